"""Per-candidate feature rows, one for each action slot of a decision, so one small model (a tree) scores every
candidate the same way (IRL's per-job scoring; docs/irl.md, "Files and features in detail")."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..environment.decisions import BACKFILL, INSPECT, SELECT, Decision
from ..environment.errors import HpcgymError
from .encoders import HORIZONS, ConcatEncoder, Encoder
from .slots import slot_mask, slot_observation

CANDIDATE_KINDS = (SELECT, BACKFILL, INSPECT)  #: Decision kinds a per-candidate model takes.
#: The job table of each encoder part that has one: its column names (None: the part's COLUMNS).
JOB_TABLES: dict[str, tuple[str, ...] | None] = {"jobs": None, "irl": None, "irl_wait": None,
                                                 "dras": ("size", "estimate", "priority", "queued")}


class CandidateFeatures:
    """The rows of a decision for an encoder made for `window` slots, a policy taking `kinds`."""

    def __init__(self, encoder: Encoder, kinds: Sequence[str], window: int, relative: bool = True) -> None:
        self.encoder, self.kinds, self.window = encoder, tuple(kinds), int(window)
        other = [k for k in self.kinds if k not in CANDIDATE_KINDS]
        if other:
            raise HpcgymError(f"a tree takes {', '.join(CANDIDATE_KINDS)} decisions, not {', '.join(other)}")
        if INSPECT in self.kinds and len(self.kinds) > 1:
            raise HpcgymError("a tree takes inspect decisions alone, not together with other kinds")
        flags = len(self.kinds) if len(self.kinds) > 1 else 0
        names = _feature_names(encoder) + [f"kind={k}" for k in self.kinds][:flags]
        if self.kinds == (INSPECT,):
            self.table, self.relative, self.names = None, False, names + ["reject"]
            return
        self.table = _job_table(encoder, self.window)
        start, columns = self.table
        stop = start + self.window * len(columns)
        self._globals = np.r_[0:start, stop:len(names)]
        self.relative = relative
        self.names = [*columns, *(names[i] for i in self._globals)]
        if relative:
            self.names += [f"{c}-rank" for c in columns] + [f"{c}-rank-desc" for c in columns]

    @property
    def slots(self) -> int:
        return 2 if self.table is None else self.window

    def rows(self, decision: Decision) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """(float32 rows, one per slot; bool mask of the allowed slots; the job id of each job slot) of `decision`."""
        vector = slot_observation(self.encoder, decision.observation, decision.kind, self.kinds)
        mask, ids = slot_mask(decision, self.window)
        rows, allowed = self.from_vector(vector, mask)
        return rows, allowed, ids

    def from_vector(self, vector: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, allowed slots) of an encoded observation (with its kind flags, for several
        kinds) and its action mask over the slots (`agents.slots`; e.g. a decision record's)."""
        if self.table is None:
            rows = np.zeros((2, len(vector) + 1), np.float32)
            rows[:, :-1] = vector
            rows[1, -1] = 1.0
            return rows, np.asarray(mask[:2], bool)
        start, columns = self.table
        table = vector[start:start + self.window * len(columns)].reshape(self.window, len(columns))
        allowed = mask[:self.window].astype(bool)
        parts = [table, np.broadcast_to(vector[self._globals], (self.window, len(self._globals)))]
        if self.relative:
            parts += _ranks(table, table[allowed] if allowed.any() else table[:1])
        return np.concatenate(parts, axis=1, dtype=np.float32), allowed


def _ranks(table: np.ndarray, candidates: np.ndarray) -> list[np.ndarray]:
    """Per cell: how many candidates have a smaller value in its column, and how many a larger."""
    below = np.empty(table.shape, np.float32)
    above = np.empty(table.shape, np.float32)
    for c in range(table.shape[1]):
        ordered = np.sort(candidates[:, c])
        below[:, c] = np.searchsorted(ordered, table[:, c], "left")
        above[:, c] = len(ordered) - np.searchsorted(ordered, table[:, c], "right")
    return [below, above]


def _parts(encoder: Encoder) -> list[tuple[str, int, Encoder]]:
    subs = encoder.encoders if isinstance(encoder, ConcatEncoder) else [encoder]
    return [(name, offset, sub) for (name, offset, _), sub in zip(encoder.parts, subs)]


def _job_table(encoder: Encoder, window: int) -> tuple[int, tuple[str, ...]]:
    """(offset, column names) of the encoder's per-job table."""
    for name, offset, sub in _parts(encoder):
        if name in JOB_TABLES:
            if getattr(sub, "window", window) != window:
                raise HpcgymError(f"encoder part {name!r} was made for window {sub.window}, not {window}")
            return offset, JOB_TABLES[name] or tuple(sub.COLUMNS)
    raise HpcgymError(f"encoder {encoder.name!r} has no per-job table to score candidates by; "
                      f"use one with {', '.join(JOB_TABLES)}")


def _feature_names(encoder: Encoder) -> list[str]:
    """A name for every feature of the encoder's vector (table cells are named by their column;
    they are replaced by the per-row columns in `CandidateFeatures.names`)."""
    names: list[str] = []
    for name, _, sub in _parts(encoder):
        if name == "nodes":
            names += [f"free+{h}s" for h in getattr(sub, "horizons", HORIZONS)]
        elif name == "dras":
            names += [f"dras[{i}]" for i in range(4 * sub.window)]
            names += [f"node{p}.{v}" for p in range(sub.procs) for v in ("free", "release")]
        elif name == "schedinspector":
            names += ["wait", "requested", "size", "free", "runnable", "rejections", "queue_delay"]
        else:
            names += [f"{name}[{i}]" for i in range(sub.size)]
    return names
