"""Several `HpcEnv`s stepped together, for rollouts: Gymnasium's Async/SyncVectorEnv.

    envs = make_vector(4, kind="select", seed=0, workload={"jobs": 256, "sample": True})
    obs, info = envs.reset(seed=0)        # or envs.reset(): the same episodes
    masks = info["action_mask"]           # (n, n_actions) int8; rows of all envs
    actions = [envs.single_action_space.sample(mask=m) for m in masks]
    obs, rewards, terminated, truncated, info = envs.step(np.array(actions))

Seeds: env i is made with seed `seed + i` and `seed_stride=n`, so its episodes use the episode
seeds seed + i, seed + i + n, seed + i + 2n, ...: no two envs of the vector run the same
episode, and a run is reproducible from `seed` alone. `envs.reset(seed=s)` seeds env i with
s + i (Gymnasium's rule), which continues the same scheme.

Autoreset: Gymnasium's default (`next_step`): after a sub-env terminates, its next `step`
ignores the action and returns the first observation of its next episode (reward 0). Its
terminal info carries `metrics`, and its mask there allows the mask-free sample actions (never
empty, so masked sampling works for every row). Pass `autoreset_mode="same_step"` to get the
next episode's first observation at once (the terminal one then in `info["final_obs"]`).

Processes: `asynchronous=True` runs each env in its own process (`context`: "spawn", "fork" or
"forkserver"; default: the platform's default). The env factory and its arguments are pickled
(cloudpickle) into the workers, so `others` agents must pickle too; each worker opens its own
connection when `remote` is given. `info["decision"]` is left out by default here
(`decision_info=False`): it would be pickled through the pipes at every step.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym

from . import make


def env_fns(n: int, kind: str = "select", seed: int = 0, **kwargs: Any) -> list:
    """The n env factories `make_vector` uses (picklable): env i has seed `seed + i`, stride n."""
    if n < 1:
        raise ValueError(f"a vector env needs at least one env, got n={n}")
    kwargs.setdefault("decision_info", False)
    return [functools.partial(make, kind, seed=seed + i, seed_stride=n, **kwargs) for i in range(n)]


def make_vector(n: int, kind: str = "select", seed: int = 0, asynchronous: bool = True, *,
                context: str | None = None, autoreset_mode: str | None = None, **kwargs: Any) -> gym.vector.VectorEnv:
    """`n` HpcEnvs of decision kind `kind` as one vector env; `kwargs` go to each `HpcEnv`
    (workload, options, reward, encoder, remote, others, decision_info, ...)."""
    fns = env_fns(n, kind, seed, **kwargs)
    vector_kwargs: dict[str, Any] = {}
    if autoreset_mode is not None:
        vector_kwargs["autoreset_mode"] = gym.vector.AutoresetMode(autoreset_mode)
    if asynchronous:
        return gym.vector.AsyncVectorEnv(fns, context=context, **vector_kwargs)
    if context is not None:
        raise ValueError("context applies to asynchronous vector envs only")
    return gym.vector.SyncVectorEnv(fns, **vector_kwargs)
