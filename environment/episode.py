"""One episode as both faces play it (the protocol service and the Gymnasium env): one loop for both is why an episode
earns the same rewards, bit for bit, in process and over sockets."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any

from .config import SimConfig
from .decisions import Action, Decision
from .priorities import PriorityPolicy
from .rewards import RewardSpec
from .simulator import Simulation
from .workload import Workload

Decider = Callable[[Decision], Action]


class Episode:
    """One episode: simulation, reward accounts, in-process deciders and fallback kinds."""

    def __init__(self, workload: Workload, config: SimConfig, reward: RewardSpec, *,
                 policy: str | PriorityPolicy = "fcfs", outside: Iterable[str] = (),
                 deciders: Mapping[str, Decider] | None = None, accounts: Iterable[Hashable] = (None,),
                 observed: Mapping[str, Collection[str]] | None = None) -> None:
        """outside: the kinds outside agents answer; deciders: kinds answered here; accounts: who earns the
        reward; observed: the only observation columns anyone reads (`Simulation`'s)."""
        self.deciders = dict(deciders or {})
        self.sim = Simulation(workload, config, policy=policy, external={*outside, *self.deciders}, observed=observed)
        self.reward = reward.make()
        self.accounts = dict.fromkeys(accounts, 0.0)
        self.fallback: set[str] = set()  #: Kinds whose agent is lost: their built-in default answers them.
        self.decisions = 0  #: Decisions that arose so far, whoever decided them.
        self._step = -1  # the simulation step last accounted
        self._stopped = False

    def start(self) -> None:
        """Start the simulation (it runs to its first decision: ask `next_decision`)."""
        self.sim.reset()

    @property
    def pending(self) -> Decision | None:
        """The simulation's pending decision (None: none, or the episode ended)."""
        return self.sim.pending

    def next_decision(self) -> Decision | None:
        """Step past the decisions answered here: the pending one for an outside agent (again, unaccounted, if
        asked again), or None at the end or after `stop`."""
        sim, deciders, fallback = self.sim, self.deciders, self.fallback
        while not self._stopped:
            decision = sim.pending
            if decision is None:
                return None
            if decision.step != self._step:
                self._step = decision.step
                self.decisions += 1
                earned = self.reward.step(sim)
                for account in self.accounts:
                    self.accounts[account] += earned
            if decision.kind in fallback:
                sim.step(decision.default())
            elif decision.kind in deciders:
                sim.step(deciders[decision.kind](decision))
            else:
                return decision
        return None

    def act(self, action: Action) -> None:
        """Answer the pending decision (InvalidAction, and nothing changes, if it is not valid)."""
        self.sim.step(action)

    def collect(self, account: Hashable = None) -> float:
        """The reward `account` earned since it was last collected."""
        earned, self.accounts[account] = self.accounts[account], 0.0
        return earned

    def finish(self) -> tuple[dict[str, Any], float]:
        """The ended episode's summary metrics and the reward spec's end reward (ask once)."""
        metrics = dict(self.sim.result().summary)
        return metrics, self.reward.end(self.sim, metrics)

    def fall_back(self, kinds: Iterable[str]) -> None:
        """From now on the built-in defaults answer `kinds` (their agent is lost); the decisions still earn."""
        self.fallback |= set(kinds)

    def decide_internally(self) -> None:
        """Nobody is left to answer: the built-in defaults decide every kind inside the loop, at full speed."""
        self.sim.decide_internally(self.sim.external)

    def stop(self) -> None:
        """End `next_decision`'s loop at its next decision (given up, e.g. at shutdown, maybe from another thread)."""
        self._stopped = True
