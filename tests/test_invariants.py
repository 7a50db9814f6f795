"""Property-based invariants of the simulator over many random small workloads (hypothesis).

Every test draws a workload of 1-40 jobs on a cluster of 1-64 processors: sizes in 1..procs,
submit times with many ties, run times >= 1, requested times sometimes below the run time
(a job that overruns its walltime) and sometimes above, unique but unordered job ids. Each test
then runs it under a drawn (or every) backfill mode, policy, estimate and overrun mode and checks
one family of properties on the per-job records:

1. capacity      -- the processors in use, rebuilt from the records (plus the killed runs a kill
                    agent made, which the records cannot show), never exceed the cluster, and
                    the processor sets allocated from the records never clash;
2. records       -- one row per job, in workload order; start >= submit; end - start is the
                    effective run (min(run, requested) under overrun=kill);
3. reservations  -- with exact estimates, EASY never starts the reserved job later than its
                    shadow time (observed through an external backfill agent that must reproduce
                    the built-in EASY schedule byte for byte), and conservative never moves a
                    reservation later (observed through Simulation._plan.reservations, a private
                    attribute: it is the only place the reservations exist);
4. decision seam -- an external PriorityAgent select gives the built-in priority schedule;
5. metrics       -- the summary matches metrics recomputed from the per-job CSV text;
6. determinism   -- same inputs, same bytes; the seed matters only for noisy estimates and the
                    random policy;
7. inspect/kill  -- random rejections and random kills keep every job completing exactly once,
                    with the rejection cap, the lost work and the wait accounted correctly.

Runtime budget: the whole file is meant to stay well under a minute on 2 cores.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import os
import random
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from hpcgym.agents.base import Agent, PriorityAgent
from hpcgym.environment.priorities import POLICIES, get_policy
from hpcgym.environment.config import SimConfig
from hpcgym.environment.decisions import BACKFILL, INSPECT, KILL
from hpcgym.environment.lublin import generate_lublin
from hpcgym.environment.metrics import FILE_COLUMNS, JOB_COLUMNS, allocate_processors, read_jobs_csv
from hpcgym.environment.simulator import Simulation, simulate
from hpcgym.environment.workload import Workload

from .test_allocation import processor_clashes

BACKFILLS = ("easy", "conservative", "none")
TEST_POLICIES = ("fcfs", "sjf", "lcfs", "wfp3", "f1", "random")
ESTIMATES = ("requested", "actual", "noisy:0.3")
OVERRUNS = ("run", "kill")
SEEDS = st.integers(0, 5)


#: Multiplies every test's example count, e.g. HPCGYM_PROP_SCALE=20 for a long bug hunt.
SCALE = float(os.environ.get("HPCGYM_PROP_SCALE", "1"))


def fast(n: int):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- workloads
@st.composite
def workloads(draw, max_jobs: int = 40, max_procs: int = 64) -> Workload:
    procs = draw(st.integers(1, max_procs))
    n = draw(st.integers(1, max_jobs))
    # Gaps of 0 are frequent, so many jobs share a submit time.
    gaps = draw(st.lists(st.one_of(st.just(0), st.integers(0, 3), st.integers(0, 200)),
                         min_size=n, max_size=n))
    submit = list(itertools.accumulate(gaps))
    ids = draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n, unique=True))
    size, run, req = [], [], []
    for _ in range(n):
        size.append(draw(st.integers(1, procs)))
        r = draw(st.integers(1, 300))
        run.append(r)
        req.append(draw(st.one_of(st.just(r), st.integers(1, r), st.integers(r, r + 300),
                                  st.integers(1, 600))))
    w = Workload("prop", procs, job_id=ids, submit=submit, run=run, size=size, requested=req,
                 user=[-1] * n)
    note(f"procs={procs} jobs(id, submit, size, run, requested)={describe(w)}")
    return w


def describe(w: Workload) -> list[tuple[int, int, int, int, int]]:
    return list(zip(w.job_id.tolist(), w.submit.tolist(), w.size.tolist(), w.run.tolist(),
                    w.requested.tolist()))


# ----------------------------------------------------------------------------- helpers
def effective_run(w: Workload, overrun: str) -> list[int]:
    run = np.minimum(w.run, w.requested) if overrun == "kill" else w.run
    return run.tolist()


def csv_bytes(result) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jobs.csv"
        result.write_jobs_csv(path)
        return path.read_bytes()


def col(result, name: str) -> list:
    return result.jobs[name].tolist()


def peak_usage(intervals: list[tuple[int, int, int]]) -> int:
    """Peak of the processors in use over [start, end) intervals; an end frees before a start
    at the same instant."""
    events = sorted([(s, 1, size) for s, e, size in intervals if e > s]
                    + [(e, 0, -size) for s, e, size in intervals if e > s])
    used = peak = 0
    for _, _, delta in events:
        used += delta
        peak = max(peak, used)
    return peak


def check_records(w: Workload, result, overrun: str, killed_runs=()) -> None:
    """Properties 1 and 2. `killed_runs`: (start, kill time, size) of runs a kill agent ended."""
    assert col(result, "job_id") == w.job_id.tolist(), "one record per job, in workload order"
    assert col(result, "submit") == w.submit.tolist()
    start, end = col(result, "start"), col(result, "end")
    run = effective_run(w, overrun)
    assert col(result, "run") == run
    for k, job in enumerate(w.job_id.tolist()):
        assert start[k] >= w.submit[k], f"job {job} starts at {start[k]} before its submit {w.submit[k]}"
        assert end[k] - start[k] == run[k], f"job {job}: end - start = {end[k] - start[k]} != run {run[k]}"
    intervals = [(s, e, z) for s, e, z in zip(start, end, w.size.tolist())] + list(killed_runs)
    peak = peak_usage(intervals)
    assert peak <= w.procs, f"{peak} processors in use on a cluster of {w.procs}"
    allocation = allocate_processors(result.jobs["start"], result.jobs["end"], result.jobs["size"], w.procs)
    assert processor_clashes(start, end, w.size.tolist(), allocation, w.procs) == []


# ----------------------------------------------------------------------------- agents
class FirstCandidate(Agent):
    """Backfill agent: always the first candidate (must equal built-in EASY). Logs the context."""

    kinds = (BACKFILL,)

    def __init__(self) -> None:
        self.log: list[tuple[int, int, int, int]] = []  # (time, reserved, shadow, picked)

    def act(self, decision):
        job = decision.candidates[0]
        self.log.append((decision.time, decision.context["reserved"], decision.context["shadow_time"], job))
        return job


class RandomInspector(Agent):
    kinds = (INSPECT,)

    def __init__(self, seed: int, p_reject: float) -> None:
        self.rng = random.Random(seed)
        self.p = p_reject
        self.log: list[tuple[int, list[int], int, bool]] = []  # (time, jobs, context rejections, accepted)

    def act(self, decision):
        accept = self.rng.random() >= self.p
        self.log.append((decision.time, list(decision.context["jobs"]), decision.context["rejections"], accept))
        return accept


class RandomKiller(Agent):
    kinds = (KILL,)

    def __init__(self, seed: int, p_kill: float, budget: int) -> None:
        self.rng = random.Random(seed)
        self.p = p_kill
        self.left = budget
        self.kills: list[tuple[int, int, int, int]] = []  # (time, job, start of the killed run, size)

    def act(self, decision):
        if self.left <= 0 or self.rng.random() >= self.p:
            return None
        job = decision.candidates[self.rng.randrange(len(decision.candidates))]
        running = decision.observation["running"]
        k = running["id"].index(job)
        self.kills.append((decision.time, job, running["start"][k], running["size"][k]))
        self.left -= 1
        return job


class RecordingSimulation(Simulation):
    """Records the conservative reservations after every pass.

    This reaches into the private `_conservative_pass` and `_plan`: the reservations of
    conservative backfilling exist nowhere else (conservative forbids external select, inspect
    and backfill agents, so no decision ever shows them), and "a reservation never moves later"
    cannot be checked from the final records alone.
    """

    def reset(self):
        self.passes: list[tuple[int, dict[int, int]]] = []
        return super().reset()

    def _conservative_pass(self, now: int) -> None:
        super()._conservative_pass(now)
        self.passes.append((now, {self._ids[i]: t for i, t in self._plan.reservations.items()}))


# ----------------------------------------------------------------------------- 1 + 2
@fast(250)
@given(w=workloads(), policy=st.sampled_from(TEST_POLICIES), estimate=st.sampled_from(ESTIMATES),
       overrun=st.sampled_from(OVERRUNS), seed=SEEDS)
def test_capacity_and_records(w, policy, estimate, overrun, seed):
    """Every backfill mode: never more processors in use than exist; every job starts after its
    submit and runs exactly its (effective) run time, once."""
    for backfill in BACKFILLS:
        config = SimConfig(backfill=backfill, estimate=estimate, overrun=overrun, seed=seed)
        check_records(w, simulate(w, config, policy=policy), overrun)


# ----------------------------------------------------------------------------- 3: EASY
@fast(200)
@given(w=workloads(), policy=st.sampled_from(sorted(POLICIES)), estimate=st.sampled_from(ESTIMATES),
       overrun=st.sampled_from(OVERRUNS), seed=SEEDS)
def test_external_first_candidate_backfill_reproduces_builtin_easy(w, policy, estimate, overrun, seed):
    """The backfill seam: an agent taking the first candidate every time is built-in EASY."""
    config = SimConfig(backfill="easy", estimate=estimate, overrun=overrun, seed=seed)
    builtin = simulate(w, config, policy=policy)
    agent = FirstCandidate()
    external = simulate(w, config, policy=policy, agents={BACKFILL: agent})
    assert csv_bytes(external) == csv_bytes(builtin)


@fast(250)
@given(w=workloads(), policy=st.sampled_from(TEST_POLICIES), overrun=st.sampled_from(OVERRUNS), seed=SEEDS)
def test_easy_never_starts_the_reserved_job_after_its_shadow_time(w, policy, overrun, seed):
    """Exact estimates. At each backfill decision the agent records (t, reserved J, shadow S).
    EASY protects J only while J stays the head: J's final start must be <= S unless, strictly
    between t and J's start, a job other than J started from the front of the queue (it ranked
    ahead of J: a later, higher-priority arrival, or a dynamic re-ordering) or another job held
    the reservation. Under FCFS neither can happen, so there every recorded shadow is checked."""
    config = SimConfig(backfill="easy", estimate="actual", overrun=overrun, seed=seed)
    builtin = simulate(w, config, policy=policy)
    agent = FirstCandidate()
    result = simulate(w, config, policy=policy, agents={BACKFILL: agent})
    assert csv_bytes(result) == csv_bytes(builtin), "external first-candidate backfill != built-in EASY"
    check_records(w, result, overrun)

    start = dict(zip(col(result, "job_id"), col(result, "start")))
    backfilled = {job for _, _, _, job in agent.log}
    front_starts = [(s, job) for job, s in start.items() if job not in backfilled]
    for t, reserved, shadow, _ in agent.log:
        s_j = start[reserved]
        overtaken = any(t < s < s_j and job != reserved for s, job in front_starts)
        other_head = any(t < t2 < s_j and r2 != reserved for t2, r2, _, _ in agent.log)
        if policy == "fcfs":
            assert not overtaken and not other_head, "FCFS: a later arrival overtook the head"
        if overtaken or other_head:
            continue
        assert s_j <= shadow, (f"job {reserved} reserved at t={t} with shadow time {shadow} "
                               f"started at {s_j}")


# ----------------------------------------------------------------------------- 3: conservative
@fast(250)
@given(w=workloads(), policy=st.sampled_from(TEST_POLICIES), overrun=st.sampled_from(OVERRUNS), seed=SEEDS)
def test_conservative_reservations_never_move_later(w, policy, overrun, seed):
    """Exact estimates: after every pass each queued job holds a reservation; it never moves
    later from one pass to the next, and the job's final start is <= every reservation it held."""
    config = SimConfig(backfill="conservative", estimate="actual", overrun=overrun, seed=seed)
    sim = RecordingSimulation(w, config, policy=policy)
    result = sim.run()
    check_records(w, result, overrun)
    assert csv_bytes(result) == csv_bytes(simulate(w, config, policy=policy))
    start = dict(zip(col(result, "job_id"), col(result, "start")))
    held: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for now, reservations in sim.passes:
        for job, t in reservations.items():
            assert t > now or t == now, f"job {job} reserved in the past ({t} < {now})"
            held[job].append((now, t))
    for job, history in held.items():
        for (n0, r0), (n1, r1) in zip(history, history[1:]):
            assert r1 <= r0, f"job {job}: reservation moved later, {r0} (pass at {n0}) -> {r1} (pass at {n1})"
        assert start[job] <= min(r for _, r in history), \
            f"job {job} started at {start[job]} after its reservation(s) {history}"


