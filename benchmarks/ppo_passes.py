"""Would plain PPO learn as well with fewer passes over each epoch's batch? The update is 40-50% of a PPO select epoch
(8 passes of 1,024-step minibatches), so fewer passes were issue 46's way to an epoch at half the env's speed; a change
of algorithm settings must first be shown over three training seeds not to hurt learning. This is that check.

Arms of `hpcgym train ppo --kind select` on lublin_256 (64 windows of 256 jobs an epoch, EASY backfilling, the
command's other defaults), seeds 0-2, --epochs epochs each:

    p8             8 passes of 1,024, 8 envs    the defaults
    p3             3 passes of 1,024, 8 envs
    p3-e32         3 passes of 1,024, 32 envs   (the env count changes only the batch order and the rows per forward)
    p3-mb512-e32   3 passes of 512, 32 envs     (216 gradient steps instead of 288, 3/8 of the arithmetic)
    p4-e32         4 passes of 1,024, 32 envs

Within a seed every arm trains on the same windows, epoch by epoch, so two arms' epoch means pair up by epoch. Then
each seed's final policies play the same --samples held-out windows (greedy, in process), paired by window against
p8. Writes results.json (with the provenance of the table and of each run) and results.md to --out.

    python benchmarks/ppo_passes.py --train       # trains what is missing (a cut run resumes), then the table
    python benchmarks/ppo_passes.py               # the table again from the runs' files
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

from hpcgym.agents.rl.checkpoint import load_checkpoint
from paper_runs import (
    HPCGYM,
    TRACES_DIR,
    argument_parser,
    compare,
    paired,
    results_provenance,
    run,
    spread,
    unit_summaries,
)

ARMS = {"p8": ["--set", "update_epochs=8", "--envs", "8"], "p3": ["--set", "update_epochs=3", "--envs", "8"],
        "p3-e32": ["--set", "update_epochs=3", "--envs", "32"],
        "p3-mb512-e32": ["--set", "update_epochs=3", "--set", "minibatch_size=512", "--envs", "32"],
        "p4-e32": ["--set", "update_epochs=4", "--envs", "32"]}
REFERENCE = "p8"
TRACE = "lublin_256.swf.gz"
LAST = 10   # the epochs at the end of each curve that are averaged


def curve(folder: Path) -> list[float]:
    with open(folder / "curve.csv", newline="") as f:
        return [float(row["mean_bsld"]) for row in csv.DictReader(f)]


def train(folder: Path, arm: str, seed: int, epochs: int) -> None:
    done = len(curve(folder)) if (folder / "curve.csv").is_file() else 0
    if done >= epochs:
        return
    run([HPCGYM, "train", "ppo", "--kind", "select", "--trace", TRACE, "--jobs", "256", "--trajectories", "64",
         "--epochs", str(epochs), "--seed", str(seed), "--checkpoint-every", "5", *ARMS[arm], "--out", str(folder),
         "--no-progress", *(["--resume"] if done else [])])


def main() -> None:
    parser = argument_parser(__doc__, "ppo-passes", epochs=60, samples=50, jobs=256, seeds="0,1,2", traces=[TRACE])
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict = {"seeds": {}, "arms": ARMS, "last_epochs": LAST}
    for seed in seeds:
        folders = {arm: args.runs / "ppo-passes" / f"{arm}-s{seed}" for arm in ARMS}
        if args.train:
            for arm, folder in folders.items():
                train(folder, arm, seed, args.epochs)
        curves = {arm: curve(folder)[:args.epochs] for arm, folder in folders.items()}
        held_out = args.out / f"eval-s{seed}"
        compare(held_out, TRACES_DIR / TRACE, {arm: f"model:{folder / 'model.pt'}" for arm, folder in folders.items()},
                5000, args.samples, args.jobs, "--baseline", REFERENCE)
        bsld = {arm: [u["mean_bsld"] for u in unit_summaries(held_out, arm)] for arm in ARMS}
        results["seeds"][seed] = {arm: {
            "first": curves[arm][0], "last": statistics.mean(curves[arm][-LAST:]),
            "last_vs_reference": paired(curves[arm][-LAST:], curves[REFERENCE][-LAST:]),
            "held_out": statistics.mean(bsld[arm]), "held_out_vs_reference": paired(bsld[arm], bsld[REFERENCE]),
            "made_by": [{k: start[k] for k in ("commit", "command", "made")}
                        for start in load_checkpoint(folders[arm] / "model.pt").trainer["provenance"]]}
            for arm in ARMS}
    results["provenance"] = results_provenance(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = [(f"Mean bsld of plain PPO select on {TRACE} ({args.epochs} epochs of 64 x 256 jobs); last {LAST}: the mean "
              f"of the last {LAST} epochs' training windows; held out: the final policy on {args.samples} windows "
              f"(seeds 5000+, greedy); differences are the arm minus {REFERENCE}, paired by epoch or window, with "
              "bootstrap 95% CIs."), "",
             f"| arm | seed | first epoch | last {LAST} | - {REFERENCE} [CI] | held out | - {REFERENCE} [CI] |",
             "|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        for seed in seeds:
            r = results["seeds"][seed][arm]
            diffs = [f"{d['mean']:+.2f} [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]" if arm != REFERENCE else "-"
                     for d in (r["last_vs_reference"], r["held_out_vs_reference"])]
            lines.append(f"| {arm} | {seed} | {r['first']:.2f} | {r['last']:.2f} | {diffs[0]} | {r['held_out']:.2f} | "
                         f"{diffs[1]} |")
        lines.append(f"| {arm} | mean ± sd (min..max) | | {spread([results['seeds'][s][arm]['last'] for s in seeds])} | "
                     f"| {spread([results['seeds'][s][arm]['held_out'] for s in seeds])} | |")
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
