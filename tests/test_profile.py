"""The availability profile of conservative backfilling, worked by hand: each expected step
function below is derived in the comment above it ((time, free) pairs from time on)."""

from __future__ import annotations

from hpcgym.environment.backfill import Blocked, Profile


def steps(profile: Profile) -> list[tuple[int, int]]:
    return list(zip(profile.times, profile.free))


def test_releases_and_adds_merge_equal_neighbours():
    # 10 free at 0; releases of 2 and 1 at 5 and 3 at 8: 10, 13 from 5, 16 from 8
    p = Profile(0, 10, [(5, 2), (5, 1), (8, 3)])
    assert steps(p) == [(0, 10), (5, 13), (8, 16)]
    # 3 taken over [2, 5): a new step at 2 with 7
    p.add(2, 5, -3)
    assert steps(p) == [(0, 10), (2, 7), (5, 13), (8, 16)]
    # 3 taken over [0, 2) too: 7 from 0 to 5, the step at 2 goes
    p.add(0, 2, -3)
    assert steps(p) == [(0, 7), (5, 13), (8, 16)]


def test_place_takes_the_earliest_fit_and_carves_it_out():
    # 4 processors, 3 busy until 10: 1 free, then 4
    p = Profile(0, 4)
    p.add(0, 10, -3)
    # 2 for 5: 1 free before 10 is too few; from 10 on: [10, 15), leaving 2 there
    assert p.place(2, 5) == 10
    assert steps(p) == [(0, 1), (10, 2), (15, 4)]
    # 1 for 20: fits at 0 (1, then 2, then 4 free): [0, 20) takes one everywhere
    assert p.place(1, 20) == 0
    assert steps(p) == [(0, 0), (10, 1), (15, 3), (20, 4)]
    # 3 for 5, known not to fit before 10: 1 free at 10, 3 from 15 until 20: [15, 20)
    assert p.place(3, 5, since=10) == 15
    assert steps(p) == [(0, 0), (10, 1), (15, 0), (20, 4)]


def test_move_changes_only_what_the_two_runs_do_not_share():
    # 5 processors, 1 busy over [0, 6), 2 reserved over [10, 20): 4, 5 from 6, 3 from 10, 5 from 20
    p = Profile(0, 5)
    p.add(0, 6, -1)
    p.add(10, 20, -2)
    # moved to [6, 16) (the boundary at index 1): taken over [6, 10), given back over [16, 20)
    p.move(1, 6, 10, 10, 2)
    assert steps(p) == [(0, 4), (6, 3), (16, 5)]
    # 1 busy over [0, 2), 2 over [10, 14) moved to [2, 6): the runs share nothing
    q = Profile(0, 5)
    q.add(0, 2, -1)
    q.add(10, 14, -2)
    q.move(1, 2, 10, 4, 2)
    assert steps(q) == [(0, 4), (2, 3), (6, 5)]


def test_add_many_gives_what_the_adds_one_by_one_give():
    # 4 of 10 busy over [0, 20): 6, then 10 from 20
    p = Profile(0, 10)
    p.add(0, 20, -4)
    # 2 back over [5, 15) and 1 over [10, 30): 6; 8 from 5; 9 from 10; 7 from 15; 10 + 1 from 20;
    # 10 from 30
    p.add_many([(5, 15, 2), (10, 30, 1)])
    assert steps(p) == [(0, 6), (5, 8), (10, 9), (15, 7), (20, 11), (30, 10)]
    # giving the 4 back and taking the 3 again leaves 10 everywhere: one step
    p.add_many([(0, 20, 4), (5, 15, -2), (10, 30, -1)])
    assert steps(p) == [(0, 10)]


def test_fit_counts_a_held_reservation_as_free_to_its_own_job():
    # 4 processors: 3 busy until 5, and a job of 3 holds [10, 20): 1, 4 from 5, 1 from 10, 4 from 20
    p = Profile(0, 4)
    p.add(0, 5, -3)
    p.add(10, 20, -3)
    assert steps(p) == [(0, 1), (5, 4), (10, 1), (20, 4)]
    # that job (3 for 10) can start at 5: [5, 10) has 4, and from 10 on its own 3 are its
    assert p.times[p.fit(3, 10, held=10, before=10)] == 5
    # another job of 3 for 10 cannot: [5, 15) meets the 1 free at 10; the first fit is 20
    assert p.times[p.fit(3, 10)] == 20
    # looking only before 5, the held job finds nothing (1 free at 0)
    assert p.fit(3, 10, held=10, before=5) is None


def test_blocked_rules_out_jobs_no_smaller_and_no_shorter():
    b = Blocked()
    b.add(4, 100, 50)  # 4 processors for 100 s: no start before 50
    assert b.since(4, 100, 0) == 50
    assert b.since(8, 200, 0) == 50  # larger and longer: no start before 50 either
    assert b.since(2, 200, 0) == 0   # smaller: not ruled out
    assert b.since(8, 50, 10) == 10  # shorter: not ruled out, the floor stays
    b.add(2, 300, 70)
    assert b.since(3, 300, 0) == 70  # the later record rules it out further
    assert b.since(4, 100, 60) == 60  # the 50 record lies below the floor
    # 1 processor for 50 s, no start before 60: makes the (4, 100, 50) record useless
    b.add(1, 50, 60)
    assert b.since(4, 100, 0) == 60
    assert b.since(2, 300, 0) == 70
