"""The slot table: how a fixed-size discrete action maps onto a decision (docs/gymnasium.md shows it), shared by the
Gymnasium bridge and served checkpoints so a policy acts in service exactly as it acted in training."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..environment.decisions import BACKFILL, INSPECT, KILL, SELECT, SELECT_KILL, Action, Decision
from ..environment.errors import HpcgymError


def slot_mask(decision: Decision, window: int) -> tuple[np.ndarray, list[int]]:
    """The int8 action mask of `decision` over `window` slots (1 = allowed), and the job id of each job slot."""
    kind, w = decision.kind, window
    if kind == INSPECT:
        return np.ones(2, np.int8), []
    if kind == SELECT_KILL:  # row k of the running table is slot W + k, whether or not it is offered
        queued = decision.context["queued"]
        running = list(decision.observation["running"]["id"][:w])
        offered = set(decision.candidates[queued:])
        mask = np.zeros(2 * w + 1, np.int8)
        mask[:queued] = 1
        mask[w:w + len(running)] = [j in offered for j in running]
        mask[2 * w] = decision.can_wait
        return mask, [*decision.candidates[:queued], *[None] * (w - queued), *running]
    mask = np.zeros(w + 1, np.int8)
    if kind == SELECT:
        ids = list(decision.candidates[:w])
        mask[:len(ids)] = 1
        mask[w] = decision.can_wait
    elif kind == BACKFILL:
        ids = list(decision.observation["queue"]["id"][:w])
        candidates = set(decision.candidates)
        mask[:len(ids)] = [j in candidates for j in ids]
        mask[w] = decision.can_wait or not mask[:w].any()  # stop if no candidate is in the window
    elif kind == KILL:
        ids = list(decision.candidates[:w])
        mask[:len(ids) + 1] = 1
    else:
        raise HpcgymError(f"unknown decision kind {kind!r}")
    return mask, ids


def slot_observation(encoder: Any, observation: dict[str, Any], kind: str, kinds: Sequence[str]) -> np.ndarray:
    """A decision's network input: the encoder's vector, followed by a one-hot flag of the
    decision's kind when the policy takes several kinds (DRAS: select and backfill)."""
    if len(kinds) == 1:
        return encoder.encode(observation)
    obs = np.zeros(encoder.size + len(kinds), np.float32)
    encoder.fill(observation, obs[:encoder.size])
    obs[encoder.size + list(kinds).index(kind)] = 1.0
    return obs


def drop_last_slot(mask: np.ndarray) -> np.ndarray:
    """A select or backfill mask without its last slot (wait / stop) whenever a job slot is allowed: the RL scheduling
    papers' agents always pick a job, and DRAS's level 2 backfills until no candidate is left."""
    if mask[:-1].any() and mask[-1]:
        mask = mask.copy()
        mask[-1] = 0
    return mask


def slot_action(kind: str, slot: int, ids: list[int], window: int) -> Action:
    """What the simulation takes for `slot` of a decision of `kind` (see the table)."""
    if kind == INSPECT:
        return slot == 0
    if kind == KILL:
        return None if slot == 0 else ids[slot - 1]
    if kind == SELECT_KILL:
        return None if slot == 2 * window else ids[slot]
    return None if slot == window else ids[slot]


def action_slot(kind: str, action: Action, ids: list[int], window: int) -> int:
    """The slot that names `action` for a decision of `kind` (the inverse of `slot_action`);
    -1 for a select action naming several jobs, which no single slot names."""
    if kind == INSPECT:
        return 0 if action else 1
    if isinstance(action, (list, tuple)):
        if len(action) != 1:
            return window if not action and kind == SELECT else -1
        action = action[0]
    if action is None:
        return 0 if kind == KILL else 2 * window if kind == SELECT_KILL else window
    k = ids.index(int(action))
    return k + 1 if kind == KILL else k


NOTHING = ("none", 0)  #: The meaning of the slot that does nothing (wait, stop, kill nothing).


def slot_meanings(kind: str, window: int) -> list[tuple[str, int]]:
    """What each slot of a decision of `kind` does, comparable across kinds (("queued", k), ("running", k), ("none", 0),
    ...), so one kind's network can start another's output rows."""
    w = window
    if kind == INSPECT:
        return [("accept", 0), ("reject", 0)]
    if kind == KILL:
        return [NOTHING, *(("running", k) for k in range(w))]
    if kind == SELECT_KILL:
        return [*(("queued", k) for k in range(w)), *(("running", k) for k in range(w)), NOTHING]
    if kind in (SELECT, BACKFILL):
        return [*(("queued", k) for k in range(w)), NOTHING]
    raise HpcgymError(f"unknown decision kind {kind!r}")


def kill_prior(kind: str, window: int, rate: float) -> list[float]:
    """Initial actor biases under which an untrained policy kills with probability about `rate`: a near-uniform start
    kills at almost every kill decision, so its episodes never end (docs/rlschert.md, "Why the kill agents stalled")."""
    if kind not in (KILL, SELECT_KILL):
        raise HpcgymError(f"a kill prior is for the kill and select_kill kinds, not {kind!r}")
    if not 0 < rate < 1:
        raise HpcgymError(f"the kill prior's rate is a probability between 0 and 1 (exclusive), got {rate!r}")
    bias = math.log(rate / (1 - rate) / window)
    return [0.0] + [bias] * window if kind == KILL else [0.0] * window + [bias] * window + [0.0]
