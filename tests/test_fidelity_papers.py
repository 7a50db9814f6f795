"""hpcgym against published numbers: only what the paper and our runs agree on, with margin.

Paper: Kolker-Hicks, Zhang, Dai, "A Reinforcement Learning Based Backfilling Strategy for HPC
Batch Jobs", SC-W 2023 (RL backfilling; Tables 2 and 4). docs/fidelity.md explains why the
absolute bsld values differ (trace cleaning, sampling, the paper code's EASY variant) and how
`benchmarks/fidelity_table4.py` regenerates the full comparison.

The orderings asserted here use the same setup as the main table of docs/fidelity.md: the first
10,000 jobs of each trace, `random_window(pool, 1024, seed)` for seeds 0-9 (the same 10
sequences as the doc, not fewer), EASY with requested times or actual run times (EASY-AR), the
default overrun "run". Each ordering was checked on 20 disjoint 10-seed sets (seeds 0-199)
before it was asserted; the margin in each test is below the smallest ratio seen there:

| ordering (mean bsld over 10 sequences)   | paper Table 4 | seeds 0-9 | min over 20 sets | margin |
|------------------------------------------|--------------:|----------:|-----------------:|-------:|
| SDSC-SP2 FCFS+EASY / FCFS+EASY-AR        |          3.87 |      1.43 |             1.15 |    1.1 |
| SDSC-SP2 SJF+EASY / SJF+EASY-AR          |         11.55 |      1.25 |             1.13 |    1.1 |
| SDSC-SP2 FCFS+EASY / F1+EASY             |          1.45 |      2.06 |             1.40 |   1.25 |
| lublin_256 (Lublin1) FCFS+EASY / SJF+EASY |         3.22 |      8.53 |             5.00 |    3.0 |
| lublin_256 (Lublin1) FCFS+EASY / F1+EASY  |         3.14 |     11.89 |             8.45 |    3.0 |

Not asserted, on purpose: HPC2N orderings (same direction as the paper, but the ratio falls to
about 1.0 on some seed sets); anything with WFP3 (the paper's code evaluates its WFP3 with a
queued job's wait read as -1 - submit, so its column is a different, static order); SJF versus
FCFS on SDSC-SP2 (the paper has SJF worse, we have it better: the paper's code keeps cancelled
jobs as 10 s jobs, which SJF starves); and every absolute value.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.environment.config import SimConfig
from hpcgym.environment.sequences import random_window
from hpcgym.environment.simulator import simulate
from hpcgym.environment.swf import read_swf, trace_stats

POOL = 10_000
JOBS = 1024
SEEDS = range(10)

_cache: dict[tuple, np.ndarray] = {}


def _bsld(traces_dir, trace: str, policy: str, estimate: str) -> np.ndarray:
    """Per-sequence mean bsld of `policy`+EASY over the 10 fixed sequences (cached)."""
    key = (str(traces_dir), trace, policy, estimate)
    if key not in _cache:
        pool = read_swf(traces_dir / f"{trace}.swf.gz").take(slice(0, POOL))
        cfg = SimConfig(backfill="easy", estimate=estimate)
        _cache[key] = np.array([simulate(random_window(pool, JOBS, s), cfg, policy=policy)
                                .summary["mean_bsld"] for s in SEEDS])
    return _cache[key]


SDSC = "SDSC-SP2-1998-4.2-cln"
LUBLIN1 = "lublin_256"


@pytest.mark.parametrize("policy", ["fcfs", "sjf"])
def test_sdsc_sp2_easy_with_actual_run_times_beats_requested_times(traces_dir, policy):
    easy = _bsld(traces_dir, SDSC, policy, "requested")
    easy_ar = _bsld(traces_dir, SDSC, policy, "actual")
    assert easy.mean() > 1.1 * easy_ar.mean(), (easy, easy_ar)


def test_sdsc_sp2_f1_beats_fcfs_with_easy(traces_dir):
    fcfs = _bsld(traces_dir, SDSC, "fcfs", "requested")
    f1 = _bsld(traces_dir, SDSC, "f1", "requested")
    assert fcfs.mean() > 1.25 * f1.mean(), (fcfs, f1)


@pytest.mark.parametrize("policy", ["sjf", "f1"])
def test_lublin1_sjf_and_f1_beat_fcfs_by_a_wide_margin(traces_dir, policy):
    fcfs = _bsld(traces_dir, LUBLIN1, "fcfs", "requested")
    other = _bsld(traces_dir, LUBLIN1, policy, "requested")
    assert fcfs.mean() > 3.0 * other.mean(), (fcfs, other)
    # not only on average: on each of the 10 sequences (true on all 200 sequences of seeds 0-199)
    assert np.all(fcfs > other), (fcfs, other)


@pytest.mark.parametrize("trace, mean_gap, mean_run, mean_size", [
    # Table 2 of the paper: i_t, r_t, n_t. Its r_t matches the mean *run* time of these traces.
    ("HPC2N-2002-2.2-cln", 538, 17024, 6),
    ("lublin_256", 771, 4862, 22),  # the paper's Lublin-1
])
def test_trace_characteristics_match_table_2(traces_dir, trace, mean_gap, mean_run, mean_size):
    stats = trace_stats(read_swf(traces_dir / f"{trace}.swf.gz"))
    assert abs(stats["mean_interarrival_s"] - mean_gap) < 1
    assert abs(stats["mean_run_s"] - mean_run) < 1
    assert round(stats["mean_size"]) == mean_size
