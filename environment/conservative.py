"""Conservative backfilling's plan: a reservation for every queued job, kept across passes.

Every queued job holds a reservation, placed in queue order at the earliest time it delays no
earlier reservation, in one availability profile (`backfill.Profile`) that lives for the whole
episode; at each pass reservations are re-placed (never later) in the order of their start
times, and the jobs whose place is now are due to start. The simulation owns the jobs and starts
them; the plan only says when each may.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable

from .backfill import FOREVER, Blocked, Profile


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
        changed since the last pass (a dynamic policy). With the profile unchanged since the last
        pass every reservation stays (it was the earliest then); otherwise `_replace`.
        """
        if reranked:
            self._reserved = sorted((t, rank(i), i) for t, _, i in self._reserved)
        self._profile.advance(now)
        reserved = self._reserved
        moved = False
        if reserved and (reserved[0][0] < now or self._freed_until > now):
            due, moved = self._replace(now, free, running, reserved)
        else:
            due = [i for t, _, i in reserved[:bisect_left(reserved, (now + 1,))]]
        self._freed_until = -1
        new = sorted(self._unplaced, key=rank) if self._unplaced else []
        self._unplaced = []
        size, est = self._size, self._est
        blocked = Blocked()  # a placed job cannot start before its place: nor can a larger, longer one
        for i in new:
            s, e = size[i], est[i]
            t = self._profile.place(s, e, blocked.since(s, e, now))
            blocked.add(s, e, t)
            insort(reserved, (t, rank(i), i))  # in order unless `moved` (sorted below)
            if t == now:
                due.append(i)
        if moved:
            reserved.sort()
        return due, new

    def started(self, now: int, started: list[int]) -> None:
        """These due jobs started at `now`: their reservations are spent."""
        # started jobs were placed at now: they lead the sorted reservations
        reserved, gone = self._reserved, set(started)
        k = bisect_left(reserved, (now + 1,))
        reserved[:k] = [entry for entry in reserved[:k] if entry[2] not in gone]

    def _replace(self, now: int, free: int, running: list[tuple[int, int]],
                 reserved: list[tuple[int, int, int]]) -> tuple[list[int], bool]:
        """Re-place the reservations in order, in place, as re-placing every job from scratch
        into a profile of the running jobs would; returns the jobs placed at `now`, in order, and
        whether any reservation moved. Only what can move is searched:
        - a stale reservation (in the past: a running job outlived its estimate) is placed first,
          exactly, among the running jobs and the stale ones before it; only where its new run
          reaches past its old end (`lost_from`..`lost_to`) can the profile be overdrawn;
        - a job whose run meets overdrawn time is placed afresh, with every job reserved to start
          before the end of its fit taken out of the profile first (`loose`, up to `horizon`):
          each of those, in its turn, is placed afresh if its old place no longer fits;
        - any other job stays or moves earlier. It was blocked everywhere before its start, so it
          can only move into time that gained processors (before `until`; at most `room` free
          there, brought up to date from the `gained` runs when a larger job asks), not onto
          the time just before its start unless that gained, and not where a job no larger and
          no shorter found no place (`failed`: time gains only after a reserved start).
        """
        profile, size, est = self._profile, self._size, self._est
        times, free_at, carve, fit, move = profile.times, profile.free, profile._carve, profile.fit, profile.move
        until = self._freed_until
        stale = bisect_left(reserved, (now,))
        due: list[int] = []
        lost_from, lost_to = FOREVER, now
        if stale:
            exact = Profile(now, free, ((max(e, now), size[i]) for e, i in running))
            for k in range(stale):
                t, key, i = reserved[k]
                s, e = size[i], est[i]
                new = exact.place(s, e)
                if t + e > now:
                    profile.add(now, t + e, s)
                profile.add(new, new + e, -s)
                until = max(until, min(new, t + e))
                if new + e > t + e:
                    lost_from, lost_to = min(lost_from, max(new, t + e)), max(lost_to, new + e)
                reserved[k] = (new, key, i)
                if new == now:
                    due.append(i)
        room = 0
        gained = [(now, until)] if until > now else []
        failed = Blocked()
        moved = bool(stale)
        horizon, loose = now, stale  # reserved[k + 1:loose], if any, are out of the profile
        for k in range(stale, len(reserved)):
            t, key, i = reserved[k]
            s, e = size[i], est[i]
            if k >= loose:  # held in the profile
                if t < lost_to and t + e > lost_from and profile.least_free(t, t + e) < 0:
                    horizon = t + e
                    loose = self._loosen(reserved, k, horizon)
                    fits = profile.least_free(t, t + e) >= s
                else:
                    if t == now:
                        due.append(i)
                        continue
                    if s > room:
                        for lo, hi in gained:
                            more = max(free_at[bisect_right(times, lo) - 1:bisect_left(times, hi)])
                            if more > room:
                                room = more
                        gained = []
                        if s > room:
                            continue
                    since = now
                    for b, bs, bd in failed.records:
                        if bs <= s and bd <= e:
                            since = b
                            break
                    before = until if until < t else t
                    if since >= before:
                        continue
                    # fewer than s free just before t (it would have started there): a run that
                    # reaches that time cannot start, so only runs ending before it are searched
                    reach = before
                    j = bisect_left(times, t) - 1
                    if free_at[j] < s and times[j] - e < before:
                        reach = times[j] - e + 1
                        if reach <= since:
                            continue
                    j = fit(s, e, t, reach, since)
                    if j is None:
                        failed.add(s, e, before)
                        continue
                    start = times[j]
                    move(j, start, t, e, s)
                    if t + e > until:
                        until = t + e
                    gained.append((max(start + e, t), t + e))
                    reserved[k] = (start, key, i)
                    moved = True
                    if start == now:
                        due.append(i)
                    continue
            else:  # loose (out of the profile): judged against its old place
                fits = True
                if profile.least_free(t, t + e) < s:
                    if t + e > horizon:
                        horizon = t + e
                        loose = self._loosen(reserved, loose, horizon)
                    fits = profile.least_free(t, t + e) >= s
            new = t
            if not fits:  # placed afresh, with the jobs its fit reaches taken out first
                since = failed.since(s, e, now)
                j = fit(s, e, FOREVER, FOREVER, since)
                while times[j] + e > horizon:
                    horizon = times[j] + e
                    loose = self._loosen(reserved, loose, horizon)
                    j = fit(s, e, FOREVER, FOREVER, since)
                new = times[j]
            elif t > now:  # or earlier, as a held job
                if s > room:
                    for lo, hi in gained:
                        room = max(room, *free_at[bisect_right(times, lo) - 1:bisect_left(times, hi)])
                    gained = []
                before = until if until < t else t
                since = failed.since(s, e, now)
                if s <= room and since < before:
                    j = fit(s, e, t, before, since)
                    if j is None:
                        failed.add(s, e, before)
                    else:
                        new = times[j]
            profile.add(new, new + e, -s)
            if new != t:  # the part of its old place it left gained processors
                gain = (t, min(new, t + e)) if new > t else (max(new + e, t), t + e)
                until = max(until, gain[1])
                gained.append(gain)
                reserved[k] = (new, key, i)
                moved = True
            if new == now:
                due.append(i)
        return due, moved

    def _loosen(self, reserved: list[tuple[int, int, int]], loose: int, horizon: int) -> int:
        """Take the reservations from position `loose` on that start before `horizon` out of the
        profile (`_replace` places them afresh); returns the new end of the loose ones."""
        size, est = self._size, self._est
        stop = bisect_left(reserved, (horizon,), loose)
        if stop > loose:
            self._profile.add_many([(t, t + est[i], size[i]) for t, _, i in reserved[loose:stop]])
        return stop
