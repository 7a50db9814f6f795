"""Per-job records and run metrics, computed once at the end of a run with numpy.

Bounded slowdown uses the interactive threshold of 10 s: max((wait + run) / max(run, 10), 1).
Utilization is used processor-seconds (completed runs plus work lost to kills) over the
processor-seconds available from the first submit to the last end.
`start_kind` says how each job's (last) start came about, as in DRAS (Fan et al., TPDS 2022,
section 3.2 and Table 4): a code into START_KINDS; docs/semantics.md section 11 has the rules.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..protocol.tables import JOB_RECORDS, names

BSLD_THRESHOLD = 10

#: Per-job columns, in the order written to CSV: the protocol's per-job records (PROTOCOL.md section 5).
JOB_COLUMNS = names(JOB_RECORDS)

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
    return {
        "jobs": n,
        "mean_wait": float(jobs["wait"].mean()),
        "max_wait": int(jobs["wait"].max()),
        "mean_response": float(jobs["response"].mean()),
        "mean_slowdown": float(jobs["slowdown"].mean()),
        "mean_bsld": float(jobs["bsld"].mean()),
        "max_bsld": float(jobs["bsld"].max()),
        "utilization": used / (procs * span) if span > 0 else 0.0,
        "makespan": span,
        "kills": int(jobs["kills"].sum()),
        "lost_work": int(jobs["lost_work"].sum()),
        "walltime_killed": int(jobs["walltime_killed"].sum()),
        **_start_shares(jobs),
    }


def _start_shares(jobs: dict[str, np.ndarray]) -> dict[str, float]:
    """started_ready, started_reserved, started_backfilled: shares of the jobs (they sum to 1,
    up to float rounding). Empty for columns without `start_kind` (CSV files written before it)."""
    kinds = jobs.get("start_kind")
    if kinds is None:
        return {}
    counts = np.bincount(np.asarray(kinds, dtype=np.int64), minlength=len(START_KINDS))
    return {f"started_{name}": int(counts[k]) / len(kinds) for k, name in enumerate(START_KINDS)}


@dataclass(frozen=True, eq=False)
class RunResult:
    """The outcome of one run: per-job columns and their summary."""

    procs: int
    jobs: dict[str, np.ndarray]
    summary: dict[str, Any]

    @classmethod
    def from_arrays(cls, procs: int, **columns: Any) -> RunResult:
        c = {name: np.asarray(value, dtype=np.int64) for name, value in columns.items()}
        if np.any(c["end"] < 0):
            raise RuntimeError("internal error: a job never finished; please report this workload")
        run = c["run"]
        wait = c["start"] - c["submit"]
        response = c["end"] - c["submit"]
        jobs = {
            "job_id": c["job_id"], "submit": c["submit"], "start": c["start"], "end": c["end"],
            "wait": wait, "run": run, "size": c["size"], "requested": c["requested"],
            "response": response,
            "slowdown": response / run,
            "bsld": np.maximum(response / np.maximum(run, BSLD_THRESHOLD), 1.0),
            "kills": c["kills"], "rejections": c["rejections"], "lost_work": c["lost_work"],
            "walltime_killed": c["walltime_killed"], "start_kind": c["start_kind"],
        }
        return cls(procs, jobs, summarize(jobs, procs))

    def write_jobs_csv(self, path: str | Path) -> None:
        """Write one row per job; floats in Python's round-trip repr, so they read back exactly."""
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(JOB_COLUMNS)
            cols = [self.jobs[name].tolist() for name in JOB_COLUMNS]
            writer.writerows(zip(*cols))

    def write_summary_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.summary, indent=2) + "\n")


def read_jobs_csv(path: str | Path) -> dict[str, np.ndarray]:
    """Read a per-job CSV written by `RunResult.write_jobs_csv` back into columns."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    columns = {}
    for k, name in enumerate(header):
        values = [row[k] for row in body]
        kind = float if name in ("slowdown", "bsld") else int
        columns[name] = np.array([kind(v) for v in values])
    return columns
