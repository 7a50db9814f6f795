"""Gymnasium bridge: `make(kind=...)` gives an `HpcEnv`, in process or on a running `hpcgym env`. Nothing here
imports gymnasium until used (the CLI runs without the `rl` extra); its ids are registered when it is imported."""

from __future__ import annotations

from typing import Any

from .registration import register_envs, register_when_gymnasium_is_imported

__all__ = ["make", "HpcEnv", "register_envs"]

register_when_gymnasium_is_imported()


def make(kind: str | tuple[str, ...] | None = None, *, recipe: str | None = None, **kwargs: Any):
    """An `HpcEnv` of decision kind `kind` (default select; `("select", "backfill")`: both, the kind in
    `info["kind"]`, a one-hot flag ending the observation), keywords as `HpcEnv` takes them; `recipe="rlbf:scw"`
    starts from a paper's episode (`hpcgym recipes`): kind, workload, options, reward, encoder under those given."""
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
