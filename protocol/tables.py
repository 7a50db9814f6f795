"""The protocol's data tables, held once: PROTOCOL.md prints them (tests/test_protocol_tables.py keeps the text equal),
the env sends from them and the conformance checker checks against them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

#: `Column.sent` values: in every message of its kind; only in episodes with a run-time predictor
#: (reset option `prediction`); added to the text of 1.0 later, so an env written to the earlier
#: text may leave it out (a checker does not require it); never in a message, only in per-job
#: files (it follows from other columns); only in episodes on a machine of nodes (workload key
#: `machine`, or a model that brings one).
ALWAYS, WITH_PREDICTOR, OPTIONAL, IN_FILES, ON_NODES = "always", "with a predictor", "optional", "in files", "on nodes"


@dataclass(frozen=True)
class Column:
    """One field of a map or one column of a columnar table, as PROTOCOL.md's tables give it."""

    name: str
    type: str          # int, float, str, table (a columnar map), map
    since: str         # the protocol version that added it
    sent: str          # ALWAYS, WITH_PREDICTOR or OPTIONAL
    meaning: str       # the text of PROTOCOL.md's table (markdown)

    @property
    def minor(self) -> int:
        return int(self.since.split(".")[1])


def _table(*rows: tuple[str, str, str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*row) for row in rows)


#: The observation map (section 6).
OBSERVATION = _table(
    ("time", "int", "1.0", ALWAYS, "simulation time"),
    ("procs", "int", "1.0", ALWAYS, "processors in the cluster"),
    ("free", "int", "1.0", ALWAYS, "processors free now"),
    ("queue_length", "int", "1.0", ALWAYS, "jobs waiting (the window may show fewer)"),
    ("max_run", "int", "1.1", ALWAYS,
     "the longest run time, s, in the workload the episode was cut from: the whole trace for a window of it, "
     "the episode's own jobs for a generated workload; constant within an episode, for features normalised by "
     "a trace-wide scale"),
    ("queue", "table", "1.0", ALWAYS,
     "the first `window` waiting jobs in queue order (the env's priority policy); its columns below"),
    ("running", "table", "1.0", ALWAYS, "running jobs by estimated end; its columns below"),
    ("context", "map", "1.0", ALWAYS, "the kind's extra facts, below"),
    ("machine", "table", "1.7", ON_NODES,
     "the machine's partitions, one entry each in the machine's order: capacities and what is free now; its "
     "columns below (`procs` and `free` count cores there)"),
)

#: The observation's `queue` table: one entry per job of the queue window.
QUEUE = _table(
    ("id", "int", "1.0", ALWAYS, "the job id"),
    ("submit", "int", "1.0", ALWAYS, "submit time, s"),
    ("size", "int", "1.0", ALWAYS, "processors requested"),
    ("requested", "int", "1.0", ALWAYS, "requested time, s (the user's estimate)"),
    ("estimate", "int", "1.0", ALWAYS, "the estimate reservations use, whole seconds"),
    ("wait", "int", "1.0", ALWAYS, "the decision's `time` minus `submit`, s"),
    ("rejections", "int", "1.0", ALWAYS, "how often its pick was rejected at an `inspect` decision"),
    ("user", "int", "1.0", ALWAYS, "user id, -1 if unknown"),
    ("group", "int", "1.5", ALWAYS, "group id (SWF field 13), -1 where the trace does not say"),
    ("executable", "int", "1.5", ALWAYS, "application number (SWF field 14), -1 where the trace does not say"),
    ("memory", "int", "1.5", ALWAYS,
     "requested memory, kB per processor (SWF field 10), -1 where the trace does not say"),
    ("prediction", "int", "1.4", WITH_PREDICTOR, "the job's pre-run prediction of its run time, s"),
    ("gpus", "int", "1.7", ALWAYS, "GPUs requested in all, 0 for a CPU job (docs/semantics.md section 13)"),
    ("exclusive", "int", "1.7", ALWAYS,
     "1 if the job gets whole nodes (it asks for them, or the machine gives only whole nodes), else 0"),
    ("partition", "int", "1.7", ALWAYS,
     "the SWF partition number it asks for (field 16): on nodes it runs only in the partition that lists it "
     "(`machine.swf`), if one does; -1 where the workload does not say"),
)

#: The observation's `machine` table: one entry per partition of the machine (1.7, on nodes).
MACHINE = _table(
    ("name", "str", "1.7", ON_NODES, "the partition's name"),
    ("nodes", "int", "1.7", ON_NODES, "its nodes, all alike"),
    ("cores", "int", "1.7", ON_NODES, "cores per node"),
    ("memory", "int", "1.7", ON_NODES, "memory per node, kB (0: not modelled, requests ignored)"),
    ("gpus", "int", "1.7", ON_NODES, "GPUs per node"),
    ("swf", "array", "1.7", ON_NODES,
     "the SWF partition numbers it serves (an array per partition; empty: none named)"),
    ("free_cores", "int", "1.7", ON_NODES, "cores free now, its nodes together"),
    ("free_memory", "int", "1.7", ON_NODES, "memory free now, kB, its nodes together"),
    ("free_gpus", "int", "1.7", ON_NODES, "GPUs free now, its nodes together"),
    ("idle_nodes", "int", "1.7", ON_NODES, "nodes with nothing running (a whole-node job can start there)"),
)

