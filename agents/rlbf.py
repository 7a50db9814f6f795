"""RL backfilling (Kolker-Hicks, Zhang, Dai, SC-W 2023): a base priority policy picks the head job and the agent takes
the `backfill` decisions; `RECIPE` and its variants public, scw and textbook (docs/rlbackfilling.md)."""

from __future__ import annotations

from .recipe import BASE, TEACHER, Recipe

#: What `hpcgym train rlbf` sets unless a flag says otherwise: the public code's PPO (its policy lr
#: 3e-4 where the paper says 1e-3), 100 trajectories of 256 jobs; per variant, the simulation
#: options, the reward and the workload keys (`first_jobs` only limits where training windows start).
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
