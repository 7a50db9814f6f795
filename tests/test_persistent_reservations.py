"""Persistent reservations (`commit_pick`, docs/semantics.md section 4): once a job is reserved it
keeps the reservation until it starts, for the built-in EASY and for an agent's pick alike, on
schedules worked out by hand. Requests equal run times throughout, so estimates are exact.

(The option off leaving every schedule unchanged is tests/test_schedule_regression.py's job; the
SchedInspector cases of the same option are in tests/test_commit_pick.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.agents.base import Agent
from hpcgym.environment.config import SimConfig, expand_preset
from hpcgym.environment.errors import ConfigError
from hpcgym.environment.metrics import START_KINDS
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import sim_config
from hpcgym.environment.workload import Workload


def workload(procs: int, submit: list[int], run: list[int], size: list[int]) -> Workload:
    """Jobs 1..n with exact requests."""
    n = len(submit)
    return Workload(name="persist", procs=procs, job_id=np.arange(1, n + 1), submit=np.array(submit),
                    run=np.array(run), size=np.array(size), requested=np.array(run), user=np.ones(n, dtype=np.int64))


def starts_and_kinds(result) -> tuple[list[int], list[str]]:
    return ([int(s) for s in result.jobs["start"]], [START_KINDS[int(k)] for k in result.jobs["start_kind"]])


# ---------------------------------------------------------------- EASY backfills around the reservation
def takeover() -> Workload:
    """Ten processors, SJF. J1 (6 procs, 100 s) and J2 (8 procs, 500 s) at 0, J3 (5 procs, 50 s)
    at 10, J4 (4 procs, 300 s) at 20.

    At 0 J1 starts and J2 (8 > 4 free) is reserved: shadow time 100 (J1 ends), extra processors
    10 - 8 = 2.

    Re-made at every pass: at 10 the shorter J3 heads the queue and takes the reservation
    (shadow 100, extra 10 - 5 = 5). At 20 J4 fits the 4 free processors and, ending at 320 > 100,
    uses 4 <= 5 extra processors: it backfills. At 100 J3 starts (100-150); J2 now needs J4's
    processors and starts when J4 ends, at 320: 220 s after the time it was first promised.

    Kept: J2 holds the reservation. At 10 J3 (5 procs) cannot backfill into 4 free; at 20 J4 ends
    after the shadow time and needs 4 > 2 extra processors: it waits too. At 100 J2 starts
    (100-600), then J3 is picked and reserved for 600; at 600 J3 starts and J4 fits beside it.
    """
    return workload(10, submit=[0, 0, 10, 20], run=[100, 500, 50, 300], size=[6, 8, 5, 4])


REMADE = ([0, 320, 100, 20], ["ready", "reserved", "reserved", "backfilled"])
KEPT = ([0, 100, 600, 600], ["ready", "reserved", "reserved", "ready"])


@pytest.mark.parametrize("keep, expected", [(False, REMADE), (True, KEPT)])
def test_builtin_easy_backfills_around_the_kept_reservation(keep, expected):
    result = simulate(takeover(), SimConfig(commit_pick=keep), policy="sjf")
    assert starts_and_kinds(result) == expected


class TwoLevel(Agent):
    """DRAS's two levels in miniature: level 1 picks the shortest request of the window, level 2
    backfills the first candidate; notes (kind, time) of every decision it is asked."""

    kinds = ("select", "backfill")

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def act(self, decision):
        self.asked.append((decision.kind, decision.time))
        if decision.kind == "backfill":
            return decision.candidates[0]
        requested = dict(zip(decision.observation["queue"]["id"], decision.observation["queue"]["requested"]))
        return [min(decision.candidates, key=lambda j: (requested[j], j))]


def test_an_agents_reservation_persists_through_both_levels():
    """The same jobs with the queue in FCFS order and TwoLevel taking both decisions: its picks
    are SJF's, so the schedules are those above. Re-made, level 1 is asked at every pass (at 10
    and 20 it moves the reservation to J3; at 100 it starts J3, then reserves J2; at 150 and 320
    it picks J2 again) and level 2 backfills J4 at 20. Kept, level 1 is asked only when no pick
    waits (0: J1 starts, J2 reserved; 100: J2 has started, J3 reserved; 600: J3 has started, J4
    starts) and level 2 never has a candidate."""
    cases = ((False, REMADE, [("select", 0), ("select", 0), ("select", 10), ("select", 20), ("backfill", 20),
                              ("select", 100), ("select", 100), ("select", 150), ("select", 320)]),
             (True, KEPT, [("select", 0), ("select", 0), ("select", 100), ("select", 600)]))
    for keep, expected, asked in cases:
        agent = TwoLevel()
        result = simulate(takeover(), SimConfig(commit_pick=keep), agents={"select": agent, "backfill": agent})
        assert starts_and_kinds(result) == expected
        assert agent.asked == asked


# ---------------------------------------------------------------- priorities that change while jobs wait
def test_a_priority_that_grows_with_waiting_does_not_take_the_kept_reservation():
    """UNICEF (score -wait / (log2(max(n, 2)) * request), lowest first, re-sorted at every pass),
    four processors. J1 (1 proc, 50 s), J2 (3 procs, 100 s), J3 (4 procs, 1000 s) at 0, J4
    (4 procs, 10 s) at 5. At 0 all scores are 0: queue order J1, J2, J3; J1 and J2 start, J3 is
    reserved (shadow 100).

    At 5 J4 arrives: J3 -5/2000 = -0.0025 < J4 0, J3 stays first. At 50 J1 ends, no arrival:
    J3 -50/2000 = -0.025, J4 -45/20 = -2.25, so J4 now comes first. Re-made: J4 takes the
    reservation; at 100 (J2 ends) J4 runs 100-110 and J3 starts at 110. Kept: J3 starts at 100
    (100-1100) and J4 at 1100.
    """
    jobs = workload(4, submit=[0, 0, 0, 5], run=[50, 100, 1000, 10], size=[1, 3, 4, 4])
    remade = simulate(jobs, SimConfig(), policy="unicef")
    kept = simulate(jobs, SimConfig(commit_pick=True), policy="unicef")
    assert starts_and_kinds(remade) == ([0, 0, 110, 100], ["ready", "ready", "reserved", "reserved"])
    assert starts_and_kinds(kept) == ([0, 0, 100, 1100], ["ready", "ready", "reserved", "reserved"])


# ---------------------------------------------------------------- kills and requeues
class KillFirstAt(Agent):
    """Kills job `victim` the first time it is asked at or after `at`; otherwise kills nothing."""

    kinds = ("kill",)

    def __init__(self, victim: int, at: int) -> None:
        self.victim, self.at, self.done = victim, at, False

    def act(self, decision):
        if self.done or decision.time < self.at or self.victim not in decision.candidates:
            return None
        self.done = True
        return self.victim


def test_a_requeued_job_does_not_take_the_kept_reservation():
    """FCFS, four processors. J1 (2 procs, 1000 s) at 0, J2 (4 procs, 100 s) at 1, J3 (1 proc,
    5 s) at 10. J1 starts at 0; at 1 J2 is reserved (shadow 1000). At 10 J3 backfills (ends at
    15), then the kill agent kills J1, which goes back to the queue as a new wait with its submit
    time 0, so FCFS ranks it first; 3 processors are free and another pass follows.

    Re-made: J1 heads the queue and restarts at 10 (ready); J2 is reserved behind it (shadow
    1010, when J1 ends) and starts at 1010.
    Kept: J2 stays the reserved job (4 > 3 free; shadow 15, when J3 ends; J1 would end at 1010,
    after it, and no extra processors are left: it cannot backfill). At 15 J2 starts (15-115);
    then J1 is picked, reserved, and starts at 115.
    """
    jobs = workload(4, submit=[0, 1, 10], run=[1000, 100, 5], size=[2, 4, 1])
    for keep, expected in ((False, ([10, 1010, 10], ["ready", "reserved", "backfilled"])),
                           (True, ([115, 15, 10], ["reserved", "reserved", "backfilled"]))):
        result = simulate(jobs, SimConfig(commit_pick=keep), agents={"kill": KillFirstAt(victim=1, at=10)})
        assert starts_and_kinds(result) == expected
        assert result.jobs["kills"].tolist() == [1, 0, 0]


# ---------------------------------------------------------------- where the option makes no sense
def test_conservative_backfilling_refuses_the_option():
    """Conservative backfilling keeps every queued job's reservation anyway (section 6): asking
    for kept reservations there is a mistake, refused with what to do, also through a preset."""
    with pytest.raises(ConfigError, match="conservative.*turn commit_pick off or use backfill easy"):
        SimConfig(backfill="conservative", commit_pick=True)
    with pytest.raises(ConfigError, match="turn commit_pick off"):
        sim_config(expand_preset({"preset": "rlbf-scw", "backfill": "conservative"}))
    assert sim_config({"backfill": "none", "commit_pick": True}).commit_pick  # head-of-line blocking behind it


# ---------------------------------------------------------------- DRAS's training env
def first_job_picks(keep: bool) -> list[int]:
    """One episode of the two-kind Gymnasium env (DRAS's levels: `hpcgym train dras-*`) on 40
    generated jobs, always taking the first job the mask allows (never wait / stop): the job ids
    picked, in order."""
    pytest.importorskip("gymnasium")  # the rl extra
    from hpcgym.gymbridge import make

    env = make(("select", "backfill"), workload={"jobs": 40, "sample": True, "generate_jobs": 600},
               options={"window": 8, "commit_pick": keep})
    _, info = env.reset(seed=3)
    picks, done = [], False
    while not done:
        slot = int(np.flatnonzero(info["action_mask"][:-1])[0])
        picks.append(info["decision"].observation["queue"]["id"][slot])
        _, _, done, _, info = env.step(slot)
    return picks


def test_in_the_training_env_a_kept_reservation_is_decided_once():
    """Kept, each job is decided exactly once: started (level 1 or 2) or reserved, and a reserved
    job then starts without being picked again; so an episode has as many decisions as jobs.
    Re-made, a reserved job that still does not fit is picked again at the next instant."""
    kept = first_job_picks(True)
    assert len(kept) == len(set(kept)) == 40
    remade = first_job_picks(False)
    assert len(set(remade)) == 40 and len(remade) > 40
