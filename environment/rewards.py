"""Reward specifications, computed by the env so agents in any language receive them.

A spec makes one `Reward` per episode. Its `step` is called whenever a new decision arises
(any kind, any agent) and returns what was earned since the previous one; the env adds it to
every participant's account, and each agent receives its account with its own next decision.
`end` is added once, at the episode's end. More specs (DRAS's capability and capacity,
RLSchert's slowdown) join this table with their agents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError


class Reward:
    """Per-episode reward state; the default earns nothing."""

    def step(self, sim: Any) -> float:
        return 0.0

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return 0.0


class EndReward(Reward):
    """A single reward at the end, from the episode's summary metrics."""

    def __init__(self, fn: Callable[[dict[str, Any]], float]) -> None:
        self.fn = fn

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return self.fn(summary)


class QueueWait(Reward):
    """Minus the job-hours spent waiting in the queue since the previous decision (dense).

    Over an episode without kills the rewards add up to minus the sum of all waits, in hours.
    """

    def __init__(self) -> None:
        self.seen = 0

    def step(self, sim: Any) -> float:
        area = sim.queue_area
        waited, self.seen = area - self.seen, area
        return -waited / 3600.0

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return self.step(sim)


@dataclass(frozen=True)
class RewardSpec:
    name: str
    description: str
    make: Callable[[], Reward]


REWARDS: dict[str, RewardSpec] = {
    r.name: r
    for r in (
        RewardSpec("none", "always 0", Reward),
        RewardSpec("bsld", "at the end, minus the mean bounded slowdown",
                   lambda: EndReward(lambda s: -float(s["mean_bsld"]))),
        RewardSpec("wait", "at the end, minus the mean wait in hours",
                   lambda: EndReward(lambda s: -float(s["mean_wait"]) / 3600.0)),
        RewardSpec("utilization", "at the end, the utilization", lambda: EndReward(lambda s: float(s["utilization"]))),
        RewardSpec("queue_wait", "at every decision, minus the job-hours waited in the queue since the previous "
                                 "decision", QueueWait),
    )
}


def get_reward(name: str) -> RewardSpec:
    try:
        return REWARDS[name]
    except KeyError:
        raise ConfigError(f"unknown reward {name!r}; use one of {', '.join(REWARDS)}") from None
