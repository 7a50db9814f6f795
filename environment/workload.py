"""The cleaned job list a simulation replays: every job source gives parallel integer arrays sorted
by submit time, so cutting a window or drawing a sample is cheap and nothing re-parses text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Columns every workload carries, all int64, all of the same length (`queue`, `group`,
#: `executable`, `memory`, `partition`: -1 where unknown; `gpus`, `exclusive`: 0).
COLUMNS = ("job_id", "submit", "run", "size", "requested", "user", "queue", "group", "executable", "memory",
           "gpus", "exclusive", "partition")
#: The columns a workload may leave out, and what each job then has.
OPTIONAL_COLUMNS = {"queue": -1, "group": -1, "executable": -1, "memory": -1, "gpus": 0, "exclusive": 0,
                    "partition": -1}


@dataclass(frozen=True, eq=False)
class Workload:
    """Jobs ready for simulation; times in seconds, sizes in processors.

    `requested` is the user's walltime request after cleaning (never -1: it falls back to the run
    time). `dropped` counts the jobs left out while cleaning, by reason. `max_run` is the longest
    run time of the workload a sequence was cut from (its own, for a workload read or generated
    whole): encoders that normalise by a trace-wide constant (SchedInspector's) read it from the
    observation, so a window sees the same scale as the whole trace.
    """

    name: str
    procs: int
    job_id: np.ndarray
    submit: np.ndarray
    run: np.ndarray
    size: np.ndarray
    requested: np.ndarray
    user: np.ndarray
    queue: np.ndarray | None = None   # SWF field 15; None: -1 (unknown) for every job
    group: np.ndarray | None = None   # SWF field 13, the user's group; None: -1 for every job
    executable: np.ndarray | None = None  # SWF field 14, the application number; None: -1
    memory: np.ndarray | None = None  # SWF field 10, requested memory (kB per processor); None: -1
    gpus: np.ndarray | None = None    # GPUs requested in all (environment/machine.py); None: 0
    exclusive: np.ndarray | None = None  # 1: the job gets whole nodes; None: 0 (shared nodes)
    partition: np.ndarray | None = None  # SWF field 16, the partition the job ran in; None: -1
    dropped: dict[str, int] = field(default_factory=dict)
    header: dict[str, str] = field(default_factory=dict)
    source_max_run: int | None = None
    #: Jobs already running when the episode starts (RLScheduler's pre-filled cluster), one row
    #: each: size, run time (its request: it ends by its estimate), seconds already run. They hold
    #: processors but are not the episode's jobs (no metrics); None or no rows: an empty cluster.
    prefill: np.ndarray | None = None
    #: The nodes the jobs run on (an environment.machine.Machine, whose cores `procs` counts);
    #: None: `procs` interchangeable processors, the papers' pool.
    machine: Any = None

    def __post_init__(self) -> None:
        n = len(self.job_id)
        for optional, missing in OPTIONAL_COLUMNS.items():
            if getattr(self, optional) is None:
                object.__setattr__(self, optional, np.full(n, missing, dtype=np.int64))
        for col in COLUMNS:
            arr = np.ascontiguousarray(getattr(self, col), dtype=np.int64)
            if arr.shape != (n,):
                raise ValueError(f"workload column {col!r} has shape {arr.shape}, expected ({n},)")
            object.__setattr__(self, col, arr)
        if self.procs <= 0:
            raise ValueError(f"cluster size must be positive, got {self.procs}")
        if self.prefill is not None:
            rows = np.asarray(self.prefill, dtype=np.int64).reshape(-1, 3)
            if np.any(rows[:, 0] < 1) or np.any(rows[:, 1] < 1) or np.any(rows[:, 2] < 0) \
                    or np.any(rows[:, 2] > rows[:, 1]) or rows[:, 0].sum() > self.procs:
                raise ValueError("prefill rows are (size >= 1, run >= 1, 0 <= elapsed <= run) and fit the cluster")
            object.__setattr__(self, "prefill", rows)
        if n and np.any(np.diff(self.submit) < 0):
            raise ValueError("workload jobs must be sorted by submit time")

    def __len__(self) -> int:
        return len(self.job_id)

    @property
    def max_run(self) -> int:
        if self.source_max_run is not None:
            return self.source_max_run
        return int(self.run.max()) if len(self) else 0

    def take(self, index: np.ndarray | slice, name: str | None = None) -> Workload:
        """A sub-workload of the given rows (kept in submit order)."""
        cols = {col: getattr(self, col)[index] for col in COLUMNS}
        order = np.argsort(cols["submit"], kind="stable")
        cols = {col: arr[order] for col, arr in cols.items()}
        return Workload(name=name or self.name, procs=self.procs, dropped=dict(self.dropped),
                        header=dict(self.header), source_max_run=self.max_run, machine=self.machine, **cols)

    def with_columns(self, name: str | None = None, **columns: np.ndarray) -> Workload:
        """A copy with some columns replaced (e.g. re-drawn submit times)."""
        cols = {col: columns.get(col, getattr(self, col)) for col in COLUMNS}
        order = np.argsort(cols["submit"], kind="stable")
        cols = {col: np.asarray(arr)[order] for col, arr in cols.items()}
        return Workload(name=name or self.name, procs=self.procs, dropped=dict(self.dropped),
                        header=dict(self.header), source_max_run=self.source_max_run, machine=self.machine, **cols)


def describe_dropped(dropped: dict[str, int]) -> str:
    """`dropped` counts as one line, e.g. "5,671 (nonpositive_run 5,664, larger_than_cluster 7)"."""
    parts = [f"{reason} {count:,}" for reason, count in dropped.items() if count]
    return f"{sum(dropped.values()):,} ({', '.join(parts)})" if parts else "none"
