"""Serve a trained checkpoint as an `Agent`, in process or over the protocol, through the same slot table, encoder,
window and `no_wait` rule as in training, so a policy acts here as it acted there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...environment.decisions import BACKFILL, SELECT, Action, Decision
from ...environment.errors import HpcgymError
from ..base import Agent
from ..slots import drop_last_slot, slot_action, slot_mask, slot_observation
from .checkpoint import Checkpoint, checkpoint_kinds, load_checkpoint
from .networks import first_equal_slot


class RLAgent(Agent):
    """A checkpoint's policy as an agent for the checkpoint's decision kind(s)."""

    def __init__(self, model: str | Path | Checkpoint, greedy: bool = True, seed: int = 0,
                 device: str = "cpu") -> None:
        from ..encoders import get_encoder

        self.checkpoint = model if isinstance(model, Checkpoint) else load_checkpoint(model)
        ckpt = self.checkpoint
        if not ckpt.encoder or not ckpt.window:
            raise HpcgymError("this checkpoint names no encoder or window; it was not trained on an hpcgym env")
        self.kinds = checkpoint_kinds(ckpt.kind)
        self.window = int(ckpt.window)
        self.algorithm = ckpt.build(device)
        self.encoder = get_encoder(ckpt.encoder, self.window, ckpt.env.get("procs"),
                                   **ckpt.env.get("encoder_options", {}))
        size = self.encoder.size + (len(self.kinds) if len(self.kinds) > 1 else 0)
        if size != int(np.prod(ckpt.obs_shape)):
            raise HpcgymError(f"encoder {ckpt.encoder!r} gives {size} features but the network "
                              f"takes {int(np.prod(ckpt.obs_shape))}")
        self.no_wait = bool(ckpt.env.get("no_wait"))
        self.greedy, self.rng = greedy, None if greedy else np.random.default_rng(seed)

    def observe(self, decision: Decision) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """The network input, the action mask and the job id of each slot, as the env gave them in training."""
        obs = slot_observation(self.encoder, decision.observation, decision.kind, self.kinds)
        mask, ids = slot_mask(decision, self.window)
        if self.no_wait and decision.kind in (SELECT, BACKFILL):
            mask = drop_last_slot(mask)
        return obs.reshape(self.checkpoint.obs_shape), mask, ids

    def act(self, decision: Decision) -> Action:
        obs, mask, ids = self.observe(decision)
        slot = int(self.algorithm.act(obs[None], mask[None], greedy=self.greedy, rng=self.rng)[0])
        if self.greedy:
            slot = first_equal_slot(self.algorithm.acting_network(), obs, mask, slot)
        return slot_action(decision.kind, slot, ids, self.window)

    def describe(self) -> dict[str, Any]:
        c = self.checkpoint
        return {"algorithm": c.algorithm, "kind": c.kind, "encoder": c.encoder, "window": c.window,
                "epoch": c.epoch, "greedy": self.greedy}
