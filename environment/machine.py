"""Machines as they are: partitions of identical nodes with cores, memory and GPUs.

The processor pool the papers use (a count of interchangeable processors) is the special case of
one partition of one-core nodes; the simulator keeps its plain counter for it and only builds a
`NodeState` when a workload carries a `Machine`. A job's request is placed as identical *units*
(docs/semantics.md section 13): without GPUs one unit per core, with its memory per core; with G
GPUs, G units of size / G cores, one GPU and their memory each. A whole-node (exclusive) job
holds every resource of the nodes its units need. A job never spans partitions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

from .errors import ConfigError
from .workload import Workload

#: How nodes are chosen for a job: the lowest-numbered nodes with room first, or the nodes with
#: the least room for it first (which keeps roomy nodes whole for larger jobs). Partitions: the
#: first that fits in the machine's order, or the one left with the fewest free cores.
PLACEMENTS = ("first_fit", "best_fit")
#: The resources of a node, in the order of every (.., 3) array here.
RESOURCES = ("cores", "memory", "gpus")
KB_PER_GB = 1024 * 1024
#: A job's columns that say what it asks of nodes, in `unit_options`'s order (the workload's, the queue's).
REQUESTS = ("size", "gpus", "memory", "exclusive", "partition")


@dataclass(frozen=True)
class Partition:
    """`nodes` identical nodes of `cores` cores, `memory` KB (0: memory is not modelled, requests
    are ignored) and `gpus` GPUs. `swf` lists the SWF partition numbers (field 16) it serves."""

    name: str
    nodes: int
    cores: int
    memory: int = 0
    gpus: int = 0
    swf: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for what, least in (("nodes", 1), ("cores", 1), ("memory", 0), ("gpus", 0)):
            value = getattr(self, what)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"partition {self.name!r}: {what} must be an integer >= {least}, got {value!r}")


@dataclass(frozen=True)
class Machine:
    """Partitions, how jobs are placed on their nodes, and whether every job gets whole nodes."""

    partitions: tuple[Partition, ...]
    placement: str = "first_fit"
    exclusive: bool = False
    name: str = "machine"
    _totals: tuple[int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.partitions:
            raise ConfigError("a machine needs at least one partition")
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"unknown placement {self.placement!r}: use one of {', '.join(PLACEMENTS)}")
        totals = tuple(sum(p.nodes * getattr(p, r) for p in self.partitions) for r in RESOURCES)
        object.__setattr__(self, "_totals", totals)

    @property
    def cores(self) -> int:
        return self._totals[0]

    @property
    def capacity(self) -> dict[str, int]:
        """The machine's cores, memory (KB) and GPUs in all."""
        return dict(zip(RESOURCES, self._totals))

    def describe(self) -> str:
        """One line, e.g. "1,002 nodes x 4 cores, whole nodes, first_fit"."""
        parts = []
        for p in self.partitions:
            extra = "".join((f", {p.memory / KB_PER_GB:g} GB" if p.memory else "", f", {p.gpus} GPUs" if p.gpus else ""))
            parts.append(f"{p.nodes:,} nodes x {p.cores} cores{extra}")
        return f"{' + '.join(parts)}, {'whole nodes' if self.exclusive else 'shared nodes'}, {self.placement}"


def _leading_ints(value: str | None) -> list[int]:
    """The integers of a header value ("184  ( 6,  171,   7)" -> [184, 6, 171, 7])."""
    return [int(t) for t in "".join(c if c.isdigit() else " " for c in value or "").split()]


