"""Conservative backfilling on a machine of nodes (docs/semantics.md section 13): every queued job
holds a reservation, kept across passes, that no other job's start can delay on any resource;
the simulation calls the plan as it calls `ConservativePlan` and starts the jobs it says are due.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable

import numpy as np

from .backfill import FOREVER
from .conservative import ConservativePlan
from .machine import REQUESTS, Allocation, NodeState, _units_per_node, one_resource
from .workload import Workload


def node_plan(now: int, nodes: NodeState, workload: Workload, est: list[int]) -> CountedPlan | NodePlan:
    """The plan for this machine: counted where one resource decides what fits, else on nodes."""
    one = one_resource(nodes.machine, *(getattr(workload, c) for c in REQUESTS))
    return NodePlan(now, nodes, est) if one is None else CountedPlan(now, nodes, est, *one)


class CountedPlan:
    """Where one resource decides what fits (`machine.one_resource`: one partition whose jobs all
    take whole nodes, or one-core units without memory or GPUs), units are interchangeable: the
    pool's plan on that resource, and a due job takes whichever nodes the placement rule picks."""

    def __init__(self, now: int, nodes: NodeState, est: list[int], amount: np.ndarray, unit: str) -> None:
        self._nodes = nodes
        self._amount = amount.tolist()
        partition = nodes.machine.partitions[0]
        self._per_unit = partition.cores if unit == "nodes" else 1
        self._plan = ConservativePlan(now, nodes.totals[0][0] // self._per_unit, self._amount, est)

    @property
    def reservations(self) -> dict[int, int]:
        return self._plan.reservations

    def queued(self, i: int) -> None:
        self._plan.queued(i)

    def released(self, now: int, i: int, est_end: int) -> None:
        self._plan.released(now, i, est_end)  # the plan's sizes are this resource's amounts

    def start(self, i: int, now: int) -> bool:
        allocation = self._nodes.find(i)
        if allocation is None:
            return False
        self._nodes.take(i, allocation)
        return True

    def due(self, now: int, free: int, running: list[tuple[int, int]], rank: Callable[[int], int],
            reranked: bool) -> tuple[list[int], list[int]]:
        return self._plan.due(now, self._nodes.totals[0][0] // self._per_unit, running, rank, reranked)

    def started(self, now: int, started: list[int]) -> None:
        self._plan.started(now, started)


class NodeProfile:
    """Free resources of one partition's nodes over time: segment k starts at `times[k]` with
    `rows[order[k]]` ((nodes, 3)) free, `total[k]` in all; the last segment lasts forever. Rows
    live in one array, so a run's change over many segments is one numpy operation, and a new
    boundary copies one row, not the segments after it."""

    __slots__ = ("times", "order", "total", "rows", "spare")

    def __init__(self, now: int, free: np.ndarray) -> None:
        self.times, self.order, self.total = [now], [0], [free.sum(axis=0).tolist()]
        self.rows = np.empty((16, *free.shape), dtype=np.int64)
        self.rows[0] = free
        self.spare = list(range(15, 0, -1))

    def advance(self, now: int) -> None:
        """Forget what lies before `now`."""
        k = bisect_right(self.times, now) - 1
        if k > 0:
            self.spare += self.order[:k]
            del self.times[:k], self.order[:k], self.total[:k]
        self.times[0] = now

    def _split(self, t: int) -> int:
        """The segment that starts at `t`, made a boundary if it was not one."""
        times = self.times
        k = bisect_left(times, t)
        if k == len(times) or times[k] != t:
            if not self.spare:
                grown = np.empty((2 * len(self.rows), *self.rows.shape[1:]), dtype=np.int64)
                grown[:len(self.rows)] = self.rows
                self.spare = list(range(len(grown) - 1, len(self.rows) - 1, -1))
                self.rows = grown
            row = self.spare.pop()
            self.rows[row] = self.rows[self.order[k - 1]]
            times.insert(k, t)
            self.order.insert(k, row)
            self.total.insert(k, list(self.total[k - 1]))
        return k

    def add(self, start: int, end: int, a: Allocation, sign: int) -> None:
        """What `a` holds, free again (sign 1) or taken (-1) over [start, end) (from now on)."""
        start = max(start, self.times[0])
        if end <= start:
            return
        k = self._split(start)
        stop = self._split(end)
        self.rows[np.array(self.order[k:stop])[:, None], a.nodes] += a.used * sign
        total = [x * sign for x in a.total]
        for t in self.total[k:stop]:
            t[0] += total[0]
            t[1] += total[1]
            t[2] += total[2]
        times, order, rows = self.times, self.order, self.rows
        for j in (stop, k):  # equal neighbours merge: scans then pass over changes only
            if 0 < j < len(times) and self.total[j] == self.total[j - 1] \
                    and np.array_equal(rows[order[j]], rows[order[j - 1]]):
                self.spare.append(order[j])
                del times[j], order[j], self.total[j]

    def room(self, start: int, end: int, own: tuple[int, Allocation] | None = None) -> np.ndarray:
        """What each node has free throughout [start, end), counting as free from its start on
        what the job's `own` reservation holds (a segment that only begins before it keeps its
        value on both sides, so leaving it out loses nothing)."""
        times, rows, order = self.times, self.rows, self.order
        k = bisect_right(times, start) - 1
        stop = bisect_left(times, end, k + 1)
        if own is None or own[0] > times[stop - 1]:
            return rows[order[k]] if stop == k + 1 else rows[order[k:stop]].min(axis=0)
        mine = max(bisect_left(times, own[0], k), k + 1)
        after = rows[order[mine:stop]].min(axis=0)
        after[own[1].nodes] += own[1].used
        return np.minimum(rows[order[k:mine]].min(axis=0), after)

    def first(self) -> np.ndarray:
        """What each node has free now."""
        return self.rows[self.order[0]]

    def fit(self, units: int, shape: tuple[int, int, int], duration: int, since: int, before: int,
            own: tuple[int, Allocation] | None = None) -> tuple[int, np.ndarray] | None:
        """The earliest start in [since, before) at which `units` units of `shape` stay free for
        `duration` on the nodes (with the job's `own` reservation free to it), and each node's
        units then; None if there is none."""
        times, total, n = self.times, self.total, len(self.times)
        need = [units * x for x in shape]
        mine = bisect_left(times, own[0]) if own else n
        back = own[1].total if own else (0, 0, 0)
        k = max(bisect_right(times, since) - 1, 0)
        while k < n:
            start = max(times[k], since)
            if start >= before:
                return None
            end = start + duration
            j = k
            while j < n and times[j] < end:  # the totals first: most starts fail there
                t = total[j]
                if j >= mine:
                    t = (t[0] + back[0], t[1] + back[1], t[2] + back[2])
                if t[0] < need[0] or t[1] < need[1] or t[2] < need[2]:
                    break
                j += 1
            else:
                caps = _units_per_node(self.room(start, end, own), *shape)
                if int(caps.sum()) >= units:
                    return start, caps
                k += 1
                continue
            k = j + 1
        return None


class NodePlan:
    """The reservations of one episode's queued jobs on nodes, and the profiles they hold."""

    def __init__(self, now: int, nodes: NodeState, est: list[int]) -> None:
        self._nodes, self._est = nodes, est
        self._profiles = [NodeProfile(now, free) for free in nodes.free]
        self._reserved: list[tuple[int, int, int]] = []  # (start, rank, index), sorted
        self._place: dict[int, Allocation] = {}  # each reserved job's nodes
        self._unplaced: list[int] = []
        self._held: dict[int, int] = {}  # running job -> until when the profiles hold its nodes
        self._gains: dict[int, tuple[int, int]] = {}  # partition -> span that gained room since the last pass

    @property
    def reservations(self) -> dict[int, int]:
        """Index -> reserved start of every job still waiting."""
        return {i: t for t, _, i in self._reserved}

    def queued(self, i: int) -> None:
        self._unplaced.append(i)

    def released(self, now: int, i: int, est_end: int) -> None:
        """Job i ended or was killed at `now`: its nodes are free from now on."""
        held, a = self._held.pop(i), self._nodes.placed[i]
        if held > now:
            self._profiles[a.partition].add(now, held, a, 1)
            self._gain(self._gains, a.partition, now, held)

    def start(self, i: int, now: int) -> bool:
        """Start due job i on its reserved nodes if they are free (a safeguard: the profiles hold
        every running job's nodes now); the plan holds them on until its estimated end."""
        a, nodes = self._place[i], self._nodes
        if not (nodes.free[a.partition][a.nodes] >= a.used).all():
            return False
        nodes.take(i, a)
        self._held[i] = now + self._est[i]
        return True

    def due(self, now: int, free: int, running: list[tuple[int, int]], rank: Callable[[int], int],
            reranked: bool) -> tuple[list[int], list[int]]:
        """One pass: the jobs whose place is `now`, and the jobs placed for the first time
        (ConservativePlan.due's contract; `free` is not needed: the profiles know the nodes)."""
        if reranked:
            self._reserved = sorted((t, rank(i), i) for t, _, i in self._reserved)
        for profile in self._profiles:
            profile.advance(now)
        overrun = self._hold_overdue(now, running)
        if self._reserved and (self._reserved[0][0] < now or overrun):
            self._replace_broken(now, overrun)
        if self._gains:
            self._compress(now, self._gains)
        self._gains = {}
        reserved = self._reserved
        due = [i for t, _, i in reserved[:bisect_left(reserved, (now + 1,))]]
        new = sorted(self._unplaced, key=rank) if self._unplaced else []
        self._unplaced = []
        for i in new:
            t, a = self._earliest(i, now, FOREVER)
            self._hold(i, t, a, rank(i))
            if t == now:
                due.append(i)
        return due, new

    def started(self, now: int, started: list[int]) -> None:
        gone = set(started)
        self._reserved = [entry for entry in self._reserved if entry[2] not in gone]
        for i in started:
            del self._place[i]

    # ----------------------------------------------------------------- placing
    def _hold(self, i: int, t: int, a: Allocation, key: int) -> None:
        self._profiles[a.partition].add(t, t + self._est[i], a, -1)
        self._place[i] = a
        insort(self._reserved, (t, key, i))

    def _hold_overdue(self, now: int, running: list[tuple[int, int]]) -> set[int]:
        """A running job past its estimated end is expected to end one second from now: its nodes
        are held until then (they are not free now). Returns the partitions of such holds."""
        added = set()
        for est_end, i in running:
            if est_end > now:
                break
            if self._held[i] <= now:
                a = self._nodes.running[i]
                self._profiles[a.partition].add(now, now + 1, a, -1)
                self._held[i] = now + 1
                added.add(a.partition)
        return added

    @staticmethod
    def _gain(gains: dict[int, tuple[int, int]], p: int, start: int, end: int) -> None:
        lo, hi = gains.get(p, (start, end))
        gains[p] = (min(lo, start), max(hi, end))

    def _earliest(self, i: int, since: int, before: int, gains: dict[int, tuple[int, int]] | None = None,
                  own: tuple[int, Allocation] | None = None) -> tuple[int, Allocation] | None:
        """Job i's earliest place starting in [since, before), by the placement rule at the
        earliest time (partitions: the first, or under best fit the one left with the fewest
        free cores); with `gains`, only starts whose run meets a span that gained room; `own`:
        the place it holds, free to it."""
        nodes, e = self._nodes, self._est[i]
        best = None
        for p, units, cores, memory, gpus in nodes.options[i]:
            lo, hi = since, before
            if gains is not None:
                if p not in gains:
                    continue
                lo, hi = max(lo, gains[p][0] - e + 1), min(hi, gains[p][1])
            if best is not None:  # later starts lose; equal ones win only under best fit
                hi = min(hi, best[0] + 1 if nodes.best_fit else best[0])
            mine = own if own is not None and own[1].partition == p else None
            found = self._profiles[p].fit(units, (cores, memory, gpus), e, lo, hi, mine)
            if found is None:
                continue
            t, caps = found
            left = int(self._profiles[p].room(t, t + e, mine)[:, 0].sum()) - units * cores if nodes.best_fit else 0
            if best is None or (t, left) < best[:2]:
                best = (t, left, p, caps, units, (cores, memory, gpus))
        if best is None:
            return None
        return best[0], nodes._pick(*best[2:], None)

    def _compress(self, now: int, gains: dict[int, tuple[int, int]]) -> None:
        """Move each reservation, in order of start, to the earliest place it has with every
        other reservation held, until none moves: it never moves later, and no other job is
        delayed. Only runs that meet a span that gained room can be new places."""
        reserved, est, profiles = self._reserved, self._est, self._profiles
        while gains:
            moved: dict[int, tuple[int, int]] = {}
            for k, (t, key, i) in enumerate(reserved):
                a, e = self._place[i], est[i]
                if not any(max(now, gains[p][0] - e + 1) < min(t, gains[p][1])
                           for p, *_ in self._nodes.options[i] if p in gains):
                    continue
                found = self._earliest(i, now, t, gains, (t, a))
                if found is None:
                    continue
                new, b = found
                profiles[a.partition].add(t, t + e, a, 1)
                profiles[b.partition].add(new, new + e, b, -1)
                reserved[k] = (new, key, i)
                self._place[i] = b
                for spans in (gains, moved):  # later jobs now, earlier ones in the next round
                    self._gain(spans, a.partition, t, t + e)
            reserved.sort()
            gains = moved

    def _replace_broken(self, now: int, overrun: set[int]) -> None:
        """A run that outlived its estimate broke the reservations left in the past or due now on
        nodes it still holds: each is placed again, in order, at the earliest time it fits around
        every other reservation (which the next compression may move into the room it left)."""
        profiles, est = self._profiles, self._est
        broken = []
        for entry in self._reserved:
            t, _, i = entry
            a = self._place[i]
            if t > now:
                break
            if t < now or (a.partition in overrun and (profiles[a.partition].first()[a.nodes] < 0).any()):
                broken.append(entry)
                profiles[a.partition].add(t, t + est[i], a, 1)
                self._gain(self._gains, a.partition, now, t + est[i])
        if broken:
            gone = {i for _, _, i in broken}
            self._reserved = [entry for entry in self._reserved if entry[2] not in gone]
        for _, key, i in broken:
            self._hold(i, *self._earliest(i, now, FOREVER), key)
