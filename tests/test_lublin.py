"""Tests of the Lublin-Feitelson workload generator.

Statistical checks compare against what the model's definition implies (probabilities and
expectations computed here from the parameters), never against numbers read off the generator.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgym.environment.errors import ConfigError
from hpcgym.environment.lublin import LublinParams, daily_arrival_weights, generate_lublin
from hpcgym.environment.workload import Workload

N_BIG = 40_000


@pytest.fixture(scope="module")
def big() -> Workload:
    return generate_lublin(N_BIG, 256, seed=12345)


def _is_pow2(a: np.ndarray) -> np.ndarray:
    return (a & (a - 1)) == 0


# --- structure and validity -------------------------------------------------------------------

def test_returns_workload_with_expected_columns():
    w = generate_lublin(500, 128, seed=3, name="toy")
    assert isinstance(w, Workload)
    assert w.name == "toy"
    assert w.procs == 128
    assert len(w) == 500
    assert np.array_equal(w.job_id, np.arange(1, 501))
    assert np.array_equal(w.requested, w.run)  # the model has no user estimates
    assert np.all(w.user == -1)
    for col in ("job_id", "submit", "run", "size", "requested", "user"):
        assert getattr(w, col).dtype == np.int64


def test_default_name_mentions_the_model():
    assert "lublin" in generate_lublin(10, 64).name


@pytest.mark.parametrize("procs", [1, 2, 3, 8, 100, 128, 256, 1000, 4096])
def test_columns_are_valid_for_any_cluster_size(procs):
    w = generate_lublin(3000, procs, seed=procs)
    assert w.size.min() >= 1
    assert w.size.max() <= procs
    assert np.all(w.run >= 1)
    assert np.all(np.diff(w.submit) >= 0)
    assert 0 <= w.submit[0] < 86400


def test_single_job():
    w = generate_lublin(1, 16, seed=0)
    assert len(w) == 1 and w.job_id[0] == 1 and 1 <= w.size[0] <= 16


def test_run_time_cap_from_model_truncation(big):
    # log run times above max_log_run are redrawn, so no run exceeds e**12 s
    assert big.run.max() <= math.exp(LublinParams().max_log_run)


# --- determinism ------------------------------------------------------------------------------

def test_same_seed_gives_identical_arrays():
    a = generate_lublin(2000, 256, seed=7)
    b = generate_lublin(2000, 256, seed=7)
    for col in ("job_id", "submit", "run", "size", "requested", "user"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col


def test_different_seed_gives_different_arrays():
    a = generate_lublin(2000, 256, seed=7)
    b = generate_lublin(2000, 256, seed=8)
    assert not np.array_equal(a.submit, b.submit)
    assert not np.array_equal(a.run, b.run)
    assert not np.array_equal(a.size, b.size)


def test_prefix_does_not_depend_on_other_calls():
    # no hidden global state: a call in between does not change the next result
    a = generate_lublin(1000, 64, seed=1)
    generate_lublin(50, 64, seed=99)
    b = generate_lublin(1000, 64, seed=1)
    assert np.array_equal(a.submit, b.submit) and np.array_equal(a.size, b.size)


# --- job sizes --------------------------------------------------------------------------------

def test_fraction_serial_matches_serial_prob(big):
    p = LublinParams()
    frac = np.mean(big.size == 1)
    # non-serial draws can only round to size 1 if 2**x < 1.5, impossible with ULOW = 1.2
    assert frac == pytest.approx(p.serial_prob, abs=0.015)


def test_power_of_two_fraction_among_parallel_jobs(big):
    p = LublinParams()
    par = big.size > 1
    # power-of-two jobs are pow2_prob of all jobs; some other parallel sizes happen to be powers
    # of two as well, so the share among parallel jobs is at least pow2 / (1 - serial)
    expected_min = p.pow2_prob / (1 - p.serial_prob)
    assert np.mean(_is_pow2(big.size[par])) >= expected_min - 0.015
    # and the other parallel jobs are not all powers of two
    assert np.mean(_is_pow2(big.size[par])) < 0.995


def test_two_stage_uniform_share_of_large_jobs(big):
    # for the jobs that are not rounded to a power of two, log2(size) ~ two-stage uniform:
    # mass 1 - uprob spread evenly over [UMED, UHI], with UHI = log2(256), UMED = UHI - 2
    p = LublinParams()
    uhi = math.log2(256)
    umed = uhi - p.umed_offset
    other = big.size[(big.size > 1) & ~_is_pow2(big.size)]
    assert other.size > 500
    # a size with log2(size) > UMED + 0.1 can only come from the upper stage
    share = np.mean(np.log2(other) > umed + 0.1)
    expected = (1 - p.uprob) * (uhi - umed - 0.1) / (uhi - umed)
    # sizes that land on a power of two by chance are excluded above (about a sixth of the
    # lower stage), which raises the share by ~0.02; the tolerance covers that
    assert share == pytest.approx(expected, abs=0.04)


def test_cluster_size_scales_the_largest_jobs():
    small = generate_lublin(20_000, 64, seed=5)
    large = generate_lublin(20_000, 1024, seed=5)
    assert small.size.max() <= 64
    assert large.size.max() <= 1024
    # UHI = log2(procs): the upper stage reaches the whole machine
    assert small.size.max() == 64
    assert large.size.max() > 512
    assert np.mean(large.size > 64) > 0.05
    assert np.mean(large.size) > 4 * np.mean(small.size)


def test_non_power_of_two_cluster_keeps_power_of_two_jobs_fitting():
    w = generate_lublin(20_000, 100, seed=2)
    assert w.size.max() <= 100
    pow2_sizes = set(np.unique(w.size[_is_pow2(w.size)]).tolist())
    assert pow2_sizes <= {1, 2, 4, 8, 16, 32, 64}


# --- run times --------------------------------------------------------------------------------

def _expected_mean_log_run(p: LublinParams, size: int) -> float:
    """E[log run] of the hyper-gamma at this size (truncation at e**12 is negligible here)."""
    mix = min(1.0, max(0.0, p.pa * size + p.pb))
    return mix * p.a1 * p.b1 + (1 - mix) * p.a2 * p.b2


def test_mean_log_run_follows_the_hyper_gamma(big):
    p = LublinParams()
    for size in (1, 2, 4, 8, 16, 32, 64, 128):
        sel = big.size == size
        if sel.sum() < 400:
            continue
        # floor(exp(x)) loses < 1 s, i.e. well under 0.05 in log for runs above ~20 s
        observed = np.log(big.run[sel] + 0.5).mean()
        assert observed == pytest.approx(_expected_mean_log_run(p, size), abs=0.25), size


def test_larger_jobs_run_longer(big):
    # pa < 0: the long-runtime gamma gets more weight as size grows
    logs = np.log(big.run)
    small = logs[big.size == 1].mean()
    large = logs[big.size >= 64].mean()
    assert large > small + 0.8
    rank_size = np.argsort(np.argsort(big.size, kind="stable"))
    rank_run = np.argsort(np.argsort(big.run, kind="stable"))
    assert np.corrcoef(rank_size, rank_run)[0, 1] > 0.05


def test_pa_zero_removes_the_size_runtime_correlation():
    p = LublinParams(pa=0.0)
    w = generate_lublin(N_BIG, 256, seed=4, params=p)
    logs = np.log(w.run)
    assert abs(logs[w.size == 1].mean() - logs[w.size >= 32].mean()) < 0.25


# --- arrivals ---------------------------------------------------------------------------------

def _gamma_pdf(x: np.ndarray, shape: float, scale: float) -> np.ndarray:
    log_norm = math.lgamma(shape) + shape * math.log(scale)
    return np.exp((shape - 1) * np.log(x) - x / scale - log_norm)


def _model_hour_shares(p: LublinParams) -> np.ndarray:
    """Share of arrivals per hour implied by the daily-cycle gamma (integrated numerically)."""
    weights = np.zeros(48)
    for i in range(11, 59):  # the fitted day covers half-hours 11..58, wrapped onto 0..47
        x = np.linspace(i - 0.5, i + 0.5, 201)
        weights[(i - 1) % 48] = np.trapezoid(_gamma_pdf(x, p.anum, p.bnum), x)
    hourly = weights.reshape(24, 2).sum(axis=1)
    return hourly / hourly.sum()


def test_daily_cycle_more_arrivals_by_day_than_by_night(big):
    hour = (big.submit % 86400) // 3600
    counts = np.bincount(hour, minlength=24)
    day = counts[10:16].mean()  # 10:00-16:00
    night = counts[1:5].mean()  # 01:00-05:00
    assert day > 2.5 * night
    assert 10 <= int(np.argmax(counts)) <= 16


def test_daily_cycle_matches_model_weights(big):
    expected = _model_hour_shares(LublinParams())
    hour = (big.submit % 86400) // 3600
    observed = np.bincount(hour, minlength=24) / len(big)
    # six four-hour blocks
    exp_blocks = expected.reshape(6, 4).sum(axis=1)
    obs_blocks = observed.reshape(6, 4).sum(axis=1)
    assert np.allclose(obs_blocks, exp_blocks, atol=0.03), (obs_blocks, exp_blocks)


def test_the_cached_daily_weights_are_the_models_and_cannot_be_changed_by_a_caller():
    """The weights are computed once per (anum, bnum) and handed out to every draw: a caller that
    writes into them must fail, not change every later workload."""
    params = LublinParams()
    weights = daily_arrival_weights(params)
    model = _model_hour_shares(params)  # integrated here, independently of the series
    assert np.allclose(weights.reshape(24, 2).sum(axis=1) / weights.sum(), model, atol=1e-6)
    before = generate_lublin(500, 256, seed=3)
    with pytest.raises(ValueError):
        weights[0] = 100.0
    assert np.array_equal(generate_lublin(500, 256, seed=3).submit, before.submit)


def test_mean_gap_matches_truncated_log_gamma():
    # over whole days the clock is not sped up or slowed down on average, so the mean gap is
    # E[exp(G) | G <= 13] with G ~ Gamma(aarr * arar, barr); the typeless gaps have a light
    # enough tail for a tight check
    p = LublinParams.typeless()
    k, theta = p.aarr * p.arar, p.barr
    x = np.linspace(1e-9, p.max_log_interarrival, 400_001)
    pdf = _gamma_pdf(x, k, theta)
    expected = np.trapezoid(pdf * np.exp(x), x) / np.trapezoid(pdf, x)
    w = generate_lublin(100_000, 256, seed=11, params=p)
    observed = (w.submit[-1] - w.submit[0]) / (len(w) - 1)
    assert observed == pytest.approx(expected, rel=0.08)


def test_start_hour_shifts_the_clock():
    p0 = LublinParams()
    p6 = LublinParams(start_hour=6)
    a = generate_lublin(20_000, 64, seed=9, params=p0)
    b = generate_lublin(20_000, 64, seed=9, params=p6)
    # with start_hour=6, time t is (6 h + t) o'clock: the peak hour moves 6 hours earlier in t
    peak_a = int(np.argmax(np.bincount((a.submit % 86400) // 3600, minlength=24)))
    peak_b = int(np.argmax(np.bincount(((b.submit + 6 * 3600) % 86400) // 3600, minlength=24)))
    assert abs(peak_a - peak_b) <= 2


# --- parameters -------------------------------------------------------------------------------

def test_params_override_changes_output():
    w = generate_lublin(20_000, 256, seed=1, params=LublinParams(serial_prob=0.6, pow2_prob=0.3))
    assert np.mean(w.size == 1) == pytest.approx(0.6, abs=0.02)


def test_presets_differ_from_batch():
    inter = generate_lublin(20_000, 128, seed=1, params=LublinParams.interactive())
    batch = generate_lublin(20_000, 128, seed=1)
    # interactive jobs: UHI = log2(128) - 1.5 -> at most round(2**5.5) = 45 processors
    assert inter.size.max() <= 45
    assert np.median(inter.run) < np.median(batch.run)
    typeless = generate_lublin(20_000, 128, seed=1, params=LublinParams.typeless())
    assert np.mean(typeless.size == 1) == pytest.approx(0.244, abs=0.02)


def test_params_are_frozen():
    p = LublinParams()
    with pytest.raises(Exception):
        p.pa = 0.0  # type: ignore[misc]


@pytest.mark.parametrize("kwargs", [
    {"serial_prob": 1.5}, {"pow2_prob": -0.1}, {"serial_prob": 0.6, "pow2_prob": 0.6},
    {"a1": 0.0}, {"barr": -1.0}, {"start_hour": 24}, {"start_hour": 1.5}, {"uprob": 2.0},
    {"pa": float("nan")}, {"pb": "0.7"}, {"ulow": -1.0}, {"max_log_run": float("inf")},
])
def test_invalid_params_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        LublinParams(**kwargs)


@pytest.mark.parametrize("n_jobs, procs, seed", [
    (0, 128, 0), (-5, 128, 0), (10, 0, 0), (10, -1, 0), (1.5, 128, 0), (10, "128", 0),
    (True, 128, 0), (10, 128, -1),
])
def test_invalid_arguments_raise_config_error(n_jobs, procs, seed):
    with pytest.raises(ConfigError):
        generate_lublin(n_jobs, procs, seed)


def test_error_message_names_the_problem():
    with pytest.raises(ConfigError, match="n_jobs"):
        generate_lublin(0, 128)
    with pytest.raises(ConfigError, match="procs"):
        generate_lublin(10, 0)


def test_bad_params_type_raises_config_error():
    with pytest.raises(ConfigError):
        generate_lublin(10, 128, params={"pa": 0})  # type: ignore[arg-type]


def test_the_lublin2_standin_matches_table_2_of_the_rl_backfilling_paper():
    """Table 2 (Kolker-Hicks et al., SC-W 2023) gives Lublin-2 as 256 processors, mean
    inter-arrival 460 s, mean requested time 1,695 s, mean size 39; the stand-in's seed 0 comes
    within 3% of each."""
    from hpcgym.environment.lublin import LublinParams, generate_lublin

    w = generate_lublin(10_000, 256, seed=0, params=LublinParams.lublin2_standin())
    assert abs(np.diff(w.submit).mean() / 460 - 1) < 0.03
    assert abs(w.requested.mean() / 1695 - 1) < 0.03
    assert abs(w.size.mean() / 39 - 1) < 0.03
