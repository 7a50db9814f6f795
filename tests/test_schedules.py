"""Hand-worked schedules: every expected start time below is derived in the docstring."""

from __future__ import annotations

import pytest

from hpcgym.agents.base import Agent
from hpcgym.environment.config import SimConfig
from hpcgym.environment.decisions import INSPECT, KILL
from hpcgym.environment.errors import InvalidAction
from hpcgym.environment.simulator import Simulation, simulate
from hpcgym.environment.workload import Workload


def make(procs: int, jobs: list[tuple[int, int, int, int]], ids: list[int] | None = None) -> Workload:
    """jobs: (submit, size, run, requested)."""
    submit, size, run, req = (list(col) for col in zip(*jobs))
    ids = ids or list(range(1, len(jobs) + 1))
    return Workload("hand", procs, job_id=ids, submit=submit, run=run, size=size, requested=req,
                    user=[-1] * len(jobs))


def starts(result) -> dict[int, int]:
    return dict(zip(result.jobs["job_id"].tolist(), result.jobs["start"].tolist()))


def test_fcfs_without_backfilling():
    """10 processors. J1 (6p) starts at 0. J2 (6p) does not fit and blocks J3 and J4 although J3
    would fit. At 10 J1 ends: J2 starts (4 free), J3 (2p) starts (2 free), J4 (4p) waits. At 13 J3
    ends: 4 free, J4 starts. Starts 0, 10, 10, 13."""
    w = make(10, [(0, 6, 10, 10), (1, 6, 5, 5), (2, 2, 3, 3), (3, 4, 2, 2)])
    r = simulate(w, SimConfig(backfill="none"))
    assert starts(r) == {1: 0, 2: 10, 3: 10, 4: 13}


EASY_JOBS = [(0, 6, 100, 100), (1, 10, 40, 40), (2, 3, 50, 50), (3, 2, 300, 300), (4, 1, 300, 300)]


def test_easy_backfilling_cases():
    """12 processors. J1 (6p, 100 s) runs from 0; 6 free. J2 (10p) is the head: by estimate 12 are
    free at 100 (shadow time), leaving 2 extra processors.
    - J3 (3p, 50 s) at 2: ends at 52 <= 100, backfills at 2 (ends before the shadow time); 3 free.
    - J4 (2p, 300 s) at 3: ends after 100 but 2 <= 2 extra, backfills at 3; 1 free, 0 extra.
    - J5 (1p, 300 s) at 4: fits the free processor, but ends after 100 and 1 > 0 extra: refused
      (it would delay the head). At 52 J3 ends; still refused for the same reason.
    At 100 J1 ends, J2 starts (0 free). J5 is now the head and starts when J2 ends at 140."""
    r = simulate(make(12, EASY_JOBS), SimConfig(backfill="easy"))
    assert starts(r) == {1: 0, 2: 100, 3: 2, 4: 3, 5: 140}


CONSERVATIVE_JOBS = [(0, 6, 100, 100), (1, 6, 100, 100), (2, 7, 100, 100), (3, 4, 250, 250)]


def test_conservative_protects_every_reservation_where_easy_protects_only_the_head():
    """10 processors. J1 (6p) runs [0, 100); 4 free. J2 (6p) reserves [100, 200), leaving 4 then.
    J3 (7p) does not fit before 200 and reserves [200, 300), leaving 3 then. J4 (4p, 250 s) at 3:
    - conservative: [3, 253) would overlap J3's reservation where only 3 are left, so it cannot
      start; its earliest place is 300 (at 100 and 200 the run overlaps [200, 300) too).
      Starts 0, 100, 200, 300.
    - EASY: only J2 is protected: J4 ends after 100 but fits the 4 extra processors at 100, so it
      starts at 3. At 100 J2 starts; J3 (7p) then waits for J4 too: 6 + 4 free only at 253.
      Starts 0, 100, 253, 3."""
    w = make(10, CONSERVATIVE_JOBS)
    assert starts(simulate(w, SimConfig(backfill="conservative"))) == {1: 0, 2: 100, 3: 200, 4: 300}
    assert starts(simulate(w, SimConfig(backfill="easy"))) == {1: 0, 2: 100, 3: 253, 4: 3}


