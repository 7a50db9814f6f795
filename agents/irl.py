"""IRL's teacher (interpretable RL scheduling, seed paper 004, section IV-A) as a composition of
the shared pieces: a DQN scoring one job at a time from the `irl` encoder's rows (size, requested
time, utilization; `irl_wait` adds the wait, for the paper's reward I), through the `conv`
network's per-slot layers 32-16-8 with ReLU and one Q-value per job, over a window of 20, taking
both `select` and `backfill` (the paper's agent also chooses the backfilled job), rewarded by the
dense `system_slowdown` spec (reward A; `system_wait_slowdown` is reward I). `hpcgym train irl-dqn`
trains it with the defaults below; `hpcgym distill model:OUT/model.pt` turns it into trees
(`agents.distill`, docs/irl.md).
"""

from __future__ import annotations

from .recipe import Recipe

#: What `hpcgym train irl-dqn` sets unless a flag says otherwise. From the paper: the inputs, the
#: 32-16-8 ReLU layers with one output per job, window 20, epsilon 1.0 decayed by 0.995, training
#: on the trace's first 10,000 jobs. Ours (the paper leaves them open): epsilon decayed per
#: gradient update, one update every ten decisions (as DRAS-DQL), discount 0.99, and the kind
#: flag of a two-kind policy reaching every row (the conv network's globals).
RECIPE = Recipe(
    name="irl", summary="IRL's teacher (interpretable RL scheduling): a DQN on select and backfill over 20 slots, "
                        "reward A (system slowdown), trained on the first 10,000 jobs; `hpcgym distill` turns it "
                        "into trees (docs/irl.md)",
    algorithm="dql", kind="select+backfill", encoder="irl", window=20, no_wait=True, reward="system_slowdown",
    first_jobs=10_000, config={"net": "conv", "hidden": [32, 16, 8], "activation": "relu", "gamma": 0.99,
                               "eps_decay": 0.995, "train_freq": 10, "n_step": 1})
