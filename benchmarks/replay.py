"""Replay whole real traces and report simulation speed and peak memory.

    python benchmarks/replay.py                      # SDSC-SP2 and HPC2N, FCFS+EASY and SJF+EASY
    python benchmarks/replay.py --trace RICC-2010-2 --policy wfp3 --repeat 3

Each case runs in a fresh process so its peak resident memory is its own. Jobs per second
counts simulated jobs over the simulation alone (loading the trace is reported apart). For
FCFS+EASY the plain textbook replay of tests/textbook_easy.py is timed in the same process as a
yardstick: compare the two columns as a ratio, never across machines.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import click

DEFAULT_TRACES = ("SDSC-SP2-1998-4.2-cln", "HPC2N-2002-2.2-cln")
DEFAULT_POLICIES = ("fcfs", "sjf")


def traces_dir() -> Path:
    env = os.environ.get("HPCGYM_TRACES")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def measure(trace: str, policy: str, backfill: str, repeat: int) -> dict:
    from hpcgym.environment.config import SimConfig
    from hpcgym.environment.simulator import simulate
    from hpcgym.environment.swf import read_swf

    t0 = time.perf_counter()
    workload = read_swf(traces_dir() / f"{trace}.swf.gz")
    load_s = time.perf_counter() - t0
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = simulate(workload, SimConfig(backfill=backfill), policy=policy)
        best = min(best, time.perf_counter() - t0)
    textbook_s = None
    if policy == "fcfs" and backfill == "easy":
        # the yardstick: the plain replay the tests use as an oracle, timed in the same process
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.textbook_easy import textbook_easy

        cols = [workload.submit.tolist(), workload.run.tolist(), workload.size.tolist(), workload.requested.tolist()]
        t0 = time.perf_counter()
        textbook_easy(workload.procs, *cols)
        textbook_s = round(time.perf_counter() - t0, 3)
    return {
        "trace": trace, "policy": policy, "backfill": backfill, "jobs": len(workload),
        "load_s": round(load_s, 3), "sim_s": round(best, 3), "jobs_per_s": round(len(workload) / best),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_after_load_mb": round(rss_before / 1024, 1),
        "mean_bsld": round(result.summary["mean_bsld"], 2),
        "textbook_s": textbook_s,
    }


@click.command()
@click.option("--trace", "traces", multiple=True, default=DEFAULT_TRACES, show_default=True,
              help="Trace name in the traces folder (without .swf.gz); repeatable.")
@click.option("--policy", "policies", multiple=True, default=DEFAULT_POLICIES, show_default=True)
@click.option("--backfill", default="easy", show_default=True)
@click.option("--repeat", default=3, show_default=True, help="Runs per case; the fastest counts.")
@click.option("--one", is_flag=True, hidden=True)
def main(traces, policies, backfill, repeat, one) -> None:
    if one:
        click.echo(json.dumps(measure(traces[0], policies[0], backfill, repeat)))
        return
    header = f"{'trace':<24}{'policy':<8}{'jobs':>8}{'load s':>8}{'sim s':>8}{'jobs/s':>10}{'peak MB':>9}{'bsld':>9}{'textbook s':>12}"
    click.echo(header)
    for trace in traces:
        for policy in policies:
            out = subprocess.run([sys.executable, __file__, "--one", "--trace", trace, "--policy", policy,
                                  "--backfill", backfill, "--repeat", str(repeat)],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out)
            click.echo(f"{trace[:23]:<24}{policy:<8}{r['jobs']:>8}{r['load_s']:>8.2f}{r['sim_s']:>8.2f}"
                       f"{r['jobs_per_s']:>10}{r['peak_rss_mb']:>9.1f}{r['mean_bsld']:>9.2f}"
                       f"{'' if r['textbook_s'] is None else format(r['textbook_s'], '.2f'):>12}")


if __name__ == "__main__":
    main()
