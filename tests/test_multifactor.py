"""Slurm's multifactor priority (SchedInspector section 4.5) on schedules worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgym.environment.config import SimConfig
from hpcgym.environment.errors import ConfigError
from hpcgym.environment.priorities import USAGE_HALF_LIFE
from hpcgym.environment.simulator import Simulation, simulate
from hpcgym.environment.workload import Workload


def jobs(user, run, submit, size, requested=None, queue=None) -> Workload:
    n = len(user)
    run = np.array(run)
    return Workload(name="mf", procs=2, job_id=np.arange(1, n + 1), submit=np.array(submit), run=run,
                    size=np.array(size), requested=run if requested is None else np.array(requested),
                    user=np.array(user), queue=None if queue is None else np.array(queue))


def starts(w: Workload, policy: str) -> list[int]:
    return [int(s) for s in simulate(w, SimConfig(), policy=policy).jobs["start"]]


def test_fair_share_runs_the_user_who_used_less_first():
    """Two processors. User 1's J1 (2 procs, 3,600 s) runs from 0; J2 (user 1) and J3 (user 2),
    both 2 procs and 100 s, wait from 10 and 20. At 3,600 user 1 has all the recent usage
    (normalised usage 1, share 7,400 / 7,600 of the work: fair share 2^(-1 / 0.974) = 0.49) and
    user 2 none (share 200 / 7,600, usage 0: fair share 1), a gap of 1000 x 0.51 = 510 against
    J2's 10 s more age (1000 x 10 / 604,800 = 0.017): J3 first. FCFS runs J2 first."""
    w = jobs(user=[1, 1, 2], run=[3600, 100, 100], submit=[0, 10, 20], size=[2, 2, 2])
    assert starts(w, "fcfs") == [0, 3600, 3700]
    assert starts(w, "multifactor") == [0, 3700, 3600]


def test_the_partition_factor_favours_the_busier_queue():
    """As above but one user (equal fair share): J2 sits in queue 1 (no other work), J3 in queue 2
    with J1 (7,400 of the 7,600 processor-seconds): partition factors 200 / 7,400 = 0.03 and 1,
    a gap of 973 against J2's 0.017 of age: J3 first."""
    w = jobs(user=[1, 1, 1], run=[3600, 100, 100], submit=[0, 10, 20], size=[2, 2, 2], queue=[2, 1, 2])
    assert starts(w, "fcfs") == [0, 3600, 3700]
    assert starts(w, "multifactor") == [0, 3700, 3600]


def test_usage_decays_with_a_half_life():
    """Two processors busy for one half-life h, from 0 to h: the usage integral is
    2 x h / ln 2 x (1 - 1/2) = h / ln 2 at h, and half of that one half-life later."""
    h = USAGE_HALF_LIFE
    sim = Simulation(jobs(user=[7], run=[h], submit=[0], size=[2]), SimConfig(), policy="multifactor")
    sim.run()
    assert sim._decayed(7, h) == pytest.approx(h / math.log(2))
    assert sim._decayed(7, 2 * h) == pytest.approx(h / math.log(2) / 2)
    assert sim._decayed(None, 2 * h) == sim._decayed(7, 2 * h)  # the only user is all users


def test_multifactor_is_an_env_policy_not_an_agent():
    from hpcgym.agents.base import PriorityAgent

    with pytest.raises(ConfigError, match="--policy multifactor"):
        PriorityAgent("multifactor")
