"""RLScheduler's rules (presets `rlscheduler`, `rlscheduler-backfill`) against its loop re-stated
in tests/rlscheduler_loop.py, and the same-second release order (`release_order: start`)."""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.environment.config import PRESETS, SimConfig
from hpcgym.environment.errors import ConfigError
from hpcgym.environment.sequences import window
from hpcgym.environment.simulator import simulate
from hpcgym.environment.swf import read_swf
from hpcgym.environment.workload import Workload

from .rlscheduler_loop import rlscheduler_starts

WINDOW = 256  # RLScheduler's JOB_SEQUENCE_SIZE
TRACES = ["lublin_256", "SDSC-SP2-1998-4.2-cln"]

# Four processors, SJF, RLScheduler's loop with backfilling. J0 (2p, 50 s) runs from 0; Jh (4p,
# 10 s, submitted at 1) is the head until J0 ends and runs 50-60; then J2 (3p, 50 s) ranks before
# J1 (1p, runs 50 s of a 60 s request): both start at 60, J2 first, and both end at 110. J3 (4p,
# 100 s) is the head from 60, reserved for 120 (J1's end by request); J4 (2p, 5 s) waits from 70.
# At 110, releasing J2 first (it started first, RLScheduler's order) frees 3 processors: J4 ends
# at 115 < 120 and backfills, and J3 waits for it. Releasing J1 first (the lower index) frees 1:
# J4 does not fit, J2's release then starts J3 at 110, and J4 waits for J3 (110-210).
SAME_SECOND = Workload(name="same-second", procs=4, job_id=np.arange(6), submit=np.array([0, 1, 2, 3, 4, 70]),
                       run=np.array([50, 10, 50, 50, 100, 5]), size=np.array([2, 4, 1, 3, 4, 2]),
                       requested=np.array([50, 10, 60, 50, 100, 5]), user=np.zeros(6))


def test_jobs_ending_in_the_same_second_release_in_start_order():
    config = SimConfig(**PRESETS["rlscheduler-backfill"])
    assert simulate(SAME_SECOND, config, policy="sjf").jobs["start"].tolist() == [0, 50, 60, 60, 115, 110]
    by_index = SimConfig(**{**PRESETS["rlscheduler-backfill"], "release_order": "index"})
    assert simulate(SAME_SECOND, by_index, policy="sjf").jobs["start"].tolist() == [0, 50, 60, 60, 110, 210]
    w = SAME_SECOND
    expected = rlscheduler_starts(w.procs, w.submit.tolist(), w.run.tolist(), w.size.tolist(), w.requested.tolist(),
                                  key=lambda j: (w.requested[j], w.submit[j]), backfill=True)
    assert expected == [0, 50, 60, 60, 115, 110]


def test_release_order_needs_one_event():
    with pytest.raises(ConfigError, match="release_order.*one_event"):
        SimConfig(release_order="start")
    with pytest.raises(ConfigError, match="unknown release_order"):
        SimConfig(one_event=True, release_order="end")


def _mismatches(traces_dir, trace: str, policy: str, backfill: bool, starts: range | None = None) -> list[int]:
    """Window starts (RLScheduler's: every start of a full window from 1 on) where hpcgym's
    schedule differs from the re-stated loop's, job for job."""
    w = read_swf(traces_dir / f"{trace}.swf.gz", cleaning="rlbf-scw")  # RLScheduler's trace reading
    submit, run, size, req = w.submit.tolist(), w.run.tolist(), w.size.tolist(), w.requested.tolist()
    config = SimConfig(**PRESETS["rlscheduler-backfill" if backfill else "rlscheduler"])
    bad = []
    for k in (starts or range(1, len(w) - WINDOW + 1)):
        if k + WINDOW > len(w):
            break
        got = simulate(window(w, WINDOW, k), config, policy=policy).jobs["start"].tolist()
        part = slice(k, k + WINDOW)
        key = ((lambda j: (req[k + j], submit[k + j])) if policy == "sjf" else (lambda j: submit[k + j]))
        if got != rlscheduler_starts(w.procs, submit[part], run[part], size[part], req[part], key, backfill):
            bad.append(k)
    return bad


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("policy", ["sjf", "fcfs"])
@pytest.mark.parametrize("backfill", [False, True], ids=["none", "backfill"])
def test_rlscheduler_rules_match_its_loop_on_sampled_starts(traces_dir, trace, policy, backfill):
    assert _mismatches(traces_dir, trace, policy, backfill, range(1, 60_000, 499)) == []


@pytest.mark.slow
def test_rlscheduler_rules_match_its_loop_on_all_starts(traces_dir):
    """Every start of lublin_256, SJF (RLScheduler's filtering score) with backfilling, where the
    release order matters (without backfilling the heads start in priority order, whatever the
    order). On SDSC-SP2 one start of about 59,000 differs (42126; docs/semantics.md): not yet
    explained, so not asserted here; the sampled starts above cover that trace."""
    assert _mismatches(traces_dir, "lublin_256", "sjf", True) == []
