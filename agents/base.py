"""The agent interface (`kinds`, `act(decision) -> action`), shared by built-in defaults and external
agents, so a heuristic runs in process or over the protocol unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..environment.errors import ConfigError
from ..environment.decisions import SELECT, Action, Decision
from ..environment.priorities import PriorityPolicy, get_policy


class Agent:
    """Base class: subclasses set `kinds` and implement `act`."""

    kinds: tuple[str, ...] = ()
    #: The only queue and running columns `act` reads, e.g. {"queue": ("size",)} (`id` always comes):
    #: over the protocol (1.8) the env then gathers and sends no others; None: it may read any.
    reads: dict[str, tuple[str, ...]] | None = None

    def act(self, decision: Decision) -> Action:
        raise NotImplementedError

    def order(self, decision: Decision) -> list[int] | None:
        """Every candidate of a select decision ranked best first, if the agent would pick by that ranking at every
        later decision it covers (a static priority), so the env (1.4) answers those itself; None: asked every time."""
        return None

    def on_reward(self, reward: float) -> None:
        """Called with the reward accumulated since this agent's previous decision."""

    def on_episode_end(self, metrics: dict[str, Any]) -> None:
        """Called once when an episode ends, with its summary metrics."""


class PriorityAgent(Agent):
    """Select the best job of the visible window by a priority policy (lowest score first,
    ties to the earlier-submitted job)."""

    kinds = (SELECT,)

    def __init__(self, policy: str | PriorityPolicy = "fcfs", seed: int = 0) -> None:
        self.policy = get_policy(policy, seed) if isinstance(policy, str) else policy
        if self.policy.env_only:
            raise ConfigError(f"the {self.policy.name} policy reads what only the env knows (users' usage, the "
                              f"whole workload): make it the env's policy (--policy {self.policy.name}), not an agent")

    def act(self, decision: Decision) -> Action:
        return self._ranking(decision)[0]

    def order(self, decision: Decision) -> list[int] | None:
        """A static policy ranks jobs the same way whenever it looks, so its ranking can stand; a
        subclass that changes `act` is asked every time (unless it says otherwise here too)."""
        return None if self.policy.dynamic or type(self).act is not PriorityAgent.act else self._ranking(decision)

    @property
    def reads(self) -> dict[str, tuple[str, ...]] | None:  # type: ignore[override]
        """The columns a score reads; a subclass that changes `act` may read others."""
        return {"queue": ("submit", "requested", "size")} if type(self).act is PriorityAgent.act else None

    def _ranking(self, decision: Decision) -> list[int]:
        queue = decision.observation["queue"]
        jobs = {name: np.asarray(queue[name]) for name in ("id", "submit", "requested", "size")}
        return jobs["id"][self.policy.order(jobs, decision.time)].tolist()
