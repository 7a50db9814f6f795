"""Job sequences cut from a workload, reproducible from a seed (docs/semantics.md section 2); windows keep the original
submit times, so a reader finds the jobs in the source trace."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from numbers import Real

import numpy as np

from .config import check_int
from .errors import ConfigError, WorkloadError
from .workload import COLUMNS, Workload

__all__ = ["random_window", "sampled_jobset", "split", "window"]


def _check_seed(seed: object) -> int:
    """Seeds must be explicit non-negative ints, so that every sequence can be reproduced."""
    return check_int(seed, "seed", 0)


def split(workload: Workload, train: float) -> tuple[Workload, Workload]:
    """The first `train` fraction of the jobs and the rest: chronological, so a policy is evaluated on later jobs."""
    if isinstance(train, bool) or not isinstance(train, Real) or not math.isfinite(train) \
            or not 0.0 < float(train) < 1.0:
        raise ConfigError(f"train fraction must be a number strictly between 0 and 1, got {train!r}")
    n = len(workload)
    cut = int(math.floor(float(train) * n))
    if cut == 0 or cut == n:
        raise WorkloadError(f"workload {workload.name!r} has {n} jobs, too few to split at train={train}: one side "
                            "would be empty; use more jobs or another fraction")
    return (workload.take(slice(0, cut), name=f"{workload.name}-train"),
            workload.take(slice(cut, n), name=f"{workload.name}-test"))


def window(workload: Workload, n_jobs: int, start: int) -> Workload:
    """The contiguous jobs [start, start + n_jobs), with their original submit times."""
    n_jobs = check_int(n_jobs, "n_jobs", 1)
    start = check_int(start, "start", 0)
    if start + n_jobs > len(workload):
        raise ConfigError(f"window [{start}, {start + n_jobs}) runs past the end of workload {workload.name!r} "
                          f"({len(workload)} jobs); use a smaller start or n_jobs")
    return workload.take(slice(start, start + n_jobs), name=f"{workload.name}-w{start}-{start + n_jobs}")


def random_window(workload: Workload, n_jobs: int, seed: int,
                  accept: Callable[[Workload], bool] | None = None, draws: int = 1) -> Workload:
    """A contiguous window whose start is drawn uniformly (seeded); with `accept`, drawn again until it holds, at
    most `draws` times (RLScheduler's trajectory filtering)."""
    return window(workload, n_jobs, random_start(workload, n_jobs, seed, accept, draws))


def random_start(workload: Workload, n_jobs: int, seed: int,
                 accept: Callable[[Workload], bool] | None = None, draws: int = 1) -> int:
    """The start of `random_window`'s window."""
    n_jobs = check_int(n_jobs, "n_jobs", 1)
    rng = np.random.default_rng(_check_seed(seed))
    if n_jobs > len(workload):
        raise ConfigError(f"asked for {n_jobs} jobs but workload {workload.name!r} has only {len(workload)}; use "
                          "fewer jobs or a larger trace")
    for _ in range(draws if accept is not None else 1):
        start = int(rng.integers(0, len(workload) - n_jobs + 1))
        if accept is None or accept(window(workload, n_jobs, start)):
            return start
    raise WorkloadError(f"none of {draws} windows of {n_jobs} jobs drawn from {workload.name!r} with seed {seed} "
                        "passed the filter; widen its range or use another seed")


PREFILL_STREAM = 1  #: Tells the pre-fill's random stream apart from the window draw's of the same seed.


def prefilled(workload: Workload, n_jobs: int, start: int, seed: int) -> Workload:
    """The window of `n_jobs` jobs from `start`, on a cluster pre-filled as RLScheduler's code fills
    it (`gen_preworkloads`; docs/semantics.md section 2), seeded by `seed`."""
    cut = window(workload, n_jobs, start)
    rng = np.random.default_rng([_check_seed(seed), PREFILL_STREAM])
    count = n_jobs + int(rng.integers(0, n_jobs))
    free, rows = workload.procs, []
    for j in range(start - 1, max(start - 1 - count, -1), -1):
        size, request = int(workload.size[j]), int(workload.requested[j])
        if size > free:
            break
        free -= size
        rows.append((size, request, min(int(rng.integers(0, max(request, 1) + 1)), request)))
    return replace(cut, prefill=np.array(rows, dtype=np.int64).reshape(-1, 3))


def sampled_jobset(workload: Workload, n_jobs: int, seed: int) -> Workload:
    """DRAS-style "sampled" jobset: random jobs with Poisson arrivals at the source's rate, renumbered 1..n_jobs."""
    n_jobs = check_int(n_jobs, "n_jobs", 1)
    rng = np.random.default_rng(_check_seed(seed))
    n = len(workload)
    if n < 2:
        raise WorkloadError(f"workload {workload.name!r} has {n} job(s); at least 2 are needed to know its arrival "
                            "rate")
    mean_gap = float(workload.submit[-1] - workload.submit[0]) / (n - 1)
    pick = rng.choice(n, size=n_jobs, replace=n_jobs > n)
    gaps = rng.exponential(mean_gap, size=n_jobs - 1) if mean_gap > 0 else np.zeros(n_jobs - 1)
    # Rounding the cumulative times (not each gap) keeps the mean rate unbiased.
    submit = np.rint(np.concatenate(([0.0], np.cumsum(gaps)))).astype(np.int64)
    cols = {**{col: getattr(workload, col)[pick] for col in COLUMNS}, "submit": submit,
            "job_id": np.arange(1, n_jobs + 1, dtype=np.int64)}
    return Workload(name=f"{workload.name}-sampled-n{n_jobs}-seed{seed}", procs=workload.procs,
                    dropped=dict(workload.dropped), header=dict(workload.header), source_max_run=workload.max_run,
                    machine=workload.machine, **cols)
