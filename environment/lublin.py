"""Synthetic rigid-job workloads from the Lublin-Feitelson (2003) model, re-implementing the
reference generator ``lublin99.c``; docs/lublin.md gives the model, its parameters and sources."""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from .config import check_int
from .errors import ConfigError
from .workload import Workload

BUCKETS = 48  #: Half-hour buckets per day and their length in seconds ([C] BUCKETS, SECONDS_IN_BUCKET).
SECONDS_IN_BUCKET = 86400 // BUCKETS
CYCLIC_DAY_START = 11  #: The fitted daily-cycle gamma starts at this bucket and wraps around ([C] CYCLIC_DAY_START).


@dataclass(frozen=True)
class LublinParams:
    """The model's parameters (docs/lublin.md); the defaults are the published batch values."""

    # job size
    serial_prob: float = 0.2927
    pow2_prob: float = 0.6686
    ulow: float = 1.2
    umed_offset: float = 2.0
    uhi_offset: float = 0.0
    uprob: float = 0.875
    # run time: log(run) ~ hyper-gamma, p = pa * size + pb
    a1: float = 6.57
    b1: float = 0.823
    a2: float = 639.1
    b2: float = 0.0156
    pa: float = -0.003
    pb: float = 0.6986
    # arrivals
    aarr: float = 6.0415
    barr: float = 0.8531
    arar: float = 1.0519
    anum: float = 6.1271
    bnum: float = 5.2740
    # truncations and clock
    max_log_run: float = 12.0
    max_log_interarrival: float = 13.0
    start_hour: int = 0

    def __post_init__(self) -> None:
        for fname in _FLOAT_FIELDS:
            value = getattr(self, fname)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ConfigError(f"Lublin parameter {fname} must be a number, got {value!r}")
        for fname in ("serial_prob", "pow2_prob", "uprob"):
            value = getattr(self, fname)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"Lublin parameter {fname} must be a probability in [0, 1], got {value}")
        if self.serial_prob + self.pow2_prob > 1.0 + 1e-12:
            raise ConfigError("Lublin parameters serial_prob + pow2_prob must not exceed 1, got "
                              f"{self.serial_prob} + {self.pow2_prob}")
        for fname in ("a1", "b1", "a2", "b2", "aarr", "barr", "arar", "anum", "bnum", "max_log_run",
                      "max_log_interarrival"):
            value = getattr(self, fname)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"Lublin parameter {fname} must be positive, got {value}")
        for fname in ("ulow", "umed_offset", "uhi_offset", "pa", "pb"):
            value = getattr(self, fname)
            if not math.isfinite(value):
                raise ConfigError(f"Lublin parameter {fname} must be finite, got {value}")
        if self.ulow < 0:
            raise ConfigError(f"Lublin parameter ulow (log2 of the smallest parallel size) must be >= 0, got "
                              f"{self.ulow}")
        if not (isinstance(self.start_hour, numbers.Integral) and 0 <= self.start_hour <= 23):
            raise ConfigError(f"Lublin parameter start_hour must be an integer hour in 0..23, got {self.start_hour!r}")

    @classmethod
    def batch(cls) -> LublinParams:
        """The batch-job parameters ([C]/[G] ``*_BATCH``); same as ``LublinParams()``."""
        return cls()

    @classmethod
    def interactive(cls) -> LublinParams:
        """The interactive-job parameters ([C]/[G] ``*_ACTIVE``)."""
        return cls(serial_prob=0.1541, pow2_prob=0.625, ulow=1.0, umed_offset=2.5, uhi_offset=1.5, uprob=0.705,
                   a1=3.8351, b1=0.6605, a2=7.073, b2=0.6856, pa=-0.0118, pb=0.9156,
                   aarr=6.5510, barr=0.6621, arar=0.9797, anum=8.9186, bnum=3.6680)

    @classmethod
    def typeless(cls) -> LublinParams:
        """The whole-sample parameters, fitted without splitting batch and interactive jobs."""
        return cls(serial_prob=0.244, pow2_prob=0.576, ulow=0.8, umed_offset=2.5, uhi_offset=0.0, uprob=0.86,
                   a1=4.2, b1=0.94, a2=312.0, b2=0.03, pa=-0.0054, pb=0.78,
                   aarr=10.2303, barr=0.4871, arar=1.0225, anum=8.1737, bnum=3.9631)

    @classmethod
    def lublin2_standin(cls) -> LublinParams:
        """A stand-in for RL backfilling's non-public "Lublin-2" trace, tuned near its Table 2 (docs/lublin.md)."""
        return replace(cls.typeless(), umed_offset=1.05, b2=0.0255, barr=0.446)

    def size_bounds(self, procs: int) -> tuple[float, float, float]:
        """(ULOW, UMED, UHI) of the two-stage uniform for a cluster of ``procs`` processors."""
        uhi = math.log2(procs) - self.uhi_offset
        umed = max(uhi - self.umed_offset, min(self.ulow, uhi))
        return self.ulow, umed, uhi


_FLOAT_FIELDS = tuple(f.name for f in fields(LublinParams) if f.name != "start_hour")


def _gamma_cdf(x: float, shape: float, scale: float) -> float:
    """Regularized lower incomplete gamma P(shape, x/scale) by its power series (converges for every z)."""
    z = x / scale
    if z <= 0:
        return 0.0
    term, total, k = 1.0, 1.0, 0
    while term > 1e-17 * total:
        k += 1
        term *= z / (shape + k)
        total += term
        if k > 10_000:  # pragma: no cover - cannot happen for the model's ranges
            break
    return min(1.0, total * math.exp(shape * math.log(z) - z - math.lgamma(shape + 1.0)))


