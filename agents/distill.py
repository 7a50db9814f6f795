"""Distil any agent into a decision tree: DAgger (Ross, Gordon and Bagnell, AISTATS 2011) with IRL's critical states
(seed paper 004, Algorithm 1); docs/irl.md gives the labels and the fidelity measured."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..environment.config import SimConfig
from ..environment.decisions import Action, Decision
from ..environment.errors import HpcgymError
from ..environment.simulator import simulate
from ..environment.workload import Workload
from .base import Agent
from .candidates import CandidateFeatures
from .slots import action_slot, slot_action, slot_mask
from .tree import TreeModel

#: A teacher's label of one decision: its action, that action's slot (-1: none of the candidate
#: slots) and its per-slot scores (None without scores).
Label = tuple[Action, int, "np.ndarray | None"]


class Teacher:
    """What a tree learns from: a `Label` per decision, in two steps (`prepare` while the decision is current, `labels`
    on the prepared list) so a network teacher labels a whole rollout in one batch."""

    kinds: tuple[str, ...] = ()
    has_scores = False
    window = 0

    def label(self, decision: Decision) -> Label:
        raise NotImplementedError

    def prepare(self, decision: Decision) -> Any:
        return self.label(decision)

    def labels(self, prepared: list[Any]) -> list[Label]:
        return prepared

    def run(self, workload: Workload, config: SimConfig, policy: str, agent: Agent) -> tuple[dict[str, Any], float]:
        """One episode in which `agent` takes its kinds: its summary metrics, and the seconds spent
        waiting for a teacher in another process (none in process)."""
        return dict(simulate(workload, config, policy=policy, agents={k: agent for k in agent.kinds}).summary), 0.0


def action_label(decision: Decision, action: Action, window: int) -> Label:
    """The label of a teacher that gives only its action: the action and its slot."""
    _, ids = slot_mask(decision, window)
    slot = action_slot(decision.kind, action, ids, window)
    return action, slot if 0 <= slot < (2 if decision.kind == "inspect" else window) else -1, None


class CheckpointTeacher(Teacher):
    """A served checkpoint (`agents.rl.serve.RLAgent`): its greedy action and its network's slot scores."""

    has_scores = True
    BATCH = 4096  # decisions per forward pass when labelling a rollout

    def __init__(self, agent: Any) -> None:
        self.agent, self.kinds, self.window = agent, tuple(agent.kinds), agent.window

    def label(self, decision: Decision) -> Label:
        return self.labels([self.prepare(decision)])[0]

    def prepare(self, decision: Decision) -> tuple[str, np.ndarray, np.ndarray, list[int]]:
        obs, mask, ids = self.agent.observe(decision)
        return decision.kind, obs, mask, ids

    def labels(self, prepared: list[Any]) -> list[Label]:
        out = []
        for start in range(0, len(prepared), self.BATCH):
            chunk = prepared[start:start + self.BATCH]
            scores = self.agent.algorithm.scores(np.stack([p[1] for p in chunk]), np.stack([p[2] for p in chunk]))
            for (kind, _, _, ids), row in zip(chunk, scores):
                slot = int(np.argmax(row))
                slots = 2 if len(row) == 2 else self.window
                out.append((slot_action(kind, slot, ids, self.window), slot if slot < slots else -1, row[:slots]))
        return out


class AgentTeacher(Teacher):
    """Any agent: its action only."""

    def __init__(self, agent: Agent, window: int) -> None:
        self.agent, self.kinds, self.window = agent, tuple(agent.kinds), int(window)

    def label(self, decision: Decision) -> Label:
        return action_label(decision, self.agent.act(decision), self.window)


def make_teacher(agent: Agent, window: int) -> Teacher:
    """The teacher of an agent: with scores for a served checkpoint, else by its actions."""
    if hasattr(agent, "observe") and hasattr(agent, "algorithm"):
        return CheckpointTeacher(agent)
    return AgentTeacher(agent, window)


