"""The training loop around any algorithm: epochs, curve.csv, checkpoints (a resumed run goes on exactly as an
uninterrupted one), the held-out evaluation through `hpcgym compare`; all randomness follows one seed."""

from __future__ import annotations

import csv
import functools
import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch

from ...agents.rl.algorithm import Algorithm, config_from_dict
from ...agents.rl.algorithms import config_to_record, get_algorithm, recorded_config
from ...agents.rl.checkpoint import (Checkpoint, CheckpointError, checkpoint_kinds, latest_checkpoint, load_checkpoint,
                         make_checkpoint, save_checkpoint, start_from)
from ...agents.rl.runner import Runner
from ...agents.slots import drop_last_slot
from ...environment.decisions import BACKFILL, KILL, SELECT
from ...environment.config import SimConfig
from ...environment.errors import ConfigError
from ..progress import progress
from ..provenance import provenance
from ..vector import usable_cores

if TYPE_CHECKING:
    from ..compare.plan import SequenceSpec

SEED_SPACE = 2 ** 30


def train_seed(seed: int, episode: int) -> int:
    """Episode seed of training episode `episode` (in [0, 2^30))."""
    return (seed * 1_000_003 + episode) % SEED_SPACE


def eval_seed(seed: int) -> int:
    """Sample seed of held-out sequence 0 (k has eval_seed(seed) + k): at least 2^30, never a training seed."""
    return SEED_SPACE + (seed * 1_009) % SEED_SPACE


@dataclass
class TrainSettings:
    """What a training run is: the env (as `gymbridge.make` keywords), the algorithm and the loop."""

    algorithm: str = "ppo"
    kind: str = "select"          # a decision kind, or "select+backfill" (DRAS's two levels)
    workload: dict[str, Any] = field(default_factory=lambda: {"jobs": 256, "sample": True})
    eval_workload: dict[str, Any] | None = None   # default: `workload` (other seeds)
    options: dict[str, Any] = field(default_factory=dict)
    reward: str = "bsld"
    encoder: str | None = None
    encoder_options: dict[str, Any] = field(default_factory=dict)   # e.g. {"priority_size": 26} (dras)
    config: dict[str, Any] = field(default_factory=dict)   # algorithm config overrides
    epochs: int = 10
    trajectories: int = 100       # episodes per epoch
    envs: int = 1                 # envs stepped together (one batched forward pass per round)
    seed: int = 0
    checkpoint_every: int = 1
    eval_episodes: int = 10
    baselines: Sequence[str] = ("fcfs", "sjf")
    no_wait: bool = False         # select/backfill: never wait / stop while a job can be picked (as the papers)
    max_steps: int | None = None  # cut an episode after this many decisions (None: never)
    discard_after: int | None = None  # throw an episode away at this many decisions (None: never)
    curriculum: list[list[Any]] | None = None   # [[phase, episodes], ...] (see `curriculum_phase`)
    teacher: str | None = None    # ppo: an agent (agents.runtime.load_agent's names) labelling each state for imitation
    init_from: str | None = None  # a checkpoint whose weights start the run (agents.rl.checkpoint.start_from)
    name: str | None = None       # the trained policy's name in the evaluation (e.g. schedinspector; default: algorithm)
    recipe: str | None = None     # the paper's recipe it follows (agents/recipes.py), e.g. rlbf:scw

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))

    @classmethod
    def from_json(cls, data: dict[str, Any], **overrides: Any) -> TrainSettings:
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["config"] = recorded_config(values["algorithm"], values.get("config"))
        return cls(**{**values, **overrides})


