"""Synthetic jobsets that follow the job patterns of a target system (DRAS's third training
phase): hour-of-week arrival rates and resampled job rows (docs/semantics.md section 15)."""

from __future__ import annotations

import datetime as _dt
from contextlib import suppress
from dataclasses import dataclass

import numpy as np

from .config import check_int
from .errors import ConfigError
from .workload import Workload

__all__ = ["WorkloadModel", "fit_workload_model", "generate_from_model", "hour_of_week", "HOURS_PER_WEEK"]

HOUR = 3600
HOURS_PER_WEEK = 7 * 24
#: 1970-01-01 (Unix time 0) was a Thursday: hour 0 of the epoch is hour 72 of a Monday week.
_EPOCH_HOUR_OF_WEEK = 3 * 24


@dataclass(frozen=True, eq=False)
class WorkloadModel:
    """Job patterns fitted to one workload: `rates` and `exposure` (7 x 24, by day of week and hour), the
    source's (size, run, requested) `jobs`, the hour of the week generation starts at and the `clock` read."""

    rates: np.ndarray
    exposure: np.ndarray
    jobs: np.ndarray
    procs: int
    start_hour: int
    clock: str
    source: str

    def __post_init__(self) -> None:
        rates = np.array(self.rates, dtype=np.float64)
        exposure = np.array(self.exposure, dtype=np.int64)
        jobs = np.array(self.jobs, dtype=np.int64)
        if rates.shape != (7, 24) or exposure.shape != (7, 24):
            raise ConfigError(f"workload model rates and exposure must have shape (7, 24), got {rates.shape} and "
                              f"{exposure.shape}")
        if jobs.ndim != 2 or jobs.shape[1] != 3:
            raise ConfigError(f"workload model jobs must have shape (n, 3) for (size, run, requested), got "
                              f"{jobs.shape}")
        for name, arr in (("rates", rates), ("exposure", exposure), ("jobs", jobs)):
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    @property
    def weekly_rate(self) -> float:
        """Expected submits per week."""
        return float(self.rates.sum())


def _time_zone(header: dict[str, str]) -> _dt.tzinfo:
    """The trace's local zone: TimeZoneString, else the fixed TimeZone offset, else UTC."""
    name = header.get("TimeZoneString", "").strip()
    if name:
        with suppress(Exception):  # unknown zone or no tz database: fall through to the offset
            from zoneinfo import ZoneInfo
            return ZoneInfo(name)
    offset = header.get("TimeZone", "").strip()
    try:
        return _dt.timezone(_dt.timedelta(seconds=int(offset)))
    except (ValueError, OverflowError):
        return _dt.timezone.utc


def _unix_start(header: dict[str, str]) -> int | None:
    try:
        return int(header.get("UnixStartTime", "").strip())
    except ValueError:
        return None


def hour_of_week(workload: Workload) -> tuple[np.ndarray, np.ndarray, str]:
    """Per job: (hour index on the clock read, hour of the week 0..167, clock kind)."""
    start = _unix_start(workload.header)
    if start is None:
        hours = workload.submit // HOUR
        return hours, hours % HOURS_PER_WEEK, "relative"
    utc_hours = (start + workload.submit) // HOUR
    zone = _time_zone(workload.header)
    # The UTC offset is a whole number of minutes; look it up once per distinct UTC hour.
    uniq, inverse = np.unique(utc_hours, return_inverse=True)
    offsets = np.array([_dt.datetime.fromtimestamp(int(h) * HOUR, tz=zone).utcoffset().total_seconds() for h in uniq],
                       dtype=np.int64)
    local_seconds = start + workload.submit + offsets[inverse]
    hours = local_seconds // HOUR
    return hours, (hours + _EPOCH_HOUR_OF_WEEK) % HOURS_PER_WEEK, "local"


