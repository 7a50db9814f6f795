"""Feature encoders: the raw observation map (PROTOCOL.md section 6) to a float32 vector in [0, 1], read the same in
process and over the protocol, so one trained network serves both (docs/gymnasium.md)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from ..environment.machine import REQUESTS, RESOURCES
from .packing import node_fit

TIME_SCALE = 7 * 24 * 3600  #: Seconds that map to 1.0 on the logarithmic time scale (longer times are clipped to 1).
_INV_LOG_TIME = 1.0 / math.log1p(TIME_SCALE)
#: Horizons (seconds from now) of `NodeAvailabilityEncoder`: now to 4 days, each about twice the one before.
HORIZONS = (0, 300, 900, 1800, 3600, 7200, 14400, 28800, 57600, 86400, 172800, 345600)


def _log_time(values: np.ndarray) -> np.ndarray:
    """In place: seconds -> log1p(max(s, 0)) / log1p(TIME_SCALE), clipped to [0, 1]."""
    np.maximum(values, 0.0, out=values)
    np.log1p(values, out=values)
    values *= _INV_LOG_TIME
    np.minimum(values, 1.0, out=values)
    return values


class Encoder:
    """Base class: `encode(observation)` gives a float32 vector of `size` features in [0, 1]."""

    size: int = 0
    name: str = ""  # the registry name (set by `get_encoder`)
    kinds: tuple[str, ...] | None = None  #: The decision kinds whose observations it reads (None: any).
    #: The queue and running columns it reads (`id` always comes; None: any): an env that serves
    #: only this encoder gathers only those.
    reads: Mapping[str, tuple[str, ...]] | None = None

    def observation_space(self, window: int | None = None, procs: int | None = None):
        """`Box(0, 1, (size,), float32)`; a `window` given must be the one this encoder was made for."""
        import gymnasium.spaces

        if window is not None and getattr(self, "window", None) not in (None, window):
            raise ValueError(f"{type(self).__name__} was made for window {self.window}, not {window}")
        return gymnasium.spaces.Box(0.0, 1.0, (self.size,), np.float32)

    def encode(self, observation: Mapping[str, Any]) -> np.ndarray:
        """The observation's features: a new float32 vector of `size` values in [0, 1]."""
        out = np.zeros(self.size, np.float32)
        self.fill(observation, out)
        return out

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        """Write the features into `out` (float32, length `size`, zeros on entry)."""
        raise NotImplementedError

    def zeros(self) -> np.ndarray:
        """A blank vector, e.g. the observation after the episode's end."""
        return np.zeros(self.size, np.float32)

    @property
    def parts(self) -> list[tuple[str, int, tuple[int, ...]]]:
        """(name, offset, shape) of each part of the vector."""
        return [(self.name or type(self).__name__, 0, self.shape)]

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.size,)


def _window(window: int) -> int:
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    return int(window)


class WindowTableEncoder(Encoder):
    """Base of the tables of `window` rows x `len(COLUMNS)` features (one row per job)."""

    COLUMNS: tuple[str, ...] = ()

    def __init__(self, window: int, procs: int | None = None) -> None:
        self.window = _window(window)
        self.procs = procs
        self.size = self.window * len(self.COLUMNS)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.window, len(self.COLUMNS))


