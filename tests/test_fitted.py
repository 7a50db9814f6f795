"""Tests of the fitted workload model (DRAS's third-phase synthetic jobsets)."""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.environment.errors import ConfigError
from hpcgym.environment.fitted import (HOURS_PER_WEEK, WorkloadModel, fit_workload_model,
                                       generate_from_model)
from hpcgym.environment.sequences import split
from hpcgym.environment.swf import read_swf
from hpcgym.environment.workload import Workload


def _day_night_workload(weeks: int = 8, seed: int = 7) -> Workload:
    """Poisson arrivals, 20 jobs/h from 09:00 to 17:00 on weekdays, 1 job/h otherwise.

    Size and run time are strongly tied (run = 100 * size + noise) so resampling can be checked
    to keep rows together.
    """
    rng = np.random.default_rng(seed)
    submits = []
    for h in range(weeks * HOURS_PER_WEEK):
        day, hour = divmod(h % HOURS_PER_WEEK, 24)
        rate = 20 if day < 5 and 9 <= hour < 17 else 1
        k = rng.poisson(rate)
        submits.append(h * 3600 + rng.integers(0, 3600, size=k))
    submit = np.sort(np.concatenate(submits))
    n = len(submit)
    size = rng.integers(1, 65, size=n)
    run = 100 * size + rng.integers(0, 50, size=n)
    requested = run + rng.integers(0, 1000, size=n)
    return Workload(name="daynight", procs=64, job_id=np.arange(1, n + 1), submit=submit,
                    run=run, size=size, requested=requested, user=np.zeros(n, dtype=np.int64))


@pytest.fixture(scope="module")
def daynight() -> Workload:
    return _day_night_workload()


@pytest.fixture(scope="module")
def model(daynight) -> WorkloadModel:
    return fit_workload_model(daynight)