def machine_from_header(header: dict[str, str], *, exclusive: bool = True, placement: str = "first_fit") -> Machine:
    """The machine an SWF header states: MaxNodes nodes of MaxProcs / MaxNodes cores each, one
    partition per group where both list their groups ("MaxNodes: 184 (6, 171, 7)")."""
    nodes, procs = _leading_ints(header.get("MaxNodes")), _leading_ints(header.get("MaxProcs"))
    if not nodes or not procs:
        raise ConfigError("the trace's header gives no MaxNodes and MaxProcs, so its nodes are unknown: "
                          "give a machine spec file (--machine FILE.json)")
    groups = list(zip(nodes[1:], procs[1:])) if len(nodes) > 2 and len(nodes) == len(procs) else [(nodes[0], procs[0])]
    partitions = []
    for k, (n, p) in enumerate(groups):
        if n < 1 or p % n:
            raise ConfigError(f"the header's MaxProcs {p} is not a whole number of cores per node over MaxNodes {n}: "
                              "give a machine spec file (--machine FILE.json)")
        partitions.append(Partition(f"p{k + 1}" if len(groups) > 1 else "nodes", n, p // n))
    return Machine(tuple(partitions), placement, exclusive, "nodes")


def load_machine(path: str | Path) -> Machine:
    """A machine spec file, JSON or TOML (by its suffix): `partitions` (each `name`, `nodes`,
    `cores`, optional `memory_gb`, `gpus`, `swf_partitions`), optional `placement`, `exclusive`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        spec = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the machine spec ({exc.strerror or exc})") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not a valid machine spec ({exc})") from None
    return machine_from_dict(spec, path.stem)


def machine_from_dict(spec: dict[str, Any], name: str = "machine") -> Machine:
    """A machine from its spec's data (see `load_machine`)."""
    known = {"partitions", "placement", "exclusive", "name"}
    if not isinstance(spec, dict) or set(spec) - known or not isinstance(spec.get("partitions"), list):
        raise ConfigError(f"a machine spec is a table with 'partitions' (a list) and optionally {sorted(known - {'partitions'})}")
    partitions = []
    for k, p in enumerate(spec["partitions"]):
        keys = {"name", "nodes", "cores", "memory_gb", "gpus", "swf_partitions"}
        if not isinstance(p, dict) or set(p) - keys:
            raise ConfigError(f"partition {k + 1}: use only the keys {sorted(keys)}")
        memory = p.get("memory_gb", 0)
        if isinstance(memory, bool) or not isinstance(memory, (int, float)) or memory < 0:
            raise ConfigError(f"partition {k + 1}: memory_gb must be a non-negative number, got {memory!r}")
        partitions.append(Partition(str(p.get("name", f"p{k + 1}")), p.get("nodes"), p.get("cores"),
                                    round(memory * KB_PER_GB), p.get("gpus", 0), tuple(p.get("swf_partitions", ()))))
    exclusive = spec.get("exclusive", False)
    if not isinstance(exclusive, bool):
        raise ConfigError(f"exclusive must be true or false, got {exclusive!r}")
    return Machine(tuple(partitions), spec.get("placement", "first_fit"), exclusive, str(spec.get("name", name)))


def machine_to_dict(machine: Machine) -> dict[str, Any]:
    """The spec `machine_from_dict` reads back as the same machine (a sequence file carries it)."""
    parts = [{"name": p.name, "nodes": p.nodes, "cores": p.cores, "memory_gb": p.memory / KB_PER_GB, "gpus": p.gpus,
              "swf_partitions": list(p.swf)} for p in machine.partitions]
    return {"partitions": parts, "placement": machine.placement, "exclusive": machine.exclusive, "name": machine.name}


def machine_from_table(table: dict[str, list[Any]]) -> Machine:
    """The machine an observation's `machine` table describes (its jobs' `exclusive` says which
    get whole nodes), so an agent can place requests as the env does."""
    return Machine(tuple(Partition(*row[:5], tuple(row[5])) for row in zip(
        *(table[k] for k in ("name", "nodes", "cores", "memory", "gpus", "swf")))))


def parse_machine(text: str, header: dict[str, str] | None = None) -> Machine:
    """`nodes` (the header's nodes, whole-node allocation), `nodes:shared` (the same nodes shared
    by jobs), either with `,best_fit`; or a machine spec file."""
    head, _, placement = text.partition(",")
    if head in ("nodes", "nodes:shared"):
        return machine_from_header(header or {}, exclusive=head == "nodes", placement=placement or "first_fit")
    machine = load_machine(head)
    return replace(machine, placement=placement) if placement else machine


# ----------------------------------------------------------------- jobs on a machine
def job_units(workload: Workload, machine: Machine) -> list[list[tuple[int, int, int, int, int]]]:
    """Per job, per partition it may run on: (partition, units, cores, memory, GPUs per unit); a
    whole-node job's units are nodes and hold all of each. A job that no partition can hold has an
    empty list."""
    return unit_options(machine, *(getattr(workload, c) for c in REQUESTS))


def unit_options(machine: Machine, size: np.ndarray, gpus: np.ndarray, memory: np.ndarray, exclusive: np.ndarray,
                 part: np.ndarray) -> list[list[tuple[int, int, int, int, int]]]:
    """`job_units` of jobs given by their columns (an agent has them from the observation)."""
    size, gpus, part = (np.asarray(c, dtype=np.int64) for c in (size, gpus, part))
    memory = np.maximum(np.asarray(memory, dtype=np.int64), 0)
    claimed = {s for p in machine.partitions for s in p.swf}
    gpu = gpus > 0
    units = np.where(gpu, gpus, size)
    cores = np.where(gpu, size // np.maximum(gpus, 1), 1)
    per_unit_gpus = gpu.astype(np.int64)
    whole = np.asarray(exclusive).astype(bool) | machine.exclusive
    options: list[list[tuple[int, int, int, int, int]]] = [[] for _ in range(len(size))]
    for p, spec in enumerate(machine.partitions):
        mem = cores * memory if spec.memory else np.zeros_like(cores)
        on_empty = spec.cores // cores
        if spec.memory:
            on_empty = np.minimum(on_empty, np.where(mem > 0, spec.memory // np.maximum(mem, 1), on_empty))
        on_empty = np.where(per_unit_gpus > 0, np.minimum(on_empty, spec.gpus), on_empty)
        nodes_needed = -(-units // np.maximum(on_empty, 1))
        fits = (on_empty > 0) & (np.where(whole, nodes_needed, units) <= np.where(whole, spec.nodes, spec.nodes * on_empty))
        fits &= (part < 0) | ~np.isin(part, list(claimed)) | np.isin(part, list(spec.swf))
        node = (spec.cores, spec.memory, spec.gpus)
        for i in np.flatnonzero(fits).tolist():
            if whole[i]:
                options[i].append((p, int(nodes_needed[i]), *node))
            else:
                options[i].append((p, int(units[i]), int(cores[i]), int(mem[i]), int(per_unit_gpus[i])))
    return options


def one_resource(machine: Machine, size: np.ndarray, gpus: np.ndarray, memory: np.ndarray, exclusive: np.ndarray,
                 part: np.ndarray) -> tuple[np.ndarray, str] | None:
    """Each job's size in the one resource by which a set of jobs fits exactly when its sum does,
    and which ("nodes": one partition whose jobs all get whole nodes; "cores": one partition of
    nodes without memory or GPUs, where no job gets whole nodes); None elsewhere: there jobs
    compete for several resources or partitions (the knapsack agent and Batsim's hosts need one)."""
    whole = np.asarray(exclusive).astype(bool) | machine.exclusive
    if len(machine.partitions) != 1:
        return None
    if whole.all():
        options = unit_options(machine, size, gpus, memory, exclusive, part)
        return np.array([o[0][1] if o else 0 for o in options], dtype=np.int64), "nodes"
    p = machine.partitions[0]
    return (np.asarray(size, dtype=np.int64), "cores") if not whole.any() and not p.memory and not p.gpus else None


def on_machine(workload: Workload, machine: Machine) -> Workload:
    """The workload placed on `machine`: its cluster size is the machine's cores, and the jobs that
    no partition can hold are left out, counted as dropped (`no_partition_fits`)."""
    uneven = (workload.gpus > 0) & (workload.size % np.maximum(workload.gpus, 1) != 0)
    if uneven.any():
        i = int(np.flatnonzero(uneven)[0])
        raise ConfigError(f"job {workload.job_id[i]} asks for {workload.gpus[i]} GPUs and {workload.size[i]} cores: "
                          "a GPU job's cores must be a multiple of its GPUs (docs/semantics.md section 13)")
    fits = np.array([bool(o) for o in job_units(workload, machine)], dtype=bool)
    dropped = {**workload.dropped, "no_partition_fits": int((~fits).sum())}
    kept = workload.take(np.flatnonzero(fits)) if not fits.all() else workload
    return replace(kept, procs=machine.cores, machine=machine, dropped=dropped)


# ----------------------------------------------------------------- the nodes during a run
def _units_per_node(free: np.ndarray, cores: int, memory: int, gpus: int) -> np.ndarray:
    """How many units of this shape each node's free resources hold."""
    caps = free[:, 0] // cores
    if memory:
        caps = np.minimum(caps, free[:, 1] // memory)
    if gpus:
        caps = np.minimum(caps, free[:, 2] // gpus)
    return caps


@dataclass(frozen=True)
class Allocation:
    """Where a job runs: its partition, nodes, the resources it holds on each (k, 3) and in all."""

    partition: int
    nodes: np.ndarray
    used: np.ndarray
    total: tuple[int, int, int]


@dataclass
class Reservation:
    """EASY's reservation of the head on nodes: when, in which partition, what each node of it
    has left over then (`extra`, (nodes, 3); backfilled jobs that end later use it up), and which
    nodes the head will hold."""

    shadow: int
    partition: int
    extra: np.ndarray
    held: np.ndarray


class NodeState:
    """The free resources of every node while a simulation runs, and each running job's place."""

    def __init__(self, workload: Workload) -> None:
        machine = workload.machine
        self.machine = machine
        self.best_fit = machine.placement == "best_fit"
        self.capacity = [np.array([p.cores, p.memory, p.gpus], dtype=np.int64) for p in machine.partitions]
        self.options = job_units(workload, machine)
        self.reset()

    def reset(self) -> None:
        self.free = [np.tile(cap, (p.nodes, 1)) for cap, p in zip(self.capacity, self.machine.partitions)]
        self.totals = [(cap * p.nodes).tolist() for cap, p in zip(self.capacity, self.machine.partitions)]
        self.running: dict[int, Allocation] = {}
        self.placed: dict[int, Allocation] = {}  # every started job's latest place: the Gantt chart
        self.busy = [0, 0, 0]  # resource-seconds held by runs that ended

    def cores_of(self, i: int) -> int:
        """The cores running job i holds (a whole node's, for a whole-node job)."""
        return self.running[i].total[0]

    def find(self, i: int, reservation: Reservation | None = None, late: bool = False) -> Allocation | None:
        """Where job i fits now under the placement rule, or None. Beside a `reservation`, a job
        that ends after its shadow time (`late`) may use, in the reserved partition, only what
        the reservation leaves over on each node; one that ends by it goes first to the reserved
        nodes, which are idle until then anyway, keeping the leftover room for later jobs."""
        if reservation is None:
            return self._find(i, self.free, self.totals)
        p = reservation.partition
        if late:
            return self._find(i, self.free, self.totals, limit={p: reservation.extra})
        return self._find(i, self.free, self.totals, rank={p: ~reservation.held})

    def _find(self, i: int, free: list[np.ndarray], totals: list[list[int]], limit: dict[int, np.ndarray] | None = None,
              rank: dict[int, np.ndarray] | None = None) -> Allocation | None:
        """`find` on given free resources: per partition, at most `limit`'s room on each node, and
        nodes of lower `rank` first."""
        best, best_left = None, None
        for p, units, cores, memory, gpus in self.options[i]:
            total = totals[p]
            if total[0] < units * cores or total[1] < units * memory or total[2] < units * gpus:
                continue
            room = free[p] if limit is None or p not in limit else np.minimum(free[p], limit[p])
            caps = _units_per_node(room, cores, memory, gpus)
            if int(caps.sum()) < units:
                continue
            order = None if rank is None else rank.get(p)
            if not self.best_fit:
                return self._pick(p, caps, units, (cores, memory, gpus), order)
            left = total[0] - units * cores
            if best_left is None or left < best_left:
                best, best_left = (p, caps, units, (cores, memory, gpus), order), left
        return None if best is None else self._pick(*best)

    def _pick(self, p: int, caps: np.ndarray, units: int, shape: tuple[int, int, int],
              rank: np.ndarray | None) -> Allocation:
        """The nodes that take the units: in node order (first fit) or fewest room first (best
        fit), nodes of lower `rank` before all others."""
        order = np.flatnonzero(caps)
        if self.best_fit:
            keys = (caps[order],) if rank is None else (caps[order], rank[order])
            order = order[np.lexsort(keys)]
        elif rank is not None:
            order = order[np.argsort(rank[order], kind="stable")]
        cum = np.cumsum(caps[order])
        k = int(np.searchsorted(cum, units))
        nodes = order[:k + 1]
        taken = caps[nodes].copy()
        taken[-1] -= int(cum[k]) - units
        return Allocation(p, nodes, taken[:, None] * np.array(shape, dtype=np.int64),
                          (units * shape[0], units * shape[1], units * shape[2]))

    def take(self, i: int, a: Allocation) -> int:
        """Job i starts on `a`; returns the cores it holds."""
        self.free[a.partition][a.nodes] -= a.used
        t, total = self.totals[a.partition], a.total
        t[0] -= total[0]
        t[1] -= total[1]
        t[2] -= total[2]
        self.running[i] = self.placed[i] = a
        return total[0]

    def give_back(self, i: int, seconds: int) -> int:
        """Job i ends after running `seconds`; returns the cores it held."""
        a = self.running.pop(i)
        self.free[a.partition][a.nodes] += a.used
        t, total, busy = self.totals[a.partition], a.total, self.busy
        for r in range(3):
            t[r] += total[r]
            busy[r] += total[r] * seconds
        return total[0]

    def reserve(self, head: int, now: int, running: list[tuple[int, int]]) -> Reservation:
        """EASY's reservation on nodes: the shadow time is when the head fits, releasing the
        running jobs in order of estimated end (past-due ones end now); the head is placed then
        on the nodes with the least room for it now first, so that what it leaves over at the
        shadow time lies as much as possible on nodes free now, where backfilled jobs can use it."""
        options = {p: (units, cores, memory, gpus) for p, units, cores, memory, gpus in self.options[head]}
        future = {p: self.free[p].copy() for p in options}
        caps = {p: _units_per_node(future[p], *options[p][1:]) for p in options}
        room = {p: int(caps[p].sum()) for p in options}
        shadow = None  # the head does not fit now: that is why it is reserved
        k = 0
        while shadow is None:
            est_end, j = running[k]
            k += 1
            a = self.running[j]
            p = a.partition
            if p in future:
                future[p][a.nodes] += a.used
                new = _units_per_node(future[p][a.nodes], *options[p][1:])
                room[p] += int(new.sum() - caps[p][a.nodes].sum())
                caps[p][a.nodes] = new
                if room[p] >= options[p][0]:
                    shadow = max(est_end, now)
        while k < len(running) and running[k][0] <= shadow:  # the jobs ending with it are free too
            a = self.running[running[k][1]]
            if a.partition in future:
                future[a.partition][a.nodes] += a.used
            k += 1
        at_shadow = [future.get(p, f) for p, f in enumerate(self.free)]
        now_room = {p: _units_per_node(self.free[p], *options[p][1:]) for p in options}
        totals = [self.totals[p] if p not in future else future[p].sum(axis=0).tolist() for p in range(len(self.free))]
        placed = self._find(head, at_shadow, totals, rank=now_room)
        extra = future[placed.partition]
        extra[placed.nodes] -= placed.used
        held = np.zeros(len(extra), dtype=bool)
        held[placed.nodes] = True
        return Reservation(shadow, placed.partition, extra, held)

    def table(self) -> dict[str, list[Any]]:
        """The observation's `machine` table (PROTOCOL.md section 6): per partition, its nodes'
        capacities and what is free now, so an agent sees where a job can start."""
        parts = self.machine.partitions
        return {"name": [p.name for p in parts], "nodes": [p.nodes for p in parts], "cores": [p.cores for p in parts],
                "memory": [p.memory for p in parts], "gpus": [p.gpus for p in parts],
                "swf": [list(p.swf) for p in parts], "free_cores": [t[0] for t in self.totals],
                "free_memory": [t[1] for t in self.totals], "free_gpus": [t[2] for t in self.totals],
                "idle_nodes": [int((free == cap).all(axis=1).sum()) for free, cap in zip(self.free, self.capacity)]}

    def utilization(self, span: int) -> dict[str, float]:
        """Per resource the machine has: resource-seconds held by the ended runs / (capacity x span)."""
        capacity = self.machine.capacity
        return {f"utilization_{r}": float(self.busy[k]) / (capacity[r] * span) if span > 0 else 0.0
                for k, r in enumerate(RESOURCES) if capacity[r]}