class JobTableEncoder(WindowTableEncoder):
    """The queue window, one row per job (padding rows zero); `marked` flags the job a decision is
    about (the inspected pick, the reservation's holder)."""

    reads = {"queue": ("wait", "requested", "estimate", "size", "rejections")}
    COLUMNS = ("present", "wait", "requested", "estimate", "size", "rejections", "fits", "marked")

    def __init__(self, window: int, procs: int | None = None, max_rejections: int | None = 72) -> None:
        super().__init__(window, procs)
        self.max_rejections = 72 if max_rejections is None else max_rejections

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        q = observation["queue"]
        ids = q["id"]
        n = min(len(ids), self.window)
        if not n:
            return
        cols = (q["wait"], q["requested"], q["estimate"], q["size"], q["rejections"])
        if n < len(ids):
            cols = tuple(c[:n] for c in cols)
        block = np.array(cols, np.float64)  # 5 x n
        table = out.reshape(self.window, len(self.COLUMNS))
        table[:n, 6] = block[3] <= observation["free"]
        _log_time(block[:3])
        block[3] *= 1.0 / (self.procs or observation["procs"])
        if self.max_rejections > 0:
            block[4] *= 1.0 / self.max_rejections
        else:
            np.minimum(block[4], 1.0, out=block[4])
        np.minimum(block[3:], 1.0, out=block[3:])
        table[:n, 0] = 1.0
        table[:n, 1:6] = block.T
        context = observation.get("context")
        if context:
            marked = context.get("jobs") if "jobs" in context else (
                [context["reserved"]] if "reserved" in context else None)
            if marked:
                table[:n, 7] = np.isin(np.array(ids[:n]), marked)


class RunningJobEncoder(WindowTableEncoder):
    """The running jobs, one row each, in the kill decision's order (by estimated end)."""

    reads = {"running": ("start", "requested", "estimated_end", "size")}

    COLUMNS = ("present", "elapsed", "requested", "remaining", "size", "overdue")

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        r = observation["running"]
        n = min(len(r["id"]), self.window)
        if not n:
            return
        cols = (r["start"], r["requested"], r["estimated_end"], r["size"])
        if n < len(r["id"]):
            cols = tuple(c[:n] for c in cols)
        block = np.array(cols, np.float64)  # 4 x n
        now = observation["time"]
        table = out.reshape(self.window, len(self.COLUMNS))
        block[0] = now - block[0]
        block[2] -= now
        table[:n, 5] = block[2] < 0
        _log_time(block[:3])
        block[3] *= 1.0 / (self.procs or observation["procs"])
        np.minimum(block[3], 1.0, out=block[3])
        table[:n, 0] = 1.0
        table[:n, 1:5] = block.T


class PredictionRunningEncoder(WindowTableEncoder):
    """RLSchert's running-job features for the kill decision (docs/rlschert.md); needs an env with a
    run-time predictor."""

    reads = {"running": ("prediction0", "prediction", "start", "submit", "size")}

    COLUMNS = ("present", "prediction0", "prediction", "elapsed", "age", "change", "size")

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        r = observation["running"]
        if "prediction" not in r:
            raise ValueError("encoder rlschert reads run-time predictions: give the env a predictor "
                             "(option prediction, e.g. running)")
        n = min(len(r["id"]), self.window)
        if not n:
            return
        now = observation["time"]
        block = np.array([c[:n] for c in (r["prediction0"], r["prediction"], r["start"], r["submit"], r["size"])],
                         np.float64)
        table = out.reshape(self.window, len(self.COLUMNS))
        change = np.abs(block[1] - block[0]) / np.maximum(block[0], 1.0)
        table[:n, 5] = change / (1.0 + change)
        table[:n, 6] = np.minimum(block[4] / (self.procs or observation["procs"]), 1.0)
        block[2:4] = now - block[2:4]
        table[:n, 1:5] = _log_time(block[:4]).T
        table[:n, 0] = 1.0


class NodeAvailabilityEncoder(Encoder):
    """The share of processors free now and at each horizon, if running jobs end at their estimated
    ends (a job past its estimate counts from the first positive horizon): non-decreasing."""

    reads = {"running": ("estimated_end", "size")}

    def __init__(self, procs: int | None = None, horizons: Sequence[int] = HORIZONS) -> None:
        self.procs = procs
        self.horizons = [int(h) for h in horizons]
        if not self.horizons or any(b <= a for a, b in zip(self.horizons, self.horizons[1:])) \
                or self.horizons[0] < 0:
            raise ValueError("horizons must be increasing non-negative seconds")
        self.size = len(self.horizons)

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        scale = 1.0 / (self.procs or observation["procs"])
        free = observation["free"]
        r = observation["running"]
        ends = r["estimated_end"]
        if not ends:
            out[:] = min(free * scale, 1.0)
            return
        released = list(accumulate(r["size"], initial=free))  # released[k]: free + the first k to end
        now = observation["time"]
        out[:] = [released[bisect_right(ends, now + h)] if h else free for h in self.horizons]
        out *= scale
        np.minimum(out, 1.0, out=out)


