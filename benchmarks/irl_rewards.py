"""IRL's reward A against reward I over training seeds (docs/irl.md; the paper's "reward A cuts the
mean wait and slowdown by up to 66% against an inappropriate reward", its Fig. 5): every teacher
in RUNS (RUNS/A-sS/model.pt and RUNS/I-sS/model.pt, `hpcgym train irl-dqn` as
benchmarks/irl_eval.py trains it, reward I with `--reward system_wait_slowdown --encoder
irl_wait`) schedules the test part of SDSC-SP2 (jobs 10,001-12,500, one episode, greedy) beside
FCFS + EASY, in one `hpcgym compare`; per reward the mean and spread over the seeds, and A's
change against I.

    python benchmarks/irl_rewards.py --runs runs/irl-rewards --out docs/results/irl/rewards-seeds
    python benchmarks/irl_rewards.py --runs runs/irl-rewards --distill 8 --out OUT   # and each teacher's tree

With --distill D each teacher is first distilled (`hpcgym distill`, IRL's critical-state DAgger as
benchmarks/irl_eval.py runs it: jobs 1-10,000 to train on, the next 2,500 held out, 5 iterations,
depth D; OUT/trees/NAME/, skipped where its tree exists) and the trees join the comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from paper_runs import HPCGYM, TRACES_DIR, compare, results_provenance, run, spread

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
    parser.add_argument("--distill", type=int, metavar="DEPTH", help="also distil each teacher into a tree of this depth")
    args = parser.parse_args()
    teachers = {run.name: run / args.checkpoint for run in sorted(args.runs.iterdir())
                if run.name[:2] in ("A-", "I-") and (run / args.checkpoint).is_file()}
    if not teachers:
        parser.error(f"no teacher (A-sS/{args.checkpoint}, I-sS/{args.checkpoint}) in {args.runs}")
    args.out.mkdir(parents=True, exist_ok=True)
    policies = {"fcfs-easy": "fcfs,easy", **{name: f"select/backfill:model:{path},easy" for name, path in teachers.items()}}
    groups = {(r, "teachers"): [name for name in teachers if name.startswith(f"{r}-")] for r in REWARDS}
    if args.distill:
        for name, path in teachers.items():
            tree = args.out / "trees" / name / f"irl-d{args.distill}.npz"
            if not tree.is_file():
                run([HPCGYM, "distill", f"model:{path}", "--trace", str(TRACES_DIR / args.trace), "--train-jobs", "10000",
                     "--test-jobs", "2500", "--depth", str(args.distill), "--iterations", "5", "--methods", "irl",
                     "--no-relative", "--no-progress", "--out", str(tree.parent)])
            policies[f"{name}-tree"] = f"select/backfill:tree:{tree},easy"
        groups.update({(r, "trees"): [f"{name}-tree" for name in groups[(r, "teachers")]] for r in REWARDS})
    result = compare(args.out / "compare", TRACES_DIR / args.trace, policies, 0, 1, 2500, "--start", "10000")
    summary = {group: {m: [result[name][m] for name in names] for m in METRICS} for group, names in groups.items()}
    change = {f"{what}/{m}": (statistics.mean(summary[("A", what)][m]) / statistics.mean(summary[("I", what)][m]) - 1) * 100
              for what in ("teachers", "trees") if ("A", what) in summary for m in METRICS
              if summary[("A", what)][m] and summary[("I", what)][m]}
    out = {"fcfs_easy": result["fcfs-easy"], "teachers": result, "change_A_vs_I_pct": change,
           "provenance": results_provenance(args)}
    (args.out / "results.json").write_text(json.dumps(out, indent=1) + "\n")
    tree = f", trees of depth {args.distill}" if args.distill else ""
    lines = [f"# IRL: reward A against reward I on {args.trace}, jobs 10,001-12,500 ({args.checkpoint}{tree})", "",
             provenance_markdown(out["provenance"]), "",
             "| reward | policies | " + " | ".join(METRICS.values()) + " |", "|---|---|" + "---|" * len(METRICS),
             "| FCFS + EASY | | " + " | ".join(f"{result['fcfs-easy'][m]:,.2f}" for m in METRICS) + " |"]
    for (r, what), names in groups.items():
        lines.append(f"| {r} (`{REWARDS[r]}`) {what} | {', '.join(sorted(names))} | "
                     + " | ".join(spread(summary[(r, what)][m], ",.2f") if summary[(r, what)][m] else "-"
                                  for m in METRICS) + " |")
    lines += ["", "A against I, mean over the seeds: " + "; ".join(f"{k.split('/')[0]}' {METRICS[k.split('/')[1]]} "
                                                                   f"{v:+.1f}%" for k, v in change.items())
              + " (negative: A better; the paper: up to -66%).", "", "| policy | " + " | ".join(METRICS.values())
              + " |", "|---|" + "---|" * len(METRICS)]
    lines += [f"| {name} | " + " | ".join(f"{result[name][m]:,.2f}" for m in METRICS) + " |"
              for name in policies if name != "fcfs-easy"]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
