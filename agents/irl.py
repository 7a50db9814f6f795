"""IRL's teacher (seed paper 004, section IV-A): a DQN scoring one job at a time on select and backfill, rewarded by
`system_slowdown` (reward A); `hpcgym distill` turns it into trees (docs/irl.md)."""

from __future__ import annotations

from .recipe import Recipe

#: What `hpcgym train irl-dqn` sets unless a flag says otherwise (docs/irl.md: which are the paper's, which ours).
RECIPE = Recipe(
    name="irl", summary="IRL's teacher (interpretable RL scheduling): a DQN on select and backfill over 20 slots, "
                        "reward A (system slowdown), trained on the first 10,000 jobs; `hpcgym distill` turns it "
                        "into trees (docs/irl.md)",
    algorithm="dql", kind="select+backfill", encoder="irl", window=20, no_wait=True, reward="system_slowdown",
    first_jobs=10_000, config={"net": "conv", "hidden": [32, 16, 8], "activation": "relu", "gamma": 0.99,
                               "eps_decay": 0.995, "train_freq": 10, "n_step": 1})
