"""RL backfilling (Kolker-Hicks, Zhang, Dai, "A Reinforcement Learning Based Backfilling Strategy
for HPC Batch Jobs", SC-W 2023) as a composition of the shared pieces.

A base priority policy (the env's `policy`: FCFS, SJF, WFP3 or F1) picks the head job; when it
does not fit, the agent takes the `backfill` decisions: which waiting job starts now, one at a
time. State: the `rlbf` encoder's 6 features per window job (`agents.encoders.BackfillEncoder`).
Networks: the actor applies one kernel to every job row, 6 -> 32 -> 16 -> 8 -> 1 (ReLU), a masked
softmax over the slots (`net: conv`); the critic is an MLP over the flattened 128 x 6 table,
768 -> 32 -> 16 -> 8 -> 1 (`value_net: mlp`). Training: PPO with the public code's settings.
docs/rlbackfilling.md has the facts behind each choice.

Three semantics (`RECIPE`'s variants), since the paper's tables come from an earlier code than the public one:

- `public` (the default): the public code (rlbackfill.py). Its scheduling loop, every waiting job
  that fits now is a candidate even if it delays the reservation, no stop action while two or
  more candidates remain (one is left to the built-in scan); reward (B - bsld) / B at the end,
  with B the FCFS + EASY run scanning candidates shortest first, whatever the base.
- `scw`: the SC-W code behind the paper's Table 4: the same loop with EASY-safe candidates and a
  stop action, cancelled jobs kept as 10 s jobs, windows from the first 10,000 jobs, reward
  minus the mean bsld at the end.
- `textbook`: hpcgym's textbook EASY with EASY-safe candidates; reward relative to the base alone.

One departure from the public code, on purpose: it re-sorts the queue by FCFS after every step
of training whatever `--heuristic` says (its tester sorts by the heuristic), so its "SJF+RLBF"
agents trained on FCFS; here the stated base orders the queue in training and testing alike.
"""

from __future__ import annotations

from .recipe import BASE, TEACHER, Recipe

#: What `hpcgym train rlbf` sets unless a flag says otherwise: the public code's PPO (gamma 1,
#: lambda 0.97, clip 0.2, policy lr 3e-4 (the paper says 1e-3), value lr 1e-3, 80 + 80 full-batch
#: iterations, the policy's stopped at an approximate KL of 1.5 x 0.01), 100 trajectories of 256 jobs;
#: per semantics, the simulation options, the reward and the workload keys (`first_jobs` only
#: limits where training windows start).
RECIPE = Recipe(
    name="rlbf", summary="RL backfilling (Kolker-Hicks et al.): the base policy picks the head job, the agent chooses "
                         "the backfills; variants: public code, scw (the paper's tables), textbook EASY "
                         "(docs/rlbackfilling.md)",
    kind="backfill", encoder="rlbf", policy="fcfs", jobs=256, trajectories=100, window=128, options={},
    config={"net": "conv", "value_net": "mlp", "hidden": [32, 16, 8], "activation": "relu", "lr": 3e-4,
            "vf_lr": 1e-3, "gamma": 1.0, "gae_lambda": 0.97, "clip": 0.2, "update_epochs": 80, "value_epochs": 80,
            "minibatch_size": 1_000_000, "target_kl": 0.015, "max_grad_norm": None, "ent_coef": 0.0},
    baselines=(BASE, TEACHER), variant="public",
    variants={
        "public": {"options": {"preset": "rlbf-public"}, "reward": "relative:bsld:pct:fcfs:sjf", "first_jobs": None,
                   "workload": {}},
        "scw": {"options": {"preset": "rlbf-scw"}, "reward": "bsld", "first_jobs": 10_000,
                "workload": {"cleaning": "rlbf-scw"}},
        "textbook": {"options": {"backfill": "easy"}, "reward": "relative:bsld", "first_jobs": None, "workload": {}},
    })
