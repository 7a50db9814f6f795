"""The update rules by name, for checkpoints, the trainer and the command line; apart from `algorithm`
(the base every rule imports) so that no module imports the rules that import it."""

from __future__ import annotations

from typing import Any

from .a2c import A2C
from .algorithm import Algorithm
from .dql import DQL
from .pg import PG
from .ppo import PPO

ALGORITHMS: dict[str, type[Algorithm]] = {cls.name: cls for cls in (PG, A2C, PPO, DQL)}


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm class called `name` (case-insensitive)."""
    try:
        return ALGORITHMS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; use one of {', '.join(sorted(ALGORITHMS))}") from None


def recorded_config(algorithm: str, values: dict[str, Any] | None) -> dict[str, Any]:
    """A config map as a run recorded it, with each field added since set to what that run did
    (`Config.RECORDED_BEFORE`), not to today's default: a resume or remake trains as it did."""
    return {**getattr(get_algorithm(algorithm).Config, "RECORDED_BEFORE", {}), **(values or {})}


def config_to_record(algorithm: str, values: dict[str, Any] | None) -> dict[str, Any]:
    """`values` with each `Config.RECORDED_BEFORE` field that is not given set to today's default, as a run records its
    config: a later remake must not take a run of today's default for one from before that default."""
    cls = get_algorithm(algorithm).Config
    defaults = cls()
    return {**{name: getattr(defaults, name) for name in getattr(cls, "RECORDED_BEFORE", {})}, **(values or {})}
