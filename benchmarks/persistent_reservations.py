"""Reservations that persist (issue: DRAS's max-wait claim): every built-in priority policy with
EASY, the head's reservation re-made at every pass (textbook) or kept until the job starts
(`commit_pick`), on a trace's test part replayed as one episode; mean and max wait of all jobs
and of the large ones (more than a quarter of the cluster), and mean bsld.

    python benchmarks/persistent_reservations.py                       # SDSC-SP2, last 20%
    python benchmarks/persistent_reservations.py --trace HPC2N-2002-2.2-cln.swf.gz --markdown out.md
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from hpcgym.environment.config import SimConfig
from hpcgym.environment.priorities import POLICIES
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def row(workload, policy: str, commit: bool) -> dict[str, float]:
    result = simulate(workload, SimConfig(commit_pick=commit), policy=policy)
    wait = (result.jobs["start"] - result.jobs["submit"]) / 3600.0
    large = workload.size > workload.procs // 4
    return {"mean_wait_h": float(wait.mean()), "max_wait_h": float(wait.max()),
            "max_wait_large_h": float(wait[large].max()) if large.any() else float("nan"),
            "mean_bsld": float(result.summary["mean_bsld"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=str(TRACES / "SDSC-SP2-1998-4.2-cln.swf.gz"))
    parser.add_argument("--train-fraction", type=float, default=0.8)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    workload = load_workload({"trace": args.trace, "train_fraction": args.train_fraction, "part": "test"})
    t0 = time.perf_counter()
    lines = [f"# Persistent reservations: {workload.name}, test part ({len(workload)} jobs) as one episode", "",
             "| policy | reservation | mean wait (h) | max wait (h) | max wait, large jobs (h) | mean bsld |",
             "|---|---|---:|---:|---:|---:|"]
    for policy in (p for p in POLICIES if p != "random"):
        for commit in (False, True):
            r = row(workload, policy, commit)
            lines.append(f"| {policy} | {'kept' if commit else 're-made'} | {r['mean_wait_h']:.2f} | "
                         f"{r['max_wait_h']:.1f} | {r['max_wait_large_h']:.1f} | {r['mean_bsld']:.2f} |")
    lines.append(f"\n_{time.perf_counter() - t0:.0f} s; large: more than {workload.procs // 4} processors._")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
