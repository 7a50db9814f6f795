"""Replay whole real traces with hpcgym and with an independent textbook simulator, side by side.

    python benchmarks/replay.py                                   # every shared trace, none/easy/conservative
    python benchmarks/replay.py --trace SDSC-SP2-1998-4.2-cln --load 1 --load 2 --load 3
    python benchmarks/replay.py --cli HPC2N-2002-2.2-cln          # whole-process cost of `hpcgym run`
    python benchmarks/replay.py --backfill easy --repeat 5 --versus OTHER-pkg   # CPU time against another version

Both simulators replay the same cleaned workload (FCFS, requested times as estimates) under the
same conditions: each case runs in a fresh process, each simulator `--repeat` times, the fastest
wall-clock run counts, and the trace is read before the clock starts (its load time is reported
apart). The yardstick is benchmarks/reference_sim.py, written apart from hpcgym; the last column
says whether the two produced the same start time for every job. `--load K` makes arrivals K
times faster (submit times divided by K), which lengthens the queue: per-job cost should not grow
with it. Compare the columns as ratios measured in one run, never across machines.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import click

BACKFILLS = ("none", "easy", "conservative")
SIMULATORS = ("hpcgym", "reference")


def traces_dir() -> Path:
    env = os.environ.get("HPCGYM_TRACES")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def measure(trace: str, load: int, backfill: str, simulator: str, repeat: int) -> dict:
    """One case in this process: the fastest of `repeat` replays, and a digest of the schedule."""
    import numpy as np

    from hpcgym.environment.config import SimConfig
    from hpcgym.environment.simulator import simulate
    from hpcgym.environment.swf import read_swf

    t0 = time.perf_counter()
    workload = read_swf(traces_dir() / f"{trace}.swf.gz")
    load_s = time.perf_counter() - t0
    if load > 1:
        first = int(workload.submit[0])
        workload = workload.with_columns(submit=first + (workload.submit - first) // load)
    best, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        if simulator == "hpcgym":
            start = simulate(workload, SimConfig(backfill=backfill)).jobs["start"]
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from reference_sim import replay

            start = replay(workload.procs, workload.job_id.tolist(), workload.submit.tolist(),
                           workload.run.tolist(), workload.size.tolist(), workload.requested.tolist(), backfill)
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    start = np.asarray(start, dtype=np.int64)
    span = int(start.max() - workload.submit.min()) or 1
    return {"jobs": len(workload), "load_s": load_s, "sim_s": best, "cpu_s": cpu, "jobs_per_s": len(workload) / best,
            "mean_queue": float((start - workload.submit).sum()) / span,
            "schedule": hashlib.sha256(start.tobytes()).hexdigest()}


def run_case(trace: str, load: int, backfill: str, simulator: str, repeat: int, timeout: float,
             pythonpath: str | None = None) -> dict | None:
    """`measure` in a fresh process (importing hpcgym from `pythonpath` if given); None when it ran
    out of time."""
    command = [sys.executable, __file__, "--one", simulator, "--trace", trace, "--load", str(load),
               "--backfill", backfill, "--repeat", str(repeat)]
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else None
    try:
        out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout, env=env).stdout
    except subprocess.TimeoutExpired:
        return None
    return json.loads(out)


def cli_cost(trace: str, repeat: int) -> None:
    """CPU seconds (user + system) of whole `hpcgym run` processes: start-up alone, then a replay.
    Each command runs once untimed first, with bytecode writing on, so modules load from their
    cached bytecode as in an installed package (PYTHONDONTWRITEBYTECODE would make every run
    compile hpcgym's sources again); the fastest of `repeat` timed runs counts."""
    hpcgym = str(Path(sys.executable).with_name("hpcgym"))
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "python -c 'import numpy, click'": [sys.executable, "-c", "import numpy, click"],
                "hpcgym run --help": [hpcgym, "run", "--help"],
                f"hpcgym run --trace {trace} --json": [hpcgym, "run", "--trace", str(traces_dir() / f"{trace}.swf.gz"),
                                                       "--json"]}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for label, command in commands.items():
        subprocess.run(command, check=True, capture_output=True, env=env)
        times = []
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(command, check=True, capture_output=True, env=env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        click.echo(f"{min(times):7.3f} s CPU  {label}  (fastest of {repeat}; median {sorted(times)[repeat // 2]:.3f})")


def versus_run(traces: list[str], backfills: tuple[str, ...], repeat: int, timeout: float, other: str) -> None:
    """hpcgym's CPU seconds per replay, this version's and `other`'s (a folder holding its hpcgym
    package) alternating in fresh processes, `repeat` rounds; the fastest of each counts."""
    click.echo(f"{'trace':<24}{'backfill':>14}{'jobs':>8}{'this s':>9}{'jobs/s':>9}{'other s':>9}{'jobs/s':>9}"
               f"{'this/other':>11}  same")
    for trace in traces:
        for backfill in backfills:
            runs: dict[str, list[dict]] = {"this": [], "other": []}
            for _ in range(repeat):
                for arm, path in (("this", None), ("other", other)):
                    runs[arm].append(run_case(trace, 1, backfill, "hpcgym", 1, timeout, path))
            this, that = (min(runs[a], key=lambda r: r["cpu_s"]) for a in ("this", "other"))
            same = "yes" if this["schedule"] == that["schedule"] else "NO"
            click.echo(f"{trace[:23]:<24}{backfill:>14}{this['jobs']:>8}{this['cpu_s']:>9.3f}"
                       f"{this['jobs'] / this['cpu_s']:>9.0f}{that['cpu_s']:>9.3f}{that['jobs'] / that['cpu_s']:>9.0f}"
                       f"{this['cpu_s'] / that['cpu_s']:>11.3f}  {same}")


@click.command()
@click.option("--trace", "traces", multiple=True, help="Trace name in the traces folder (without .swf.gz); "
              "repeatable. Default: every .swf.gz there.")
@click.option("--backfill", "backfills", multiple=True, type=click.Choice(BACKFILLS), default=BACKFILLS,
              show_default=True)
@click.option("--load", "loads", multiple=True, type=click.IntRange(min=1), default=(1,), show_default=True,
              help="Arrivals this many times faster; repeatable.")
@click.option("--repeat", default=1, show_default=True, help="Runs per case and simulator; the fastest counts.")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds one case may take per simulator.")
@click.option("--skip-reference", is_flag=True, help="Time hpcgym alone.")
@click.option("--cli", "cli_trace", default=None, help="Measure whole `hpcgym run` processes on this trace instead.")
@click.option("--versus", type=click.Path(exists=True, file_okay=False),
              help="Time hpcgym (CPU seconds) against the hpcgym package in this folder (another version's), the "
                   "two alternating, --repeat rounds.")
@click.option("--one", type=click.Choice(SIMULATORS), hidden=True)
def main(traces, backfills, loads, repeat, timeout, skip_reference, cli_trace, versus, one) -> None:
    if one:
        click.echo(json.dumps(measure(traces[0], loads[0], backfills[0], one, repeat)))
        return
    if cli_trace:
        cli_cost(cli_trace, repeat)
        return
    traces = traces or sorted(p.name[:-len(".swf.gz")] for p in traces_dir().glob("*.swf.gz"))
    if versus:
        versus_run(traces, backfills, repeat, timeout, versus)
        return
    simulators = SIMULATORS[:1] if skip_reference else SIMULATORS
    click.echo(f"{'trace':<24}{'load':>5}{'backfill':>14}{'jobs':>8}{'queue':>8}{'load s':>8}"
               f"{'hpcgym s':>10}{'jobs/s':>9}{'ref s':>10}{'jobs/s':>9}{'speed-up':>9}  same")
    for trace in traces:
        for load in loads:
            for backfill in backfills:
                got = {sim: run_case(trace, load, backfill, sim, repeat, timeout) for sim in simulators}
                ours, ref = got["hpcgym"], got.get("reference")
                known = ours or ref
                cells = [f"{trace[:23]:<24}{load:>5}{backfill:>14}",
                         f"{known['jobs']:>8}{known['mean_queue']:>8.0f}{known['load_s']:>8.2f}" if known else f"{'':>24}"]
                for sim in SIMULATORS:
                    r = got.get(sim)
                    cells.append(f"{r['sim_s']:>10.2f}{r['jobs_per_s']:>9.0f}" if r else
                                 f"{'> ' + str(int(timeout)) if sim in got else '-':>10}{'':>9}")
                if ours and ref:
                    cells.append(f"{ref['sim_s'] / ours['sim_s']:>9.1f}  {'yes' if ours['schedule'] == ref['schedule'] else 'NO'}")
                click.echo("".join(cells), nl=True)


if __name__ == "__main__":
    main()
