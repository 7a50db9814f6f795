"""RLScheduler's pre-filled cluster (workload key `prefill`, `hpcgym train --prefill`): the jobs
before the window are running when it starts (RLScheduler's `gen_preworkloads`, read in
DIR-LAB/deep-batch-scheduler HPCSimPickJobs.py). Which jobs, and what they block, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.environment.config import SimConfig
from hpcgym.environment.errors import ConfigError
from hpcgym.environment.simulator import Simulation, simulate
from hpcgym.environment.spec import check_workload_spec, cut_sequence
from hpcgym.environment.workload import Workload

# Four processors; run = request. J0 2p100 at 0, J1 1p50 at 10, J2 3p10 at 20, J3 2p20 at 30,
# J4 1p20 at 40.
JOBS = Workload(name="pf", procs=4, job_id=np.arange(5), submit=np.array([0, 10, 20, 30, 40]),
                run=np.array([100, 50, 10, 20, 20]), size=np.array([2, 1, 3, 2, 1]),
                requested=np.array([100, 50, 10, 20, 20]), user=np.zeros(5))


def test_the_jobs_before_the_window_fill_the_cluster_until_one_does_not_fit():
    """Window [J3, J4]: walking back, J2 (3p) fits the 4 free processors, J1 (1p) the last one,
    J0 (2p) does not: the walk stops. Each has run a seeded part of its request."""
    w = cut_sequence(JOBS, {"jobs": 2, "start": 3, "prefill": True})
    assert w.job_id.tolist() == [3, 4]
    rows = w.prefill.tolist()
    assert [(size, run) for size, run, _ in rows] == [(3, 10), (1, 50)]
    assert all(0 <= elapsed <= run for _, run, elapsed in rows)
    assert cut_sequence(JOBS, {"jobs": 2, "start": 3, "prefill": True}).prefill.tolist() == rows  # seeded


def test_the_window_waits_for_the_pre_filled_jobs_and_metrics_leave_them_out():
    """At 30 no processor is free: J3 (2p) starts when the pre-filled J2 ends (it started `elapsed`
    seconds before 30 and runs 10 s, so by 40); J4 (1p, at 40) finds J2's third processor free."""
    w = cut_sequence(JOBS, {"jobs": 2, "start": 3, "prefill": True})
    (_, _, elapsed2), (_, _, elapsed1) = w.prefill.tolist()
    result = simulate(w, SimConfig())
    assert result.summary["jobs"] == 2
    assert result.jobs["start"].tolist() == [30 - elapsed2 + 10, 40]


def test_an_agent_sees_the_pre_filled_jobs_running():
    w = cut_sequence(JOBS, {"jobs": 2, "start": 3, "prefill": True})
    d = Simulation(w, SimConfig(), external={"select"}).reset()
    assert d.time == 30 and d.observation["free"] == 0
    assert sorted(d.observation["running"]["id"]) == [-2, -1] and sorted(d.observation["running"]["size"]) == [1, 3]


def test_prefill_is_refused_where_it_cannot_run():
    w = cut_sequence(JOBS, {"jobs": 2, "start": 3, "prefill": True})
    with pytest.raises(ConfigError, match="pre-filled cluster"):
        Simulation(w, SimConfig(backfill="conservative"))
    with pytest.raises(ConfigError, match="prefill starts a window"):
        check_workload_spec({"prefill": True})
