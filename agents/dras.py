"""DRAS (Fan et al., IEEE TPDS 2022) from the shared pieces: the `dras` encoder, `agents.rl.dras_networks`, the env's
`dras_capability` / `dras_capacity` rewards; `hpcgym train dras-ALGO` trains PG, A2C, PPO or DQL (docs/dras.md)."""

from __future__ import annotations

from .recipe import Recipe

#: What `hpcgym train dras-ALGO` (`dras:ALGO`) sets unless a flag says otherwise (docs/dras.md gives
#: each value's source; the discount 0.95 is ours, the paper gives none).
_CONFIG = {"net": "dras", "lr": 1e-3, "gamma": 0.95}
RECIPE = Recipe(
    name="dras", summary="DRAS (Fan et al.): two levels, select then backfill, DRAS's state, network and capacity "
                         "reward, a sampled/real/synthetic curriculum; variants: the update rule (docs/dras.md)",
    kind="select+backfill", encoder="dras", window=50, no_wait=True, reward="dras_capacity", config=_CONFIG,
    curriculum="sampled,real,synthetic", variant="ppo",
    variants={algorithm: {"algorithm": algorithm, "config": {**_CONFIG, **(
        {"eps_decay": 0.995, "train_freq": 10, "n_step": 1} if algorithm == "dql" else {})}}
        for algorithm in ("pg", "a2c", "ppo", "dql")})