def _profile(workload: Workload) -> np.ndarray:
    return np.bincount((workload.submit // 3600) % HOURS_PER_WEEK, minlength=HOURS_PER_WEEK)


def test_fit_recovers_known_rates(model, daynight):
    assert model.clock == "relative"
    assert model.procs == 64
    assert model.source == "daynight"
    assert np.all(model.exposure == 8)
    busy = model.rates[:5, 9:17]
    quiet = np.concatenate([model.rates[:5, :9].ravel(), model.rates[5:].ravel()])
    assert 17 < busy.mean() < 23
    assert 0.7 < quiet.mean() < 1.3
    assert model.rates.sum() * 8 == pytest.approx(len(daynight))
    assert len(model.jobs) == len(daynight)


def test_same_seed_identical_different_seed_differs(model):
    a = generate_from_model(model, 2000, seed=11)
    b = generate_from_model(model, 2000, seed=11)
    c = generate_from_model(model, 2000, seed=12)
    for col in ("submit", "size", "run", "requested"):
        assert np.array_equal(getattr(a, col), getattr(b, col))
    assert not np.array_equal(a.submit, c.submit)
    assert not np.array_equal(a.size, c.size)
    assert a.name == "daynight-fitted-n2000-seed11"


def test_structure(model):
    w = generate_from_model(model, 500, seed=1)
    assert len(w) == 500
    assert w.procs == 64
    assert np.array_equal(w.job_id, np.arange(1, 501))
    assert w.submit.dtype == np.int64
    assert np.all(np.diff(w.submit) >= 0)
    # the process starts at the start of the model's start hour
    assert w.submit[0] >= model.start_hour * 3600
    assert np.all(w.user == -1)


def test_rows_come_from_source_and_keep_correlation(model, daynight):
    w = generate_from_model(model, 3000, seed=5)
    source = set(zip(daynight.size.tolist(), daynight.run.tolist(), daynight.requested.tolist()))
    generated = set(zip(w.size.tolist(), w.run.tolist(), w.requested.tolist()))
    assert generated <= source
    assert len(generated) > 1000  # really resampled, not one row repeated
    assert np.corrcoef(w.size, w.run)[0, 1] > 0.95


def test_hour_of_week_profile_follows_fitted_rates(model):
    w = generate_from_model(model, 40_000, seed=3)
    r = np.corrcoef(_profile(w), model.rates.ravel())[0, 1]
    assert r > 0.8
    # and the level: jobs per week of generated time close to the fitted weekly rate
    weeks = (w.submit[-1] - w.submit[0]) / (HOURS_PER_WEEK * 3600)
    assert len(w) / weeks == pytest.approx(model.weekly_rate, rel=0.05)


def test_refit_of_generated_matches_model(model):
    w = generate_from_model(model, 40_000, seed=4)
    refit = fit_workload_model(w)
    assert np.corrcoef(refit.rates.ravel(), model.rates.ravel())[0, 1] > 0.95


def test_flat_profile_is_not_mistaken_for_pattern(model):
    """Guard for the correlation test: a constant-rate model gives no day/night shape."""
    flat = WorkloadModel(rates=np.full((7, 24), 5.0), exposure=np.ones((7, 24)), jobs=model.jobs,
                         procs=64, start_hour=0, clock="relative", source="flat")
    w = generate_from_model(flat, 40_000, seed=3)
    r = np.corrcoef(_profile(w), model.rates.ravel())[0, 1]
    assert abs(r) < 0.3


def test_zero_rate_hours_get_no_jobs(model):
    rates = np.zeros((7, 24))
    rates[2, 10] = 3.0
    rates[4, 0] = 1.0
    sparse = WorkloadModel(rates=rates, exposure=np.ones((7, 24)), jobs=model.jobs, procs=64,
                           start_hour=100, clock="relative", source="sparse")
    w = generate_from_model(sparse, 2000, seed=9)
    how = (w.submit // 3600) % HOURS_PER_WEEK
    assert set(np.unique(how).tolist()) == {2 * 24 + 10, 4 * 24}
    assert np.mean(how == 58) == pytest.approx(0.75, abs=0.05)


def test_unix_start_time_gives_local_weekday():
    # 2024-01-01 00:00 in Los Angeles (PST, UTC-8) is a Monday; 2024-01-01 08:00 UTC.
    n = 10
    w = Workload(name="tz", procs=8, job_id=np.arange(1, n + 1),
                 submit=np.arange(n) * 60 + 3 * 3600, run=np.ones(n), size=np.ones(n),
                 requested=np.ones(n), user=np.zeros(n),
                 header={"UnixStartTime": "1704096000", "TimeZoneString": "America/Los_Angeles"})
    m = fit_workload_model(w)
    assert m.clock == "local"
    assert m.start_hour == 3  # Monday 03:00 local
    assert m.rates[0, 3] == n
    # without the header the hour is relative to time 0
    bare = fit_workload_model(Workload(name="tz", procs=8, job_id=w.job_id, submit=w.submit,
                                       run=w.run, size=w.size, requested=w.requested,
                                       user=w.user))
    assert bare.clock == "relative" and bare.start_hour == 3
    # a fixed TimeZone offset is used when there is no zone name
    fixed = fit_workload_model(Workload(name="tz", procs=8, job_id=w.job_id, submit=w.submit,
                                        run=w.run, size=w.size, requested=w.requested,
                                        user=w.user, header={"UnixStartTime": "1704096000",
                                                             "TimeZone": "0"}))
    assert fixed.start_hour == 11  # Monday 11:00 UTC


def test_mean_interarrival_matches_real_trace(traces_dir):
    path = traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"
    if not path.exists():
        pytest.skip(f"{path.name} not in {traces_dir}")
    first, _ = split(read_swf(path), 0.2)
    m = fit_workload_model(first)
    assert m.clock == "local"
    w = generate_from_model(m, len(first), seed=2024)
    src_gap = np.diff(first.submit).mean()
    gen_gap = np.diff(w.submit).mean()
    assert gen_gap == pytest.approx(src_gap, rel=0.10)
    assert np.corrcoef(_profile(w), m.rates.ravel())[0, 1] > 0.8
    assert set(np.unique(w.size)) <= set(np.unique(first.size))


def test_errors(model):
    empty = Workload(name="e", procs=4, job_id=np.array([], dtype=np.int64),
                     submit=np.array([], dtype=np.int64), run=np.array([], dtype=np.int64),
                     size=np.array([], dtype=np.int64), requested=np.array([], dtype=np.int64),
                     user=np.array([], dtype=np.int64))
    with pytest.raises(ConfigError, match="no jobs"):
        fit_workload_model(empty)
    with pytest.raises(ConfigError):
        fit_workload_model("not a workload")
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ConfigError, match="n_jobs"):
            generate_from_model(model, bad, seed=0)
    with pytest.raises(ConfigError, match="seed"):
        generate_from_model(model, 10, seed=-1)
    zero = WorkloadModel(rates=np.zeros((7, 24)), exposure=np.ones((7, 24)), jobs=model.jobs,
                         procs=64, start_hour=0, clock="relative", source="zero")
    with pytest.raises(ConfigError, match="zero"):
        generate_from_model(zero, 10, seed=0)
    with pytest.raises(ConfigError):
        WorkloadModel(rates=np.ones(5), exposure=np.ones((7, 24)), jobs=model.jobs, procs=64,
                      start_hour=0, clock="relative", source="bad")
    with pytest.raises(ConfigError):
        generate_from_model("not a model", 10, seed=0)
