"""DRAS (Fan et al., "DRAS: Deep reinforcement learning for cluster scheduling in high performance
computing", IEEE TPDS 2022) as a composition of the shared pieces: the state is the `dras`
encoder (`agents.encoders.DRASEncoder`), the networks are `agents.rl.dras_networks`, the
rewards are the env's `dras_capability` / `dras_capacity` specs (`environment.rewards`), and
`hpcgym train dras-ALGO` trains PG, A2C, PPO or DQL with the defaults below (docs/dras.md).
"""

from __future__ import annotations

import numpy as np

from .recipe import Recipe

#: What `hpcgym train dras-ALGO` (`dras:ALGO`) sets unless a flag says otherwise: DRAS's two levels in one env
#: (no wait at level 1, backfilling until no candidate is left at level 2), its state, network and
#: window, the capacity reward (eq. 2), the learning rate of section 5.3, DRAS-DQL's epsilon
#: decay and its update every ten decisions (section 3.3: "for every ten scheduling instances";
#: also what makes DQL's per-job network affordable here), and, with a trace, the three-phase curriculum in the paper's order. The paper gives no
#: discount; 0.95 is ours: DRAS's rewards arrive at every decision, and on short training runs a
#: horizon of about 20 decisions learned faster here than undiscounted whole episodes (docs/dras.md).
_CONFIG = {"net": "dras", "lr": 1e-3, "gamma": 0.95}
RECIPE = Recipe(
    name="dras", summary="DRAS (Fan et al.): two levels, select then backfill, DRAS's state, network and capacity "
                         "reward, a sampled/real/synthetic curriculum; variants: the update rule (docs/dras.md)",
    kind="select+backfill", encoder="dras", window=50, no_wait=True, reward="dras_capacity", config=_CONFIG,
    curriculum="sampled,real,synthetic", variant="ppo",
    variants={algorithm: {"algorithm": algorithm, "config": {**_CONFIG, **(
        {"eps_decay": 0.995, "train_freq": 10, "n_step": 1} if algorithm == "dql" else {})}}
        for algorithm in ("pg", "a2c", "ppo", "dql")})


def window_mask(n_jobs: int, window: int, extra: int = 0) -> np.ndarray:
    """The valid actions when `n_jobs` jobs wait: the first min(n_jobs, W) slots (and `extra`
    further actions, valid)."""
    mask = np.zeros(window + extra, bool)
    mask[:min(n_jobs, window)] = True
    mask[window:] = True
    return mask
