"""Job sequences: splits, windows and sampled jobsets are deterministic and correctly bounded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpcgym.environment.errors import ConfigError, HpcgymError, WorkloadError
from hpcgym.environment.sequences import random_window, sampled_jobset, split, window
from hpcgym.environment.swf import read_swf
from hpcgym.environment.workload import Workload


def make(n: int = 100, gap: int = 100) -> Workload:
    """n jobs submitted every `gap` seconds from t=1000; every job's run time is unique."""
    i = np.arange(n)
    return Workload(name="src", procs=64, job_id=i + 1, submit=1000 + gap * i,
                    run=10 + i, size=1 + i % 64, requested=20 + i, user=i % 5,
                    dropped={"nonpositive_run": 3}, header={"MaxProcs": "64"})


# --- split ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n, train, n_train", [(10, 0.7, 7), (10, 0.75, 7), (100, 0.8, 80),
                                               (3, 0.5, 1)])
def test_split_sizes(n: int, train: float, n_train: int) -> None:
    w = make(n)
    a, b = split(w, train)
    assert len(a) == n_train and len(b) == n - n_train
    assert a.job_id.tolist() == list(range(1, n_train + 1))
    assert b.job_id.tolist() == list(range(n_train + 1, n + 1))
    assert a.procs == b.procs == 64 and b.submit[0] == w.submit[n_train]


@pytest.mark.parametrize("train", [0, 1, 0.0, 1.0, -0.2, 1.5, float("nan"), True, "0.5", None])
def test_split_rejects_bad_fraction(train: object) -> None:
    with pytest.raises(ConfigError, match="between 0 and 1"):
        split(make(10), train)  # type: ignore[arg-type]


def test_split_too_few_jobs() -> None:
    with pytest.raises(WorkloadError, match="empty"):
        split(make(3), 0.2)


# --- window -------------------------------------------------------------------------------


def test_window_keeps_original_times() -> None:
    w = make(50)
    win = window(w, 5, 10)
    assert win.job_id.tolist() == [11, 12, 13, 14, 15]
    assert win.submit.tolist() == [2000, 2100, 2200, 2300, 2400]   # not rebased
    assert win.dropped == {"nonpositive_run": 3} and win.header == {"MaxProcs": "64"}
    assert window(w, 50, 0).job_id.tolist() == list(range(1, 51))
    assert window(w, 1, 49).job_id.tolist() == [50]


@pytest.mark.parametrize("n_jobs, start", [(1, 50), (5, 46), (51, 0), (0, 0), (-1, 3), (3, -1),
                                           (2.0, 0), (2, 1.5), (True, 0)])
def test_window_out_of_range(n_jobs: object, start: object) -> None:
    with pytest.raises(ConfigError):
        window(make(50), n_jobs, start)  # type: ignore[arg-type]


def test_random_window_deterministic_and_contiguous() -> None:
    w = make(1000)
    a, b = random_window(w, 64, seed=3), random_window(w, 64, seed=3)
    assert np.array_equal(a.job_id, b.job_id)
    ids = a.job_id
    assert np.array_equal(ids, np.arange(ids[0], ids[0] + 64))
    starts = {int(random_window(w, 64, seed=s).job_id[0]) for s in range(20)}
    assert len(starts) > 1, "different seeds should give different windows"


def test_random_window_reaches_both_ends() -> None:
    w = make(10)
    starts = {int(random_window(w, 8, seed=s).job_id[0]) - 1 for s in range(200)}
    assert starts == {0, 1, 2}   # every start that fits, and nothing past the end


def test_random_window_errors() -> None:
    with pytest.raises(ConfigError, match="only 10"):
        random_window(make(10), 11, seed=0)
    with pytest.raises(ConfigError, match="seed"):
        random_window(make(10), 5, seed=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="seed"):
        random_window(make(10), 5, seed=-1)


# --- sampled jobsets ------------------------------------------------------------------------


def test_sampled_deterministic_and_seed_dependent() -> None:
    w = make(500)
    a, b, c = (sampled_jobset(w, 100, seed=s) for s in (7, 7, 8))
    for col in ("job_id", "submit", "run", "size", "requested", "user"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert not np.array_equal(a.run, c.run)
    assert not np.array_equal(a.submit, c.submit)


def test_sampled_shape_and_columns() -> None:
    w = make(500)
    s = sampled_jobset(w, 200, seed=1)
    assert len(s) == 200 and s.procs == 64
    assert s.submit[0] == 0 and np.all(np.diff(s.submit) >= 0)
    assert s.submit.dtype == np.int64
    assert s.job_id.tolist() == list(range(1, 201))
    # without replacement: each source job (unique run time) at most once
    assert len(set(s.run.tolist())) == 200
    # each sampled job keeps its source job's columns together (run = 10 + i in make())
    src = s.run - 10
    assert np.array_equal(s.size, 1 + src % 64)
    assert np.array_equal(s.requested, 20 + src)
    assert np.array_equal(s.user, src % 5)


def test_sampled_with_replacement_when_source_is_small() -> None:
    s = sampled_jobset(make(20), 50, seed=2)
    assert len(s) == 50 and len(set(s.run.tolist())) <= 20
    assert len(set(s.job_id.tolist())) == 50


def test_sampled_mean_interarrival_matches_source() -> None:
    w = make(1000, gap=100)                  # mean inter-arrival exactly 100 s
    s = sampled_jobset(w, 5000, seed=12345)
    mean_gap = (s.submit[-1] - s.submit[0]) / (len(s) - 1)
    assert mean_gap == pytest.approx(100.0, rel=0.1)
    gaps = np.diff(s.submit)
    # exponential gaps: standard deviation close to the mean, not constant like the source
    assert gaps.std() == pytest.approx(100.0, rel=0.2)


def test_sampled_errors() -> None:
    with pytest.raises(HpcgymError):
        sampled_jobset(make(1), 5, seed=0)
    with pytest.raises(ConfigError):
        sampled_jobset(make(10), 0, seed=0)


def test_sampled_on_real_trace(traces_dir: Path) -> None:
    path = traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"
    if not path.exists():
        pytest.skip(f"{path} missing")
    w = read_swf(path)
    source_gap = (w.submit[-1] - w.submit[0]) / (len(w) - 1)
    s = sampled_jobset(w, 10000, seed=0)
    assert (s.submit[-1] - s.submit[0]) / (len(s) - 1) == pytest.approx(source_gap, rel=0.1)
    assert np.all(s.size <= w.procs) and np.all(s.run > 0)
