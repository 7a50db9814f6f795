"""Synthetic rigid-job workloads from the Lublin-Feitelson model.

The model is U. Lublin and D. G. Feitelson, "The workload on parallel supercomputers: modeling
the characteristics of rigid jobs", J. Parallel Distrib. Comput. 63(11):1105-1122, 2003. Its
authors published a reference generator, ``lublin99.c``, with the Parallel Workloads Archive
(http://www.cs.huji.ac.il/labs/parallel/workload). This module re-implements that
generator's behaviour with numpy's ``Generator``; no code was taken from it. Every job gets a
size, a run time and a submit time:

Job size (processors)
    With probability ``serial_prob`` the job is serial (size 1). Otherwise a value ``x`` is drawn
    from a two-stage uniform distribution: uniform on [ULOW, UMED] with probability ``uprob``,
    else uniform on [UMED, UHI]. The size is ``round(2**x)``. The draw that decides "serial" also
    decides "power of two": a job is a power-of-two job when ``serial_prob < u <= serial_prob +
    pow2_prob``, and then ``x`` is rounded to an integer first. ``pow2_prob`` is therefore a
    fraction of *all* jobs, not of the parallel ones.

Run time (seconds)
    ``log(run)`` (natural log) follows a hyper-gamma distribution: with probability ``p`` it is
    Gamma(shape a1, scale b1), otherwise Gamma(a2, b2). The mixing probability depends linearly on
    the job size, ``p = pa * size + pb`` clipped to [0, 1]. Since ``pa < 0``, larger jobs more often
    take the second gamma, whose mean (a2*b2 ~ 9.97, about 6 hours) is far above the first's
    (a1*b1 ~ 5.41, about 4 minutes): size and run time are positively correlated. Draws above
    ``max_log_run`` (12, i.e. e**12 = 162,754 s, about two days) are redrawn, and the run time is
    ``floor(exp(log_run))``, so it is always >= 1 s.

Arrivals (seconds)
    Inter-arrival gaps are ``exp(g)`` with ``g ~ Gamma(aarr * arar, barr)``; ``aarr``/``barr`` were
    fitted to rush-hour gaps and the constant ``arar`` ("arrive-rush-to-all ratio") rescales the
    shape to represent the whole day. Draws above ``max_log_interarrival`` (13, about 5 days) are
    redrawn. The gaps are measured on a clock that runs at a rate set by the time of day: the day
    has 48 half-hour buckets, bucket ``h`` gets the weight ``F(i + 0.5) - F(i - 0.5)`` where ``F``
    is the CDF of Gamma(anum, bnum) (in half-hour units) and ``i`` is ``h + 1`` cyclically shifted
    into 11..58 (the fitted "day" starts at bucket 11, 05:30), and the weights are normalised to
    mean 1. A gap of ``s`` rush-hour seconds consumes ``s / 1800`` points, and the real clock
    needs ``weight[h]`` points to cross half-hour ``h``: jobs bunch in the heavily weighted
    afternoon buckets (peak near 13:00) and thin out in the early morning (minimum near 05:00).
    The simulation starts at ``start_hour`` (midnight) and the first job arrives one gap after
    time 0; if that first gap spans whole days, they are cut (all submits move back by whole
    days, so the first job lands within the first day and every job keeps its time of day). The
    reference program advances this clock with a loop; here it is the same piecewise-linear time
    change, applied to all jobs at once through cumulative sums.

Cluster size
    The parameters were fitted on a 128-node machine, where the published batch values are
    ULOW = 1.2, UMED = 5 and UHI = 7 = log2(128). For a cluster of ``procs`` processors
    ``UHI = log2(procs) - uhi_offset`` and ``UMED = UHI - umed_offset``, which reproduces the
    published values for ``procs = 128`` and keeps the shape of the size distribution (the
    reference code asks the user to set UHI to log2 of the system size and UMED 1.5 to 3.5 below
    it). ULOW does not move: it is the smallest parallel size. On tiny clusters (UHI - umed_offset
    < ULOW, i.e. under about 9 processors for batch jobs) UMED is raised to min(ULOW, UHI) so the
    first stage is not inverted; sizes are always clipped to 1..procs, and a power-of-two job
    that would exceed a non-power-of-two cluster gets the largest power of two that fits.

Parameters (batch job type, the default; the [C] macro in brackets; [G] has the same values)

    serial_prob           0.2927          P(serial job)                          [SERIAL_PROB_BATCH]
    pow2_prob             0.6686          P(power-of-two parallel job)           [POW2_PROB_BATCH]
    ulow                  1.2             ULOW, log2 of smallest parallel size   [ULOW_BATCH]
    umed_offset           2.0             UHI - UMED            [UMED_BATCH 5, UHI_BATCH 7]
    uhi_offset            0.0             log2(procs) - UHI     [UHI_BATCH 7 on 128 nodes]
    uprob                 0.875           P(first uniform stage)                 [UPROB_BATCH]
    a1, b1                6.57, 0.823     short gamma of log run       [A1_BATCH, B1_BATCH]
    a2, b2                639.1, 0.0156   long gamma of log run        [A2_BATCH, B2_BATCH]
    pa, pb                -0.003, 0.6986  p = pa * size + pb           [PA_BATCH, PB_BATCH]
    aarr, barr            6.0415, 0.8531  gamma of log gap, rush hours [AARR_BATCH, BARR_BATCH]
    arar                  1.0519          multiplies aarr: rush hours -> whole day  [ARAR_BATCH]
    anum, bnum            6.1271, 5.2740  daily-cycle gamma (half hours) [ANUM/BNUM_BATCH]
    max_log_run           12              redraw log run above this    [TOO_MUCH_TIME]
    max_log_interarrival  13              redraw log gap above this    [TOO_MUCH_ARRIVE_TIME]
    start_hour            0               hour of day at time 0        [START]
    BUCKETS               48              half-hour buckets per day    [BUCKETS]
    CYCLIC_DAY_START      11              first bucket of the fitted day [CYCLIC_DAY_START]

Sources: [C] ``lublin99.c``, the reference generator by U. Lublin and D. G. Feitelson from the
Parallel Workloads Archive (its ``*_BATCH`` macros; a public copy was read, not copied);
[G] GridSim 5.0, class ``gridsim.parallel.util.WorkloadLublin99`` by M. Dias de Assuncao, whose
``*_BATCH`` constants match [C] value for value. The paper's own tables were not available to
check against. ``LublinParams.interactive()`` and ``LublinParams.typeless()`` hold the
interactive (``*_ACTIVE``) and whole-sample (no ``_BATCH``/``_ACTIVE`` suffix) values of the same
sources; the reference program's mode that interleaves a batch and an interactive stream is not
implemented.

The model has no user run-time estimates, users or queues: ``requested`` is set equal to ``run``
and ``user`` to -1.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from .config import check_int
from .errors import ConfigError
from .workload import Workload

#: Half-hour buckets per day and their length in seconds ([C] BUCKETS, SECONDS_IN_BUCKET).
BUCKETS = 48
SECONDS_IN_BUCKET = 86400 // BUCKETS
#: The fitted daily-cycle gamma starts at this bucket and wraps around ([C] CYCLIC_DAY_START).
CYCLIC_DAY_START = 11


@dataclass(frozen=True)
class LublinParams:
    """Parameters of the Lublin-Feitelson model; the defaults are the published batch values.

    See the module docstring for the meaning and source of each field. Override single values
    with ``LublinParams(pa=-0.01)`` or ``dataclasses.replace(LublinParams.typeless(), pa=-0.01)``.
    """

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
                raise ConfigError(f"Lublin parameter {fname} must be a probability in [0, 1], "
                                  f"got {value}")
        if self.serial_prob + self.pow2_prob > 1.0 + 1e-12:
            raise ConfigError("Lublin parameters serial_prob + pow2_prob must not exceed 1, got "
                              f"{self.serial_prob} + {self.pow2_prob}")
        for fname in ("a1", "b1", "a2", "b2", "aarr", "barr", "arar", "anum", "bnum",
                      "max_log_run", "max_log_interarrival"):
            value = getattr(self, fname)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"Lublin parameter {fname} must be positive, got {value}")
        for fname in ("ulow", "umed_offset", "uhi_offset", "pa", "pb"):
            value = getattr(self, fname)
            if not math.isfinite(value):
                raise ConfigError(f"Lublin parameter {fname} must be finite, got {value}")
        if self.ulow < 0:
            raise ConfigError(f"Lublin parameter ulow (log2 of the smallest parallel size) must be "
                              f">= 0, got {self.ulow}")
        if not (isinstance(self.start_hour, numbers.Integral) and 0 <= self.start_hour <= 23):
            raise ConfigError(f"Lublin parameter start_hour must be an integer hour in 0..23, "
                              f"got {self.start_hour!r}")

    @classmethod
    def batch(cls) -> LublinParams:
        """The batch-job parameters ([C]/[G] ``*_BATCH``); same as ``LublinParams()``."""
        return cls()

    @classmethod
    def interactive(cls) -> LublinParams:
        """The interactive-job parameters ([C]/[G] ``*_ACTIVE``).

        Published for 128 nodes with UHI = 5.5 and UMED = 3, i.e. uhi_offset 1.5 and
        umed_offset 2.5: interactive jobs use at most about a third of the machine.
        """
        return cls(serial_prob=0.1541, pow2_prob=0.625, ulow=1.0, umed_offset=2.5,
                   uhi_offset=1.5, uprob=0.705,
                   a1=3.8351, b1=0.6605, a2=7.073, b2=0.6856, pa=-0.0118, pb=0.9156,
                   aarr=6.5510, barr=0.6621, arar=0.9797, anum=8.9186, bnum=3.6680)

    @classmethod
    def typeless(cls) -> LublinParams:
        """The whole-sample parameters, fitted without splitting batch and interactive jobs.

        [C] uses them when its INCLUDE_JOBS_TYPE switch is off (ULOW 0.8, UMED 4.5, UHI 7).
        """
        return cls(serial_prob=0.244, pow2_prob=0.576, ulow=0.8, umed_offset=2.5,
                   uhi_offset=0.0, uprob=0.86,
                   a1=4.2, b1=0.94, a2=312.0, b2=0.03, pa=-0.0054, pb=0.78,
                   aarr=10.2303, barr=0.4871, arar=1.0225, anum=8.1737, bnum=3.9631)

    @classmethod
    def lublin2_standin(cls) -> LublinParams:
        """A STAND-IN for the RL backfilling paper's "Lublin-2" trace, which is not public: the
        typeless set with larger jobs (umed_offset 1.05), shorter long runs (b2 0.0255) and
        denser arrivals (barr 0.446), tuned so that 10,000 jobs on 256 processors come near the
        paper's Table 2 (mean inter-arrival 460 s, mean requested time 1,695 s, mean size 39;
        seed 0: 461 s, 1,668 s, 38.8). Not the paper's trace (docs/lublin.md)."""
        return replace(cls.typeless(), umed_offset=1.05, b2=0.0255, barr=0.446)

    def size_bounds(self, procs: int) -> tuple[float, float, float]:
        """(ULOW, UMED, UHI) of the two-stage uniform for a cluster of ``procs`` processors."""
        uhi = math.log2(procs) - self.uhi_offset
        umed = max(uhi - self.umed_offset, min(self.ulow, uhi))
        return self.ulow, umed, uhi


