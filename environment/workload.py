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
    """Jobs ready for simulation; times in seconds, sizes in processors. `max_run` is that of the workload a sequence
    was cut from, so an encoder normalising by it sees a window at the whole trace's scale."""

    name: str
    procs: int
    job_id: np.ndarray
    submit: np.ndarray
    run: np.ndarray
    size: np.ndarray
    requested: np.ndarray  # falls back to the run time
    user: np.ndarray
    queue: np.ndarray | None = None   # SWF field 15; None: -1 (unknown) for every job
    group: np.ndarray | None = None   # SWF field 13, the user's group; None: -1 for every job
    executable: np.ndarray | None = None  # SWF field 14, the application number; None: -1
    memory: np.ndarray | None = None  # SWF field 10, requested memory (kB per processor); None: -1
    gpus: np.ndarray | None = None    # GPUs requested in all (environment/machine.py); None: 0
    exclusive: np.ndarray | None = None  # 1: the job gets whole nodes; None: 0 (shared nodes)
    partition: np.ndarray | None = None  # SWF field 16, the partition the job ran in; None: -1
    dropped: dict[str, int] = field(default_factory=dict)  # the jobs cleaning left out, by reason
    header: dict[str, str] = field(default_factory=dict)
    source_max_run: int | None = None
    #: Jobs already running when the episode starts (RLScheduler's pre-filled cluster), rows of size, run time
    #: (its request) and seconds already run; not the episode's jobs (no metrics). None: an empty cluster.
    prefill: np.ndarray | None = None
    #: The nodes the jobs run on (an environment.machine.Machine; None: `procs` interchangeable processors).
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
        return self._sorted({col: getattr(self, col)[index] for col in COLUMNS}, name, self.max_run)

    def with_columns(self, name: str | None = None, **columns: np.ndarray) -> Workload:
        """A copy with some columns replaced (e.g. re-drawn submit times)."""
        return self._sorted({col: columns.get(col, getattr(self, col)) for col in COLUMNS}, name, self.source_max_run)

    def _sorted(self, cols: dict[str, Any], name: str | None, source_max_run: int | None) -> Workload:
        order = np.argsort(cols["submit"], kind="stable")
        return Workload(name=name or self.name, procs=self.procs, dropped=dict(self.dropped), header=dict(self.header),
                        source_max_run=source_max_run, machine=self.machine,
                        **{col: np.asarray(arr)[order] for col, arr in cols.items()})


def describe_dropped(dropped: dict[str, int]) -> str:
    """`dropped` counts as one line, e.g. "5,671 (nonpositive_run 5,664, larger_than_cluster 7)"."""
    parts = [f"{reason} {count:,}" for reason, count in dropped.items() if count]
    return f"{sum(dropped.values()):,} ({', '.join(parts)})" if parts else "none"
