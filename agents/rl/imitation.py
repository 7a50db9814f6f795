"""Imitation of a teacher agent (RLSchert's eq. 11): the term -log pi(a_teacher | s), and the
labeller that turns any agent's answer to a decision into the env's discrete action.

The teacher is any `Agent` (a heuristic, the rule-based kill, a served checkpoint): it is shown
the same pending decision the learner acts on (the env's `info["decision"]`), and its action is
mapped onto the slot table (agents/slots.py) with the env's window. States the teacher does not
decide (another kind) or whose answer no allowed slot names are left unlabelled (-1) and add
nothing to the term.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..base import Agent
from ..slots import action_slot, slot_mask
from .policy import MaskedCategorical


def imitation_loss(dist: MaskedCategorical, teacher: torch.Tensor) -> torch.Tensor:
    """mean over the labelled rows (teacher >= 0) of -log pi(teacher | s); 0 when none is."""
    labelled = teacher >= 0
    if not bool(labelled.any()):
        return torch.zeros((), device=teacher.device)
    return -dist.log_prob(teacher.clamp(min=0))[labelled].mean()


def teacher_labeller(agent: Agent, window: int) -> Callable[[dict[str, Any]], int]:
    """info -> the slot the teacher's action names in the state `info` describes (-1: none).
    Needs envs made with `decision_info=True`."""
    def label(info: dict[str, Any]) -> int:
        decision = info.get("decision")
        if decision is None or decision.kind not in agent.kinds:
            return -1
        _, ids = slot_mask(decision, window)
        try:
            slot = action_slot(decision.kind, agent.act(decision), ids, window)
        except ValueError:  # a job outside the window's slots
            return -1
        mask = info["action_mask"]
        return slot if 0 <= slot < len(mask) and mask[slot] else -1

    return label
