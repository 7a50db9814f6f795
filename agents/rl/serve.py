"""Serve a trained checkpoint as an `Agent`: in process (`simulate(..., agents=...)`) or over
the protocol (`hpcgym agent --model ckpt.pt --connect ADDR`).

The agent encodes the decision's raw observation with the checkpoint's encoder and window,
builds the action mask, asks the network for the best valid slot (or samples one with a seeded
generator), and maps the slot back to what the simulation expects, following the slot table of
`gymbridge/env.py`:

| kind     | slot k < W                         | slot W (or 0 for kill)     |
|----------|------------------------------------|----------------------------|
| select   | the k-th candidate (queue window)  | wait (if the decision can) |
| backfill | the k-th queue-window job, if it is a backfill candidate | stop |
| kill     | slot k >= 1: the (k-1)-th running job | slot 0: kill nothing    |
| inspect  | 0: accept, 1: reject               |                            |

so a policy acts here exactly as it acted in `HpcEnv` during training. A checkpoint trained
with `no_wait` (select without waiting while a job can be picked) gets the same rule here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...environment.decisions import BACKFILL, INSPECT, KILL, SELECT, Action, Decision
from ...environment.errors import HpcgymError
from ..base import Agent
from .checkpoint import Checkpoint, load_checkpoint


def slot_mask(decision: Decision, window: int) -> tuple[np.ndarray, list[int]]:
    """The action mask of `decision` for a policy over `window` slots, and the job id of each slot."""
    kind, w = decision.kind, window
    if kind == INSPECT:
        return np.ones(2, dtype=bool), []
    mask = np.zeros(w + 1, dtype=bool)
    if kind == SELECT:
        ids = list(decision.candidates[:w])
        mask[:len(ids)] = True
        mask[w] = decision.can_wait
    elif kind == BACKFILL:
        ids = list(decision.observation["queue"]["id"][:w])
        candidates = set(decision.candidates)
        mask[:len(ids)] = [j in candidates for j in ids]
        mask[w] = True
    elif kind == KILL:
        ids = list(decision.candidates[:w])
        mask[:len(ids) + 1] = True
    else:
        raise HpcgymError(f"unknown decision kind {kind!r}")
    return mask, ids


def drop_wait(mask: np.ndarray) -> np.ndarray:
    """A select mask without its wait slot (the last) whenever some job slot is allowed."""
    if mask[:-1].any() and mask[-1]:
        mask = mask.copy()
        mask[-1] = 0
    return mask


def slot_action(kind: str, slot: int, ids: list[int], window: int) -> Action:
    """What the simulation takes for `slot` (see the module's table)."""
    if kind == INSPECT:
        return slot == 0
    if kind == KILL:
        return None if slot == 0 else ids[slot - 1]
    return None if slot == window else ids[slot]


class RLAgent(Agent):
    """A checkpoint's policy as an agent for the checkpoint's decision kind."""

    def __init__(self, model: str | Path | Checkpoint, greedy: bool = True, seed: int = 0,
                 device: str = "cpu") -> None:
        from ..encoders import get_encoder

        self.checkpoint = model if isinstance(model, Checkpoint) else load_checkpoint(model)
        ckpt = self.checkpoint
        if not ckpt.encoder or not ckpt.window:
            raise HpcgymError("this checkpoint names no encoder or window; it was not trained on an hpcgym env")
        self.kinds = (ckpt.kind,)
        self.window = int(ckpt.window)
        self.algorithm = ckpt.build(device)
        self.encoder = get_encoder(ckpt.encoder, self.window, None, **ckpt.env.get("encoder_options", {}))
        if self.encoder.size != int(np.prod(ckpt.obs_shape)):
            raise HpcgymError(f"encoder {ckpt.encoder!r} gives {self.encoder.size} features but the network "
                              f"takes {int(np.prod(ckpt.obs_shape))}")
        self.no_wait = bool(ckpt.env.get("no_wait")) and ckpt.kind == SELECT
        self.greedy = greedy
        self.rng = None if greedy else np.random.default_rng(seed)

    def act(self, decision: Decision) -> Action:
        obs = self.encoder.encode(decision.observation).reshape(self.checkpoint.obs_shape)
        mask, ids = slot_mask(decision, self.window)
        if self.no_wait:
            mask = drop_wait(mask)
        slot = int(self.algorithm.act(obs[None], mask[None], greedy=self.greedy, rng=self.rng)[0])
        return slot_action(decision.kind, slot, ids, self.window)

    def describe(self) -> dict[str, Any]:
        c = self.checkpoint
        return {"algorithm": c.algorithm, "kind": c.kind, "encoder": c.encoder, "window": c.window,
                "epoch": c.epoch, "greedy": self.greedy}
