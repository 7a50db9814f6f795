"""The availability profile conservative backfilling places reservations in."""

from __future__ import annotations

from bisect import bisect_right


class Profile:
    """Free processors over time as a step function from `now` on.

    `times[k]` starts a segment with `free[k]` processors free until `times[k + 1]`.
    """

    __slots__ = ("times", "free")

    def __init__(self, now: int, free: int) -> None:
        self.times = [now]
        self.free = [free]

    def _split(self, t: int) -> int:
        """Index of the segment starting exactly at `t`, creating it if needed."""
        k = bisect_right(self.times, t) - 1
        if self.times[k] != t:
            self.times.insert(k + 1, t)
            self.free.insert(k + 1, self.free[k])
            k += 1
        return k

    def release(self, t: int, size: int) -> None:
        """`size` processors become free at `t` (a running job's estimated end)."""
        k = self._split(t)
        for j in range(k, len(self.free)):
            self.free[j] += size

    def occupy(self, start: int, end: int, size: int) -> None:
        """Reserve `size` processors over [start, end)."""
        k = self._split(start)
        stop = self._split(end)
        for j in range(k, stop):
            self.free[j] -= size

    def earliest(self, size: int, duration: int) -> int:
        """The earliest segment start at which `size` processors stay free for `duration`."""
        times, free = self.times, self.free
        k = 0
        while True:
            start = times[k]
            end = start + duration
            j = k
            while j < len(times) and times[j] < end:
                if free[j] < size:
                    break
                j += 1
            else:
                return start
            k = j + 1
