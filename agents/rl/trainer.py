"""The training loop around any algorithm: epochs, a learning curve, checkpoints, resuming,
and a greedy evaluation on held-out sequences.

Everything random follows from one seed: the network's initial weights and the algorithm's
numpy generator come from it, and training episode j is reset with `train_seed(seed, j)` (the
episode seed of an hpcgym env: which window of the trace, which generated workload). A
checkpoint holds the weights, the optimizer state, the generator state and the next episode
index, so a resumed run continues exactly as an uninterrupted one would have.

Files in the output folder:

    curve.csv            one row per epoch (returns, scheduling metrics, losses, seconds)
    epoch_NNNNNN.pt      checkpoints (every `checkpoint_every` epochs and the last one); DQL's
                         replay buffer beside the newest one (epoch_NNNNNN.replay.pt)
    model.pt             the final policy (the last checkpoint), for `hpcgym agent --model`
    eval.json            the held-out evaluation
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from .algorithm import Algorithm, config_from_dict, get_algorithm
from .checkpoint import (Checkpoint, CheckpointError, latest_checkpoint, load_checkpoint, make_checkpoint,
                         save_checkpoint)
from .runner import Runner
from .serve import drop_wait

SEED_SPACE = 2 ** 30


def train_seed(seed: int, episode: int) -> int:
    """Episode seed of training episode `episode` (in [0, 2^30))."""
    return (seed * 1_000_003 + episode) % SEED_SPACE


def eval_seed(seed: int, k: int) -> int:
    """Episode seed of held-out episode k: in [2^30, 2^31), never a training seed."""
    return SEED_SPACE + (seed * 1_009 + k) % SEED_SPACE


@dataclass
class TrainSettings:
    """What a training run is: the env (as `gymbridge.make` keywords), the algorithm and the loop."""

    algorithm: str = "ppo"
    kind: str = "select"
    workload: dict[str, Any] = field(default_factory=lambda: {"jobs": 256, "sample": True})
    eval_workload: dict[str, Any] | None = None   # default: `workload` (other seeds)
    options: dict[str, Any] = field(default_factory=dict)
    reward: str = "bsld"
    encoder: str | None = None
    config: dict[str, Any] = field(default_factory=dict)   # algorithm config overrides
    epochs: int = 10
    trajectories: int = 100       # episodes per epoch
    envs: int = 1                 # envs stepped together (one batched forward pass per round)
    seed: int = 0
    checkpoint_every: int = 1
    eval_episodes: int = 10
    baselines: Sequence[str] = ("fcfs", "sjf")
    no_wait: bool = False         # select: never wait while a job can be picked (as the RL papers)
    max_steps: int | None = None  # cut an episode after this many decisions (None: never)

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))

    @classmethod
    def from_json(cls, data: dict[str, Any], **overrides: Any) -> TrainSettings:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{**{k: v for k, v in data.items() if k in known}, **overrides})


def make_env(settings: TrainSettings, workload: dict[str, Any] | None = None, remote: str | None = None):
    from ...gymbridge import make

    env = make(settings.kind, workload=dict(workload or settings.workload), options=dict(settings.options),
               reward=settings.reward, encoder=settings.encoder, seed=settings.seed, remote=remote,
               decision_info=False)
    return NoWait(env) if settings.no_wait and settings.kind == "select" else env


class NoWait(gym.Wrapper):
    """The select env without its wait action whenever a job can be picked (the RL scheduling
    papers' setting); `RLAgent` applies the same rule when a checkpoint says `no_wait`."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, self._fix(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._fix(info)

    @staticmethod
    def _fix(info: dict[str, Any]) -> dict[str, Any]:
        if "action_mask" in info:
            info["action_mask"] = drop_wait(info["action_mask"])
        return info


def table_layout(env) -> list[int] | None:
    """(offset, rows, columns) of the first table in the env's encoder, for the conv network."""
    for _, offset, shape in getattr(getattr(env.unwrapped, "encoder", None), "parts", []):
        if len(shape) == 2:
            return [offset, shape[0], shape[1]]
    return None


class Trainer:
    """Train `settings.algorithm` on hpcgym envs (or on any envs from `env_fn`)."""

    def __init__(self, settings: TrainSettings, out: str | Path, *, device: str = "auto",
                 env_fn: Callable[[int], Any] | None = None, progress: bool | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.out = Path(out)
        self.device = device
        self.env_fn = env_fn or (lambda i: make_env(settings))
        self.progress = progress
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.history: list[dict[str, Any]] = []
        self.algo: Algorithm | None = None
        self.runner: Runner | None = None
        self.epoch = 0

    # ---------------------------------------------------------------- set-up
    def setup(self, resume: bool = False) -> None:
        s = self.settings
        envs = [self.env_fn(i) for i in range(s.envs)]
        self.envs = envs
        ckpt_path = latest_checkpoint(self.out) if resume else None
        if resume and ckpt_path is None:
            raise CheckpointError(f"nothing to resume: no epoch_*.pt checkpoint in {self.out}")
        if ckpt_path is not None:
            ckpt = load_checkpoint(ckpt_path)
            replay = ckpt_path.with_suffix(".replay.pt")
            if replay.exists():  # DQL's replay buffer, kept beside the newest checkpoint only
                import torch

                ckpt.state["extra"]["buffer"] = torch.load(replay, map_location="cpu", weights_only=True)
            if ckpt.algorithm != s.algorithm.lower():
                raise CheckpointError(f"{ckpt_path} was trained with {ckpt.algorithm}, not {s.algorithm}")
            self.algo = ckpt.build(self.device)
            self.epoch = ckpt.epoch
            self.history = list(ckpt.trainer.get("history", []))
            next_episode = int(ckpt.trainer.get("next_episode", 0))
            self.log(f"resuming from {ckpt_path} (epoch {ckpt.epoch})")
        else:
            cls = get_algorithm(s.algorithm)
            config = dict(s.config)
            flat = len(envs[0].observation_space.shape) == 1
            if config.get("net") == "conv" and config.get("table") is None and flat:
                config["table"] = table_layout(envs[0])
            self.algo = cls(envs[0].observation_space.shape, envs[0].action_space.n,
                            config_from_dict(cls.Config, config), device=self.device, seed=s.seed)
            next_episode = 0
        self.runner = Runner(envs, lambda j: train_seed(s.seed, j), next_episode, s.max_steps)

    # ---------------------------------------------------------------- the loop
    def train(self, resume: bool = False) -> list[dict[str, Any]]:
        from tqdm import tqdm

        s = self.settings
        self.setup(resume)
        self.out.mkdir(parents=True, exist_ok=True)
        self._write_curve()
        with tqdm(total=s.epochs, initial=min(self.epoch, s.epochs), unit="epoch", file=sys.stderr,
                  disable=None if self.progress is None else not self.progress, dynamic_ncols=True) as bar:
            while self.epoch < s.epochs:
                t0, steps_before = time.perf_counter(), self.runner.steps
                stats = self.algo.train_epoch(self.runner, s.trajectories)
                self.epoch += 1
                steps = (self.history[-1]["steps_total"] if self.history else 0) + self.runner.steps - steps_before
                row = {"epoch": self.epoch, "episodes_total": self.runner.next_episode, "steps_total": steps,
                       **stats, "seconds": round(time.perf_counter() - t0, 3)}
                self.history.append(row)
                self._write_curve()
                if self.epoch % s.checkpoint_every == 0 or self.epoch == s.epochs:
                    self.save()
                bar.update(1)
                bar.set_postfix({k: f"{row[k]:.3g}" for k in ("return", "mean_bsld") if k in row})
        if self.history and latest_checkpoint(self.out) is not None:
            save_checkpoint(self.out / "model.pt", self._without_buffer(self.checkpoint()))
        return self.history

    def checkpoint(self) -> Checkpoint:
        s = self.settings
        env = self.envs[0].unwrapped
        env_info = {"workload": s.workload, "options": s.options, "reward": s.reward, "no_wait": s.no_wait,
                    "encoder_options": {"max_rejections": env.config.max_rejections}
                    if hasattr(env, "config") else {}}
        return make_checkpoint(self.algo, kind=s.kind, encoder=getattr(getattr(env, "encoder", None), "name", None),
                               window=getattr(env, "window", None), epoch=self.epoch, env=env_info,
                               trainer={"next_episode": self.runner.next_episode, "history": self.history,
                                        "settings": s.to_json()})

    def save(self) -> Path:
        """epoch_NNNNNN.pt; a replay buffer (DQL) goes beside it in epoch_NNNNNN.replay.pt, and
        only the newest is kept (it is large, and only resuming needs it)."""
        import torch

        ckpt = self.checkpoint()
        path = self.out / f"epoch_{self.epoch:06d}.pt"
        buffer = ckpt.state.get("extra", {}).get("buffer")
        if buffer is not None:
            tmp = self.out / "replay.tmp"
            torch.save(buffer, tmp)
            tmp.replace(path.with_suffix(".replay.pt"))
        save_checkpoint(path, self._without_buffer(ckpt))
        for old in self.out.glob("epoch_*.replay.pt"):
            if old.name != path.with_suffix(".replay.pt").name:
                old.unlink()
        return path

    @staticmethod
    def _without_buffer(ckpt: Checkpoint) -> Checkpoint:
        extra = ckpt.state.get("extra", {})
        if "buffer" in extra:
            ckpt.state = {**ckpt.state, "extra": {k: v for k, v in extra.items() if k != "buffer"}}
        return ckpt

    def _write_curve(self) -> None:
        columns: list[str] = []
        for row in self.history:
            columns += [k for k in row if k not in columns]
        tmp = self.out / "curve.csv.tmp"
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, columns or ["epoch"])
            writer.writeheader()
            writer.writerows(self.history)
        tmp.replace(self.out / "curve.csv")

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, episodes: int | None = None) -> dict[str, Any]:
        """The greedy policy on held-out episode seeds, next to the baselines on the same sequences."""
        s = self.settings
        n = s.eval_episodes if episodes is None else episodes
        seeds = [eval_seed(s.seed, k) for k in range(n)]
        result = evaluate_policy(self.algo, s, seeds)
        (self.out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
        return result


def evaluate_policy(algo: Algorithm, settings: TrainSettings, seeds: Sequence[int]) -> dict[str, Any]:
    """Greedy episodes of `algo` in an hpcgym env, one per seed; the baselines' metrics on the same
    job sequences through `simulate`."""
    from ...environment.simulator import simulate
    from ...environment.spec import load_workload, sim_config

    workload = settings.eval_workload or settings.workload
    env = make_env(settings, workload)
    runner_seeds = list(seeds)
    runner = Runner([env], lambda k: runner_seeds[k], max_steps=settings.max_steps)
    ended = runner.run_epoch(len(runner_seeds), lambda obs, mask: (algo.act(obs, mask, greedy=True), {}))
    ended = sorted((e for e in ended if "metrics" in e.info), key=lambda e: e.index)  # cut ones have none
    seeds = [runner_seeds[e.index] for e in ended]
    per_episode = {"seed": seeds, settings.algorithm: [e.info["metrics"] for e in ended]}
    options = {k: v for k, v in settings.options.items() if k != "policy"}
    for name in settings.baselines:
        per_episode[name] = []
        for seed in seeds:
            spec = dict(workload)
            if spec.get("sample") is not None:
                spec["sample"] = seed
            per_episode[name].append(dict(simulate(load_workload(spec, seed), sim_config(options, seed),
                                                   policy=name).summary))
    summary = {}
    for name in (settings.algorithm, *settings.baselines) if seeds else ():
        runs = per_episode[name]
        summary[name] = {k: float(np.mean([r[k] for r in runs])) for k in ("mean_bsld", "mean_wait", "utilization",
                                                                              "max_bsld")}
    env.close()
    return {"episodes": len(seeds), "cut": len(runner_seeds) - len(seeds), "workload": workload,
            "summary": summary, "per_episode": per_episode}
