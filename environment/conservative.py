"""Conservative backfilling's plan: a reservation for every queued job, kept across passes.

Every queued job holds a reservation, placed in queue order at the earliest time it delays no
earlier reservation, in one availability profile (`backfill.Profile`) that lives for the whole
episode; at each pass reservations are re-placed (never later) in the order of their start
times, and the jobs whose place is now are due to start. The simulation owns the jobs and starts
them; the plan only says when each may.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from .backfill import Blocked, Profile


class ConservativePlan:
    """The reservations of one episode's queued jobs, and the profile they are placed in."""

    def __init__(self, now: int, procs: int, size: list[int], est: list[int]) -> None:
        """size, est: per-job processors and estimates (the simulation's lists, read as they change)."""
        self._size, self._est = size, est
        self._reserved: list[tuple[int, int, int]] = []  # (start, rank, index), sorted
        self._unplaced: list[int] = []  # queued jobs with no reservation yet
        self._freed_until = -1          # end of the processors handed back early
        self._profile = Profile(now, procs)

    @property
    def reservations(self) -> dict[int, int]:
        """Index -> reserved start of every job still waiting."""
        return {i: t for t, _, i in self._reserved}

    def queued(self, i: int) -> None:
        """Job `i` joined the queue: the next pass places it."""
        self._unplaced.append(i)

    def released(self, now: int, est_end: int, size: int) -> None:
        """A job of `size` processors ended at `now`, before its estimated end: the profile gets
        them back until then."""
        self._profile.add(now, est_end, size)
        self._freed_until = max(self._freed_until, est_end)

    def due(self, now: int, free: int, running: list[tuple[int, int]], rank: Callable[[int], int],
            reranked: bool) -> tuple[list[int], list[int]]:
        """One pass: the jobs whose place is `now`, in placement order, and the jobs placed for
        the first time. free, running: the cluster now ((estimated end, index) of every running
        job, sorted); rank: a queued job's position in the priority order; reranked: that order
        changed since the last pass (a dynamic policy).

        Re-placing is incremental and gives what re-placing every job from scratch gives. With
        the profile unchanged since the last pass, every reservation stays where it is (it was
        the earliest then, and what lies after it cannot block an earlier start). Processors
        handed back early can only pull reservations earlier, and only into the time they free.
        A reservation left in the past (a running job outlived its estimate) is placed again and
        can push others later. `_replace` handles both.
        """
        if reranked:
            self._reserved = sorted((t, rank(i), i) for t, _, i in self._reserved)
        self._profile.advance(now)
        reserved = self._reserved
        if reserved and (reserved[0][0] < now or self._freed_until > now):
            reserved = self._replace(now, free, running, reserved)
            due = [i for t, _, i in reserved if t == now]
        else:
            due = [i for t, _, i in reserved[:bisect_left(reserved, (now + 1,))]]
        self._freed_until = -1
        profile = self._profile
        new = sorted(self._unplaced, key=rank)
        self._unplaced = []
        size, est = self._size, self._est
        blocked = Blocked()  # a placed job cannot start before its place: nor can a larger, longer one
        for i in new:
            s, e = size[i], est[i]
            t = profile.place(s, e, blocked.since(s, e, now))
            blocked.add(s, e, t)
            reserved.append((t, rank(i), i))
            if t == now:
                due.append(i)
        reserved.sort()
        self._reserved = reserved
        return due, new

    def started(self, now: int, started: list[int]) -> None:
        """These due jobs started at `now`: their reservations are spent."""
        # started jobs were placed at now: they lead the sorted reservations
        reserved, gone = self._reserved, set(started)
        k = bisect_left(reserved, (now + 1,))
        reserved[:k] = [entry for entry in reserved[:k] if entry[2] not in gone]

    def _replace(self, now: int, free: int, running: list[tuple[int, int]],
                 reserved: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """Re-place the reservations in order, as if into a profile rebuilt from the running jobs,
        after processors came back early or a reservation was left in the past.

        A reservation in the past (`stale`: a running job outlived its estimate) comes first in
        the order, so it is placed exactly, among the running jobs and the stale ones before it;
        its new place, later than its old one, takes processors from time after its old end
        (`lost`). Then, in order, every other job:
        - whose reserved run no longer fits there (the profile, still holding it and the jobs
          after it, is overdrawn over its run: only lost time can do that) is placed afresh at
          its earliest fit. Jobs after it in the order must not stand in its way: every job
          reserved to start before the end of that fit is taken out of the profile first (below
          `horizon` the profile then holds placed jobs only), and in its turn each of them
          (`loose`: its own processors out of the profile) is judged like any other job;
        - otherwise it stays, or moves earlier (what comes after it cannot change that: it still
          fits its old place). It was blocked everywhere before its reservation, so it can move
          only into time that gained processors since (before `until`), and only if it is no
          larger than the most processors free there (`room`). A job no smaller and no shorter
          than one that found no earlier place cannot start where that one could not (`failed`):
          that one was blocked before its own reserved start, and time gains processors only
          from a later reserved start on.
        """
        profile, size, est = self._profile, self._size, self._est
        earliest, add, most_free = profile.earliest, profile.add, profile.most_free
        until = self._freed_until
        stale = bisect_left(reserved, (now,))
        lost = False
        placed = []
        if stale:
            exact = Profile(now, free, ((max(e, now), size[i]) for e, i in running))
            for t, key, i in reserved[:stale]:
                s, e = size[i], est[i]
                new = exact.place(s, e)
                if t + e > now:
                    add(now, t + e, s)
                add(new, new + e, -s)
                until = max(until, min(new, t + e))
                lost = lost or new + e > t + e
                placed.append((new, key, i))
        room = most_free(now, until) if until > now else 0
        failed = Blocked()
        horizon, loose = now, stale  # reserved[k + 1:loose], if any, are out of the profile
        for k in range(stale, len(reserved)):
            entry = reserved[k]
            t, key, i = entry
            s, e = size[i], est[i]
            if not lost and (s > room or t == now):
                placed.append(entry)
                continue
            held = k >= loose  # still in the profile
            fits = True
            if lost and profile.least_free(t, t + e) < (0 if held else s):
                if held or t + e > horizon:
                    horizon = t + e
                    loose = self._loosen(reserved, k if held else loose, horizon)
                    held = False
                fits = profile.least_free(t, t + e) >= s
            if not fits:  # placed afresh, later or earlier
                since = failed.since(s, e, now)
                new = earliest(s, e, since=since)
                while new + e > horizon:  # the fit reaches jobs still in the profile
                    horizon = new + e
                    loose = self._loosen(reserved, loose, horizon)
                    new = earliest(s, e, since=since)
                add(new, new + e, -s)
                lost = lost or new > t
            else:
                new = t
                if s <= room and t > now:
                    before = until if until < t else t
                    since = failed.since(s, e, now)
                    if since < before:
                        found = earliest(s, e, t, before, since)
                        if found is None:
                            failed.add(s, e, before)
                        else:
                            new = found
                if held:
                    if new != t:
                        profile.move(t, new, e, s)
                else:
                    add(new, new + e, -s)
            if new != t:  # the part of its old place it left gained processors
                gain_start, gain_end = (t, min(new, t + e)) if new > t else (max(new + e, t), t + e)
                if gain_end > until:
                    until = gain_end
                more = most_free(gain_start, gain_end)
                if more > room:
                    room = more
                entry = (new, key, i)
            placed.append(entry)
        return placed

    def _loosen(self, reserved: list[tuple[int, int, int]], loose: int, horizon: int) -> int:
        """Take the reservations from position `loose` on that start before `horizon` out of the
        profile (`_replace` places them afresh); returns the new end of the loose ones."""
        size, est = self._size, self._est
        stop = bisect_left(reserved, (horizon,), loose)
        if stop > loose:
            self._profile.add_many([(t, t + est[i], size[i]) for t, _, i in reserved[loose:stop]])
        return stop