# ----------------------------------------------------------------------------- 4
@fast(80)
@given(w=workloads(), estimate=st.sampled_from(ESTIMATES), overrun=st.sampled_from(OVERRUNS), seed=SEEDS)
def test_external_priority_select_equals_builtin(w, estimate, overrun, seed):
    """For easy and none backfill and every policy an agent can apply (static and dynamic), a
    PriorityAgent select agent seeing the whole queue gives byte-identical per-job records to the
    built-in path."""
    for backfill in ("easy", "none"):
        config = SimConfig(backfill=backfill, estimate=estimate, overrun=overrun, seed=seed, window=10_000)
        for policy in (name for name, p in POLICIES.items() if not p.env_only):
            builtin = simulate(w, config, policy=policy)
            external = simulate(w, config, policy=policy, agents={"select": PriorityAgent(policy, seed)})
            assert csv_bytes(external) == csv_bytes(builtin), f"{policy} + {backfill}"


# ----------------------------------------------------------------------------- 5
def metrics_from_csv(text: str, procs: int) -> dict[str, float]:
    rows = list(csv.DictReader(io.StringIO(text)))
    submit = [int(r["submit"]) for r in rows]
    start = [int(r["start"]) for r in rows]
    end = [int(r["end"]) for r in rows]
    run = [int(r["run"]) for r in rows]
    size = [int(r["size"]) for r in rows]
    lost = [int(r["lost_work"]) for r in rows]
    n = len(rows)
    wait = [s - q for s, q in zip(start, submit)]
    bsld = [max((e - q) / max(r, 10), 1.0) for e, q, r in zip(end, submit, run)]
    span = max(end) - min(submit)
    used = sum(r * z for r, z in zip(run, size)) + sum(lost)
    return {"jobs": n, "mean_wait": math.fsum(wait) / n, "max_wait": max(wait),
            "mean_bsld": math.fsum(bsld) / n, "utilization": used / (procs * span),
            "makespan": span, "lost_work": sum(lost)}


