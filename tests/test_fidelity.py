"""The simulator against an independent textbook FCFS+EASY replay, on windows of real traces."""

from __future__ import annotations

import pytest

from hpcgym.environment.config import SimConfig
from hpcgym.environment.sequences import random_window
from hpcgym.environment.simulator import simulate
from hpcgym.environment.swf import read_swf

from .textbook_easy import textbook_easy

TRACES = ["SDSC-SP2-1998-4.2-cln", "HPC2N-2002-2.2-cln", "CTC-SP2-1996-3.1-cln", "lublin_256"]


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("estimate", ["requested", "actual"])
def test_fcfs_easy_schedule_matches_the_textbook_replay(traces_dir, trace, estimate):
    workload = read_swf(traces_dir / f"{trace}.swf.gz")
    for seed in range(3):
        w = random_window(workload, 3000, seed)
        est = w.requested if estimate == "requested" else w.run
        expected = textbook_easy(w.procs, w.submit.tolist(), w.run.tolist(), w.size.tolist(), est.tolist())
        result = simulate(w, SimConfig(backfill="easy", estimate=estimate))
        assert result.jobs["start"].tolist() == expected