class ResourceEncoder(Encoder):
    """What each window job asks of a machine of nodes, and what is free (docs/semantics.md section
    13), so an agent can tell GPU jobs apart; a resource the machine lacks reads 0."""

    COLUMNS = ("gpus", "memory", "exclusive", "fits")
    reads = {"queue": REQUESTS}

    def __init__(self, window: int) -> None:
        self.window = _window(window)
        self.size = self.window * len(self.COLUMNS) + len(RESOURCES)

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        q, table = observation["queue"], observation.get("machine")
        n = min(len(q["id"]), self.window)
        rows = out[:self.window * len(self.COLUMNS)].reshape(self.window, len(self.COLUMNS))
        if table is None:
            rows[:n, 3] = np.asarray(q["size"][:n]) <= observation["free"]
            out[-3] = observation["free"] / observation["procs"]
            return
        total = np.array([sum(k * c for k, c in zip(table["nodes"], table[r])) for r in RESOURCES], np.float64)
        share = np.divide(1.0, total, out=np.zeros(3), where=total > 0)
        if n:
            rows[:n, 0] = np.asarray(q["gpus"][:n]) * share[2]
            rows[:n, 1] = np.maximum(q["memory"][:n], 0) * np.asarray(q["size"][:n]) * share[1]
            rows[:n, 2] = q["exclusive"][:n]
            rows[:n, 3] = node_fit(observation, n)[0]
            np.minimum(rows, 1.0, out=rows)
        out[-3:] = np.array([sum(table[f"free_{r}"]) for r in RESOURCES]) * share


class ConcatEncoder(Encoder):
    """Several encoders' vectors, one after the other."""

    def __init__(self, encoders: Sequence[Encoder]) -> None:
        if not encoders:
            raise ValueError("ConcatEncoder needs at least one encoder")
        self.encoders = list(encoders)
        self.size = sum(e.size for e in self.encoders)
        self.window = next((e.window for e in self.encoders if getattr(e, "window", None)), None)
        bounds = np.cumsum([0, *(e.size for e in self.encoders)]).tolist()
        self._slices = [(e, slice(a, b)) for e, a, b in zip(self.encoders, bounds, bounds[1:])]
        if all(e.reads is not None for e in self.encoders):
            self.reads = {table: tuple(dict.fromkeys(c for e in self.encoders for c in e.reads.get(table, ())))
                          for table in ("queue", "running")}

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        for enc, where in self._slices:
            enc.fill(observation, out[where])

    @property
    def parts(self) -> list[tuple[str, int, tuple[int, ...]]]:
        return [(e.name or type(e).__name__, where.start, e.shape) for e, where in self._slices]


