"""Whole real traces give the very schedules recorded before the backfilling code was made fast.

The reference is the simulator's own output at commit 531a04a (see tests/schedule_regression.py):
it guards refactoring only; correctness rests on the hand-worked tests and the textbook replay.
"""

from __future__ import annotations

import numpy as np
import pytest

from .schedule_regression import ARRAYS, TEST_CASES, first_difference, schedule


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    return dict(np.load(ARRAYS))


@pytest.mark.parametrize("case", TEST_CASES, ids=[c.key for c in TEST_CASES])
def test_schedule_is_unchanged_job_for_job(traces_dir, reference, case):
    got = schedule(traces_dir, case)
    want = reference[case.key]
    assert np.array_equal(got, want), first_difference(got, want)
