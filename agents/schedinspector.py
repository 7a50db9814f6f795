"""SchedInspector (Zhang et al., HPDC 2022): the agent accepts or rejects a base policy's pick (`inspect`), rewarded at
the end by the improvement over the base alone; `RECIPE` and its variants code and textbook (docs/schedinspector.md)."""

from __future__ import annotations

from .recipe import BASE, TEACHER, Recipe

#: What `hpcgym train schedinspector` sets unless a flag says otherwise: the code's PPO settings but
#: GAE lambda 1 (Monte Carlo advantages) where the code has 0.97, as with 0.97 10 of 16 seeds
#: trained themselves into rejecting (docs/schedinspector.md, "Why most seeds collapsed";
#: `--set gae_lambda=0.97` restores the code's).
RECIPE = Recipe(
    name="schedinspector", summary="SchedInspector (Zhang et al.): a base priority policy picks, the agent accepts or "
                                   "rejects the pick; reward: the improvement over the base alone; variants: the "
                                   "authors' code rules, textbook (docs/schedinspector.md)",
    kind="inspect", encoder="schedinspector", policy="sjf", jobs=128, trajectories=100, options={},
    config={"net": "mlp", "hidden": [32, 16, 8], "activation": "relu", "lr": 3e-4, "vf_lr": 1e-3, "gamma": 1.0,
            "gae_lambda": 1.0, "clip": 0.2, "update_epochs": 80, "value_epochs": 80, "minibatch_size": 1_000_000,
            "target_kl": 0.015, "max_grad_norm": None, "ent_coef": 0.0},
    baselines=(BASE, TEACHER), variant="code",
    variants={
        "code": {"options": {"preset": "schedinspector-code"}, "reward": "relative:bsld:pct_max", "first_jobs": 10_000,
                 "workload": {}},
        "textbook": {"options": {"backfill": "none"}, "reward": "relative:bsld:pct_max", "first_jobs": None,
                     "workload": {}},
    })