_FLOAT_FIELDS = tuple(f.name for f in fields(LublinParams) if f.name != "start_hour")


def _gamma_cdf(x: float, shape: float, scale: float) -> float:
    """Regularized lower incomplete gamma P(shape, x/scale), by its power series.

    P(a, z) = z**a e**-z / Gamma(a + 1) * sum_k z**k / ((a+1)...(a+k)); all terms are positive,
    so the sum converges for every z (quickly for the z <= ~20 used here).
    """
    z = x / scale
    if z <= 0:
        return 0.0
    term = 1.0
    total = 1.0
    k = 0
    while term > 1e-17 * total:
        k += 1
        term *= z / (shape + k)
        total += term
        if k > 10_000:  # pragma: no cover - cannot happen for the model's ranges
            break
    return min(1.0, total * math.exp(shape * math.log(z) - z - math.lgamma(shape + 1.0)))


def daily_arrival_weights(params: LublinParams | None = None) -> np.ndarray:
    """Relative arrival intensity of each half-hour of the day (index 0 = 00:00-00:30), mean 1
    (read-only: the same array is handed out for the same parameters)."""
    p = params or LublinParams()
    return _daily_weights(p.anum, p.bnum)


@functools.lru_cache(maxsize=16)
def _daily_weights(anum: float, bnum: float) -> np.ndarray:
    """Cached: 96 series evaluations cost 2 ms, a third of drawing an episode's 10,000 jobs."""
    weights = np.empty(BUCKETS)
    for i in range(CYCLIC_DAY_START, CYCLIC_DAY_START + BUCKETS):
        weights[(i - 1) % BUCKETS] = _gamma_cdf(i + 0.5, anum, bnum) - _gamma_cdf(i - 0.5, anum, bnum)
    if not np.all(weights > 0):
        raise ConfigError(f"Lublin daily-cycle parameters anum={anum}, bnum={bnum} leave some "
                          "half-hour without arrivals; choose a gamma that covers the whole day")
    weights /= weights.mean()
    weights.flags.writeable = False
    return weights