#: The observation's `running` table: one entry per running job.
RUNNING = _table(
    ("id", "int", "1.0", ALWAYS, "the job id"),
    ("start", "int", "1.0", ALWAYS, "start time, s"),
    ("size", "int", "1.0", ALWAYS, "processors"),
    ("requested", "int", "1.0", ALWAYS, "requested time, s"),
    ("estimated_end", "int", "1.0", ALWAYS, "`start` plus the job's estimate, s"),
    ("submit", "int", "1.4", WITH_PREDICTOR, "submit time, s"),
    ("prediction0", "int", "1.4", WITH_PREDICTOR, "the pre-run prediction of its run time, s"),
    ("prediction", "int", "1.4", WITH_PREDICTOR, "the current prediction of its run time, s"),
)

JOB_TABLES = {"queue": QUEUE, "running": RUNNING}  #: The job tables of an observation, by name.

#: `episode_end.metrics` (section 5): the episode's summary.
METRICS = _table(
    ("jobs", "int", "1.0", ALWAYS, "jobs in the episode"),
    ("mean_wait", "float", "1.0", ALWAYS, "mean wait (start minus submit), s"),
    ("max_wait", "int", "1.0", ALWAYS, "the longest wait, s"),
    ("mean_response", "float", "1.0", ALWAYS, "mean response time (end minus submit), s"),
    ("mean_slowdown", "float", "1.0", ALWAYS, "mean slowdown, response / run"),
    ("mean_bsld", "float", "1.0", ALWAYS, "mean bounded slowdown, max(response / max(run, 10), 1)"),
    ("max_bsld", "float", "1.0", ALWAYS, "the largest bounded slowdown"),
    ("utilization", "float", "1.0", ALWAYS,
     "processor-seconds used (runs and work lost to kills) over those available from the first submit to the "
     "last end"),
    ("makespan", "int", "1.0", ALWAYS, "the last end minus the first submit, s"),
    ("kills", "int", "1.0", ALWAYS, "kills, all jobs together"),
    ("lost_work", "int", "1.0", ALWAYS, "processor-seconds of work lost to kills"),
    ("walltime_killed", "int", "1.0", ALWAYS, "jobs ended at their requested time (`overrun: kill`)"),
    ("started_ready", "float", "1.0", OPTIONAL, "the share of the jobs whose `start_kind` is 0"),
    ("started_reserved", "float", "1.0", OPTIONAL, "the share of the jobs whose `start_kind` is 1"),
    ("started_backfilled", "float", "1.0", OPTIONAL, "the share of the jobs whose `start_kind` is 2"),
)

#: `episode_end.jobs` and `records.jobs` (section 5): per-job columns in workload (submit) order.
JOB_RECORDS = _table(
    ("job_id", "int", "1.0", ALWAYS, "the job id (`id` in observations: the same values)"),
    ("submit", "int", "1.0", ALWAYS, "submit time, s"),
    ("start", "int", "1.0", ALWAYS, "start time (of its last start), s"),
    ("end", "int", "1.0", ALWAYS, "end time, s"),
    ("wait", "int", "1.0", ALWAYS, "`start` minus `submit`, s"),
    ("run", "int", "1.0", ALWAYS, "run time, s"),
    ("size", "int", "1.0", ALWAYS, "processors"),
    ("requested", "int", "1.0", ALWAYS, "requested time, s"),
    ("response", "int", "1.0", ALWAYS, "`end` minus `submit`, s"),
    ("slowdown", "float", "1.0", ALWAYS, "`response` / `run`"),
    ("bsld", "float", "1.0", ALWAYS, "bounded slowdown, max(`response` / max(`run`, 10), 1)"),
    ("kills", "int", "1.0", ALWAYS, "how often it was killed and requeued"),
    ("rejections", "int", "1.0", ALWAYS, "how often its pick was rejected at an `inspect` decision"),
    ("lost_work", "int", "1.0", ALWAYS, "processor-seconds of its runs lost to kills"),
    ("walltime_killed", "int", "1.0", ALWAYS, "1 if it was ended at its requested time (`overrun: kill`), else 0"),
    ("start_kind", "int", "1.0", OPTIONAL, "how its last start came about: 0 ready, 1 reserved, 2 backfilled (below)"),
    ("allocated_resources", "str", "1.6", IN_FILES,
     "the processor ids of its last run as a Batsim interval set, e.g. `0-3 7 9-10` (below)"),
)

START_KIND_CODES = (0, 1, 2)  #: The `start_kind` codes.


def names(table: tuple[Column, ...], *, sent: str | None = None, since: str | None = None) -> tuple[str, ...]:
    """The names of a table's entries, in order; only those `sent` so and added in version `since` where given."""
    return tuple(c.name for c in table if (sent is None or c.sent == sent) and (since is None or c.since == since))


@cache
def columns_newer_than(minor: int) -> dict[str, tuple[str, ...]]:
    """Per job table, the columns an agent whose hello said 1.`minor` is not sent (added later:
    it never asked for them). Asked at every decision, so kept; do not change the answer."""
    return {table: newer for table, columns in JOB_TABLES.items()
            if (newer := tuple(c.name for c in columns if c.minor > minor))}
