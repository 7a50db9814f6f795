"""One PPO epoch as `hpcgym train ppo --kind select` runs it, against the bare env on the same core:
steps per CPU second of the epoch (collection and update) over those of `env_steps.py`'s single
in-process env, the ratio issue 46 asks to be at least 0.5.

    taskset -c 1 python benchmarks/ppo_epoch.py --trace lublin_256.swf.gz --rounds 3

Each round plays `--env-steps` bare env steps (masked random actions, jobs+nodes encoder, no
backfilling: env_steps.py's first row) and then one fresh training epoch (the CLI's defaults: 8
envs, EASY backfilling, jobs+nodes, mlp; `--envs` and `--set` change them), alternately, so a
shared machine's drift falls on both; times are CPU seconds of this process (one torch thread).
Prints each round and the medians.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_steps import masked_uniform

from hpcgym.gymbridge import make
from hpcgym.gymbridge.training.settings import key_values
from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings


def env_rate(env, rng: np.random.Generator, info: dict, steps: int) -> tuple[float, dict]:
    t0 = time.process_time()
    for _ in range(steps):
        _, _, terminated, _, info = env.step(int(masked_uniform(rng, info["action_mask"])))
        if terminated:
            _, info = env.reset()
    return steps / (time.process_time() - t0), info


def epoch(settings: TrainSettings) -> dict[str, float]:
    """CPU seconds of one epoch's collection and update (set-up excluded), and its steps."""
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(settings, out, device="cpu", progress=False, log=lambda m: None)
        trainer.setup()
        t0 = time.process_time()
        storage, _ = trainer.algo.collect(trainer.runner, settings.trajectories)
        t1 = time.process_time()
        trainer.algo.update(storage)
        t2 = time.process_time()
    steps = trainer.runner.steps
    return {"steps": steps, "collect_us": 1e6 * (t1 - t0) / steps, "update_us": 1e6 * (t2 - t1) / steps,
            "epoch_rate": steps / (t2 - t0)}


@click.command()
@click.option("--trace", default=None, help="SWF trace (a path or a name in $HPCGYM_TRACES; default: generated Lublin).")
@click.option("--jobs", type=click.IntRange(min=2), default=256, show_default=True)
@click.option("--trajectories", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--envs", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--env-steps", type=click.IntRange(min=1), default=20_000, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A PPO config option, e.g. update_epochs=8.")
def main(trace, jobs, trajectories, envs, env_steps, rounds, sets) -> None:
    """Steps per CPU second of a PPO epoch over those of the bare env."""
    torch.set_num_threads(1)
    workload = {"jobs": jobs, "sample": True, **({"trace": trace} if trace else {})}
    env = make("select", workload=workload, options={"window": 128}, encoder="jobs+nodes")
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    _, info = env_rate(env, rng, info, 1000)   # warm-up
    settings = TrainSettings(workload=workload, options={"backfill": "easy", "window": 128, "policy": "fcfs"},
                             epochs=1, trajectories=trajectories, envs=envs, eval_episodes=0,
                             config=key_values(sets, "--set", "a PPO option, e.g. update_epochs=8"))
    ratios = []
    for r in range(rounds):
        rate, info = env_rate(env, rng, info, env_steps)
        e = epoch(settings)
        ratios.append(e["epoch_rate"] / rate)
        print(f"round {r + 1}: env {rate:,.0f} steps/s; epoch {e['epoch_rate']:,.0f} steps/s ({e['steps']} steps, "
              f"collect {e['collect_us']:.0f} us/step, update {e['update_us']:.0f} us/step); epoch / env "
              f"{ratios[-1]:.3f}", flush=True)
    print(f"median epoch / env: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