@fast(150)
@given(w=workloads(), backfill=st.sampled_from(BACKFILLS), policy=st.sampled_from(TEST_POLICIES),
       estimate=st.sampled_from(ESTIMATES), overrun=st.sampled_from(OVERRUNS), seed=SEEDS,
       kill_budget=st.sampled_from([0, 0, 3]))
def test_summary_matches_metrics_recomputed_from_the_csv(w, backfill, policy, estimate, overrun, seed, kill_budget):
    """Utilization is sum(run * size) / (procs * (max end - min submit)); with a kill agent the
    work lost to kills is added, as the metrics module documents."""
    config = SimConfig(backfill=backfill, estimate=estimate, overrun=overrun, seed=seed)
    agents = {KILL: RandomKiller(seed, 0.3, kill_budget)} if kill_budget else {}
    result = simulate(w, config, policy=policy, agents=agents)
    text = csv_bytes(result).decode()
    assert text.splitlines()[0] == ",".join(FILE_COLUMNS)
    mine = metrics_from_csv(text, w.procs)
    s = result.summary
    assert s["jobs"] == mine["jobs"] == len(w)
    assert s["max_wait"] == mine["max_wait"]
    assert s["makespan"] == mine["makespan"]
    assert s["lost_work"] == mine["lost_work"]
    for key in ("mean_wait", "mean_bsld", "utilization"):
        assert s[key] == pytest.approx(mine[key], rel=1e-12, abs=1e-12), key
    # The CSV also reads back exactly (floats in round-trip repr).
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jobs.csv"
        path.write_text(text)
        back = read_jobs_csv(path)
    for name in JOB_COLUMNS:
        assert back[name].tolist() == result.jobs[name].tolist(), name