def _truncated_log_gamma(rng: np.random.Generator, shape: float, scale: float, n: int,
                         limit: float) -> np.ndarray:
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
    lo = np.where(first_stage, ulow, umed)
    hi = np.where(first_stage, umed, uhi)
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
        shape = np.where(first, p.a1, p.a2)
        scale = np.where(first, p.b1, p.b2)
        log_run[todo] = rng.gamma(shape, scale)
        todo = todo[log_run[todo] > p.max_log_run]
    return np.floor(np.exp(log_run)).astype(np.int64)


def _submit_times(rng: np.random.Generator, n: int, p: LublinParams) -> np.ndarray:
    log_gap = _truncated_log_gamma(rng, p.aarr * p.arar, p.barr, n, p.max_log_interarrival)
    return on_daily_clock(np.cumsum(np.exp(log_gap)), p)


def on_daily_clock(arrivals: np.ndarray, p: LublinParams) -> np.ndarray:
    """Submit times (whole seconds, from the first day with a job) of `arrivals` measured on the
    model's rush-hour clock: the daily cycle thins and bunches them, keeping the mean daily rate."""
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
    """Draw ``n_jobs`` jobs of the Lublin-Feitelson model for a cluster of ``procs`` processors.

    Uses the published batch-job parameters unless ``params`` is given (for instance
    ``LublinParams.interactive()`` or ``LublinParams(pa=-0.01)``). The same ``seed`` always gives
    the same workload (numpy ``default_rng``). Submit times are in seconds, sorted, counted from
    ``params.start_hour`` o'clock (midnight by default) of the first day that has a job, so the
    first submit is below 86,400 and ``submit % 86400`` is the time of day; run times are >= 1 s;
    sizes lie in 1..procs.

    The model has no run-time estimates, so ``requested`` equals ``run`` (a perfectly accurate
    user); ``user`` is -1 for every job.

    Raises ConfigError if ``n_jobs`` or ``procs`` is not a positive integer, ``seed`` is not a
    non-negative integer, or ``params`` is not a LublinParams.
    """
    n = check_int(n_jobs, "Lublin workload n_jobs (number of jobs)", 1)
    procs = check_int(procs, "Lublin workload procs (cluster size)", 1)
    seed = check_int(seed, "Lublin workload seed", 0)
    if params is None:
        params = LublinParams()
    elif not isinstance(params, LublinParams):
        raise ConfigError(f"params must be a LublinParams, got {type(params).__name__}")

    rng = np.random.default_rng(seed)
    submit = _submit_times(rng, n, params)
    size = draw_sizes(rng, n, procs, params)
    run = _run_times(rng, size, params)
    header = {"Generator": "Lublin-Feitelson 2003 model (hpcgym.environment.lublin)",
              "Seed": str(seed), "MaxProcs": str(procs),
              "Params": ", ".join(f"{k}={v}" for k, v in asdict(params).items())}
    return Workload(
        name=name or f"lublin-{procs}p-{n}j-seed{seed}",
        procs=procs,
        job_id=np.arange(1, n + 1, dtype=np.int64),
        submit=submit,
        run=run,
        size=size,
        requested=run.copy(),
        user=np.full(n, -1, dtype=np.int64),
        header=header,
    )
