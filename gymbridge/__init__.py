"""Gymnasium bridge: `make(kind=...)` gives an `HpcEnv`, in process or on a running `hpcgym env`.
Nothing here imports gymnasium until used, so the command line (in this package) runs without
the `rl` extra; the Gymnasium ids are registered whenever gymnasium is imported."""

from __future__ import annotations

from typing import Any

from .registration import register_envs, register_when_gymnasium_is_imported

__all__ = ["make", "HpcEnv", "register_envs"]

register_when_gymnasium_is_imported()


def make(kind: str | tuple[str, ...] | None = None, *, recipe: str | None = None, **kwargs: Any):
    """An `HpcEnv` for decision kind `kind` (default select; or `("select", "backfill")`: both in one
    env, with the kind in `info["kind"]` and a one-hot flag ending the observation); keyword
    arguments as `HpcEnv` takes them (workload, options, reward, encoder, seed, remote, others, ...).
    `recipe="rlbf:scw"` starts from a paper's episode (`hpcgym recipes`): its kind, workload keys,
    simulation options, reward and encoder, under the arguments given."""
    from ..agents.recipes import recipe_episode
    from .env import HpcEnv

    if "prefetch" in kwargs:
        raise TypeError("prefetch was removed in issue 41 (it measured under 1.2x); the env draws its workloads in process")
    episode = {"kind": "select", **recipe_episode(recipe, kind=kind, workload=kwargs.pop("workload", None),
                                                  options=kwargs.pop("options", None),
                                                  reward=kwargs.pop("reward", None), encoder=kwargs.pop("encoder", None))}
    return HpcEnv(**episode, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "HpcEnv":
        from .env import HpcEnv

        return HpcEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
