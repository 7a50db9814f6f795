"""Replay speed of the Batsim path (docs/batsim.md) beside `hpcgym run`, in jobs per second.

    python benchmarks/batsim_speed.py --trace SDSC-SP2-1998-4.2-cln.swf.gz --jobs 10000 --out docs/results/batsim/speed.json

Rows, on the same window: hpcgym's own FCFS + EASY with walltime kills, in process (what `hpcgym
run` does); the Batsim loop alone, with the cheapest scheduler there is (tests/
batsim_schedulers.py's first come first served) called in process, no JSON, no socket; the same
scheduler as a program over ipc:// (raw JSON), which adds the exchange; and pybatsim's
easyBackfill, unchanged. Each row is the
fastest of --repeat runs, in wall time and in CPU time (this process's and the scheduler
program's, which other work on the machine does not inflate as it does wall time: on a loaded
machine every message waits for both processes to get a CPU); the load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from hpcgym.environment.batsim import BatsimReplay
    from hpcgym.environment.config import SimConfig
    from hpcgym.environment.simulator import simulate
    from hpcgym.environment.spec import load_workload
    from hpcgym.gymbridge.compare.unit import ipc_folder
    from hpcgym.gymbridge.scheduler_program import run_scheduler

    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default="SDSC-SP2-1998-4.2-cln.swf.gz")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    workload = load_workload({"trace": args.trace, "jobs": args.jobs, "start": args.start})
    pybatsim = str(Path(sys.executable).parent / "pybatsim")
    schedulers = {"batsim-loop+fcfs-raw-json": [sys.executable, str(ROOT / "tests" / "batsim_schedulers.py"), "fcfs"],
                  "batsim-loop+pybatsim-easyBackfill": [pybatsim, "easyBackfill", "-t", "0"]}
    rows = []

    def cpu() -> float:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + children.ru_utime + children.ru_stime

    def timed(name, call):
        best, best_cpu, extra = None, None, {}
        for _ in range(args.repeat):
            began, began_cpu = time.perf_counter(), cpu()
            extra = call() or {}
            took, took_cpu = time.perf_counter() - began, cpu() - began_cpu
            best = took if best is None else min(best, took)
            best_cpu = took_cpu if best_cpu is None else min(best_cpu, took_cpu)
        n = len(workload)
        rows.append({"path": name, "jobs": n, "wall_s": round(best, 3), "jobs_per_s": round(n / best, 1),
                     "cpu_s": round(best_cpu, 3), "jobs_per_cpu_s": round(n / best_cpu, 1), **extra})
        print(f"{name:<40}{best:8.2f} s {n / best:10,.0f} jobs/s {best_cpu:8.2f} CPU s {n / best_cpu:10,.0f} jobs/CPU s",
              flush=True)

    timed("hpcgym-run-fcfs+easy", lambda: {"mean_bsld": simulate(workload, SimConfig(overrun="kill"),
                                                                    policy="fcfs").summary["mean_bsld"]})

    def in_process():
        sys.path.insert(0, str(ROOT / "tests"))
        from batsim_schedulers import WakeRejectKill

        fcfs = WakeRejectKill(wake_reject_kill=False)
        run = BatsimReplay(workload).run(lambda m: {"now": m["now"], "events": fcfs.handle(m["now"], m["events"])})
        return {"messages": run.exchanges, "mean_bsld": run.summary["mean_bsld"]}
    timed("batsim-loop+fcfs-in-process", in_process)
    for name, argv in schedulers.items():
        def batsim(argv=argv):
            folder = ipc_folder("hpcgym-speed-")
            try:
                run, _ = run_scheduler(workload, argv, folder=folder, timeout=120)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            return {"messages": run.exchanges, "mean_bsld": run.summary["mean_bsld"]}
        timed(name, batsim)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "provenance": {"commit": commit, "command": " ".join(["python", *sys.argv])},
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "load_average_at_end": [round(v, 2) for v in os.getloadavg()]},
            "workload": workload.name, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
