"""The availability profile of conservative backfilling (environment/replan.py), worked by hand:
each expected step function below is derived in the comment above it ((time, free) pairs)."""

from __future__ import annotations

import numpy as np

from hpcgym.environment.backfill import FOREVER
from hpcgym.environment.replan import _add, _block, _fit, _move, _since


class Steps:
    """A profile in the kernels' arrays: `free` processors from `now` on, room to grow."""

    def __init__(self, now: int, free: int) -> None:
        self.T, self.F, self.n = np.full(32, now, np.int64), np.full(32, free, np.int64), 1

    def add(self, start: int, end: int, size: int) -> None:
        self.n = _add(self.T, self.F, self.n, start, end, size)

    def fit(self, size: int, duration: int, held: int = FOREVER, before: int = FOREVER, since: int = 0) -> int | None:
        k = _fit(self.T, self.F, self.n, size, duration, held, before, since)
        return None if k < 0 else int(self.T[k])

    def move(self, new: int, start: int, duration: int, size: int) -> None:
        k = int(np.searchsorted(self.T[:self.n], new))
        self.n = _move(self.T, self.F, self.n, k, new, start, duration, size)

    def __eq__(self, steps: object) -> bool:
        return list(zip(self.T[:self.n].tolist(), self.F[:self.n].tolist())) == steps


def test_adds_merge_equal_neighbours():
    # 10 free; 3 taken over [2, 5): a step at 2 with 7, back to 10 at 5
    p = Steps(0, 10)
    p.add(2, 5, -3)
    assert p == [(0, 10), (2, 7), (5, 10)]
    # 3 taken over [0, 2) too: 7 from 0 to 5, the step at 2 goes
    p.add(0, 2, -3)
    assert p == [(0, 7), (5, 10)]
    # given back over [0, 5): one step
    p.add(0, 5, 3)
    assert p == [(0, 10)]


def test_fit_takes_the_earliest_start_that_stays_free():
    # 4 processors, 3 busy until 10, 2 reserved over [10, 15): 1 free, 2 from 10, 4 from 15
    p = Steps(0, 4)
    p.add(0, 10, -3)
    p.add(10, 15, -2)
    assert p.fit(2, 5) == 10   # 1 free before 10 is too few; 2 over [10, 15)
    assert p.fit(1, 20) == 0   # 1, 2 and 4 free: one fits everywhere
    assert p.fit(3, 5) == 15   # 3 only once 4 are free
    assert p.fit(3, 5, since=15) == 15  # known not to fit before 15


def test_move_changes_only_what_the_two_runs_do_not_share():
    # 5 processors, 1 busy over [0, 6), 2 reserved over [10, 20): 4, 5 from 6, 3 from 10, 5 from 20
    p = Steps(0, 5)
    p.add(0, 6, -1)
    p.add(10, 20, -2)
    # moved to [6, 16): taken over [6, 10), given back over [16, 20)
    p.move(6, 10, 10, 2)
    assert p == [(0, 4), (6, 3), (16, 5)]
    # 1 busy over [0, 2), 2 over [10, 14) moved to [2, 6): the runs share nothing
    q = Steps(0, 5)
    q.add(0, 2, -1)
    q.add(10, 14, -2)
    q.move(2, 10, 4, 2)
    assert q == [(0, 4), (2, 3), (6, 5)]


def test_fit_counts_a_held_reservation_as_free_to_its_own_job():
    # 4 processors: 3 busy until 5, and a job of 3 holds [10, 20): 1, 4 from 5, 1 from 10, 4 from 20
    p = Steps(0, 4)
    p.add(0, 5, -3)
    p.add(10, 20, -3)
    assert p == [(0, 1), (5, 4), (10, 1), (20, 4)]
    # that job (3 for 10) can start at 5: [5, 10) has 4, and from 10 on its own 3 are its
    assert p.fit(3, 10, held=10, before=10) == 5
    # another job of 3 for 10 cannot: [5, 15) meets the 1 free at 10; the first fit is 20
    assert p.fit(3, 10) == 20
    # looking only before 5, the held job finds nothing (1 free at 0)
    assert p.fit(3, 10, held=10, before=5) is None


def test_blocked_rules_out_jobs_no_smaller_and_no_shorter():
    B, nb = np.zeros((4, 3), np.int64), 0
    nb = _block(B, nb, 4, 100, 50)  # 4 processors for 100 s: no start before 50
    assert _since(B, nb, 4, 100, 0) == 50
    assert _since(B, nb, 8, 200, 0) == 50  # larger and longer: no start before 50 either
    assert _since(B, nb, 2, 200, 0) == 0   # smaller: not ruled out
    assert _since(B, nb, 8, 50, 10) == 10  # shorter: not ruled out, the floor stays
    nb = _block(B, nb, 2, 300, 70)
    assert _since(B, nb, 3, 300, 0) == 70  # the later record rules it out further
    assert _since(B, nb, 4, 100, 60) == 60  # the 50 record lies below the floor
    # 1 processor for 50 s, no start before 60: makes the (4, 100, 50) record useless
    nb = _block(B, nb, 1, 50, 60)
    assert nb == 2
    assert _since(B, nb, 4, 100, 0) == 60
    assert _since(B, nb, 2, 300, 0) == 70
