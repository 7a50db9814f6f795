"""The learner's own cost per decision when rollout workers collect (issue 25): what one process
does for every worker, which caps collection however many workers there are.

    .venv/bin/python benchmarks/learner_replay.py                       # ppo-select, 32 episodes
    .venv/bin/python benchmarks/learner_replay.py --agent rlbf --profile

It plays one epoch's episodes once with 2 real rollout workers and keeps what they sent, then,
in this process alone, times (the best of `--repeats`):

- receive: unpickling the workers' answers (as `ProcessWorkers.wait` does after reading the pipe;
  the pipe read itself, a copy of the bytes printed, is not in it);
- replay: `algorithm.collect` on a `ParallelCollector` whose workers hand back the kept episodes
  at once: the learner's bookkeeping and storing of every decision, nothing played;
- in process: the same epoch played by the in-process runner (`--workers 1`), for scale.

With `--profile`, cProfile's top functions of one replay. Each figure is microseconds per
decision; the machine's load average is printed: compare figures of one run.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import torch

from hpcgym.gymbridge.training.trainer import Trainer
from hpcgym.gymbridge.training.workers import ParallelCollector
from train_scaling import AGENTS, preset   # benchmarks/ is the script's folder


class RecordedWorkers:
    """Stands in for `ProcessWorkers`: answers a sync at once and an `advance` with the kept
    episodes it asks for."""

    def __init__(self, n: int, records: dict[int, Any]) -> None:
        self.n, self.records = n, records
        self.busy: set[int] = set()
        self.answers: list[tuple[int, bool, Any]] = []

    def __len__(self) -> int:
        return self.n

    def name(self, w: int) -> str:
        return f"recorded worker {w}"

    def submit(self, w: int, method: str, *args: Any) -> None:
        self.busy.add(w)
        self.answers.append((w, True, [self.records[i] for i in args[0]] if method == "advance" else None))

    def wait(self, timeout: float) -> list[tuple[int, bool, Any]]:
        events, self.answers = self.answers, []
        self.busy.clear()
        return events

    def close(self) -> None:
        pass


def record_epoch(trainer: Trainer, episodes: int) -> tuple[list[bytes], dict[int, Any]]:
    """One epoch collected by the trainer's real workers: the answers as pickled bytes, and the
    episodes by index."""
    workers = trainer.runner.workers
    answers: list[bytes] = []
    records: dict[int, Any] = {}
    wait = workers.wait

    def keeping(timeout: float):
        events = wait(timeout)
        for _, ok, value in events:
            if ok and isinstance(value, list):
                answers.append(bytes(ForkingPickler.dumps(value)))
                records.update((r.index, r) for r in value)
        return events

    workers.wait = keeping
    trainer.algo.collect(trainer.runner, episodes)
    workers.wait = wait
    return answers, records


def replay(trainer: Trainer, records: dict[int, Any], episodes: int) -> tuple[float, int]:
    """Seconds of `algorithm.collect` over the kept episodes, and the decisions it replayed."""
    like = trainer.runner
    collector = ParallelCollector(RecordedWorkers(len(like.workers), records), like.capacity, len(like.envs),
                                  trainer.envs[0], like.seed_of, 0, like.max_steps, like.options_of,
                                  like.discard_after, like.teacher is not None, like.sampling_seed)
    collector.built = True   # nothing to build in recorded workers
    t0 = time.perf_counter()
    trainer.algo.collect(collector, episodes)
    return time.perf_counter() - t0, collector.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="ppo-select", choices=list(AGENTS))
    parser.add_argument("--trace", default="lublin_256.swf.gz")
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile one replay (top 25 by own time)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())   # noqa: E731
    print(f"{os.cpu_count()} cores, load average {load()} at the start; {args.agent}, {args.trajectories} "
          f"episodes of {args.trace}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        settings = preset(args.agent, args.trace, Path(tmp))
        settings.trajectories, settings.eval_episodes = args.trajectories, 0
        trainer = Trainer(settings, Path(tmp) / "w2", device="cpu", progress=False, log=lambda m: None, workers=2)
        trainer.setup()
        try:
            answers, records = record_epoch(trainer, args.trajectories)
        finally:
            trainer.runner.close()
        inproc = Trainer(settings, Path(tmp) / "w1", device="cpu", progress=False, log=lambda m: None)
        inproc.setup()

        receive = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for data in answers:
                ForkingPickler.loads(data)
            receive.append(time.perf_counter() - t0)
        replays = [replay(trainer, records, args.trajectories) for _ in range(args.repeats)]
        decisions = replays[0][1]
        t0 = time.perf_counter()
        inproc.algo.collect(inproc.runner, args.trajectories)
        played = time.perf_counter() - t0
        if inproc.runner.steps != decisions:
            raise SystemExit(f"in process played {inproc.runner.steps} decisions, the workers {decisions}")

        us = lambda s: f"{s / decisions * 1e6:.2f}"   # noqa: E731
        size = sum(map(len, answers))
        print(f"{decisions} decisions, obs {trainer.algo.obs_shape}, {size / decisions:,.0f} bytes pickled per decision")
        print(f"receive (unpickle) us/decision: {us(min(receive))}  (all: {', '.join(us(s) for s in receive)})")
        print(f"replay  (collect)  us/decision: {us(min(s for s, _ in replays))}  "
              f"(all: {', '.join(us(s) for s, _ in replays)})")
        print(f"in process (play)  us/decision: {us(played)}")
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(replay, trainer, records, args.trajectories)
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