def daily_arrival_weights(params: LublinParams | None = None) -> np.ndarray:
    """Relative arrival intensity of each half-hour of the day (0 = 00:00-00:30), mean 1, read-only (cached)."""
    p = params or LublinParams()
    return _daily_weights(p.anum, p.bnum)


@functools.lru_cache(maxsize=16)
def _daily_weights(anum: float, bnum: float) -> np.ndarray:
    """Cached: 96 series evaluations cost 2 ms, a third of drawing an episode's 10,000 jobs."""
    weights = np.empty(BUCKETS)
    for i in range(CYCLIC_DAY_START, CYCLIC_DAY_START + BUCKETS):
        weights[(i - 1) % BUCKETS] = _gamma_cdf(i + 0.5, anum, bnum) - _gamma_cdf(i - 0.5, anum, bnum)
    if not np.all(weights > 0):
        raise ConfigError(f"Lublin daily-cycle parameters anum={anum}, bnum={bnum} leave some half-hour without "
                          "arrivals; choose a gamma that covers the whole day")
    weights /= weights.mean()
    weights.flags.writeable = False
    return weights


def _truncated_log_gamma(rng: np.random.Generator, shape: float, scale: float, n: int, limit: float) -> np.ndarray:
    """n Gamma(shape, scale) draws, each redrawn while it exceeds ``limit``."""
    out = rng.gamma(shape, scale, n)
    bad = np.flatnonzero(out > limit)
    while bad.size:
        out[bad] = rng.gamma(shape, scale, bad.size)
        bad = bad[out[bad] > limit]
    return out


def draw_sizes(rng: np.random.Generator, n: int, procs: int, p: LublinParams) -> np.ndarray:
    ulow, umed, uhi = p.size_bounds(procs)
    u = rng.random(n)
    serial = u <= p.serial_prob
    pow2 = ~serial & (u <= p.serial_prob + p.pow2_prob)
    first_stage = rng.random(n) <= p.uprob
    lo, hi = np.where(first_stage, ulow, umed), np.where(first_stage, umed, uhi)
    x = lo + rng.random(n) * (hi - lo)
    x = np.where(pow2, np.floor(x + 0.5), x)
    # a power-of-two job must stay a power of two that fits the cluster
    x = np.where(pow2, np.minimum(x, math.floor(math.log2(procs))), x)
    size = np.floor(np.exp2(x) + 0.5)
    size[serial] = 1
    return np.clip(size, 1, procs).astype(np.int64)


def _run_times(rng: np.random.Generator, size: np.ndarray, p: LublinParams) -> np.ndarray:
    n = size.size
    prob_first = np.clip(p.pa * size + p.pb, 0.0, 1.0)
    log_run = np.empty(n)
    todo = np.arange(n)
    while todo.size:  # like [C], a rejected draw repeats the whole hyper-gamma draw
        first = rng.random(todo.size) <= prob_first[todo]
        log_run[todo] = rng.gamma(np.where(first, p.a1, p.a2), np.where(first, p.b1, p.b2))
        todo = todo[log_run[todo] > p.max_log_run]
    return np.floor(np.exp(log_run)).astype(np.int64)


def on_daily_clock(arrivals: np.ndarray, p: LublinParams) -> np.ndarray:
    """Submit times (whole seconds, from the first day with a job) of `arrivals` on the model's rush-hour clock,
    which thins and bunches them, keeping the mean daily rate."""
    points = arrivals / SECONDS_IN_BUCKET
    # the clock starts at the first bucket of start_hour; a bucket costs its weight in points
    weights = np.roll(daily_arrival_weights(p), -2 * p.start_hour)
    edges = np.concatenate(([0.0], np.cumsum(weights)))  # points at each bucket start
    per_day = edges[-1]
    day = np.floor(points / per_day)
    rest = points - day * per_day
    bucket = np.clip(np.searchsorted(edges, rest, side="right") - 1, 0, BUCKETS - 1)
    frac = (rest - edges[bucket]) / weights[bucket]
    seconds = (day * BUCKETS + bucket + frac) * SECONDS_IN_BUCKET
    submit = np.floor(seconds).astype(np.int64)
    # start on the first day that has a job; whole days keep every job's time of day
    return submit - (submit[0] // 86400) * 86400


def generate_lublin(n_jobs: int, procs: int, seed: int = 0, *, name: str | None = None,
                    params: LublinParams | None = None) -> Workload:
    """``n_jobs`` jobs of the model on ``procs`` processors, the same for the same ``seed``; ``requested`` equals
    ``run`` and ``user`` is -1, as the model has neither."""
    n = check_int(n_jobs, "Lublin workload n_jobs (number of jobs)", 1)
    procs = check_int(procs, "Lublin workload procs (cluster size)", 1)
    seed = check_int(seed, "Lublin workload seed", 0)
    params = LublinParams() if params is None else params
    if not isinstance(params, LublinParams):
        raise ConfigError(f"params must be a LublinParams, got {type(params).__name__}")
    rng = np.random.default_rng(seed)
    submit = on_daily_clock(np.cumsum(np.exp(_truncated_log_gamma(rng, params.aarr * params.arar, params.barr, n,
                                                                  params.max_log_interarrival))), params)
    size = draw_sizes(rng, n, procs, params)
    run = _run_times(rng, size, params)
    header = {"Generator": "Lublin-Feitelson 2003 model (hpcgym.environment.lublin)", "Seed": str(seed),
              "MaxProcs": str(procs), "Params": ", ".join(f"{k}={v}" for k, v in asdict(params).items())}
    return Workload(name=name or f"lublin-{procs}p-{n}j-seed{seed}", procs=procs, header=header,
                    job_id=np.arange(1, n + 1, dtype=np.int64), submit=submit, run=run, size=size,
                    requested=run.copy(), user=np.full(n, -1, dtype=np.int64))
