"""Gymnasium env steps per second: `HpcEnv("select")` with a random masked policy.

    python benchmarks/env_steps.py                    # all rows, 20,000 steps each
    taskset -c 0-7 python benchmarks/env_steps.py --envs 8   # 8 envs on 8 cores
    python benchmarks/env_steps.py --steps 50000 --window 64 --jobs 512
    python benchmarks/env_steps.py --trace lublin_256.swf.gz    # windows of a trace: cheap resets
    python benchmarks/env_steps.py --no-ipc --rounds 25 --steps 2000   # a noisy machine: medians

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

Every row's envs are opened once and play `--warmup` steps; then every row runs `--steps` env
steps (a vector step of n envs counts n), `--rounds` times with the rows taking turns, each
going on with its open envs' episodes (so that a shared machine's drift falls on every row
alike: many short rounds follow it closest; the table gives medians). Episodes of `--jobs`
jobs drawn from the generated Lublin workload (`{"jobs": N, "sample": True}`: each episode
draws its 10,000 jobs anew, 1-5 ms a reset by machine), or with `--trace` random windows of that trace
(read once: resets cost well under a millisecond), resets included (single envs reset by hand,
vector envs auto-reset). The policy draws uniformly among the allowed actions of
`info["action_mask"]`, for all of a vector's envs at once as a batched policy does
(`masked_uniform`: one numpy call, about 5 us for one env or two; drawn env by env with
`np.flatnonzero` it took 8-12 us an env, paid once per env by the one process that draws,
which hid a vector's gain); the encoder is jobs+nodes. Steps per second count env steps: a
vector's rate is the sum over its envs; "x 1 env" divides it by the rate of the first row of its
transport in the same round.

Timings depend on the machine and what else runs there (CPU count and the load average before
and after are printed): compare rows of one run. Two env processes only help with two idle
cores; the ipc:// rows with several envs share one single-threaded env server.
"""

from __future__ import annotations

import os
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
from hpcgym.environment.spec import TraceNotFound, resolve_trace
from hpcgym.gymbridge import make
from hpcgym.gymbridge.vector import env_fns, make_vector
from hpcgym.protocol.messages import PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parents[1]


def masked_uniform(rng: np.random.Generator, masks: np.ndarray) -> np.ndarray:
    """One allowed action per row of `masks`, uniformly (the largest of uniform draws, masked)."""
    return np.argmax(rng.random(masks.shape) * masks, axis=-1)


class Stepper:
    """A row's env (one env, or a vector env) kept open across the rounds, so that each round
    goes on with its episodes: `run(steps)` plays at least `steps` env steps with the masked
    random policy and says how many it played and in how many seconds."""

    def __init__(self, env: gym.Env | gym.vector.VectorEnv, seed: int) -> None:
        self.env, self.rng = env, np.random.default_rng(seed)
        self.n = getattr(env, "num_envs", 1)
        _, self.info = env.reset(seed=seed)

    def run(self, steps: int) -> tuple[int, float]:
        env, rng, info = self.env, self.rng, self.info
        vector_steps = -(-steps // self.n)
        t0 = time.perf_counter()
        if self.n == 1:
            for _ in range(vector_steps):
                _, _, terminated, _, info = env.step(int(masked_uniform(rng, info["action_mask"])))
                if terminated:
                    _, info = env.reset()
        else:  # vector envs reset their ended envs themselves
            for _ in range(vector_steps):
                _, _, _, _, info = env.step(masked_uniform(rng, info["action_mask"]))
        seconds = time.perf_counter() - t0
        self.info = info
        return vector_steps * self.n, seconds


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
              help="Measured env steps per row and round.")
@click.option("--warmup", type=click.IntRange(min=0), default=1_000, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Times every row runs --steps, the rows taking turns, each going on with its open "
                   "envs; the table gives the medians, a row's ratio the median of its ratios to the "
                   "same round's one env.")
