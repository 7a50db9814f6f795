"""The learner's own cost per decision when rollout workers collect (issue 25): what one process
does for every worker, which caps collection however many workers there are.

    .venv/bin/python benchmarks/learner_replay.py                       # ppo-select, 32 episodes
    .venv/bin/python benchmarks/learner_replay.py --agent rlbf --profile whole

It plays one epoch's episodes once with 2 real rollout workers and keeps what they sent, then,
in this process alone, times (the best of `--repeats`):

- receive shared: the workers' answers as `ProcessWorkers.wait` gets them: a short pickle from
  the pipe, the arrays copied out of the worker's shared memory block (`SharedArrays`);
- receive by pipe: the same answers read whole from a pipe (a thread of this process writes
  them) and unpickled, as the workers sent them before;
- whole: `algorithm.collect` on a `ParallelCollector` whose workers hand back the kept episodes
  at once: the learner's bookkeeping and storing of every decision, nothing played (PG and PPO
  take each episode whole);
- by step: the same episodes replayed step by step through the runner's `round` into the same
  storage (how every algorithm took them before; A2C and DQL still do); both must store the
  same steps.

With `--profile`, cProfile's top functions of one replay. Each figure is microseconds per
decision; the machine's load average is printed: compare figures of one run.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import threading
import time
from multiprocessing import Pipe
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import torch

from hpcgym.agents.rl.storage import RolloutStorage
from hpcgym.gymbridge.training.trainer import Trainer
from hpcgym.gymbridge.training.workers import ParallelCollector, SharedArrays, WorkerSpec
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


def record_epoch(trainer: Trainer, episodes: int) -> list[list[Any]]:
    """One epoch collected by the trainer's real workers: their answers (lists of episodes)."""
    workers = trainer.runner.workers
    answers: list[list[Any]] = []
    wait = workers.wait

    def keeping(timeout: float):
        events = wait(timeout)
        answers.extend(value for _, ok, value in events if ok and isinstance(value, list))
        return events

    workers.wait = keeping
    trainer.algo.collect(trainer.runner, episodes)
    workers.wait = wait
    return answers


def receive_by_pipe(answers: list[list[Any]]) -> float:
    """Seconds to read `answers` from a pipe and unpickle them, as `Connection.recv` does (the
    workers' way before `SharedArrays`); a thread writes them."""
    data = [bytes(ForkingPickler.dumps((True, value))) for value in answers]
    reader, writer = Pipe(duplex=False)
    sender = threading.Thread(target=lambda: [writer.send_bytes(d) for d in data])
    t0 = time.perf_counter()
    sender.start()
    kept = [reader.recv() for _ in data]   # kept, as the learner keeps the episodes for its update
    seconds = time.perf_counter() - t0
    sender.join()
    reader.close()
    writer.close()
    return seconds


def receive_shared(answers: list[list[Any]]) -> float:
    """Seconds the learner takes to get `answers` as `ProcessWorkers.wait` does: the rest from
    the pipe, the arrays copied out of the worker's shared block (written beforehand, untimed)."""
    reader, writer = Pipe(duplex=False)
    worker, learner = SharedArrays(), SharedArrays()
    seconds, kept = 0.0, []
    for value in answers:
        writer.send(worker.pack((True, value)))
        t0 = time.perf_counter()
        kept.append(learner.unpack(reader.recv()))   # kept, as the learner keeps the episodes for its update
        seconds += time.perf_counter() - t0
    learner.close()
    worker.block.close()
    reader.close()
    writer.close()
    return seconds


def replay(trainer: Trainer, records: dict[int, Any], episodes: int, whole: bool = True
           ) -> tuple[float, int, RolloutStorage]:
    """Seconds of the algorithm's collection over the kept episodes, the decisions in it and the
    storage it filled:
    `algorithm.collect` (episodes handed over whole where it takes them so), or, with `whole`
    False, its steps replayed one by one through the runner's `round` into the same storage."""
    like = trainer.runner
    spec = WorkerSpec(None, like.capacity, like.seed_of, like.options_of, like.max_steps, like.discard_after,
                      like.teacher, like.sampling_seed)
    collector = ParallelCollector(RecordedWorkers(len(like.workers), records), spec, trainer.envs[0])
    collector.built = True   # nothing to build in recorded workers
    algo = trainer.algo
    t0 = time.perf_counter()
    if whole:
        storage, _ = algo.collect(collector, episodes)
    else:
        storage = RolloutStorage(len(collector.envs))
        collector.run_epoch(episodes, algo.sample, lambda t: algo.store(storage, t), storage.discard_open)
    seconds = time.perf_counter() - t0
    return seconds, collector.steps, storage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="ppo-select", choices=list(AGENTS))
    parser.add_argument("--trace", default="lublin_256.swf.gz")
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", choices=["whole", "by-step"], help="cProfile one replay (top 25 by own time)")
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
            answers = record_epoch(trainer, args.trajectories)
        finally:
            trainer.runner.close()

        records = {r.index: r for answer in answers for r in answer}
        received: dict[str, list[float]] = {"by pipe": [], "shared": []}
        for _ in range(args.repeats):
            received["by pipe"].append(receive_by_pipe(answers))
            received["shared"].append(receive_shared(answers))
        times: dict[str, list[float]] = {"whole": [], "by step": []}
        stored = {}
        for _ in range(args.repeats):   # interleaved: the machine's load falls on both alike
            for name in times:
                seconds, decisions, stored[name] = replay(trainer, records, args.trajectories, name == "whole")
                times[name].append(seconds)
        whole, by_step = stored["whole"].batch(), stored["by step"].batch()
        if any(not torch.equal(whole[k], by_step[k]) for k in whole):
            raise SystemExit("the two replays stored different steps")

        us = lambda s: f"{s / decisions * 1e6:.2f}"   # noqa: E731
        size = sum(len(ForkingPickler.dumps(value)) for value in answers)
        print(f"{decisions} decisions, obs {trainer.algo.obs_shape}, "
              f"{size / decisions:,.0f} bytes pickled per decision")
        for name, seconds in received.items():
            print(f"receive {name:<16} us/decision: {us(min(seconds))}  (all: {', '.join(map(us, seconds))})")
        print(f"by pipe / shared: {min(received['by pipe']) / min(received['shared']):.1f}x")
        for name, seconds in times.items():
            print(f"replay {name:<17} us/decision: {us(min(seconds))}  (all: {', '.join(map(us, seconds))})")
        print(f"by step / whole: {min(times['by step']) / min(times['whole']):.1f}x")
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(replay, trainer, records, args.trajectories, args.profile == "whole")
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
