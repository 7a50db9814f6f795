"""Gymnasium env steps per second: `HpcEnv("select")` with a random masked policy.

    python benchmarks/env_steps.py                    # all rows, 20,000 steps each
    taskset -c 0-7 python benchmarks/env_steps.py --envs 8   # 8 envs on 8 cores
    python benchmarks/env_steps.py --steps 50000 --window 64 --jobs 512

Rows (one run, one table):

- in-process, 1 env: `HpcEnv` stepping the simulation in this process;
- in-process, n envs (`--envs`, default 2), `make_vector(n)`: n shares of the envs (at most one
  per usable core), the first stepped in this process, the others in worker processes, through
  shared memory;
- in-process, n envs, `make_vector(n, caller_share=False)`: every share in a worker process;
- in-process, n envs, `make_vector(n, workers=1, caller_share=False)`: all n envs in one worker;
- in-process, n envs, Gymnasium's `AsyncVectorEnv` over the same env factories (what
  `make_vector` was before: one process per env, infos pickled through pipes every step);
- ipc://, 1 env: `HpcEnv(remote=...)` against `hpcgym env` started here as a subprocess;
- ipc://, n envs: `make_vector(n, remote=...)`: worker processes, each env with its own
  connection and session, served by that one `hpcgym env` process.

Every row runs `--steps` env steps (a vector step of n envs counts n) after `--warmup`
steps, episodes of `--jobs` jobs drawn from the generated Lublin workload
(`{"jobs": N, "sample": True}`), resets included (single envs reset by hand, vector envs
auto-reset). The policy draws uniformly among the allowed actions of `info["action_mask"]`
(Python's `random`, a fraction of a microsecond); the encoder is jobs+nodes. Steps per
second count env steps: a vector's rate is the sum over its envs; "x 1 env" divides it by the
rate of the first row of its transport.

Timings depend on the machine and what else runs there (CPU count and the load average before
and after are printed): compare rows of one run. Two env processes only help with two idle
cores; the ipc:// rows with several envs share one single-threaded env server.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import gymnasium as gym
import numpy as np

from hpcgym.agents.runtime import Connection, EnvUnreachable
from hpcgym.gymbridge import make
from hpcgym.gymbridge.vector import env_fns, make_vector
from hpcgym.protocol.messages import PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parents[1]


def run_single(env, steps: int, warmup: int, seed: int) -> tuple[int, float]:
    """(measured steps, seconds)."""
    rng = random.Random(seed)
    obs, info = env.reset(seed=seed)
    t0, done = time.perf_counter(), 0
    while done < warmup + steps:
        if done == warmup:
            t0 = time.perf_counter()
        allowed = np.flatnonzero(info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(int(allowed[rng.randrange(len(allowed))]))
        done += 1
        if terminated:
            obs, info = env.reset()
    return steps, time.perf_counter() - t0


def run_vector(envs, steps: int, warmup: int, seed: int) -> tuple[int, float]:
    """(measured env steps: n per vector step, seconds)."""
    rng = random.Random(seed)
    n = envs.num_envs
    obs, info = envs.reset(seed=seed)
    t0, done, measured = None, 0, 0
    while measured < steps:
        if t0 is None and done >= warmup:
            t0 = time.perf_counter()
        actions = []
        for mask in info["action_mask"]:
            allowed = np.flatnonzero(mask)
            actions.append(int(allowed[rng.randrange(len(allowed))]))
        obs, rewards, terminated, truncated, info = envs.step(np.array(actions))
        done += n
        if t0 is not None:
            measured += n
    return measured, time.perf_counter() - t0


def start_env_server(folder: Path) -> tuple[subprocess.Popen, str]:
    address = f"ipc://{folder / 'env.ipc'}"
    local = Path(sys.executable).parent / "hpcgym"
    exe = str(local) if local.exists() else (shutil.which("hpcgym") or "hpcgym")
    proc = subprocess.Popen([exe, "env", "--bind", address, "--decision-timeout", "600"], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:  # the env is up once it answers a hello
        conn = Connection(address, timeout=0.5)
        try:
            conn.request({"type": "hello", "protocol": PROTOCOL_VERSION, "agent": "probe", "kinds": []})
            conn.request({"type": "bye"})
            return proc, address
        except EnvUnreachable:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("hpcgym env did not start") from None
        finally:
            conn.close()


@click.command()
@click.option("--steps", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Measured env steps per row.")
@click.option("--warmup", type=click.IntRange(min=0), default=1_000, show_default=True)
@click.option("--jobs", type=click.IntRange(min=2), default=256, show_default=True, help="Jobs per episode.")
@click.option("--window", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--envs", type=click.IntRange(min=2), default=2, show_default=True,
              help="Envs of the vector rows (their worker count: make_vector's default).")
@click.option("--ipc/--no-ipc", default=True, show_default=True, help="Also the rows over ipc://.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--context", type=click.Choice(["fork", "spawn", "forkserver"]), default=None,
              help="Start method of the vector envs' workers (default: the platform's).")
def main(steps, warmup, jobs, window, envs, ipc, seed, context) -> None:
    """Env steps per second of HpcEnv(select), in process and over ipc://, with 1 and `--envs` envs."""
    n = envs
    kwargs = {"workload": {"jobs": jobs, "sample": True}, "options": {"window": window}, "encoder": "jobs+nodes"}
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = []
    folder = Path(tempfile.mkdtemp(prefix="hpcgym-b-", dir="/tmp"))
    server = None
    try:
        env = make("select", **kwargs)
        rows.append(("in-process", "HpcEnv", 1, run_single(env, steps, warmup, seed)))
        env.close()
        for label, options in (("make_vector", {}), ("caller_share=False", {"caller_share": False}),
                               ("workers=1, no caller", {"workers": 1, "caller_share": False})):
            vector = make_vector(n, "select", seed=seed, context=context, **options, **kwargs)
            rows.append(("in-process", label, n, run_vector(vector, steps, warmup, seed)))
            vector.close()
        vector = gym.vector.AsyncVectorEnv(env_fns(n, "select", seed, **kwargs), context=context)
        rows.append(("in-process", "AsyncVectorEnv", n, run_vector(vector, steps, warmup, seed)))
        vector.close()
        if ipc:
            server, address = start_env_server(folder)
            env = make("select", remote=address, **kwargs)
            rows.append(("ipc://", "HpcEnv", 1, run_single(env, steps, warmup, seed)))
            env.close()
            vector = make_vector(n, "select", seed=seed, context=context, remote=address, **kwargs)
            rows.append(("ipc://", "make_vector", n, run_vector(vector, steps, warmup, seed)))
            vector.close()
    finally:
        if server is not None:
            server.kill()
            server.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)

    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    click.echo(f"HpcEnv(select), random masked policy, {jobs}-job episodes, window {window}, encoder jobs+nodes; "
               f"{os.cpu_count()} CPUs, load average {load_before:.2f} before, {load_after:.2f} after")
    click.echo(f"{'transport':<12}{'vector':<23}{'envs':>5}{'steps':>9}{'seconds':>9}{'steps/s':>10}"
               f"{'us/step':>9}{'x 1 env':>9}")
    single: dict[str, float] = {}
    for transport, label, n, (done, seconds) in rows:
        rate = done / seconds
        single.setdefault(transport, rate)
        click.echo(f"{transport:<12}{label:<23}{n:>5}{done:>9}{seconds:>9.2f}{rate:>10,.0f}"
                   f"{1e6 * seconds / done:>9.1f}{rate / single[transport]:>8.2f}x")

if __name__ == "__main__":
    main()
