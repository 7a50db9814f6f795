"""Checkpoints: one `torch.save`d map of plain values, loaded `weights_only` so opening one never runs code
(docs/architecture.md, "Checkpoint files", lists the fields)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...environment.errors import HpcgymError
from ...environment.spec import WorkloadSpec
from .algorithm import Algorithm, config_to_dict
from .algorithms import get_algorithm, recorded_config

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

    def trained_workload(self) -> WorkloadSpec:
        """The workload the policy was trained on, so that evaluating it on another is said aloud, never an
        accident; a trace recorded by a path this machine lacks is looked up by name ($HPCGYM_TRACES)."""
        workload = dict(self.env.get("workload") or {})
        trace = workload.get("trace")
        if trace is not None and not Path(trace).exists():
            workload["trace"] = Path(trace).name
        return WorkloadSpec.from_dict(workload)

    def trained_options(self) -> dict[str, Any]:
        """The simulation options (rules, window, base policy) it was trained under."""
        return dict(self.env.get("options") or {})


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
    return value if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)) else str(value)


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
    fields["config"] = recorded_config(fields["algorithm"], fields["config"])
    return Checkpoint(**fields)


def latest_checkpoint(folder: str | Path) -> Path | None:
    """The checkpoint of the highest epoch in `folder` (files epoch_NNNNNN.pt), or None."""
    files = sorted(p for p in Path(folder).glob("epoch_*.pt") if p.stem[len("epoch_"):].isdigit())
    return files[-1] if files else None


def start_from(algo: Algorithm, source: Checkpoint, kind: str, encoder: str | None, window: int | None) -> None:
    """Load `source`'s weights into `algo`, a fresh run taking `kind`, output rows matched by what their slots do. A row
    with no counterpart (a kill slot) starts as the source's do-nothing row plus its fresh offset (the kill prior): kept
    fresh, it would compete with trained rows far lower in states the source never met."""
    from ..slots import NOTHING, slot_meanings

    if tuple(source.obs_shape) != tuple(algo.obs_shape) or source.encoder != encoder:
        raise CheckpointError(f"--init-from needs the observation of this run: the checkpoint encodes with "
                              f"{source.encoder!r} into {tuple(source.obs_shape)}, this run with {encoder!r} into "
                              f"{tuple(algo.obs_shape)}; give --encoder {source.encoder}")
    if source.algorithm != algo.name:
        raise CheckpointError(f"--init-from: the checkpoint was trained with {source.algorithm}, this run uses "
                              f"{algo.name}: their networks differ")
    rows, new_rows = None, []
    if source.kind != kind:
        if "+" in source.kind or "+" in kind or source.window != window:
            raise CheckpointError(f"--init-from maps output slots between two single decision kinds of one "
                                  f"window; the checkpoint takes {source.kind} over {source.window} slots, this run "
                                  f"{kind} over {window}")
        have = {meaning: i for i, meaning in enumerate(slot_meanings(source.kind, source.window))}
        wanted = slot_meanings(kind, window)
        rows = [(t, have[meaning]) for t, meaning in enumerate(wanted) if meaning in have]
        if NOTHING in have and NOTHING in wanted:   # the do-nothing rows the new ones are set against
            nothing = (have[NOTHING], wanted.index(NOTHING))
            new_rows = [t for t, meaning in enumerate(wanted) if meaning not in have]
        if source.n_actions == algo.n_actions:
            if rows != [(t, t) for t in range(algo.n_actions)]:
                raise CheckpointError(f"--init-from: {source.kind} and {kind} have as many slots in another "
                                      "order, which the output layer cannot tell from a hidden one")
            rows = None
    weights = algo.weights()
    for module, params in weights.items():
        for name, target in params.items():
            value = source.state["weights"].get(module, {}).get(name)
            if value is not None and value.shape == target.shape:
                params[name] = value.clone()
            elif value is not None and rows is not None and value.shape[1:] == target.shape[1:] \
                    and (value.shape[0], target.shape[0]) == (source.n_actions, algo.n_actions):
                fresh = target.clone()
                for t, s in rows:  # the output layer: rows of the same meaning
                    target[t] = value[s]
                for t in new_rows:   # the others: do nothing, shifted as the fresh start shifts them
                    target[t] = value[nothing[0]] + fresh[t] - fresh[nothing[1]]
            else:
                raise CheckpointError(f"--init-from: the checkpoint has no weights of the shape {tuple(target.shape)} "
                                      f"for {module}.{name}: another network (--net, --hidden)")
    algo.load_weights(weights)
