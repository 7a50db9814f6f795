"""Decision requests: what the simulation asks an agent, and how an answer (PROTOCOL.md's `act`) is checked.
The observation is built only when read, so built-in deciders in process never pay for it."""

from __future__ import annotations

import operator
from typing import Any, Protocol, Union

from .errors import InvalidAction

SELECT, INSPECT, BACKFILL, KILL = "select", "inspect", "backfill", "kill"
SELECT_KILL = "select_kill"  #: The joint decision: select and kill in one (it takes the place of both).
#: The decision kinds, in the order they are asked at one instant (select_kill where select is).
KINDS = (SELECT, INSPECT, BACKFILL, KILL, SELECT_KILL)

Action = Union[int, list, tuple, bool, None]


def check_kinds(kinds: Any) -> frozenset[str]:
    """Validate a collection of decision kind names."""
    kinds = frozenset(kinds)
    unknown = kinds - set(KINDS)
    if unknown:
        raise InvalidAction(f"unknown decision kind(s) {sorted(unknown)}: use {', '.join(KINDS)}")
    return kinds


class DecisionSource(Protocol):
    """What a decision reads from its simulation, named here so this module does not depend on the simulator."""

    free: int

    def observe(self, decision: Decision) -> dict[str, Any]: ...

    def total_size(self, ids: list[int]) -> int: ...


class Decision:
    """One pending decision: `candidates` are the job ids an action may name, `context` the kind's extra facts."""

    __slots__ = ("kind", "time", "step", "candidates", "context", "can_wait", "_sim", "_observation")

    def __init__(self, sim: DecisionSource, kind: str, time: int, step: int, candidates: list[int],
                 context: dict[str, Any], can_wait: bool = True) -> None:
        self.kind, self.time, self.step, self.candidates, self.context = kind, time, step, candidates, context
        self.can_wait, self._sim = can_wait, sim
        self._observation: dict[str, Any] | None = None

    @property
    def observation(self) -> dict[str, Any]:
        """Raw state at this decision, columnar (each field a list over jobs)."""
        if self._observation is None:
            self._observation = self._sim.observe(self)
        return self._observation

    def __repr__(self) -> str:
        return f"Decision({self.kind}, t={self.time}, step={self.step}, {len(self.candidates)} candidates, " \
               f"context={self.context})"

    def default(self) -> Action:
        """The built-in default's answer: candidates come in queue order, so the first is the policy's pick."""
        if self.kind == INSPECT:
            return True
        if self.kind == KILL or (self.kind == SELECT_KILL and not self.context["queued"]):
            return None
        return self.candidates[0]

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Decision:
        """A decision received over the protocol, with its observation already built."""
        decision = cls(None, message["kind"], message["time"], message["step"],  # type: ignore[arg-type]
                       list(message["candidates"]), dict(message["observation"].get("context", {})),
                       bool(message["can_wait"]))
        decision._observation = message["observation"]
        return decision

    def parse(self, action: Action) -> Any:
        """`action` normalised (select: a list of ids, empty to wait; inspect: a bool; else an id or None)."""
        if self.kind == INSPECT:
            if not isinstance(action, bool):
                raise InvalidAction(f"inspect expects true (accept) or false (reject), got {action!r}")
            return action
        if self.kind == SELECT:
            ids = [] if action is None else list(action) if isinstance(action, (list, tuple)) else [action]
            if not ids:
                if not self.can_wait:
                    raise InvalidAction("select cannot wait now: nothing runs and no job will arrive; "
                                        "pick a job from the candidates")
                return ids
            ids = [self._check_candidate(job) for job in ids]
            if len(set(ids)) != len(ids):
                raise InvalidAction(f"select names a job twice: {ids}")
            if len(ids) > 1 and self._sim.workload.machine is not None:
                raise InvalidAction(f"on a machine of nodes select takes one job at a time (it starts, or is reserved "
                                    f"if it does not fit), not {len(ids)}")
            if len(ids) > 1 and (need := self._sim.total_size(ids)) > self._sim.free:
                raise InvalidAction(f"jobs {ids} need {need} processors together but only {self._sim.free} are free; "
                                    "pick a set that fits, or one job to reserve")
            return ids
        if self.kind == SELECT_KILL:
            if isinstance(action, (list, tuple)):
                raise InvalidAction(f"select_kill takes one job id (a queued job to start or reserve, a running one "
                                    f"to kill) or nil to wait, not a list: {list(action)!r}")
            if action is None and not self.can_wait:
                raise InvalidAction("select_kill cannot wait now: nothing runs and no job will arrive; pick a job "
                                    "from the candidates")
        if action is None:
            if not self.can_wait:  # backfill under backfill_stop off, with two or more candidates
                raise InvalidAction(f"{self.kind} cannot stop now (the env's backfill_stop is off): start one of "
                                    "the candidates")
            return None
        return self._check_candidate(action)

    def parse_order(self, action: Any) -> dict[int, int]:
        """A standing order (`{"order": [ids, best first]}`, 1.4) ranking every candidate once, as id -> rank."""
        if self.kind != SELECT:
            raise InvalidAction(f"an order answers select decisions only; this is a {self.kind} decision")
        ids = action["order"]
        if len(ids) == len(self.candidates) and all(type(job) is int for job in ids) \
                and set(ids) == set(self.candidates):  # the usual case, checked at C speed
            return {job: rank for rank, job in enumerate(ids)}
        ids = [self._check_candidate(job) for job in ids]
        if len(set(ids)) != len(ids):
            raise InvalidAction(f"the order names a job twice: {ids[:10]}{' ...' if len(ids) > 10 else ''}")
        if len(ids) != len(self.candidates):
            missing = [job for job in self.candidates if job not in set(ids)]
            raise InvalidAction(f"an order must rank every candidate; it leaves out {missing[:10]}"
                                f"{' ...' if len(missing) > 10 else ''}")
        return {job: rank for rank, job in enumerate(ids)}

    def by_order(self, rank: dict[int, int]) -> int | None:
        """The best-ranked candidate, or None when the order leaves one out (the agent must be asked)."""
        ranks = list(map(rank.get, self.candidates))
        return None if None in ranks else self.candidates[ranks.index(min(ranks))]

    def _check_candidate(self, job: Any) -> int:
        try:
            if isinstance(job, bool):
                raise TypeError
            job = operator.index(job)
        except TypeError:
            raise InvalidAction(f"{self.kind} expects job ids (integers), got {job!r}") from None
        if job not in self.candidates:
            raise InvalidAction(f"job {job} is not a valid {self.kind} choice at t={self.time}; "
                                f"valid: {self.candidates[:10]}{' ...' if len(self.candidates) > 10 else ''}")
        return job
