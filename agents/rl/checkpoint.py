"""Checkpoints: the weights together with everything needed to use or resume them.

A checkpoint is one `torch.save`d map of plain values (loaded with `weights_only=True`, so
opening one never runs code):

    format      "hpcgym-rl/1"
    algorithm   pg, a2c, ppo or dql          config   that algorithm's config, as a map
    kind        the decision kind it takes   obs_shape, n_actions   the network's sizes
    encoder     observation encoder name     window   the visible window it was trained with
    seed, epoch                              state    weights, optimizer and RNG states
    env         how the training env was made (workload, options, reward), for reference
    trainer     what resuming needs: next episode index, the learning curve so far, settings

so `hpcgym agent --model ckpt.pt` can rebuild the policy and its encoder with no other flags.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...environment.errors import HpcgymError
from .algorithm import Algorithm, config_to_dict
from .algorithms import get_algorithm

FORMAT = "hpcgym-rl/1"


class CheckpointError(HpcgymError):
    """A checkpoint file is missing or is not one of ours."""


@dataclass
class Checkpoint:
    algorithm: str
    config: dict[str, Any]
    obs_shape: tuple[int, ...]
    n_actions: int
    kind: str = "select"
    encoder: str | None = None
    window: int | None = None
    seed: int = 0
    epoch: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)

    def build(self, device: str | torch.device = "cpu") -> Algorithm:
        """The algorithm with this checkpoint's config and full state (weights, optimizer, RNG)."""
        algo = get_algorithm(self.algorithm)(self.obs_shape, self.n_actions, self.config, device=device,
                                             seed=self.seed)
        if self.state:
            algo.load_state_dict(self.state)
        return algo


def checkpoint_kinds(kind: str) -> tuple[str, ...]:
    """The kinds a checkpoint's (or training's) `kind` names: one kind, or several joined by "+"."""
    return tuple(kind.split("+"))


def _plain(value: Any) -> Any:
    """Only values the weights-only unpickler accepts (paths and other objects become str)."""
    if isinstance(value, dict):  # int keys stay: an optimizer's state is keyed by parameter index
        return {k if isinstance(k, (int, str)) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return value
    return str(value)


def make_checkpoint(algo: Algorithm, *, kind: str = "select", encoder: str | None = None,
                    window: int | None = None, epoch: int = 0, env: dict[str, Any] | None = None,
                    trainer: dict[str, Any] | None = None) -> Checkpoint:
    return Checkpoint(algo.name, config_to_dict(algo.config), algo.obs_shape, algo.n_actions, kind, encoder,
                      window, algo.seed, epoch, algo.state_dict(), dict(env or {}), dict(trainer or {}))


def save_checkpoint(path: str | Path, checkpoint: Checkpoint) -> Path:
    """Write atomically (a crash mid-write never leaves a half checkpoint under `path`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": FORMAT, **{k: getattr(checkpoint, k) for k in Checkpoint.__dataclass_fields__}}
    data["obs_shape"] = list(checkpoint.obs_shape)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(_plain(data), tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    path = Path(path)
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path}") from None
    except Exception as exc:  # pickle errors of all kinds: say which file and why
        raise CheckpointError(f"{path} is not an hpcgym checkpoint: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an hpcgym checkpoint (format {FORMAT})")
    fields = {k: data[k] for k in Checkpoint.__dataclass_fields__ if k in data}
    fields["obs_shape"] = tuple(fields["obs_shape"])
    return Checkpoint(**fields)


def latest_checkpoint(folder: str | Path) -> Path | None:
    """The checkpoint of the highest epoch in `folder` (files epoch_NNNNNN.pt), or None."""
    files = sorted(p for p in Path(folder).glob("epoch_*.pt") if p.stem[len("epoch_"):].isdigit())
    return files[-1] if files else None