class DRASEncoder(Encoder):
    """DRAS's state (Fan et al., TPDS 2022, section 3.1; docs/dras.md): a [2W + N, 2] table, a [2, 2]
    block per window job, then a row per processor (each processor is a node here)."""

    reads = {"queue": ("size", "estimate", "wait"), "running": ("estimated_end", "size")}

    def __init__(self, window: int, procs: int, priority_size: int | None = None) -> None:
        if not procs or procs < 1:
            raise ValueError("the dras encoder needs the cluster's processors (one row per node)")
        if priority_size is not None and (isinstance(priority_size, bool) or not isinstance(priority_size, int)
                                          or priority_size < 1):
            raise ValueError(f"priority_size is a processor count of at least 1, got {priority_size!r}")
        self.window = _window(window)
        self.procs = int(procs)
        self.priority_size = priority_size
        self.rows = 2 * self.window + self.procs
        self.size = 2 * self.rows

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.rows, 2)

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        if observation["procs"] != self.procs:
            raise ValueError(f"the dras encoder was made for {self.procs} processors, "
                             f"not {observation['procs']}")
        table = out.reshape(self.rows, 2)
        q = observation["queue"]
        n = min(len(q["id"]), self.window)
        if n:
            size = np.asarray(q["size"][:n], np.float64)
            times = np.array([q["estimate"][:n], q["wait"][:n]], np.float64)
            _log_time(times)
            jobs = table[:2 * n].reshape(n, 4)  # [size, estimate, priority, queued time]
            jobs[:, 0] = np.minimum(size / self.procs, 1.0)
            jobs[:, 1] = times[0]
            if self.priority_size is not None:
                jobs[:, 2] = size >= self.priority_size
            jobs[:, 3] = times[1]
        nodes = table[2 * self.window:]
        free = min(int(observation["free"]), self.procs)
        nodes[:free, 0] = 1.0
        r = observation["running"]
        if not r["id"]:
            return
        ends = np.asarray(r["estimated_end"], np.float64)
        order = np.argsort(ends, kind="stable")
        remaining = _log_time(ends[order] - observation["time"])
        sizes = np.asarray(r["size"], np.int64)[order]
        stop = np.minimum(free + np.cumsum(sizes), self.procs)
        start = np.concatenate(([free], stop[:-1]))
        nodes[free:stop[-1], 1] = np.repeat(remaining, stop - start)


class InspectorEncoder(Encoder):
    """SchedInspector's seven features of the pick under inspection, as the authors' code computes
    them (docs/schedinspector.md gives the table)."""

    reads = {"queue": ("size", "requested", "wait", "rejections")}

    kinds = ("inspect",)
    size = 7
    HIGH, LOW = 1.0 - 1e-5, 1e-5
    MAX_WAIT = 12 * 3600
    REJECTION_SCALE = 72
    DELAY_SCALE = 128

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        q = observation["queue"]
        pick = observation["context"]["jobs"][0]
        k = q["id"].index(pick)
        procs, free = observation["procs"], observation["free"]
        size, requested = q["size"][k], q["requested"][k]
        delay = sum(10.0 / max(r, 10) for r in q["requested"]) / self.DELAY_SCALE
        out[:] = (min(q["wait"][k] / self.MAX_WAIT, self.HIGH),
                  min(requested / max(observation["max_run"], 1), self.HIGH),
                  min(size / procs, self.HIGH),
                  min(free / procs, self.HIGH),
                  self.HIGH if size <= free else self.LOW,
                  min(q["rejections"][k] / self.REJECTION_SCALE, 1.0),
                  min(delay, self.HIGH))


class BackfillEncoder(WindowTableEncoder):
    """RL backfilling's six features per window job, as the authors' public code computes them (docs/rlbackfilling.md);
    a row that cannot be backfilled now is the code's padding row, every row at its action slot."""

    reads = {"queue": ("size", "requested", "wait")}
    kinds = ("backfill",)
    COLUMNS = ("wait", "requested", "size", "until_reservation", "of_free", "constant")
    HIGH = 1.0 - 1e-5
    MAX_WAIT = 12 * 3600
    PADDING = (0.0, 1.0, 1.0, 1.0, 1.0, 0.0)

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        table = out.reshape(self.window, len(self.COLUMNS))
        table[:] = self.PADDING
        q, context = observation["queue"], observation["context"]
        now, free, procs = observation["time"], observation["free"], observation["procs"]
        until_shadow = max(context["shadow_time"] + 2 - now, 1)
        max_run = max(observation["max_run"], 1)
        reserved = context["reserved"]
        for k, (job, size) in enumerate(zip(q["id"][:self.window], q["size"][:self.window])):
            if size > free or job == reserved:
                continue
            requested = max(q["requested"][k], 0)
            row = (q["wait"][k] / self.MAX_WAIT, requested / max_run, size / procs, requested / until_shadow,
                   size / free, 0.0)
            table[k] = [min(max(v, 0.0), self.HIGH) for v in row]