def test_conservative_reservation_moves_earlier_when_a_job_ends_early():
    """10 processors. J1 (10p) requests 100 s but runs 40. J2 (10p, 10 s) reserves [100, 110) at 1.
    At 40 J1 ends: the reservation is re-placed no later, at 40, and J2 starts then."""
    w = make(10, [(0, 10, 40, 100), (1, 10, 10, 10)])
    assert starts(simulate(w, SimConfig(backfill="conservative"))) == {1: 0, 2: 40}


def test_conservative_an_overrun_pushes_the_reservations_it_reaches_later_in_order():
    """6 processors. J1 (4p) requests 10 s but runs 15. By estimates: J2 (4p, 5 s) reserves
    [10, 15) (2 free before 10); J3 (3p, 5 s) and J4 (3p, 10 s) reserve [15, 20) and [15, 25);
    J5 (3p, 5 s) reserves [20, 25) beside J4. At 15 J1 ends: J2's reservation lies in the past and
    is placed again, exactly: [15, 20), 2 left there. In order, J3 (3p) no longer fits at 15: 20,
    [20, 25). J4 (3p, 10 s): 2 at 15, then 3 over [20, 25) and 6 after: 20. J5 (3p): none left
    over [20, 25), 3 from 25: 25. Starts 0, 15, 20, 20, 25."""
    w = make(6, [(0, 4, 15, 10), (1, 4, 5, 5), (2, 3, 5, 5), (3, 3, 10, 10), (4, 3, 5, 5)])
    assert starts(simulate(w, SimConfig(backfill="conservative"))) == {1: 0, 2: 15, 3: 20, 4: 20, 5: 25}


TIE_JOBS = [(0, 4, 10, 10), (1, 4, 5, 5), (1, 4, 5, 5), (2, 4, 5, 5)]
TIE_IDS = [1, 7, 5, 9]


@pytest.mark.parametrize("policy, expected", [
    # All three waiting jobs request 5 s: SJF ties go to the earlier submit, then the lower id:
    # 5 (submit 1), 7 (submit 1), 9 (submit 2), one after another from 10.
    ("sjf", {1: 0, 5: 10, 7: 15, 9: 20}),
    # LCFS prefers the latest submit (9), then ties at submit 1 go to the lower id: 5, then 7.
    ("lcfs", {1: 0, 9: 10, 5: 15, 7: 20}),
])
def test_priority_tie_breaks(policy, expected):
    """4 processors, every job needs all 4; J1 runs [0, 10) and the rest queue behind it."""
    r = simulate(make(4, TIE_JOBS, TIE_IDS), SimConfig(backfill="none"), policy=policy)
    assert starts(r) == expected


class KillAt(Agent):
    kinds = (KILL,)

    def __init__(self, time: int, job: int) -> None:
        self.time, self.job = time, job

    def act(self, decision):
        return self.job if decision.time == self.time and self.job in decision.candidates else None


def test_kill_and_requeue():
    """4 processors, SJF. J1 (4p, 100 s) starts at 0. J2 (2p, 10 s) arrives at 10 and cannot fit.
    The kill agent kills J1 at 10: it returns to the queue with its original submit, having lost
    10 s * 4p = 40 processor-seconds. The pass that follows starts J2 (shorter) at 10 and reserves
    J1, which restarts at 20 when J2 ends, and ends at 120. Its wait counts from submit 0: 20."""
    w = make(4, [(0, 4, 100, 100), (10, 2, 10, 10)])
    r = simulate(w, SimConfig(), policy="sjf", agents={KILL: KillAt(10, 1)})
    j = {k: r.jobs[k].tolist() for k in ("start", "end", "wait", "kills", "lost_work")}
    assert j["start"] == [20, 10] and j["end"] == [120, 20]
    assert j["wait"] == [20, 0] and j["kills"] == [1, 0] and j["lost_work"] == [40, 0]
    assert r.summary["lost_work"] == 40