# ----------------------------------------------------------------------------- 6
@fast(100)
@given(w=workloads(), backfill=st.sampled_from(BACKFILLS), policy=st.sampled_from(TEST_POLICIES),
       estimate=st.sampled_from(ESTIMATES), overrun=st.sampled_from(OVERRUNS), seed=SEEDS,
       other_seed=SEEDS)
def test_determinism_and_seed_independence(w, backfill, policy, estimate, overrun, seed, other_seed):
    """The same run twice (fresh simulations, and the same Simulation reset) gives the same
    bytes; a different seed changes nothing unless the estimate is noisy or the policy random."""
    config = SimConfig(backfill=backfill, estimate=estimate, overrun=overrun, seed=seed)
    first = csv_bytes(simulate(w, config, policy=policy))
    assert csv_bytes(simulate(w, config, policy=policy)) == first
    sim = Simulation(w, config, policy=policy)
    assert csv_bytes(sim.run()) == first
    assert csv_bytes(sim.run()) == first, "re-running the same Simulation object differs"
    if estimate != "noisy:0.3" and policy != "random":
        other = SimConfig(backfill=backfill, estimate=estimate, overrun=overrun, seed=other_seed)
        assert csv_bytes(simulate(w, other, policy=policy)) == first


@pytest.mark.parametrize("estimate, policy", [("noisy:0.3", "fcfs"), ("requested", "random")])
def test_seeded_choices_change_with_the_seed(estimate, policy):
    """On a 300-job generated workload, noisy estimates and the random policy give different
    schedules for different seeds (and each seed is reproducible)."""
    w = generate_lublin(300, 64, seed=3)
    runs = {seed: csv_bytes(simulate(w, SimConfig(estimate=estimate, seed=seed), policy=policy))
            for seed in range(4)}
    assert len(set(runs.values())) > 1, "the seed changes nothing"
    assert csv_bytes(simulate(w, SimConfig(estimate=estimate, seed=2), policy=policy)) == runs[2]


