"""IRL's reward A against reward I over training seeds (docs/irl.md; the paper's "reward A cuts the
mean wait and slowdown by up to 66% against an inappropriate reward", its Fig. 5): every teacher
in RUNS (RUNS/A-sS/model.pt and RUNS/I-sS/model.pt, `hpcgym train irl-dqn` as
benchmarks/irl_eval.py trains it, reward I with `--reward system_wait_slowdown --encoder
irl_wait`) schedules the test part of SDSC-SP2 (jobs 10,001-12,500, one episode, greedy) beside
FCFS + EASY, in one `hpcgym compare`; per reward the mean and spread over the seeds, and A's
change against I.

    python benchmarks/irl_rewards.py --runs runs/irl-rewards --out docs/results/irl/rewards-seeds
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from paper_runs import TRACES_DIR, compare, results_provenance, spread

from hpcgym.gymbridge.provenance import provenance_markdown

REWARDS = {"A": "system_slowdown", "I": "system_wait_slowdown"}
METRICS = {"mean_wait_mean": "mean wait (s)", "mean_slowdown_mean": "mean slowdown"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="folder of the teachers (A-sS, I-sS)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trace", default="SDSC-SP2-1998-4.2-cln.swf.gz")
    parser.add_argument("--checkpoint", default="model.pt",
                        help="which checkpoint of each run, e.g. epoch_000003.pt (default: the final model.pt)")
    args = parser.parse_args()
    teachers = {run.name: run / args.checkpoint for run in sorted(args.runs.iterdir())
                if run.name[:2] in ("A-", "I-") and (run / args.checkpoint).is_file()}
    if not teachers:
        parser.error(f"no teacher (A-sS/{args.checkpoint}, I-sS/{args.checkpoint}) in {args.runs}")
    args.out.mkdir(parents=True, exist_ok=True)
    policies = {"fcfs-easy": "fcfs,easy", **{name: f"select/backfill:model:{path},easy" for name, path in teachers.items()}}
    result = compare(args.out / "compare", TRACES_DIR / args.trace, policies, 0, 1, 2500, "--start", "10000")
    by_reward = {r: {name: result[name] for name in teachers if name.startswith(f"{r}-")} for r in REWARDS}
    summary = {r: {m: [row[m] for row in rows.values()] for m in METRICS} for r, rows in by_reward.items()}
    change = {m: (statistics.mean(summary["A"][m]) / statistics.mean(summary["I"][m]) - 1.0) * 100
              for m in METRICS if summary["A"][m] and summary["I"][m]}
    out = {"fcfs_easy": result["fcfs-easy"], "teachers": result, "change_A_vs_I_pct": change,
           "provenance": results_provenance(args)}
    (args.out / "results.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [f"# IRL: reward A against reward I on {args.trace}, jobs 10,001-12,500 ({args.checkpoint})", "",
             provenance_markdown(out["provenance"]), "",
             "| reward | teachers | " + " | ".join(METRICS.values()) + " |", "|---|---|" + "---|" * len(METRICS),
             f"| FCFS + EASY | | " + " | ".join(f"{result['fcfs-easy'][m]:,.2f}" for m in METRICS) + " |"]
    for r, spec in REWARDS.items():
        lines.append(f"| {r} (`{spec}`) | {', '.join(sorted(by_reward[r]))} | "
                     + " | ".join(spread(summary[r][m], ",.2f") if summary[r][m] else "-" for m in METRICS) + " |")
    lines += ["", "A against I, mean over the seeds: " + "; ".join(f"{METRICS[m]} {v:+.1f}%" for m, v in change.items())
              + " (negative: A better; the paper: up to -66%).", "", "| teacher | " + " | ".join(METRICS.values())
              + " |", "|---|" + "---|" * len(METRICS)]
    lines += [f"| {name} | " + " | ".join(f"{result[name][m]:,.2f}" for m in METRICS) + " |" for name in teachers]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