class RejectTimes(Agent):
    kinds = (INSPECT,)

    def __init__(self, times: int) -> None:
        self.left = times
        self.asked_at: list[int] = []

    def act(self, decision):
        self.asked_at.append(decision.time)
        self.left -= 1
        return self.left < 0


def test_reject_then_retry_at_the_next_event():
    """4 processors. J1 (2p) arrives at 0; the inspector rejects it once, so the next look is at the
    earlier of the next event (J2 arrives at 50) and 0 + 600. At 50 both are accepted and start."""
    inspector = RejectTimes(1)
    w = make(4, [(0, 2, 100, 100), (50, 2, 10, 10)])
    r = simulate(w, SimConfig(), agents={INSPECT: inspector})
    assert starts(r) == {1: 50, 2: 50}
    assert inspector.asked_at == [0, 50, 50]
    assert r.jobs["rejections"].tolist() == [1, 0]


def test_reject_retries_after_max_interval_and_respects_the_cap():
    """One job, an inspector that always rejects, max interval 600, cap 2 rejections: looks at 0
    and 600 are rejected; at 1200 the job has reached the cap and starts without being asked."""
    inspector = RejectTimes(10**9)
    w = make(4, [(0, 2, 100, 100)])
    r = simulate(w, SimConfig(max_interval=600, max_rejections=2), agents={INSPECT: inspector})
    assert starts(r) == {1: 1200}
    assert inspector.asked_at == [0, 600]
    assert r.jobs["rejections"].tolist() == [2]


@pytest.mark.parametrize("overrun, expected_j2, j1_run", [("kill", 50, 50), ("run", 100, 100)])
def test_walltime_kill(overrun, expected_j2, j1_run):
    """4 processors. J1 requests 50 s but its recorded run is 100 s; J2 (4p) waits for it. Killed at
    its walltime, J1 ends at 50 and J2 starts then; run to its recorded end, J2 starts at 100."""
    w = make(4, [(0, 4, 100, 50), (1, 4, 10, 10)])
    r = simulate(w, SimConfig(overrun=overrun))
    assert starts(r)[2] == expected_j2
    assert r.jobs["run"].tolist()[0] == j1_run
    assert r.summary["walltime_killed"] == (1 if overrun == "kill" else 0)


def test_invalid_action_leaves_the_decision_pending():
    """A select agent's bad answers are refused with a message and change nothing."""
    sim = Simulation(make(4, [(0, 2, 10, 10), (0, 4, 10, 10)]), external={"select"})
    decision = sim.reset()
    assert decision.kind == "select" and decision.candidates == [1, 2]
    for bad, words in [(99, "not a valid"), ("x", "integers"), ([1, 2], "need 6 processors"), ([1, 1], "twice")]:
        with pytest.raises(InvalidAction, match=words):
            sim.step(bad)
        assert sim.pending is decision and sim.free == 4
    nxt = sim.step(1)
    assert nxt.kind == "select" and nxt.candidates == [2] and sim.free == 2


def test_select_cannot_wait_when_nothing_would_ever_happen():
    sim = Simulation(make(4, [(0, 2, 10, 10)]), external={"select"})
    decision = sim.reset()
    assert not decision.can_wait
    with pytest.raises(InvalidAction, match="cannot wait"):
        sim.step(None)


def test_an_agent_that_always_kills_cannot_stall_the_simulation():
    """Kill decisions come only at real scheduling instances (a finish, a submit, a wake-up), never
    at the leftover finish time of a killed run, so even an agent that kills at every chance is
    asked at most about twice per job and every job still completes (FCFS restarts the oldest job
    first, so a killed job can lose its place to an earlier one)."""
    jobs = [(t, 2 + t % 3, 50 + 7 * t, 60 + 7 * t) for t in range(0, 40, 2)]
    sim = Simulation(make(6, jobs), SimConfig(backfill="easy"), external={KILL})
    decision, asked = sim.reset(), 0
    while decision is not None:
        asked += 1
        assert asked < 4 * len(jobs), "the kill agent is asked again and again"
        decision = sim.step(decision.candidates[-1])
    result = sim.result()
    assert result.summary["kills"] > 0 and (result.jobs["end"] > 0).all()