def test_random_policy_order_depends_on_the_seed_only():
    jobs = {"id": np.arange(50), "submit": np.zeros(50), "requested": np.ones(50), "size": np.ones(50)}
    a, b = get_policy("random", 0).order(jobs), get_policy("random", 1).order(jobs)
    assert a.tolist() != b.tolist()
    assert get_policy("random", 1).order(jobs, now=999).tolist() == b.tolist()


# ----------------------------------------------------------------------------- 7: inspect
@fast(200)
@given(w=workloads(), backfill=st.sampled_from(("easy", "none")), policy=st.sampled_from(TEST_POLICIES),
       estimate=st.sampled_from(ESTIMATES), overrun=st.sampled_from(OVERRUNS), seed=SEEDS,
       p_reject=st.sampled_from([0.2, 0.5, 0.9, 1.0]), max_rejections=st.integers(0, 4),
       max_interval=st.sampled_from([1, 7, 100, 600]), kill_budget=st.sampled_from([0, 0, 3]))
def test_random_rejections(w, backfill, policy, estimate, overrun, seed, p_reject, max_rejections, max_interval,
                           kill_budget):
    """A seeded inspector rejecting at random (sometimes alongside a random kill agent): every job
    still completes once, no job is rejected more than max_rejections times (and the column counts
    exactly the rejections made), the inspector is never asked about a job at the cap, and a
    rejected job starts no earlier than the rejection."""
    config = SimConfig(backfill=backfill, estimate=estimate, overrun=overrun, seed=seed,
                       max_rejections=max_rejections, max_interval=max_interval)
    inspector = RandomInspector(seed, p_reject)
    killer = RandomKiller(seed + 1, 0.3, kill_budget)
    agents = {INSPECT: inspector, KILL: killer} if kill_budget else {INSPECT: inspector}
    result = simulate(w, config, policy=policy, agents=agents)
    check_records(w, result, overrun, [(s, t, size) for t, _, s, size in killer.kills])
    start = dict(zip(col(result, "job_id"), col(result, "start")))
    rejections = dict(zip(col(result, "job_id"), col(result, "rejections")))
    counted: Counter[int] = Counter()
    for t, jobs, ctx_rejections, accepted in inspector.log:
        assert ctx_rejections == max(counted[j] for j in jobs)
        assert any(counted[j] < max_rejections for j in jobs), "asked about a job at the cap"
        if not accepted:
            for j in jobs:
                counted[j] += 1
                assert start[j] >= t, f"job {j} rejected at {t} but started at {start[j]}"
    for job, n in rejections.items():
        assert n <= max_rejections, f"job {job} rejected {n} times, cap {max_rejections}"
        assert n == counted[job]


