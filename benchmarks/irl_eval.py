"""IRL's pipeline on one trace, timed: train the paper's teacher (`hpcgym train irl-dqn`) on the
first 10,000 jobs, distil it (`hpcgym distill`, IRL and plain DAgger) with the next 2,500 jobs as
the test, and print the table of docs/irl.md beside the paper's claims.

    nice python benchmarks/irl_eval.py --trace SDSC-SP2-1998-4.2-cln.swf.gz --out runs/irl-sp2
    python benchmarks/irl_eval.py --out runs/irl-sp2 --report-only     # the table of a finished run

Short settings by default (the shared 2-core machine); --epochs, --depth and --iterations set
the budget. Where the time goes is printed per stage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from hpcgym.gymbridge.provenance import provenance


def run(argv: list[str]) -> float:
    start = time.perf_counter()
    print("$", " ".join(argv), flush=True)
    subprocess.run(argv, check=True)
    return time.perf_counter() - start


def report(out: Path) -> str:
    d = json.loads((out / "distill" / "distill.json").read_text())
    timing = json.loads((out / "timing.json").read_text()) if (out / "timing.json").exists() else {}
    last = max(r["iteration"] for r in d["iterations"])
    fcfs, dqn = d["base_test"], d["teacher_test"]
    lines = ["| policy | depth | nodes | agreement (all / 2+ choices) | R² | mean wait (s) | mean slowdown | us/decision |",
             "|---|---|---|---|---|---|---|---|",
             f"| FCFS + EASY | | | | | {fcfs['mean_wait']:.0f} | {fcfs['mean_slowdown']:.2f} | |",
             f"| DQN (teacher) | | | | | {dqn['mean_wait']:.0f} | {dqn['mean_slowdown']:.2f} | {dqn['us_per_decision']:.0f} |"]
    for r in d["iterations"]:
        if r["iteration"] == last:
            lines.append(f"| {r['method']} | {r['depth']} | {r['nodes']} | {r['agreement']:.3f} / "
                         f"{r['agreement_choice']:.3f} | {r['r2']:.3f} | {r['mean_wait']:.0f} | "
                         f"{r['mean_slowdown']:.2f} | {r['tree_us_per_decision']:.0f} |")
    lines.append("")
    lines.append(f"Seconds: teacher training {timing.get('train', float('nan')):.0f}, distillation "
                 f"{timing.get('distill', float('nan')):.0f} (of which teacher rollouts and baselines "
                 f"{d['seconds']['setup']:.0f}); {last} iterations.")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", default="SDSC-SP2-1998-4.2-cln.swf.gz")
    p.add_argument("--out", type=Path, default=Path("runs/irl"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--trajectories", type=int, default=4)
    p.add_argument("--jobs", type=int, default=2000, help="Jobs per training episode (windows of the first 10,000).")
    p.add_argument("--reward", default="system_slowdown")
    p.add_argument("--encoder", default="irl")
    p.add_argument("--depth", default="8,10,12")
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--seed", type=int, default=0, help="The teacher's training seed.")
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args()
    hpcgym = str(Path(sys.executable).with_name("hpcgym"))
    if not a.report_only:
        timing = {"train": run([hpcgym, "train", "irl-dqn", "--trace", a.trace, "--jobs", str(a.jobs), "--epochs",
                                str(a.epochs), "--trajectories", str(a.trajectories), "--envs", "2", "--reward",
                                a.reward, "--encoder", a.encoder, "--seed", str(a.seed), "--eval-episodes", "0",
                                "--device", "cpu",
                                "--no-progress", "--out", str(a.out / "teacher")]
                               + (["--resume"] if (a.out / "teacher" / "curve.csv").is_file() else []))}
        timing["distill"] = run([hpcgym, "distill", f"model:{a.out / 'teacher' / 'model.pt'}", "--trace", a.trace,
                                 "--train-jobs", "10000", "--test-jobs", "2500", "--depth", a.depth, "--iterations",
                                 str(a.iterations), "--no-relative", "--no-progress", "--out", str(a.out / "distill")])
        timing["provenance"] = provenance({k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
                                          [a.out / "teacher" / "model.pt"])
        (a.out / "timing.json").write_text(json.dumps(timing, indent=1))
    print(report(a.out))


if __name__ == "__main__":
    main()