class IRLEncoder(WindowTableEncoder):
    """IRL's per-job rows (seed paper 004, section III-A; docs/irl.md): size, requested time and
    utilization, plus the wait for reward I (`wait=True`)."""

    reads = {"queue": ("size", "requested", "wait")}

    def __init__(self, window: int, procs: int | None = None, wait: bool = False) -> None:
        self.COLUMNS = ("size", "requested", "utilization", "wait")[:4 if wait else 3]
        super().__init__(window, procs)

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        q = observation["queue"]
        n = min(len(q["id"]), self.window)
        if not n:
            return
        procs = self.procs or observation["procs"]
        table = out.reshape(self.window, len(self.COLUMNS))
        table[:n, 0] = np.minimum(np.asarray(q["size"][:n], np.float64) / procs, 1.0)
        table[:n, 1] = _log_time(np.array(q["requested"][:n], np.float64))
        table[:n, 2] = min(max(1.0 - observation["free"] / procs, 0.0), 1.0)
        if len(self.COLUMNS) == 4:
            table[:n, 3] = _log_time(np.array(q["wait"][:n], np.float64))


#: Base encoders by name: factory(window, procs, **options).
ENCODERS: dict[str, Callable[..., Encoder]] = {
    "jobs": lambda window, procs, max_rejections=72, **_: JobTableEncoder(window, procs, max_rejections),
    "running": lambda window, procs, **_: RunningJobEncoder(window, procs),
    "rlschert": lambda window, procs, **_: PredictionRunningEncoder(window, procs),
    "nodes": lambda window, procs, **_: NodeAvailabilityEncoder(procs),
    "dras": lambda window, procs, priority_size=None, **_: DRASEncoder(window, procs, priority_size),
    "schedinspector": lambda window, procs, **_: InspectorEncoder(),
    "rlbf": lambda window, procs, **_: BackfillEncoder(window),
    "irl": lambda window, procs, **_: IRLEncoder(window, procs),
    "irl_wait": lambda window, procs, **_: IRLEncoder(window, procs, wait=True),
    "resources": lambda window, procs, **_: ResourceEncoder(window),
}
#: Options an encoder may take (`get_encoder(..., **options)`), and what they do.
ENCODER_OPTIONS = {
    "max_rejections": "jobs: the inspect cap its rejection-count column is scaled by (set from the env's option)",
    "priority_size": "dras: processors from which a job's priority flag is 1 (DRAS's large-job priority)",
}
#: The encoder of each decision kind when none is named (the Gymnasium env's, decision records').
DEFAULT_ENCODERS = {"select": "jobs+nodes", "backfill": "jobs+nodes", "inspect": "jobs+nodes", "kill": "running+nodes",
                    "select_kill": "jobs+running+nodes"}
COMBINED = ("jobs+nodes", "running+nodes")  #: Named concatenations (any "a+b" of base names also works).


def get_encoder(name: str, window: int, procs: int | None = None, **options: Any) -> Encoder:
    """The encoder `name` (base names joined by "+", e.g. "jobs+nodes") for a window of `window` jobs on
    `procs` processors (None: each observation's); `options` (`ENCODER_OPTIONS`) reach the parts that take them."""
    names = [part.strip() for part in str(name).split("+")]
    unknown = [part for part in names if part not in ENCODERS]
    if unknown or not names:
        raise ValueError(f"unknown encoder {name!r}; use one of {', '.join([*ENCODERS, *COMBINED])} "
                         "(or base names joined by '+')")
    bad = sorted(set(options) - set(ENCODER_OPTIONS))
    if bad:
        raise ValueError(f"unknown encoder option(s) {', '.join(bad)}; known: "
                         + "; ".join(f"{k} ({v})" for k, v in ENCODER_OPTIONS.items()))
    parts = [_named(ENCODERS[part](window, procs, **options), part) for part in names]
    return parts[0] if len(parts) == 1 else _named(ConcatEncoder(parts), "+".join(names))


def _named(encoder: Encoder, name: str) -> Encoder:
    encoder.name = name
    return encoder