# ----------------------------------------------------------------------------- 7: kill
@fast(250)
@given(w=workloads(), backfill=st.sampled_from(BACKFILLS), policy=st.sampled_from(TEST_POLICIES),
       estimate=st.sampled_from(ESTIMATES), overrun=st.sampled_from(OVERRUNS), seed=SEEDS,
       p_kill=st.sampled_from([0.1, 0.5, 1.0]), budget=st.integers(0, 6))
def test_random_kills(w, backfill, policy, estimate, overrun, seed, p_kill, budget):
    """A seeded agent killing a random running job, at most `budget` times: every job completes
    exactly once; kills and lost_work equal what the agent did (lost work = (kill time - start of
    the killed run) * size, summed); waits count from the original submit."""
    config = SimConfig(backfill=backfill, estimate=estimate, overrun=overrun, seed=seed)
    killer = RandomKiller(seed, p_kill, budget)
    result = simulate(w, config, policy=policy, agents={KILL: killer})
    assert len(killer.kills) <= budget
    killed_runs = [(s, t, size) for t, _, s, size in killer.kills]
    check_records(w, result, overrun, killed_runs)  # every job completes exactly once
    ids = col(result, "job_id")
    start = dict(zip(ids, col(result, "start")))
    submit = dict(zip(ids, col(result, "submit")))
    wait = dict(zip(ids, col(result, "wait")))
    kills = dict(zip(ids, col(result, "kills")))
    lost = dict(zip(ids, col(result, "lost_work")))
    my_kills: Counter[int] = Counter()
    my_lost: Counter[int] = Counter()
    last_kill: dict[int, int] = {}
    for t, job, s, size in killer.kills:
        assert submit[job] <= s <= t
        my_kills[job] += 1
        my_lost[job] += (t - s) * size
        last_kill[job] = t
    for job in ids:
        assert kills[job] == my_kills[job]
        assert lost[job] == my_lost[job]
        assert wait[job] == start[job] - submit[job], "wait counts from the original submit"
        if job in last_kill:
            assert start[job] >= last_kill[job]
    assert result.summary["kills"] == len(killer.kills)
    assert result.summary["lost_work"] == sum(my_lost.values())
