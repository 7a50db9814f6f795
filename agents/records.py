"""Decision records: what an agent saw and did at each decision of one kind, for analysis and for distilling any agent,
in any language, into a tree (docs/irl.md, "Files and features in detail")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..environment.decisions import INSPECT, Action, Decision
from ..environment.errors import HpcgymError
from .base import Agent
from .encoders import Encoder, get_encoder
from .slots import action_slot, slot_mask

FORMAT = "hpcgym-decision-records/1"


class DecisionLog:
    """Records of the decisions of one `kind`, encoded with `encoder` over `window` slots."""

    COLUMNS = ("episode", "time", "queue_length", "features", "mask", "action")

    def __init__(self, kind: str, encoder: str | Encoder, window: int = 128, procs: int | None = None) -> None:
        self.kind, self.window = kind, int(window)
        self.encoder = get_encoder(encoder, self.window, procs) if isinstance(encoder, str) else encoder
        if self.encoder.kinds is not None and kind not in self.encoder.kinds:
            raise HpcgymError(f"encoder {self.encoder.name!r} reads {'/'.join(self.encoder.kinds)} decisions, "
                              f"not {kind}")
        self.episode = 0
        self._rows: dict[str, list[Any]] = {k: [] for k in self.COLUMNS}

    def __len__(self) -> int:
        return len(self._rows["time"])

    def add(self, decision: Decision, action: Action) -> None:
        """Record `action` taken on `decision` (decisions of other kinds are ignored)."""
        if decision.kind != self.kind:
            return
        mask, ids = slot_mask(decision, self.window)
        obs, slot = decision.observation, action_slot(decision.kind, action, ids, self.window)
        for column, value in zip(self.COLUMNS, (self.episode, decision.time, obs["queue_length"],
                                                self.encoder.encode(obs), mask, slot)):
            self._rows[column].append(value)

    def end_episode(self) -> None:
        self.episode += 1

    def arrays(self) -> dict[str, np.ndarray]:
        rows, n = self._rows, len(self)
        slots = 2 if self.kind == INSPECT else self.window + 1
        return {"episode": np.asarray(rows["episode"], np.int32), "time": np.asarray(rows["time"], np.int64),
                "queue_length": np.asarray(rows["queue_length"], np.int32),
                "features": np.asarray(rows["features"], np.float32).reshape(n, self.encoder.size),
                "mask": np.asarray(rows["mask"], np.int8).reshape(n, slots),
                "action": np.asarray(rows["action"], np.int32)}

    def meta(self, **extra: Any) -> dict[str, Any]:
        return {"format": FORMAT, "kind": self.kind, "encoder": self.encoder.name, "window": self.window,
                "features_shape": list(self.encoder.shape), "episodes": self.episode, **extra}

    def save(self, path: str | Path, **meta: Any) -> Path:
        """Write the records (and `meta`, JSON-able) to `path` (.npz)."""
        return save_records(path, self.arrays(), self.meta(**meta))


def save_records(path: str | Path, columns: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Write columns and JSON meta as an .npz (records, trees), atomically (a reader never sees half a file)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        np.savez_compressed(f, meta=np.array(json.dumps(meta)), **columns)
    tmp.replace(path)
    return path


def load_records(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(columns, meta) of a records file; refuses files that are not decision records."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            columns = {k: data[k] for k in data.files if k != "meta"}
    except (OSError, ValueError, KeyError) as exc:
        raise HpcgymError(f"{path}: not a decision records file ({exc})") from None
    if meta.get("format") != FORMAT:
        raise HpcgymError(f"{path}: not a decision records file (format {meta.get('format')!r})")
    return columns, meta


def merge_records(parts: list[tuple[dict[str, np.ndarray], dict[str, Any]]]) -> dict[str, np.ndarray]:
    """One set of columns from several files of the same kind and encoder, episodes renumbered
    so that they run on across files."""
    if not parts:
        raise HpcgymError("no decision records to merge")
    first = parts[0][1]
    for _, meta in parts[1:]:
        if (meta["kind"], meta["encoder"], meta["window"]) != (first["kind"], first["encoder"], first["window"]):
            raise HpcgymError("decision records of different kinds, encoders or windows cannot be merged")
    merged, offset = {k: [] for k in parts[0][0]}, 0
    for columns, meta in parts:
        for k, v in columns.items():
            merged[k].append(v + offset if k == "episode" else v)
        offset += meta["episodes"]
    return {k: np.concatenate(v) for k, v in merged.items()}


class RecordingAgent(Agent):
    """An in-process agent whose decisions of the log's kind are recorded as it takes them."""

    def __init__(self, agent: Agent, log: DecisionLog) -> None:
        self.agent, self.log = agent, log
        self.kinds = tuple(agent.kinds)

    def act(self, decision: Decision) -> Action:
        action = self.agent.act(decision)
        self.log.add(decision, action)
        return action

    def on_reward(self, reward: float) -> None:
        self.agent.on_reward(reward)

    def on_episode_end(self, metrics: dict[str, Any]) -> None:
        self.agent.on_episode_end(metrics)
        self.log.end_episode()
