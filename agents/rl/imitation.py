"""Imitation of a teacher agent (RLSchert's eq. 11): the term -log pi(a_teacher | s) and the labeller. A kill is
labelled once per run of a job: labelling every later state "kill" taught the student kills everywhere
(docs/rlschert.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...environment.decisions import KILL, SELECT_KILL
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
    killed: set[tuple[int, int]] = set()   # (job, start) of each run the teacher has said to kill

    def label(info: dict[str, Any]) -> int:
        decision = info.get("decision")
        if decision is None or decision.kind not in agent.kinds:
            return -1
        _, ids = slot_mask(decision, window)
        action = agent.act(decision)
        try:
            slot = action_slot(decision.kind, action, ids, window)
        except ValueError:  # a job outside the window's slots
            return -1
        mask = info["action_mask"]
        if not (0 <= slot < len(mask) and mask[slot]):
            return -1
        run = _killed_run(decision, action)
        if run is not None:
            if run in killed:
                return -1
            killed.add(run)
        return slot

    return label


def _killed_run(decision: Any, action: Any) -> tuple[int, int] | None:
    """(job, start) when `action` kills a running job, else None."""
    if decision.kind not in (KILL, SELECT_KILL) or action is None or isinstance(action, (list, tuple)):
        return None
    running = decision.observation["running"]
    ids = list(running["id"])
    if int(action) not in ids:
        return None   # select_kill's pick of a queued job
    return int(action), int(running["start"][ids.index(int(action))])
