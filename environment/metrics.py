"""Per-job records and run metrics, computed once at the end of a run with numpy (docs/semantics.md
sections 10 and 11: bounded slowdown, utilization, how each job started)."""

from __future__ import annotations

import bisect
import csv
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from ..protocol.tables import IN_FILES, JOB_RECORDS, names

BSLD_THRESHOLD = 10

#: Per-job columns, in the order written to CSV: the protocol's per-job records (PROTOCOL.md section 5).
FILE_COLUMNS = names(JOB_RECORDS)
#: Those a run's result holds (and an episode's end sends); the others are computed from them.
JOB_COLUMNS = tuple(c.name for c in JOB_RECORDS if c.sent != IN_FILES)

#: Names of the `start_kind` codes 0, 1, 2: started at once because it fit when selected; selected
#: when it did not fit, held the reservation and started later; started ahead of a waiting job.
START_KINDS = ("ready", "reserved", "backfilled")


def summarize(jobs: dict[str, np.ndarray], procs: int) -> dict[str, Any]:
    """Run metrics from per-job columns (also used to re-check a written CSV)."""
    n = len(jobs["job_id"])
    if n == 0:
        return {"jobs": 0}
    span = int(jobs["end"].max() - jobs["submit"].min())
    used = float((jobs["run"] * jobs["size"]).sum() + jobs["lost_work"].sum())
    return {"jobs": n, "mean_wait": float(jobs["wait"].mean()), "max_wait": int(jobs["wait"].max()),
            "mean_response": float(jobs["response"].mean()), "mean_slowdown": float(jobs["slowdown"].mean()),
            "mean_bsld": float(jobs["bsld"].mean()), "max_bsld": float(jobs["bsld"].max()),
            "utilization": used / (procs * span) if span > 0 else 0.0, "makespan": span,
            **{key: int(jobs[key].sum()) for key in ("kills", "lost_work", "walltime_killed")}, **_start_shares(jobs)}


def _start_shares(jobs: dict[str, np.ndarray]) -> dict[str, float]:
    """started_ready, started_reserved, started_backfilled: shares of the jobs (none for CSV files before them)."""
    kinds = jobs.get("start_kind")
    if kinds is None:
        return {}
    counts = np.bincount(np.asarray(kinds, dtype=np.int64), minlength=len(START_KINDS))
    return {f"started_{name}": int(counts[k]) / len(kinds) for k, name in enumerate(START_KINDS)}


def allocate_processors(start: np.ndarray, end: np.ndarray, size: np.ndarray, procs: int) -> list[str]:
    """Each job's processor ids as a Batsim interval set ("0-3 7 9-10"; "" if it never ran), so that a schedule,
    which counts processors only, draws as a Gantt chart (docs/semantics.md section 10)."""
    start, end, size = (np.asarray(a, dtype=np.int64) for a in (start, end, size))
    ran = np.flatnonzero(start >= 0)
    instant = end[ran] == start[ran]
    # events: (time, rank, job); rank 0 an end, 1 a zero-length run, 2 a start
    times = np.concatenate([end[ran][~instant], start[ran]])
    ranks = np.concatenate([np.zeros((~instant).sum(), np.int64), np.where(instant, 1, 2)])
    jobs = np.concatenate([ran[~instant], ran])
    order = np.lexsort((jobs, ranks, times))
    free = [(0, procs - 1)] if procs > 0 else []   # disjoint, sorted, inclusive, never adjacent
    held: dict[int, list[tuple[int, int]]] = {}
    sizes, out = size.tolist(), [""] * len(start)
    for t, rank, j in zip(times[order].tolist(), ranks[order].tolist(), jobs[order].tolist()):
        if rank == 0:
            _release(free, held.pop(j))
            continue
        got = _take(free, sizes[j])
        if got is None:
            raise ValueError(f"the job of record {j} starts at {t} on {sizes[j]} processors, more than "
                             f"are free of {procs}: the schedule overfills the machine")
        out[j] = " ".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in got)
        if rank == 1:
            _release(free, got)
        else:
            held[j] = got
    return out