@dataclass
class Samples:
    """Labelled decisions: per decision its candidate rows' features and targets, and its queue length."""

    rows: list[np.ndarray] = field(default_factory=list)
    targets: list[np.ndarray] = field(default_factory=list)
    queue: list[int] = field(default_factory=list)

    def add(self, rows: np.ndarray, target: np.ndarray, queue_length: int) -> None:
        self.rows.append(rows)
        self.targets.append(target)
        self.queue.append(queue_length)

    def __len__(self) -> int:
        return len(self.queue)

    def extend(self, other: Samples) -> None:
        self.rows += other.rows
        self.targets += other.targets
        self.queue += other.queue

    def arrays(self, critical: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(X, y) of every row, or only of the decisions whose queue was longer than `critical`."""
        keep = [i for i, q in enumerate(self.queue) if critical is None or q > critical]
        if not keep:
            return np.zeros((0, 0), np.float32), np.zeros(0)
        return (np.concatenate([self.rows[i] for i in keep]).astype(np.float32),
                np.concatenate([self.targets[i] for i in keep]))


@dataclass
class Rollout:
    """One episode driven by the teacher or a tree, every decision labelled by the teacher."""

    samples: Samples
    summary: dict[str, Any]
    decisions: int = 0
    taught: int = 0       # decisions where the teacher chose a candidate slot
    agreed: int = 0       # ... and the driver chose the same
    choice: int = 0       # ... of those, decisions with two or more allowed candidates
    choice_agreed: int = 0
    scores: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)   # (teacher, tree) per decision
    seconds: float = 0.0
    teacher_seconds: float = 0.0   # labelling: the teacher's decisions (a network's forward pass)
    driver_seconds: float = 0.0    # the tree's decisions (scoring the candidate rows)

    @property
    def agreement(self) -> float:
        return self.agreed / self.taught if self.taught else float("nan")

    @property
    def choice_agreement(self) -> float:
        return self.choice_agreed / self.choice if self.choice else float("nan")

    @property
    def r2(self) -> float:
        if not self.scores:
            return float("nan")
        y = np.concatenate([s[0] for s in self.scores])
        pred = np.concatenate([s[1] for s in self.scores])
        total = float(np.sum((y - y.mean()) ** 2))
        return 1.0 - float(np.sum((y - pred) ** 2)) / total if total > 0 else float("nan")


class _Labeller(Agent):
    """Drives an episode with the teacher (tree None) or a tree, labelling every decision; a tree's decisions are
    labelled in one batch at the end (`finish`), as single forward passes were most of a distillation's time."""

    def __init__(self, teacher: Teacher, features: CandidateFeatures, tree: TreeModel | None, mode: str,
                 out: Rollout) -> None:
        self.teacher, self.features, self.tree, self.mode, self.out = teacher, features, tree, mode, out
        self.kinds = features.kinds
        self.pending: list[tuple[Any, np.ndarray, np.ndarray, int, np.ndarray | None, int]] = []

    def act(self, decision: Decision) -> Action:
        begun = time.perf_counter()
        rows, mask, ids = self.features.rows(decision)
        allowed, queue = np.flatnonzero(mask), decision.observation["queue_length"]
        encoded = time.perf_counter()
        # driven by the teacher: its label now; by a tree: what the batched label needs
        prepared = self.teacher.label(decision) if self.tree is None else self.teacher.prepare(decision)
        taught = time.perf_counter()
        self.out.teacher_seconds += taught - encoded
        if self.tree is None:
            self._learn(prepared, rows, allowed, queue, None, -1)
            return prepared[0]
        predicted = self.tree.predict(rows[allowed]) if len(allowed) else np.zeros(0)
        mine = int(allowed[np.argmax(predicted)]) if len(allowed) else self.features.slots
        chosen = slot_action(decision.kind, mine, ids, self.features.window)
        self.out.driver_seconds += encoded - begun + time.perf_counter() - taught
        self.pending.append((prepared, rows, allowed, queue, predicted, mine))
        return chosen

    def finish(self) -> None:
        """Label the tree's decisions of the episode and count its agreement with the teacher."""
        start = time.perf_counter()
        labels = self.teacher.labels([p[0] for p in self.pending])
        self.out.teacher_seconds += time.perf_counter() - start
        for label, (_, rows, allowed, queue, predicted, mine) in zip(labels, self.pending):
            self._learn(label, rows, allowed, queue, predicted, mine)
        self.pending = []

    def _learn(self, label: Label, rows: np.ndarray, allowed: np.ndarray, queue: int,
               predicted: np.ndarray | None, mine: int) -> None:
        """One labelled decision into the samples, and (driven by a tree) into the fidelity counts."""
        out = self.out
        _, slot, scores = label
        out.decisions += 1
        if self.mode == "regression":
            if scores is None:
                raise HpcgymError("the teacher gives no scores: distil it by classification")
            target = scores[allowed].astype(np.float64)
        else:
            target = (allowed == slot).astype(np.int64)
        if len(allowed):
            out.samples.add(rows[allowed], target, queue)
        if predicted is None:
            return
        if slot >= 0:
            out.taught += 1
            out.agreed += mine == slot
            if len(allowed) > 1:
                out.choice += 1
                out.choice_agreed += mine == slot
        if scores is not None and len(allowed):
            out.scores.append((target, predicted))


def rollout(workload: Workload, config: SimConfig, policy: str, teacher: Teacher, features: CandidateFeatures,
            mode: str, tree: TreeModel | None = None) -> Rollout:
    """One episode on `workload`, driven by `tree` (or the teacher), labelled by the teacher."""
    out = Rollout(Samples(), {})
    agent = _Labeller(teacher, features, tree, mode, out)
    start = time.perf_counter()
    out.summary, waited = teacher.run(workload, config, policy, agent)
    agent.finish()
    out.seconds = time.perf_counter() - start
    out.teacher_seconds += waited
    return out


def fit_tree(samples: Samples, depth: int, mode: str, critical: int | None, seed: int,
             meta: dict[str, Any]) -> TreeModel:
    """A tree of at most `depth` levels on the samples (of critical states only, if given)."""
    try:
        from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
    except ImportError as exc:
        raise HpcgymError(f"fitting trees needs scikit-learn (in the clone: pip install -e '.[distill]'): {exc}") from None
    x, y = samples.arrays(critical)
    if not len(y):
        where = f" with a queue longer than {critical} jobs" if critical is not None else ""
        raise HpcgymError(f"no decision{where} to fit a tree on (of {len(samples)}); "
                          + ("lower --critical" if critical is not None else "give more jobs"))
    cls = DecisionTreeRegressor if mode == "regression" else DecisionTreeClassifier
    estimator = cls(max_depth=depth, random_state=seed).fit(x, y)
    return TreeModel.from_sklearn(estimator, {**meta, "mode": mode, "depth": depth, "critical": critical,
                                              "samples": int(len(y))})


@dataclass
class Iteration:
    """What one DAgger iteration made and measured."""

    method: str
    depth: int
    iteration: int
    tree: TreeModel
    train_samples: int
    test: Rollout

    def row(self) -> dict[str, Any]:
        s, t = self.test.summary, self.test
        return {"method": self.method, "depth": self.depth, "iteration": self.iteration,
                "nodes": self.tree.node_count, "fit_rows": self.tree.meta["samples"],
                "data_decisions": self.train_samples, "agreement": t.agreement,
                "agreement_choice": t.choice_agreement, "r2": t.r2, "mean_wait": s.get("mean_wait"),
                "mean_slowdown": s.get("mean_slowdown"), "mean_bsld": s.get("mean_bsld"),
                "utilization": s.get("utilization"),
                "tree_us_per_decision": 1e6 * t.driver_seconds / max(t.decisions, 1)}


def dagger(teacher: Teacher, features: CandidateFeatures, train: Workload, test: Workload, config: SimConfig,
           policy: str, depth: int, iterations: int, critical: int | None, mode: str, meta: dict[str, Any],
           seed: int = 0, start: Samples | None = None,
           progress: Callable[[Iteration], None] | None = None) -> list[Iteration]:
    """Algorithm 1 for one depth; `start` is D (made here when not given). Every iteration, the last
    one's tree being the result."""
    data = Samples()
    data.extend(start if start is not None else rollout(train, config, policy, teacher, features, mode).samples)
    if not len(data):
        raise HpcgymError("the teacher took no decision on the training jobs: nothing to learn from")
    method = "dagger" if critical is None else "irl"
    done: list[Iteration] = []
    for i in range(1, iterations + 1):
        tree = fit_tree(data, depth, mode, critical, seed, {**meta, "method": method, "iteration": i})
        data.extend(rollout(train, config, policy, teacher, features, mode, tree).samples)
        step = Iteration(method, depth, i, tree, len(data), rollout(test, config, policy, teacher, features, mode,
                                                                     tree))
        done.append(step)
        if progress is not None:
            progress(step)
    return done


def check_teacher_kinds(teacher_kinds: Sequence[str], asked: Sequence[str], name: str) -> None:
    """One clear line when the teacher does not take the kinds asked for."""
    missing = [k for k in asked if k not in teacher_kinds]
    if missing:
        raise HpcgymError(f"teacher {name} takes {'/'.join(teacher_kinds) or 'no'} decisions, not "
                          f"{'/'.join(missing)}; distil the kinds it takes (--kind {'+'.join(teacher_kinds)})")