def make_env(settings: TrainSettings, workload: dict[str, Any] | None = None, remote: str | None = None):
    """The training env; with a curriculum, one env per phase behind a `PhasedEnv`."""
    from .. import make

    kinds = checkpoint_kinds(settings.kind)

    def one(spec: dict[str, Any]):
        env = make(kinds[0] if len(kinds) == 1 else kinds, workload=dict(spec), options=dict(settings.options),
                   reward=settings.reward, encoder=settings.encoder, encoder_options=settings.encoder_options,
                   seed=settings.seed, remote=remote,
                   decision_info=settings.teacher is not None)  # a teacher reads the pending decision
        return NoWait(env) if settings.no_wait and {SELECT, BACKFILL} & set(kinds) else env

    if settings.curriculum and workload is None:
        return PhasedEnv({name: one(phase_workload(settings.workload, name)) for name, _ in settings.curriculum})
    return one(workload or settings.workload)


class NoWait(gym.Wrapper):
    """The select / backfill env without its last action (wait / stop) whenever a job can be picked, as
    in the RL scheduling papers (`RLAgent` does the same for a `no_wait` checkpoint)."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, self._fix(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._fix(info)

    @staticmethod
    def _fix(info: dict[str, Any]) -> dict[str, Any]:
        if "action_mask" in info:
            info["action_mask"] = drop_last_slot(info["action_mask"])
        return info


#: DRAS's three kinds of training jobsets (section 3.3), in the paper's order.
PHASES = ("sampled", "real", "synthetic")


def phase_workload(workload: dict[str, Any], phase: str) -> dict[str, Any]:
    """The workload of a curriculum phase (DRAS 3.3: sampled jobsets, real windows, synthetic sequences)."""
    if phase not in PHASES:
        raise ConfigError(f"unknown curriculum phase {phase!r}; use {', '.join(PHASES)}")
    if workload.get("jobs") is None or workload.get("start") is not None:
        raise ConfigError("a curriculum needs episodes of --jobs N drawn at random, not one fixed --start window")
    kept = {k: v for k, v in workload.items() if k not in ("sampled_jobset", "synthetic")}
    marked = {"sampled": {"sampled_jobset": True}, "synthetic": {"synthetic": True}}.get(phase, {})
    return {**kept, "sample": True, **marked}


def parse_curriculum(text: str, total_episodes: int) -> list[list[Any]]:
    """`sampled,real,synthetic` (episodes split evenly, the remainder to the last phase) or with counts,
    `sampled:9,real:9,synthetic:82` (DRAS's Theta split); episodes past the end stay in the last phase."""
    phases: list[list[Any]] = []
    for item in (part.strip() for part in text.split(",")):
        name, sep, count = item.partition(":")
        name = name.strip().lower()
        if name not in PHASES:
            raise ConfigError(f"--curriculum: unknown phase {name!r}; use {', '.join(PHASES)} "
                              "(e.g. sampled,real,synthetic or sampled:9,real:9,synthetic:82)")
        if any(name == p for p, _ in phases):
            raise ConfigError(f"--curriculum: phase {name!r} named twice")
        try:
            episodes = int(count) if sep else None
        except ValueError:
            raise ConfigError(f"--curriculum: {item!r}: the count after ':' must be an integer") from None
        if episodes is not None and episodes < 1:
            raise ConfigError(f"--curriculum: {item!r}: a phase needs at least one episode")
        phases.append([name, episodes])
    counted = [e is not None for _, e in phases]
    if any(counted) and not all(counted):
        raise ConfigError("--curriculum: give episode counts for every phase or for none")
    if not all(counted):
        share, rest = divmod(total_episodes, len(phases))
        for i, phase in enumerate(phases):
            phase[1] = max(1, share + (rest if i == len(phases) - 1 else 0))
    return phases


def curriculum_phase(curriculum: Sequence[Sequence[Any]], episode: int) -> str:
    """The phase training episode `episode` (counted from 0 over the whole run) belongs to."""
    ends = itertools.accumulate(int(episodes) for _, episodes in curriculum)
    return next((name for (name, _), end in zip(curriculum, ends) if episode < end), curriculum[-1][0])


class PhasedEnv(gym.Env):
    """One env per curriculum phase behind one env: `reset(options={"phase": name})` picks the episode's."""

    def __init__(self, envs: dict[str, gym.Env]) -> None:
        self.envs, first = envs, next(iter(envs.values()))
        for name, env in envs.items():
            if env.observation_space != first.observation_space or env.action_space.n != first.action_space.n:
                raise ConfigError(f"curriculum phase {name!r} has other observations or actions than the first "
                                  "(different cluster sizes?)")
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self.current = first

    @property
    def unwrapped(self):
        return self.current.unwrapped

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.current = self.envs[(options or {}).get("phase", next(iter(self.envs)))]
        return self.current.reset(seed=seed)

    def step(self, action):
        return self.current.step(action)

    def close(self) -> None:
        for env in self.envs.values():
            env.close()


def dras_layout(env, config: dict[str, Any]) -> dict[str, Any]:
    """`table` = (W, N) of the env's dras encoder, and DRAS's hidden sizes unless given."""
    encoder = getattr(env.unwrapped, "encoder", None)
    if getattr(encoder, "name", None) != "dras":
        raise ConfigError("net dras needs the dras encoder (--encoder dras)")
    from ...agents.rl.dras_networks import dras_hidden

    layout = {"table": [encoder.window, encoder.procs]}
    if not config.get("hidden"):
        layout["hidden"] = list(dras_hidden(encoder.window, encoder.procs))
    return layout


def table_layout(env, kind: str = SELECT) -> list[int] | None:
    """(offset, rows, columns) of the encoder's first table (conv network); kill adds 1: row k is action k + 1."""
    for _, offset, shape in getattr(getattr(env.unwrapped, "encoder", None), "parts", []):
        if len(shape) == 2:
            return [offset, shape[0], shape[1], *([1] if kind == KILL else [])]
    return None


class Trainer:
    """Train `settings.algorithm` on hpcgym envs (or on any envs from `env_fn`)."""

    def __init__(self, settings: TrainSettings, out: str | Path, *, device: str = "auto",
                 env_fn: Callable[[int], Any] | None = None, progress: bool | None = None,
                 log: Callable[[str], None] | None = None, workers: int = 1, executor: str = "local",
                 address: str | None = None, worker_timeout: float = 600.0, threads: int | None = None) -> None:
        settings.config = config_to_record(settings.algorithm, settings.config)
        self.settings, self.out, self.device, self.progress = settings, Path(out), device, progress
        self.threads = threads   # the learner's torch threads at most (None: torch's setting, untouched)
        self.workers, self.executor, self.address, self.worker_timeout = workers, executor, address, worker_timeout
        self.env_fn = env_fn or (lambda i: make_env(settings))
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.history: list[dict[str, Any]] = []
        self.starts: list[dict[str, Any]] = []
        self.algo: Algorithm | None = None
        self.runner: Runner | None = None
        self.epoch = 0

    def setup(self, resume: bool = False) -> None:
        s = self.settings
        if s.eval_episodes:  # a held-out evaluation it cannot make fails now, not after the training
            eval_sequences(s.eval_workload or s.workload, s.eval_episodes, s.seed)
        parallel = self.workers > 1 or self.executor != "local"
        self.envs = envs = [self.env_fn(i) for i in range(1 if parallel else s.envs)]  # workers: one for the spaces
        ckpt_path = latest_checkpoint(self.out) if resume else None
        if resume and ckpt_path is None:
            raise CheckpointError(f"nothing to resume: no epoch_*.pt checkpoint in {self.out}")
        if ckpt_path is not None:
            ckpt, replay = load_checkpoint(ckpt_path), ckpt_path.with_suffix(".replay.pt")
            if replay.exists():  # DQL's replay buffer, kept beside the newest checkpoint only
                ckpt.state["extra"]["buffer"] = torch.load(replay, map_location="cpu", weights_only=True)
            if ckpt.algorithm != s.algorithm.lower():
                raise CheckpointError(f"{ckpt_path} was trained with {ckpt.algorithm}, not {s.algorithm}")
            self.algo, self.epoch = ckpt.build(self.device), ckpt.epoch
            self.history, self.starts = list(ckpt.trainer.get("history", [])), list(ckpt.trainer.get("provenance", []))
            next_episode = int(ckpt.trainer.get("next_episode", 0))
            self.log(f"resuming from {ckpt_path} (epoch {ckpt.epoch})")
        else:
            cls = get_algorithm(s.algorithm)
            config = dict(s.config)
            flat = len(envs[0].observation_space.shape) == 1
            if config.get("net") == "conv" and config.get("table") is None and flat:
                config["table"] = table_layout(envs[0], s.kind)
            if config.get("net") == "dras":
                config.update(dras_layout(envs[0], config))
            self.algo = cls(envs[0].observation_space.shape, envs[0].action_space.n,
                            config_from_dict(cls.Config, config), device=self.device, seed=s.seed)
            if s.init_from:
                start_from(self.algo, load_checkpoint(s.init_from), s.kind, *self._encoding())
                self.log(f"starting from the weights of {s.init_from}")
            next_episode = 0
        # each start and resume of the run: its commit, command and what it read
        self.starts = self.starts + [provenance(s.to_json(), [p for p in (ckpt_path, s.teacher, s.init_from) if p])]
        options_of = (lambda j: {"phase": curriculum_phase(s.curriculum, j)}) if s.curriculum else None
        seed_of = functools.partial(train_seed, s.seed)
        teacher = self._teacher()
        if not parallel:
            self.runner = Runner(envs, seed_of, next_episode, s.max_steps, options_of, s.discard_after, teacher,
                                 sampling_seed=s.seed)
            return
        from .workers import ParallelCollector, WorkerSpec, start_workers

        spec = WorkerSpec(self.env_fn, s.envs, seed_of, options_of, s.max_steps, s.discard_after,
                          functools.partial(teacher_for, s) if teacher else None, s.seed)
        self.runner = ParallelCollector(start_workers(self.workers, spec, self.executor, self.address), spec, envs[0],
                                        next_episode, self.worker_timeout)

    def _teacher(self):
        """The teacher's labeller (None without one); imitation without a teacher, or vice versa, is a mistake."""
        s, coef = self.settings, getattr(self.algo.config, "imitation_coef", None)
        if s.teacher is None:
            if coef or getattr(self.algo.config, "pretrain_epochs", 0):
                raise ConfigError("imitation_coef > 0 (or pretrain_epochs > 0) imitates a teacher: name one "
                                  "(--teacher AGENT)")
            return None
        if coef is None:
            raise ConfigError(f"--teacher needs ppo (its imitation term), not {s.algorithm}")
        return teacher_for(s)

    def train(self, resume: bool = False) -> list[dict[str, Any]]:
        self.setup(resume)
        try:
            return self._train()
        finally:
            getattr(self.runner, "close", lambda: None)()  # rollout workers (ParallelCollector) end here

    def _train(self) -> list[dict[str, Any]]:
        s = self.settings
        self.out.mkdir(parents=True, exist_ok=True)
        self._write_curve()
        lines = self.progress is None and not sys.stderr.isatty()
        bar = progress(s.epochs * s.trajectories, "episodes", "train", self.progress,
                       initial=min(self.epoch, s.epochs) * s.trajectories)

        def episode_ended(episode: Any) -> None:
            """An epoch's last episode counts once its update is done: 100% means the run is done."""
            if bar.n < (self.epoch + 1) * s.trajectories - 1:
                bar.update(1)

        self.runner.on_episode_end = episode_ended
        try:
            while self.epoch < s.epochs:
                if self.threads is not None:
                    torch.set_num_threads(free_threads(self.threads))
                t0, steps_before, discarded = time.perf_counter(), self.runner.steps, self.runner.discarded
                stats = self.algo.train_epoch(self.runner, s.trajectories)
                if s.discard_after is not None:
                    stats["discarded"] = self.runner.discarded - discarded
                self.epoch += 1
                steps = (self.history[-1]["steps_total"] if self.history else 0) + self.runner.steps - steps_before
                row = {"epoch": self.epoch, "episodes_total": self.runner.next_episode, "steps_total": steps,
                       **stats, "seconds": round(time.perf_counter() - t0, 3)}
                self.history.append(row)
                self._write_curve()
                if self.epoch % s.checkpoint_every == 0 or self.epoch == s.epochs:
                    self.save()
                bar.set_postfix_str(epoch_line(row, s.epochs))
                bar.update(self.epoch * s.trajectories - bar.n)
                if lines:
                    self.log(epoch_line(row, s.epochs))
        finally:
            bar.close()
            self.runner.on_episode_end = None
        if self.history and latest_checkpoint(self.out) is not None:
            save_checkpoint(self.out / "model.pt", self._without_buffer(self.checkpoint()))
        return self.history

    def _encoding(self) -> tuple[str | None, int | None]:
        """The training env's encoder name and window (None for an env that has neither)."""
        env = self.envs[0].unwrapped
        return getattr(getattr(env, "encoder", None), "name", None), getattr(env, "window", None)

    def checkpoint(self) -> Checkpoint:
        s, env = self.settings, self.envs[0].unwrapped
        env_info = {"workload": s.workload, "options": s.options, "reward": s.reward, "no_wait": s.no_wait,
                    "procs": getattr(getattr(env, "encoder", None), "procs", None),
                    "encoder_options": {"max_rejections": env.config.max_rejections, **s.encoder_options}
                    if hasattr(env, "config") else dict(s.encoder_options)}
        encoder, window = self._encoding()
        return make_checkpoint(self.algo, kind=s.kind, encoder=encoder, window=window, epoch=self.epoch, env=env_info,
                               trainer={"next_episode": self.runner.next_episode, "history": self.history,
                                        "settings": s.to_json(), "provenance": self.starts})

    def save(self) -> Path:
        """epoch_NNNNNN.pt; a DQL replay buffer beside it (.replay.pt), the newest only: only a resume needs it."""
        ckpt, path = self.checkpoint(), self.out / f"epoch_{self.epoch:06d}.pt"
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
        columns = list(dict.fromkeys(k for row in self.history for k in row)) or ["epoch"]  # as they first come
        tmp = self.out / "curve.csv.tmp"
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(self.history)
        tmp.replace(self.out / "curve.csv")

    def evaluate(self, episodes: int | None = None) -> dict[str, Any]:
        """model.pt (greedy) and the baselines on held-out sequences by `hpcgym compare`'s harness into
        eval/ (redone each time); eval.json sums up the main metrics."""
        from ..compare.plan import unit_id
        from ..compare.policy import AgentSpec, PolicySpec, parse_policy
        from ..compare.runner import Comparison, run_comparison

        s, model = self.settings, (self.out / "model.pt").resolve()
        if not model.is_file():
            raise CheckpointError(f"no trained model at {model}: train first")
        workload = s.eval_workload or s.workload
        priority = s.options.get("policy", "fcfs")
        kinds = checkpoint_kinds(s.kind)
        trained = PolicySpec(s.name or s.algorithm, f"{'/'.join(kinds)}:model:{model},{priority}", priority,
                             agents=(AgentSpec(kinds, "model", str(model)),))
        comparison = Comparison(
            [trained, *(parse_policy(name) for name in s.baselines)],
            eval_sequences(workload, s.eval_episodes if episodes is None else episodes, s.seed),
            self.out / "eval", baseline=s.baselines[0] if s.baselines else None,
            options={k: v for k, v in s.options.items() if k != "policy"}, mode="inproc", workers=1,
            progress=self.progress)
        folder = run_comparison(comparison, force=True).out
        run = json.loads((folder / "run.json").read_text())
        with open(folder / "summary.csv", newline="") as f:
            rows = {row["policy"]: row for row in csv.DictReader(f)}
        summary, failed, per_episode = {}, {}, {"seed": run["sample_seeds"]}
        for policy in comparison.policies:
            row = rows[policy.name]
            if row["status"] != "ok":
                failed[policy.name] = row["error"]
                continue
            summary[policy.name] = {k: float(row[f"{k}_mean"]) for k in EVAL_METRICS}
            per_episode[policy.name] = [
                json.loads((folder / "units" / f"{unit_id(policy, seq['index'])}.json").read_text())["summary"]
                for seq in run["sequences"]]
        result = {"episodes": len(run["sequences"]), "workload": workload, "compare": folder.name,
                  "baseline": run["baseline"], "summary": summary, "failed": failed, "per_episode": per_episode,
                  "provenance": provenance(s.to_json(), [model])}
        (self.out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
        return result


def free_threads(requested: int, window: float = 0.05) -> int:
    """`requested` torch threads, capped by the usable cores idle now (/proc/stat over `window` s): a thread
    on a busy core stalls every parallel step (an epoch 4x slower on a shared machine, issue 46)."""
    usable = usable_cores()
    if min(requested, usable) <= 1:
        return 1

    def times() -> tuple[list[int], int]:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
        return [int(v) for v in lines[0].split()[1:]], sum(line.startswith("cpu") for line in lines) - 1

    try:
        (before, cores), (after, _) = times(), (time.sleep(window), times())[1]
    except (OSError, ValueError, IndexError):
        return min(requested, usable)
    spent = [b - a for a, b in zip(before, after)]
    idle = cores * (spent[3] + spent[4]) / max(1, sum(spent))   # idle + iowait
    return max(1, min(requested, usable, round(idle)))


def teacher_for(settings: TrainSettings):
    """The labeller of the settings' teacher agent (in the learner, and in each rollout worker)."""
    from ...agents.rl.imitation import teacher_labeller
    from ...agents.runtime import load_agent

    agent, kinds = load_agent(settings.teacher), settings.kind.split("+")
    if not set(kinds) & set(agent.kinds):
        raise ConfigError(f"teacher {settings.teacher} takes {'/'.join(agent.kinds)} decisions, the agent learns "
                          f"{settings.kind}: nothing to imitate; name a teacher of {settings.kind} decisions "
                          "(e.g. --teacher sjf for select) or none")
    return teacher_labeller(agent, settings.options.get("window", SimConfig.window))


def epoch_line(row: dict[str, Any], epochs: int) -> str:
    """The line logged per epoch outside a terminal: `epoch 3/10: 300 episodes, mean return -4.21, 12.4 s`."""
    means = [f"mean {name} {row[key]:.4g}" for key, name in (("return", "return"), ("mean_bsld", "bsld")) if key in row]
    return ", ".join([f"epoch {row['epoch']}/{epochs}: {row['episodes_total']} episodes", *means,
                      f"{row['seconds']:.1f} s"])


#: The metrics eval.json sums up (all of them are in eval/summary.csv).
EVAL_METRICS = ("mean_bsld", "mean_wait", "utilization", "max_bsld")


def eval_sequences(workload: dict[str, Any], episodes: int, seed: int) -> SequenceSpec:
    """`episodes` held-out windows (or sampled jobsets) of the episodes' length, k seeded eval_seed(seed) + k
    (random windows even for a fixed `start`; a workload without a length is one sequence, all of it)."""
    from ..compare.plan import SequenceSpec

    drawn = set(SequenceSpec.__dataclass_fields__) - {"samples", "seed", "first_jobs", "start"}
    unknown = sorted(set(workload) - drawn - {"start", "sample"})
    if unknown:
        raise ConfigError(f"the held-out evaluation cannot draw sequences with workload key(s) "
                          f"{', '.join(unknown)}; train with --eval-episodes 0 and evaluate with hpcgym compare")
    return SequenceSpec(**{"trace": None, **{k: v for k, v in workload.items() if k in drawn and v is not None}},
                        samples=episodes if workload.get("jobs") is not None else 1, seed=eval_seed(seed))
