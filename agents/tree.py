"""Decision trees as agents (IRL's student): a tree scores each candidate row and the best allowed is taken; tree files
load without running code and serve with numpy only (docs/irl.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..environment.decisions import Action, Decision
from ..environment.errors import HpcgymError
from .base import Agent
from .candidates import CandidateFeatures
from .encoders import get_encoder
from .records import save_records
from .slots import slot_action

FORMAT = "hpcgym-tree/1"
MODES = ("regression", "classification")
_ARRAYS = {"left": np.int32, "right": np.int32, "feature": np.int32, "threshold": np.float64,
           "value": np.float64, "samples": np.int64}


@dataclass
class TreeModel:
    """A fitted tree: its node arrays and meta."""

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray
    samples: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_sklearn(cls, estimator: Any, meta: dict[str, Any]) -> TreeModel:
        """The tree of a fitted DecisionTreeRegressor (value: the prediction) or of a binary
        DecisionTreeClassifier (value: the share of the positive class)."""
        t = estimator.tree_
        value = t.value[:, 0, :]
        if meta.get("mode") == "classification":
            positive = list(estimator.classes_).index(1) if 1 in estimator.classes_ else None
            value = (value[:, positive] / value.sum(1)) if positive is not None else np.zeros(len(value))
        else:
            value = value[:, 0]
        return cls(t.children_left.copy(), t.children_right.copy(), t.feature.copy(), t.threshold.copy(),
                   np.asarray(value, np.float64), t.n_node_samples.copy(), {"format": FORMAT, **meta})

    @property
    def node_count(self) -> int:
        return len(self.left)

    @property
    def depth(self) -> int:
        depth, level = 0, np.array([0])
        while True:
            inner = level[self.left[level] >= 0]
            if not len(inner):
                return depth
            level = np.concatenate([self.left[inner], self.right[inner]])
            depth += 1

    @property
    def features(self) -> list[str]:
        return list(self.meta.get("features", []))

    def predict(self, rows: np.ndarray) -> np.ndarray:
        """The score of each row (rows: (n, features))."""
        x = np.asarray(rows, np.float32)
        node = np.zeros(len(x), np.int64)
        at = np.arange(len(x))
        while True:
            inner = self.left[node] >= 0
            if not inner.any():
                return self.value[node]
            i = at[inner]
            n = node[inner]
            node[inner] = np.where(x[i, self.feature[n]] <= self.threshold[n], self.left[n], self.right[n])

    def save(self, path: str | Path) -> Path:
        """Write the tree to `path` (.npz, as decision records are written), atomically."""
        return save_records(path, {k: np.asarray(getattr(self, k), t) for k, t in _ARRAYS.items()}, self.meta)

    def rules(self, max_depth: int | None = None, digits: int = 4) -> str:
        """The tree as nested if/else text, to `max_depth` levels (deeper branches summarised)."""
        names, lines = self.features, []

        def walk(node: int, depth: int) -> None:
            pad = "    " * depth
            if self.left[node] < 0:
                lines.append(f"{pad}score {self.value[node]:.{digits}g}  ({self.samples[node]} samples)")
                return
            if max_depth is not None and depth >= max_depth:
                lines.append(f"{pad}...  (subtree of {self.samples[node]} samples, mean score "
                             f"{self.value[node]:.{digits}g})")
                return
            name = names[self.feature[node]] if self.feature[node] < len(names) else f"x[{self.feature[node]}]"
            lines.append(f"{pad}if {name} <= {self.threshold[node]:.{digits}g}:")
            walk(int(self.left[node]), depth + 1)
            lines.append(f"{pad}else:  # {name} > {self.threshold[node]:.{digits}g}")
            walk(int(self.right[node]), depth + 1)

        walk(0, 0)
        return "\n".join(lines)


def load_tree(path: str | Path) -> TreeModel:
    """A tree file written by `TreeModel.save`; anything else is refused with one line."""
    hint = "write one with `hpcgym distill`"
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            arrays = {k: np.asarray(data[k], t) for k, t in _ARRAYS.items()}
    except FileNotFoundError:
        raise HpcgymError(f"no tree file at {path}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HpcgymError(f"{path}: not a tree file ({type(exc).__name__}: {exc}); {hint}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise HpcgymError(f"{path}: not a tree file (format {meta.get('format') if isinstance(meta, dict) else meta!r}"
                          f", expected {FORMAT}); {hint}")
    n = len(arrays["left"])
    if not n or any(len(a) != n for a in arrays.values()) or arrays["left"].max() >= n or arrays["right"].max() >= n:
        raise HpcgymError(f"{path}: a damaged tree file (node arrays of different lengths or links out of range)")
    return TreeModel(**arrays, meta=meta)


def is_tree_file(path: str | Path) -> bool:
    """Whether `path` is a tree file (and not, e.g., a torch checkpoint)."""
    try:
        load_tree(path)
    except HpcgymError:
        return False
    return True


class TreeAgent(Agent):
    """A tree file as an agent for the kinds it was fitted on: the allowed candidate of best
    score (ties: the first slot); never waits or stops while a candidate is allowed."""

    def __init__(self, tree: str | Path | TreeModel) -> None:
        self.tree = tree if isinstance(tree, TreeModel) else load_tree(tree)
        meta = self.tree.meta
        try:
            encoder = get_encoder(meta["encoder"], int(meta["window"]), meta.get("procs"),
                                  **meta.get("encoder_options", {}))
            self.features = CandidateFeatures(encoder, meta["kinds"], int(meta["window"]), bool(meta["relative"]))
        except (KeyError, ValueError) as exc:
            raise HpcgymError(f"tree file meta is incomplete or wrong ({exc})") from None
        if len(self.features.names) != len(self.tree.features):
            raise HpcgymError(f"the tree reads {len(self.tree.features)} features but its encoder gives "
                              f"{len(self.features.names)}")
        self.kinds = tuple(meta["kinds"])

    def scores(self, decision: Decision) -> tuple[np.ndarray, list[int]]:
        """Each slot's score (-inf where not allowed) and the slots' job ids."""
        rows, mask, ids = self.features.rows(decision)
        scores = np.full(len(rows), -np.inf)
        if mask.any():
            scores[mask] = self.tree.predict(rows[mask])
        return scores, ids

    def act(self, decision: Decision) -> Action:
        scores, ids = self.scores(decision)
        slot = int(np.argmax(scores)) if np.isfinite(scores).any() else self.features.window  # none allowed: wait
        return slot_action(decision.kind, slot, ids, self.features.window)

    def describe(self) -> dict[str, Any]:
        return {"kinds": list(self.kinds), "nodes": self.tree.node_count, "depth": self.tree.depth,
                "mode": self.tree.meta.get("mode")}
