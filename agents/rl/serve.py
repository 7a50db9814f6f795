"""Serve a trained checkpoint as an `Agent`: in process (`simulate(..., agents=...)`) or over
the protocol (`hpcgym agent --model ckpt.pt --connect ADDR`).

The agent encodes the decision's raw observation with the checkpoint's encoder and window,
builds the action mask, asks the network for the best valid slot (or samples one with a seeded
generator), and maps the slot back to what the simulation expects, through the slot table of
`agents/slots.py` that `HpcEnv` uses too, so a policy acts here exactly as it acted in training. A checkpoint trained
with `no_wait` (select without waiting while a job can be picked) gets the same rule here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...environment.decisions import SELECT, Action, Decision
from ...environment.errors import HpcgymError
from ..base import Agent
from ..slots import slot_action, slot_mask
from .checkpoint import Checkpoint, load_checkpoint


def drop_wait(mask: np.ndarray) -> np.ndarray:
    """A select mask without its wait slot (the last) whenever some job slot is allowed."""
    if mask[:-1].any() and mask[-1]:
        mask = mask.copy()
        mask[-1] = 0
    return mask


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
