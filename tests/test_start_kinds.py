"""How each job started: ready (0), reserved (1), backfilled (2), the classification of DRAS
(Fan et al., TPDS 2022, section 3.2 and Table 4); the rules are docs/semantics.md section 11.

The hand-worked schedules derive every start time and kind in their docstrings; the properties
check the codes on random small workloads.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcgym.agents.base import Agent, PriorityAgent
from hpcgym.environment.config import SimConfig
from hpcgym.environment.decisions import BACKFILL, KILL, SELECT
from hpcgym.environment.metrics import JOB_COLUMNS, START_KINDS, read_jobs_csv, summarize
from hpcgym.environment.simulator import simulate
from hpcgym.environment.workload import Workload

from .test_invariants import FirstCandidate, RandomInspector, RandomKiller, fast, workloads
from .test_schedules import KillAt

READY, RESERVED, BACKFILLED = 0, 1, 2
VECTORS = Path(__file__).resolve().parents[1] / "protocol" / "vectors"


def make(procs: int, jobs: list[tuple[int, int, int, int]]) -> Workload:
    """jobs: (submit, size, run, requested); ids 1, 2, ..."""
    submit, size, run, req = (list(col) for col in zip(*jobs))
    return Workload("hand", procs, job_id=list(range(1, len(jobs) + 1)), submit=submit, run=run,
                    size=size, requested=req, user=[-1] * len(jobs))


def starts(result) -> list[int]:
    return result.jobs["start"].tolist()


def kinds(result) -> list[int]:
    return result.jobs["start_kind"].tolist()


class Decline(Agent):
    """Backfill agent that never backfills."""

    kinds = (BACKFILL,)

    def __init__(self) -> None:
        self.asked_at: list[int] = []

    def act(self, decision):
        self.asked_at.append(decision.time)
        return None


def test_start_kind_names_and_column():
    assert START_KINDS == ("ready", "reserved", "backfilled")
    assert JOB_COLUMNS[-1] == "start_kind"


# ----------------------------------------------------------------------------- EASY
SMALL = [(0, 2, 100, 100), (1, 3, 50, 50), (2, 1, 10, 10)]


@pytest.mark.parametrize("external", [False, True])
def test_easy_ready_reserved_backfilled(external):
    """4 processors. A (2p, 100 s) starts at 0 because it fits: ready; 2 free. B (3p) arrives at 1
    and does not fit: it is the reserved job (shadow time 100, when A ends by estimate). C (1p,
    10 s) arrives at 2; B is picked again and still does not fit; C fits the 2 free processors and
    ends at 12 <= 100: backfilled at 2. At 100 A ends and B starts: reserved.
    The same with an external backfill agent that takes the first candidate (C at 2)."""
    agents = {BACKFILL: FirstCandidate()} if external else {}
    r = simulate(make(4, SMALL), SimConfig(backfill="easy"), agents=agents)
    assert starts(r) == [0, 100, 2]
    assert kinds(r) == [READY, RESERVED, BACKFILLED]
    if external:
        assert [(t, job) for t, _, _, job in agents[BACKFILL].log] == [(2, 3)]
    assert r.summary["started_ready"] == pytest.approx(1 / 3)
    assert r.summary["started_reserved"] == pytest.approx(1 / 3)
    assert r.summary["started_backfilled"] == pytest.approx(1 / 3)


def test_easy_ready_after_waiting():
    """4 processors. A (4p) starts at 0: ready. B (2p) at 1 does not fit: reserved. C (2p) at 2
    waits behind B but is never the reserved job (B stays the head). At 100 A ends: B starts
    (reserved), then C is picked and fits the 2 processors left: ready, with a wait of 98."""
    r = simulate(make(4, [(0, 4, 100, 100), (1, 2, 50, 50), (2, 2, 50, 50)]), SimConfig(backfill="easy"))
    assert starts(r) == [0, 100, 100]
    assert kinds(r) == [READY, RESERVED, READY]


EASY_JOBS = [(0, 6, 100, 100), (1, 10, 40, 40), (2, 3, 50, 50), (3, 2, 300, 300), (4, 1, 300, 300)]


@pytest.mark.parametrize("external", [False, True])
def test_easy_backfill_by_shadow_and_by_extra_processors(external):
    """tests/test_schedules.py's EASY case, 12 processors: J1 (6p) ready at 0; J2 (10p) reserved
    (shadow 100, 2 extra processors); J3 (3p, ends 52 <= 100) backfilled at 2; J4 (2p, 300 s) fits
    the 2 extra processors: backfilled at 3; J5 (1p) refused (0 extra left). At 100 J2 starts
    (reserved); J5 is now the head and does not fit (J2 and J4 hold all 12): reserved, it starts
    at 140 when J2 ends."""
    agents = {BACKFILL: FirstCandidate()} if external else {}
    r = simulate(make(12, EASY_JOBS), SimConfig(backfill="easy"), agents=agents)
    assert starts(r) == [0, 100, 2, 3, 140]
    assert kinds(r) == [READY, RESERVED, BACKFILLED, BACKFILLED, RESERVED]


def test_easy_with_a_backfill_agent_that_never_backfills_equals_none():
    """The same jobs with a backfill agent that always stops, and with --backfill none: J1 ready at
    0, J2 reserved (starts at 100). At 100 J3 (3p) is the head with 2 free: reserved. At 140 J2
    ends: J3 starts (reserved), then J4 and J5 fit and were never the reserved job: ready."""
    agent = Decline()
    declined = simulate(make(12, EASY_JOBS), SimConfig(backfill="easy"), agents={BACKFILL: agent})
    none = simulate(make(12, EASY_JOBS), SimConfig(backfill="none"))
    for r in (declined, none):
        assert starts(r) == [0, 100, 140, 140, 140]
        assert kinds(r) == [READY, RESERVED, RESERVED, READY, READY]
        assert r.summary["started_backfilled"] == 0.0
    assert agent.asked_at == [2, 3, 4, 100]


def test_none_never_backfills():
    """The first case with --backfill none: C waits behind B (head-of-line blocking). At 100 A
    ends: B starts (reserved), and C, which fits the processor left and was never reserved,
    starts too: ready."""
    r = simulate(make(4, SMALL), SimConfig(backfill="none"))
    assert starts(r) == [0, 100, 100]
    assert kinds(r) == [READY, RESERVED, READY]


def test_select_agent_reserved_jobs_stay_reserved():
    """PROTOCOL.md's worked example, 4 processors, an SJF select agent: job 1 (4p) starts at 0:
    ready. Job 2 (2p, requests 60) is picked at 10 and does not fit: reserved. At 20 the agent
    picks job 3 (requests 20) instead, which does not fit either and takes over the reservation.
    At 100 job 3 starts, then job 2: both held the reservation during their wait, so both are
    reserved. The per-job records and the share metrics equal the episode_end_records vector."""
    w = make(4, [(0, 4, 100, 100), (10, 2, 50, 60), (20, 2, 10, 20)])
    r = simulate(w, SimConfig(backfill="easy"), agents={SELECT: PriorityAgent("sjf")})
    assert starts(r) == [0, 100, 100]
    assert kinds(r) == [READY, RESERVED, RESERVED]
    index = json.loads((VECTORS / "index.json").read_text())
    vector = next(v for v in index["vectors"] if v["name"] == "episode_end_records")["decoded"]
    assert {name: col.tolist() for name, col in r.jobs.items()} == vector["jobs"]
    for key in ("started_ready", "started_reserved", "started_backfilled"):
        assert r.summary[key] == vector["metrics"][key], key


# ----------------------------------------------------------------------------- conservative
def test_conservative_backfilled_even_with_a_reservation():
    """10 processors. J1 (6p, 100 s) ready at 0; 4 free. J2 (6p) at 1 reserves [100, 200). J3 (4p,
    50 s) at 2 is placed at 2 (it ends at 52, before J2's reservation) and starts while J2, ahead of
    it, waits: backfilled. J4 (2p, 10 s) at 3 has no processor free: it reserves [52, 62). At 52
    J3 ends; J4 keeps its place and starts while J2 still waits: backfilled, although it held a
    reservation. At 100 J2 starts; nothing ahead of it waits, and it held a reservation: reserved."""
    w = make(10, [(0, 6, 100, 100), (1, 6, 100, 100), (2, 4, 50, 50), (3, 2, 10, 10)])
    r = simulate(w, SimConfig(backfill="conservative"))
    assert starts(r) == [0, 100, 2, 52]
    assert kinds(r) == [READY, RESERVED, BACKFILLED, BACKFILLED]


def test_conservative_a_job_ahead_that_starts_in_the_same_pass_does_not_wait():
    """10 processors. J1 (8p) and J2 (2p) start at 0 (ready); they request 100 s and 300 s but both
    end at 10. X (9p, 50 s) at 1: 9 are free only at 300: reserves [300, 350). Y (1p, 50 s) at 2
    fits the 8 free in [100, 150): reserves [100, 150), ahead of X in time, behind it in queue order.
    At 10 both running jobs end. The pass re-places Y first (earlier reserved start): Y starts at
    10; then X fits the 9 left and starts at 10 too. After the pass no job ahead of Y waits, so Y
    is not backfilled: both held reservations from earlier passes: reserved."""
    w = make(10, [(0, 8, 10, 100), (0, 2, 10, 300), (1, 9, 50, 50), (2, 1, 50, 50)])
    r = simulate(w, SimConfig(backfill="conservative"))
    assert starts(r) == [0, 0, 10, 10]
    assert kinds(r) == [READY, READY, RESERVED, RESERVED]


def test_conservative_the_small_cases():
    """4 processors, the first EASY case under conservative: A starts at 0 at its first placement:
    ready. B reserves [100, 150) at 1. C (1p, 10 s) at 2 fits the 2 free before 100 and starts
    while B waits: backfilled. At 100 B starts: reserved.
    test_easy_ready_after_waiting's jobs: A (4p) ready at 0; B (2p) reserves [100, 150) at 1 and
    C (2p) reserves [100, 150) at 2 too. At 100 both start with nothing ahead of them waiting, and
    both held reservations: reserved (under EASY, C was ready: it was never the reserved job)."""
    r = simulate(make(4, SMALL), SimConfig(backfill="conservative"))
    assert starts(r) == [0, 100, 2]
    assert kinds(r) == [READY, RESERVED, BACKFILLED]
    r = simulate(make(4, [(0, 4, 100, 100), (1, 2, 50, 50), (2, 2, 50, 50)]), SimConfig(backfill="conservative"))
    assert starts(r) == [0, 100, 100]
    assert kinds(r) == [READY, RESERVED, RESERVED]


# ----------------------------------------------------------------------------- kill and requeue
def test_reserved_and_started_at_the_same_instant_after_a_kill():
    """4 processors, SJF, EASY. A (3p, 100 s) ready at 0; 1 free. B (2p, 10 s) at 5 does not fit:
    reserved by the pass at 5. The kill agent then kills A, and the pass after the kill (same
    instant) starts B (SJF: B first): reserved by an earlier pass, so reserved. A (3p) now does
    not fit the 2 free: reserved; it starts at 15 when B ends. A's last start counts: reserved."""
    w = make(4, [(0, 3, 100, 100), (5, 2, 10, 10)])
    r = simulate(w, SimConfig(backfill="easy"), policy="sjf", agents={KILL: KillAt(5, 1)})
    assert starts(r) == [15, 5]
    assert r.jobs["kills"].tolist() == [1, 0]
    assert kinds(r) == [RESERVED, RESERVED]


@pytest.mark.parametrize("backfill", ["easy", "none", "conservative"])
def test_a_requeued_job_starts_a_new_wait(backfill):
    """4 processors. A (4p) ready at 0. B (4p) at 1 does not fit: reserved; it starts at 100 when
    A ends (reserved). The kill agent kills B at once; the pass after the kill starts it again at
    100 because it fits: its last start is ready (the kill cleared its reservation)."""
    w = make(4, [(0, 4, 100, 100), (1, 4, 100, 100)])
    r = simulate(w, SimConfig(backfill=backfill), agents={KILL: KillAt(100, 2)})
    assert starts(r) == [0, 100]
    assert r.jobs["kills"].tolist() == [0, 1]
    assert kinds(r) == [READY, READY]
    # without the kill B's start is reserved
    assert kinds(simulate(w, SimConfig(backfill=backfill))) == [READY, RESERVED]


# ----------------------------------------------------------------------------- CSV
def test_the_column_round_trips_through_the_csv(tmp_path):
    r = simulate(make(12, EASY_JOBS), SimConfig(backfill="easy"))
    path = tmp_path / "jobs.csv"
    r.write_jobs_csv(path)
    assert "start_kind" in path.read_text().splitlines()[0].split(",")
    back = read_jobs_csv(path)
    assert back["start_kind"].tolist() == [READY, RESERVED, BACKFILLED, BACKFILLED, RESERVED]
    assert back["start_kind"].dtype.kind == "i"
    assert summarize(back, r.procs) == r.summary
    # a CSV written before the column existed still summarizes, without the shares
    del back["start_kind"]
    old = summarize(back, r.procs)
    assert "started_ready" not in old and old["mean_bsld"] == r.summary["mean_bsld"]


# ----------------------------------------------------------------------------- properties
SHARES = ("started_ready", "started_reserved", "started_backfilled")


def check_codes(result, backfill: str) -> np.ndarray:
    k = result.jobs["start_kind"]
    assert k.dtype == np.int64 and set(k.tolist()) <= {READY, RESERVED, BACKFILLED}
    if backfill == "none":
        assert BACKFILLED not in k.tolist()
    shares = [result.summary[name] for name in SHARES]
    assert sum(shares) == pytest.approx(1.0, rel=1e-12)
    assert shares == [np.count_nonzero(k == code) / len(k) for code in (READY, RESERVED, BACKFILLED)]
    return k


@fast(150)
@given(w=workloads(), backfill=st.sampled_from(["easy", "conservative", "none"]),
       policy=st.sampled_from(["fcfs", "sjf", "wfp3", "random"]),
       estimate=st.sampled_from(["requested", "actual", "noisy:0.3"]), seed=st.integers(0, 5),
       agent=st.sampled_from(["", "kill", "inspect"]))
def test_every_start_has_one_code(w, backfill, policy, estimate, seed, agent):
    """Any run: every job's code is 0, 1 or 2; no 2 without backfilling; the shares sum to 1.
    Without kills a reserved job waited (it was reserved at an earlier instant)."""
    agents = {}
    if agent == "kill":
        agents[KILL] = RandomKiller(seed, 0.3, 3)
    elif agent == "inspect" and backfill != "conservative":
        agents["inspect"] = RandomInspector(seed, 0.3)
    r = simulate(w, SimConfig(backfill=backfill, estimate=estimate, seed=seed), policy=policy, agents=agents)
    k = check_codes(r, backfill)
    if KILL not in agents:
        assert np.all(r.jobs["wait"][k == RESERVED] > 0)


@fast(150)
@given(w=workloads(), backfill=st.sampled_from(["easy", "conservative", "none"]),
       estimate=st.sampled_from(["requested", "actual", "noisy:0.3"]), seed=st.integers(0, 5))
def test_fcfs_backfilled_means_started_before_an_earlier_job(w, backfill, estimate, seed):
    """FCFS (queue order: submit, then job id), no kills: a job is backfilled exactly when some job
    ahead of it in that order was submitted by its start and started later. An external backfill
    agent taking the first candidate gives the same codes as built-in EASY."""
    r = simulate(w, SimConfig(backfill=backfill, estimate=estimate, seed=seed), policy="fcfs")
    k = check_codes(r, backfill)
    submit, start, ids = (r.jobs[c].tolist() for c in ("submit", "start", "job_id"))
    for i in range(len(ids)):
        jumped = any((submit[j], ids[j]) < (submit[i], ids[i]) and submit[j] <= start[i] < start[j]
                     for j in range(len(ids)))
        assert (k[i] == BACKFILLED) == jumped, f"job {ids[i]}: code {k[i]}"
    if backfill == "easy":
        agent = simulate(w, SimConfig(backfill="easy", estimate=estimate, seed=seed), policy="fcfs",
                         agents={BACKFILL: FirstCandidate()})
        assert agent.jobs["start_kind"].tolist() == k.tolist()
