"""Conservative backfilling's plan: a reservation for every queued job in one availability profile kept across passes
(docs/semantics.md section 6); the simulation starts the jobs, the plan says when each may."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_NONE = np.empty((0, 2), np.int64)


class ConservativePlan:
    """The reservations of one episode's queued jobs, and the profile they are placed in."""

    def __init__(self, now: int, procs: int, size: list[int], est: list[int]) -> None:
        """size, est: per-job processors and estimates (the simulation's lists, read as they change)."""
        from . import replan  # numba loads only for conservative runs

        self._replan = replan
        self._size, self._est = size, est
        self._profile = np.array([[now] * 64, [procs] * 64], np.int64)  # times, free: see replan
        self._segments = 1
        self._reserved = np.empty((64, 5), np.int64)  # rows of replan.START..EST, sorted
        self._count = 0
        self._due = np.empty(64, np.int64)
        self._new = np.empty((64, 4), np.int64)  # rank, index, size, estimate of the jobs placed next
        self._unplaced: list[int] = []  # queued jobs with no reservation yet
        self._released = np.empty((64, 3), np.int64)  # start, end, size: handed back early, not yet in the profile
        self._nreleased = 0
        self._freed_until = -1  # end of the processors handed back early

    @property
    def reservations(self) -> dict[int, int]:
        """Index -> reserved start of every job still waiting."""
        return {int(i): int(t) for t, i in self._reserved[:self._count, [0, 2]]}

    def queued(self, i: int) -> None:
        """Job `i` joined the queue: the next pass places it."""
        self._unplaced.append(i)

    def released(self, now: int, i: int, est_end: int) -> None:
        """Job `i` ended at `now`: if that is before its estimated end, the profile gets its
        processors back until then."""
        if est_end <= now:
            return
        if self._nreleased == len(self._released):
            self._released = np.concatenate([self._released, self._released])
        self._released[self._nreleased] = now, est_end, self._size[i]
        self._nreleased += 1
        self._freed_until = max(self._freed_until, est_end)

    def start(self, i: int, now: int) -> bool:
        """Due job `i` may start: any free processors will do."""
        return True

    def due(self, now: int, free: int, running: list[tuple[int, int]], rank: Callable[[int], int],
            reranked: bool) -> tuple[list[int], list[int]]:
        """One pass: the jobs whose place is `now`, in placement order, and those placed for the first time (`rank`: a
        queued job's position by priority; `reranked`: that order changed). An unchanged profile keeps every reservation
        (each was the earliest then); else they are re-placed."""
        reserved, m = self._reserved, self._count
        stale = m > 0 and reserved[0, 0] < now
        if not (stale or self._nreleased or self._unplaced or reranked):
            due = []
            for t, i in reserved[:m, [0, 2]].tolist():
                if t > now:
                    break
                due.append(i)
            return due, []
        size, est = self._size, self._est
        new = sorted(self._unplaced, key=rank) if len(self._unplaced) > 1 else self._unplaced
        self._unplaced = []
        if reranked and m:
            reserved[:m, 1] = [rank(i) for i in reserved[:m, 2].tolist()]
        grow = len(new) + m + 1 - len(reserved)
        if grow > 0:
            self._reserved = reserved = np.concatenate([reserved, np.empty((grow + len(reserved), 5), np.int64)])
            self._due = np.empty(len(reserved), np.int64)
            self._new = np.empty((len(reserved), 4), np.int64)
        # room for every change the pass can make: compiled code checks no bounds
        need = self._segments + 2 * len(running) + 4 * (m + len(new) + self._nreleased) + 16
        if need > self._profile.shape[1]:
            self._profile = np.concatenate([self._profile, np.empty((2, need), np.int64)], axis=1)
        placed = self._new
        for q, i in enumerate(new):
            placed[q] = rank(i), i, size[i], est[i]
        self._segments, self._count, n = self._replan.plan_pass(
            self._profile, self._segments, reserved, m, now, free, self._freed_until,
            self._released[:self._nreleased],
            np.array([(e, size[i]) for e, i in running], np.int64).reshape(-1, 2) if stale else _NONE,
            placed[:len(new)], self._due, reranked)
        self._nreleased = 0
        self._freed_until = -1
        return self._due[:n].tolist(), new

    def started(self, now: int, started: list[int]) -> None:
        """These due jobs started at `now`: their reservations are spent."""
        self._count = self._replan.drop(self._reserved, self._count, now, np.array(started, np.int64))