def _take(free: list[tuple[int, int]], n: int) -> list[tuple[int, int]] | None:
    """The lowest `n` ids of `free`, taken out of it; None (and `free` unchanged) if too few."""
    got, k = [], 0
    while n > 0:
        if k == len(free):
            return None
        lo, hi = free[k]
        if hi - lo + 1 > n:
            got.append((lo, lo + n - 1))
            break
        got.append((lo, hi))
        n -= hi - lo + 1
        k += 1
    if n > 0:
        free[k] = (lo + n, hi)
    del free[:k]
    return got


def _release(free: list[tuple[int, int]], intervals: list[tuple[int, int]]) -> None:
    """Put `intervals` back into `free`, merging neighbours."""
    for lo, hi in intervals:
        k = bisect.bisect_left(free, (lo, hi))
        if k > 0 and free[k - 1][1] == lo - 1:
            k -= 1
            lo = free[k][0]
            del free[k]
        if k < len(free) and free[k][0] == hi + 1:
            hi = free[k][1]
            del free[k]
        free.insert(k, (lo, hi))


def intervals(allocation: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batsim interval sets ("0-3 7") as flat arrays: record index, lowest id, highest id."""
    rows, low, high = [], [], []
    for j, text in enumerate(allocation):
        for part in text.split():
            lo, _, hi = part.partition("-")
            rows.append(j)
            low.append(int(lo))
            high.append(int(hi or lo))
    return np.asarray(rows, dtype=np.int64), np.asarray(low, dtype=np.int64), np.asarray(high, dtype=np.int64)


class ReservationBreak(NamedTuple):
    """A backfill that moved the reserved job's shadow time later (only one past EASY's guard does)."""

    time: int        # when the job was backfilled
    reserved: int    # the delayed reserved job's id
    backfilled: int  # the backfilled job's id
    shadow: int      # the reserved job's shadow time before the backfill
    delay: int       # how much later its shadow time became, in seconds


@dataclass(frozen=True, eq=False)
class RunResult:
    """The outcome of one run: per-job columns, their summary, and the reservations broken."""

    procs: int
    jobs: dict[str, np.ndarray]
    summary: dict[str, Any]
    reservation_breaks: tuple[ReservationBreak, ...] = ()

    @classmethod
    def from_arrays(cls, procs: int, reservation_breaks: tuple[ReservationBreak, ...] = (),
                    **columns: Any) -> RunResult:
        c = {name: np.asarray(value, dtype=np.int64) for name, value in columns.items()}
        if np.any(c["end"] < 0):
            raise RuntimeError("internal error: a job never finished; please report this workload")
        run, response = c["run"], c["end"] - c["submit"]
        jobs = {"job_id": c["job_id"], "submit": c["submit"], "start": c["start"], "end": c["end"],
                "wait": c["start"] - c["submit"], "run": run, "size": c["size"], "requested": c["requested"],
                "response": response, "slowdown": response / run,
                "bsld": np.maximum(response / np.maximum(run, BSLD_THRESHOLD), 1.0),
                **{key: c[key] for key in ("kills", "rejections", "lost_work", "walltime_killed", "start_kind")}}
        return cls(procs, jobs, summarize(jobs, procs), tuple(reservation_breaks))

    def write_jobs_csv(self, path: str | Path) -> None:
        """Write one row per job (`write_jobs`)."""
        with open(path, "w", newline="") as f:
            write_jobs(f, {name: column.tolist() for name, column in self.jobs.items()}, self.procs)


def write_jobs(f: IO[str], jobs: dict[str, list], procs: int) -> None:
    """The per-job CSV of `hpcgym run --jobs-out` and `compare` (FILE_COLUMNS, with each job's processors);
    floats in Python's round-trip repr, so they read back exactly."""
    allocation = allocate_processors(np.asarray(jobs["start"]), np.asarray(jobs["end"]), np.asarray(jobs["size"]),
                                     procs)
    writer = csv.writer(f)
    writer.writerow(FILE_COLUMNS)
    columns = {**jobs, "allocated_resources": allocation}
    writer.writerows(zip(*[columns[name] for name in FILE_COLUMNS]))


def read_jobs_csv(path: str | Path) -> dict[str, np.ndarray]:
    """Read a per-job CSV written by `write_jobs` back into columns."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    columns = {}
    for k, name in enumerate(rows[0]):
        kind = {"slowdown": float, "bsld": float, "allocated_resources": str}.get(name, int)
        columns[name] = np.array([kind(row[k]) for row in rows[1:]], dtype=object if kind is str else None)
    return columns
