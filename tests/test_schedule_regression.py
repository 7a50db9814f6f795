"""Whole real traces give the very schedules recorded before the backfilling code was made fast.

The reference is the simulator's own output at commit 531a04a (see tests/schedule_regression.py):
it guards refactoring only; correctness rests on the hand-worked tests and the textbook replay.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.environment.config import SimConfig
from hpcgym.environment.decisions import BACKFILL
from hpcgym.environment.simulator import LONG_QUEUE, simulate
from hpcgym.environment.swf import read_swf

from .schedule_regression import ARRAYS, SDSC, TEST_CASES, first_difference, schedule
from .test_invariants import FirstCandidate


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    return dict(np.load(ARRAYS))


@pytest.mark.parametrize("case", TEST_CASES, ids=[c.key for c in TEST_CASES])
def test_schedule_is_unchanged_job_for_job(traces_dir, reference, case):
    got = schedule(traces_dir, case)
    want = reference[case.key]
    assert np.array_equal(got, want), first_difference(got, want)


def test_first_candidate_backfill_agent_over_a_long_queue_is_builtin_easy(traces_dir):
    """SDSC-SP2 on half its processors keeps hundreds of jobs waiting, so both the built-in EASY
    pass takes the vectorised long-queue path; an agent that always takes the first candidate,
    seeing the whole queue (an agent's candidates come from its window), must still give built-in
    EASY's schedule."""
    workload = read_swf(traces_dir / f"{SDSC}.swf.gz", procs=64).take(slice(0, 4000))
    builtin = simulate(workload, SimConfig(window=100_000))
    agent = simulate(workload, SimConfig(window=100_000), agents={BACKFILL: FirstCandidate()})
    submit, start = np.asarray(builtin.jobs["submit"]), np.sort(builtin.jobs["start"])
    waiting = np.arange(1, len(submit) + 1) - np.searchsorted(start, submit, side="right")
    assert waiting.max() > 2 * LONG_QUEUE  # the long-queue path did run
    assert builtin.jobs["start"].tolist() == agent.jobs["start"].tolist()