def fit_workload_model(workload: Workload) -> WorkloadModel:
    """Fit hourly-of-week arrival rates and the empirical job rows of `workload`."""
    if not isinstance(workload, Workload):
        raise ConfigError(f"fit_workload_model needs a Workload, got {type(workload).__name__}")
    if len(workload) == 0:
        raise ConfigError(f"workload {workload.name!r} has no jobs; cannot fit a workload model to it")
    hours, how, clock = hour_of_week(workload)
    counts = np.bincount(how, minlength=HOURS_PER_WEEK).astype(np.float64)
    # Whole clock hours covered, first to last submit's hour inclusive, binned by hour of week.
    first, last = int(hours.min()), int(hours.max())
    span = last - first + 1
    first_how = int(how[np.argmin(hours)])
    full_weeks, rest = divmod(span, HOURS_PER_WEEK)
    exposure = np.full(HOURS_PER_WEEK, full_weeks, dtype=np.int64)
    exposure[(first_how + np.arange(rest)) % HOURS_PER_WEEK] += 1
    mean_rate = len(workload) / span
    rates = np.where(exposure > 0, counts / np.maximum(exposure, 1), mean_rate)
    jobs = np.stack([workload.size, workload.run, workload.requested], axis=1)
    return WorkloadModel(rates=rates.reshape(7, 24), exposure=exposure.reshape(7, 24), jobs=jobs,
                         procs=int(workload.procs), start_hour=first_how, clock=clock, source=workload.name)


def generate_from_model(model: WorkloadModel, n_jobs: int, seed: int) -> Workload:
    """`n_jobs` jobs with Poisson arrivals at the fitted hourly rates and resampled job rows, the same per `seed`."""
    if not isinstance(model, WorkloadModel):
        raise ConfigError(f"generate_from_model needs a WorkloadModel, got {type(model).__name__}")
    n_jobs = check_int(n_jobs, "n_jobs", 1)
    seed = check_int(seed, "seed", 0)
    rates = model.rates.reshape(-1)
    if not np.all(np.isfinite(rates)) or np.any(rates < 0):
        raise ConfigError("workload model rates must be finite and non-negative")
    weekly = float(rates.sum())
    if not weekly > 0:
        raise ConfigError(f"workload model of {model.source!r} has a total arrival rate of zero; no job could ever "
                          "arrive")
    if len(model.jobs) == 0:
        raise ConfigError(f"workload model of {model.source!r} has no job rows to resample")
    start = int(model.start_hour) % HOURS_PER_WEEK
    rng = np.random.default_rng(seed)
    # Unit-rate Poisson arrivals, mapped through the inverse of the cumulative intensity.
    cum_unit = np.cumsum(rng.exponential(1.0, size=n_jobs))
    week_rates = np.roll(rates, -start)              # hour k after the start
    cum = np.concatenate([[0.0], np.cumsum(week_rates)])
    weeks = np.floor(cum_unit / weekly)
    resid = cum_unit - weeks * weekly
    k = np.clip(np.searchsorted(cum, resid, side="right") - 1, 0, HOURS_PER_WEEK - 1)
    r = week_rates[k]
    frac = np.where(r > 0, (resid - cum[k]) / np.where(r > 0, r, 1.0), 1.0)
    frac = np.clip(frac, 0.0, 1.0)
    offset = (weeks * HOURS_PER_WEEK + k + frac) * HOUR
    submit = start * HOUR + np.floor(offset).astype(np.int64)
    submit = np.maximum.accumulate(submit)           # guard against float ties at bin edges
    rows = model.jobs[rng.integers(0, len(model.jobs), size=n_jobs)]
    return Workload(name=f"{model.source}-fitted-n{n_jobs}-seed{seed}", procs=int(model.procs),
                    job_id=np.arange(1, n_jobs + 1, dtype=np.int64), submit=submit, run=rows[:, 1], size=rows[:, 0],
                    requested=rows[:, 2], user=np.full(n_jobs, -1, dtype=np.int64))
