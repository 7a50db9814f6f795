"""Reward specifications, computed by the env so agents in any language receive them.

A spec gives a reward at each decision (`step`, the dense part, accumulated per agent between
its own turns) and one at the episode's end (`end`). More specs (DRAS's capability and capacity,
RLSchert's slowdown) join this table with their agents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class RewardSpec:
    name: str
    description: str
    end: Callable[[dict[str, Any]], float]
    step: Callable[[Any], float] | None = None


REWARDS: dict[str, RewardSpec] = {
    r.name: r
    for r in (
        RewardSpec("none", "always 0", lambda summary: 0.0),
        RewardSpec("bsld", "at the end, minus the mean bounded slowdown", lambda s: -float(s["mean_bsld"])),
        RewardSpec("wait", "at the end, minus the mean wait in hours", lambda s: -float(s["mean_wait"]) / 3600.0),
        RewardSpec("utilization", "at the end, the utilization", lambda s: float(s["utilization"])),
    )
}


def get_reward(name: str) -> RewardSpec:
    try:
        return REWARDS[name]
    except KeyError:
        raise ConfigError(f"unknown reward {name!r}; use one of {', '.join(REWARDS)}") from None
