"""Wall time of one PPO epoch: 100 trajectories of 256 jobs on the select kind (the SchedInspector
and RL-backfilling training unit), MLP policy, JobTableEncoder over a window of 128 jobs.

    .venv/bin/python benchmarks/ppo_epoch.py                       # generated Lublin workload
    .venv/bin/python benchmarks/ppo_epoch.py --trace SDSC-SP2-1998-4.2-cln.swf.gz --epochs 2

Prints the time of each epoch, split into collecting the trajectories (simulation, encoding,
one batched forward pass per round) and the PPO update.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time

import torch

from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings


def time_collection(runner) -> dict[str, float]:
    """A clock on the runner's `run_epoch` (collecting an epoch's episodes): its seconds add up
    in the returned map's "s"."""
    collect = {"s": 0.0}
    run_epoch = runner.run_epoch

    def timed_run_epoch(*a, **kw):
        t0 = time.perf_counter()
        try:
            return run_epoch(*a, **kw)
        finally:
            collect["s"] += time.perf_counter() - t0

    runner.run_epoch = timed_run_epoch
    return collect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", help="SWF trace (default: generated Lublin workload, 256 processors)")
    parser.add_argument("--jobs", type=int, default=256)
    parser.add_argument("--trajectories", type=int, default=100)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--envs", type=int, default=8, help="envs stepped together (batched forward pass)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    workload = {"jobs": args.jobs, "sample": True}
    if args.trace:
        workload["trace"] = args.trace
    settings = TrainSettings(algorithm="ppo", workload=workload, options={"window": args.window}, encoder="jobs",
                             config={"net": "mlp"}, epochs=args.epochs, trajectories=args.trajectories,
                             envs=args.envs, seed=0, eval_episodes=0)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(settings, out, device=args.device, progress=False, log=lambda m: None)
        trainer.setup()
        runner, algo = trainer.runner, trainer.algo
        collect = time_collection(runner)
        print(f"PPO epoch: {args.trajectories} trajectories x {args.jobs} jobs, select, MLP {algo.config.hidden}, "
              f"jobs encoder, window {args.window} (obs {algo.obs_shape[0]} features, {algo.n_actions} actions), "
              f"{args.envs} envs, {args.threads} thread(s), {algo.device}; "
              f"{platform.processor() or platform.machine()}, torch {torch.__version__}")
        for epoch in range(args.epochs):
            collect["s"] = 0.0
            t0 = time.perf_counter()
            stats = algo.train_epoch(runner, args.trajectories)
            total = time.perf_counter() - t0
            print(f"epoch {epoch + 1}: {total:.2f} s  (collect {collect['s']:.2f} s for "
                  f"{int(stats['length'] * stats['episodes'])} decisions, update {total - collect['s']:.2f} s, "
                  f"{stats['updates']} minibatch steps); mean bsld {stats['mean_bsld']:.2f}")


if __name__ == "__main__":
    main()