@click.option("--jobs", type=click.IntRange(min=2), default=256, show_default=True, help="Jobs per episode.")
@click.option("--trace", default=None,
              help="Random windows of this SWF trace (a path or a name in $HPCGYM_TRACES) instead of "
                   "generated Lublin episodes.")
@click.option("--window", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--envs", type=click.IntRange(min=2), default=2, show_default=True,
              help="Envs of the vector rows (their worker count: make_vector's default).")
@click.option("--ipc/--no-ipc", default=True, show_default=True, help="Also the rows over ipc://.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--context", type=click.Choice(["fork", "spawn", "forkserver"]), default=None,
              help="Start method of the vector envs' workers (default: the platform's).")
def main(steps, warmup, rounds, jobs, trace, window, envs, ipc, seed, context) -> None:
    """Env steps per second of HpcEnv(select), in process and over ipc://, with 1 and `--envs` envs."""
    n = envs
    if trace is not None:
        try:
            resolve_trace(trace)
        except TraceNotFound as exc:
            raise click.BadParameter(str(exc), param_hint="--trace") from None
    workload = {"jobs": jobs, "sample": True} if trace is None else {"trace": trace, "jobs": jobs, "sample": True}
    kwargs = {"workload": workload, "options": {"window": window}, "encoder": "jobs+nodes"}
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    folder = Path(tempfile.mkdtemp(prefix="hpcgym-b-", dir="/tmp"))
    server = None
    steppers: list[Stepper] = []
    rows = [("in-process", "HpcEnv", 1, lambda: make("select", **kwargs))]
    rows += [("in-process", label, n, lambda options=options: make_vector(n, "select", seed=seed, context=context,
                                                                          **options, **kwargs))
             for label, options in (("make_vector", {}), ("caller_share=False", {"caller_share": False}),
                                    ("workers=1, no caller", {"workers": 1, "caller_share": False}))]
    rows.append(("in-process", "AsyncVectorEnv", n,
                 lambda: gym.vector.AsyncVectorEnv(env_fns(n, "select", seed, **kwargs), context=context)))
    try:
        if ipc:
            server, address = start_env_server(folder)
            rows.append(("ipc://", "HpcEnv", 1, lambda: make("select", remote=address, **kwargs)))
            rows.append(("ipc://", "make_vector", n,
                         lambda: make_vector(n, "select", seed=seed, context=context, remote=address, **kwargs)))
        for _, _, _, factory in rows:
            steppers.append(Stepper(factory(), seed))
            if warmup:
                steppers[-1].run(warmup)
        rates: list[list[float]] = [[] for _ in rows]
        for _ in range(rounds):
            for stepper, measured in zip(steppers, rates):
                done, seconds = stepper.run(steps)
                measured.append(done / seconds)
    finally:
        for stepper in steppers:
            stepper.env.close()
        if server is not None:
            server.kill()
            server.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)

    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    click.echo(f"HpcEnv(select), random masked policy, {jobs}-job episodes of {trace or 'generated Lublin jobs'}, "
               f"window {window}, encoder jobs+nodes; "
               f"{os.cpu_count()} CPUs, load average {load_before:.2f} before, {load_after:.2f} after; "
               f"{rounds} round(s) of {steps} steps a row" + (", medians" if rounds > 1 else ""))
    click.echo(f"{'transport':<12}{'vector':<23}{'envs':>5}{'steps/s':>10}{'us/step':>9}{'x 1 env':>9}"
               + (f"{'x 1 env, each round':>26}" if rounds > 1 else ""))
    single: dict[str, list[float]] = {}
    for (transport, label, envs_in_row, _), measured in zip(rows, rates):
        base = single.setdefault(transport, measured)
        ratios = [rate / one for rate, one in zip(measured, base)]
        rate = float(np.median(measured))
        click.echo(f"{transport:<12}{label:<23}{envs_in_row:>5}{rate:>10,.0f}{1e6 / rate:>9.1f}"
                   f"{np.median(ratios):>8.2f}x" + ("   " + " ".join(f"{r:.2f}" for r in ratios) if rounds > 1 else ""))


if __name__ == "__main__":
    main()
