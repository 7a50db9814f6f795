"""The availability profile conservative backfilling places reservations in.

One profile lives for the whole episode: running jobs and reservations are carved out of it as
they are placed, processors are handed back when a job ends before its estimate, and the past is
cut off as time advances. A pass therefore only touches what changed, never the whole queue.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

#: Beyond every time a trace reaches.
FOREVER = 2**62


class Profile:
    """Free processors over time as a step function from `now` on.

    `times[k]` starts a segment with `free[k]` processors free until `times[k + 1]`; the last
    segment lasts forever. Equal neighbours are merged where a change leaves them; a boundary
    between equal segments would change no answer (the earliest feasible start is always at a
    change of the step function), only slow scans down.
    """

    __slots__ = ("times", "free")

    def __init__(self, now: int, free: int, releases: Iterable[tuple[int, int]] = ()) -> None:
        """`free` processors at `now`, plus (time, size) releases given in time order."""
        self.times = [now]
        self.free = [free]
        for t, size in releases:
            if t == self.times[-1]:
                self.free[-1] += size
            else:
                self.times.append(t)
                self.free.append(self.free[-1] + size)

    def advance(self, now: int) -> None:
        """Forget what lies before `now`."""
        times = self.times
        k = bisect_right(times, now) - 1
        if k > 0:
            del times[:k]
            del self.free[:k]
        times[0] = now

    def add(self, start: int, end: int, size: int) -> None:
        """`size` more processors free over [start, end) (negative: reserve them)."""
        self._carve(bisect_left(self.times, start), start, end, size)

    def _carve(self, k: int, start: int, end: int, size: int) -> None:
        """`add` from `k`, the first boundary not before `start`: both ends made boundaries, the
        segments between changed, equal neighbours merged (scans then pass over changes of the
        step function only). Written out in one function: it is re-placement's hottest path."""
        times, free = self.times, self.free
        if k == len(times) or times[k] != start:
            times.insert(k, start)
            free.insert(k, free[k - 1])
        stop = bisect_left(times, end, k + 1)
        if stop == len(times) or times[stop] != end:
            times.insert(stop, end)
            free.insert(stop, free[stop - 1])
        for j in range(k, stop):
            free[j] += size
        if stop < len(free) and free[stop] == free[stop - 1]:
            del times[stop], free[stop]
        if k > 0 and free[k] == free[k - 1]:
            del times[k], free[k]

    def add_many(self, changes: list[tuple[int, int, int]]) -> None:
        """Several `add`s (start, end, size) at once: one sweep over the part of the profile they
        touch, instead of one pass over each run (many reservations released together)."""
        delta: dict[int, int] = {}
        for start, end, size in changes:
            delta[start] = delta.get(start, 0) + size
            delta[end] = delta.get(end, 0) - size
        points = sorted(delta)
        times, free = self.times, self.free
        lo = bisect_right(times, points[0]) - 1
        hi = bisect_right(times, points[-1])  # segments lo..hi-1 are rebuilt
        new_times, new_free = [], []
        level = free[lo - 1] if lo > 0 else None  # the level before the rebuilt part
        shift = 0
        k, n = lo, len(points)
        p = 0
        while k < hi or p < n:
            t = times[k] if k < hi and (p == n or times[k] <= points[p]) else points[p]
            if k < hi and times[k] == t:
                base = free[k]
                k += 1
            else:
                base = free[k - 1]
            if p < n and points[p] == t:
                shift += delta[t]
                p += 1
            if base + shift != level:
                level = base + shift
                new_times.append(t)
                new_free.append(level)
        if hi < len(times) and free[hi] == level:  # the first segment after the part merges into it
            del times[hi], free[hi]
        times[lo:hi] = new_times
        free[lo:hi] = new_free

    def move(self, k: int, new: int, start: int, duration: int, size: int) -> None:
        """Move a reservation of `size` processors for `duration` from `start` to `new` (< start,
        the boundary at `k`): only the parts the two runs do not share change."""
        end = new + duration
        if end > start:
            self._carve(k, new, start, -size)
            self._carve(bisect_left(self.times, end, k), end, start + duration, size)
        else:
            self.add(start, start + duration, size)
            self._carve(k, new, end, -size)

    def least_free(self, start: int, end: int) -> int:
        """The fewest processors free at any time in [start, end) (negative: overdrawn)."""
        times = self.times
        return min(self.free[bisect_right(times, start) - 1:bisect_left(times, end)])

    def place(self, size: int, duration: int, since: int = 0) -> int:
        """Reserve `size` processors for `duration` at the earliest time they stay free (none
        fits before `since`, the caller knows), found and carved out in one pass; return it."""
        k = self.fit(size, duration, FOREVER, FOREVER, since)
        start = self.times[k]
        self._carve(k, start, start + duration, -size)
        return start

    def fit(self, size: int, duration: int, held: int = FOREVER, before: int = FOREVER,
            since: int = 0) -> int | None:
        """The segment at whose start `size` processors first stay free for `duration`.

        For a job that already holds [held, held + duration), only starts before `before`
        (<= held) are looked at and None means none fits; its own processors are free to it from
        `held` on. A caller that knows no start before `since` fits passes it to skip them."""
        times, free = self.times, self.free
        n = len(times)
        k = bisect_right(times, since) - 1 if since > times[0] else 0
        while k < n:
            start = times[k]
            if start >= before:
                return None
            if free[k] < size:
                k += 1
                continue
            limit = start + duration
            if held < limit:
                limit = held
            j = k + 1
            while j < n and times[j] < limit and free[j] >= size:
                j += 1
            if j == n or times[j] >= limit:
                return k
            k = j + 1
        raise AssertionError("the last segment of a profile has every processor free")


class Blocked:
    """What earlier searches of one pass proved: a job no smaller and no shorter than one that
    could not start before some time cannot start before it either, as long as the profile has
    not gained processors where that search was blocked. Saves scanning the same segments again."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[tuple[int, int, int]] = []  # (no start before, size, duration), latest first

    def since(self, size: int, duration: int, floor: int) -> int:
        """The latest time before which no job of this size and duration can start (at least `floor`)."""
        for t, s, d in self.records:
            if t <= floor:
                break
            if s <= size and d <= duration:
                return t
        return floor

    def add(self, size: int, duration: int, before: int) -> None:
        """Record that a job of `size` and `duration` cannot start before `before`; records it
        makes useless (as large, as long, no later) go."""
        records = [r for r in self.records if r[1] < size or r[2] < duration or r[0] > before]
        k = 0
        while k < len(records) and records[k][0] > before:
            k += 1
        records.insert(k, (before, size, duration))
        self.records = records
