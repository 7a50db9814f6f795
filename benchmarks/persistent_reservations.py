"""Reservations that persist (issue 16: DRAS's max-wait claim): each policy with EASY's
reservation re-made at every pass (textbook) or kept until the job starts (`commit_pick`,
docs/semantics.md section 4).

Two measurements:

- the whole test part as one episode, every built-in priority policy with EASY and any DRAS
  checkpoints (`--agent NAME=PATH`, in process): mean and max wait of all jobs and of the large
  ones (more than a quarter of the cluster), and mean bsld (default);
- `--windows OUT`: `hpcgym compare` on DRAS's test windows (10 random windows of 512 jobs of the
  test part, seeds 7..16, window 50 as in benchmarks/dras_eval.py) for every built-in priority
  policy with EASY (FCFS/B among them), the DRAS baselines (the capacity knapsack, BinPacking,
  Random; no backfilling) and any trained DRAS checkpoints (`--agent NAME=PATH`, both levels),
  each under both rules (`--rules` picks one); per rule the mean over windows of mean wait, max
  wait (all, small, large jobs) and mean bsld (the JSON keeps each window's values too, for
  pairings made later), and per policy the paired difference kept - re-made
  with a bootstrap 95% CI over the windows; `--versus NAME` adds each policy's paired difference
  to that one (e.g. `optimization`, DRAS's "outperforms optimization" claim).

    python benchmarks/persistent_reservations.py --agent dras-ppo=runs/persist/ppo-remade/model.pt
    python benchmarks/persistent_reservations.py --trace HPC2N-2002-2.2-cln.swf.gz --markdown out.md
    python benchmarks/persistent_reservations.py --windows runs/persist/compare \\
        --agent dras-ppo=runs/persist/ppo-remade/model.pt --markdown windows.md --json windows.json
    python benchmarks/persistent_reservations.py --windows runs/vs-opt --rules remade --builtin fcfs-easy,optimization \\
        --versus optimization --agent dras-ppo=docs/results/dras/agents-10x/ppo-remade/epoch_000020.pt
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from dras_eval import DEFAULT_TRACE, HPCGYM, LARGE_SHARE, read_jobs, run, validation_curve
from paper_runs import chosen, paired
from hpcgym.agents.base import Agent
from hpcgym.agents.runtime import load_agent
from hpcgym.environment.config import SimConfig
from hpcgym.environment.priorities import POLICIES
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload
from hpcgym.gymbridge.compare.report import Panel, write_curves
from hpcgym.gymbridge.provenance import provenance, provenance_markdown

#: The rules compared: the option's value in a compare policy spec.
RULES = {"remade": "commit_pick:false", "kept": "commit_pick:true"}
RULE_LABELS = {"remade": "re-made", "kept": "kept"}
#: Every built-in priority policy with EASY (fcfs-easy is DRAS's FCFS/B), then DRAS's baselines
#: (docs/dras.md; the knapsack of the capacity objective, which the DRAS agents trained here use).
WINDOW_POLICIES = {**{f"{p}-easy": f"{p},easy" for p in POLICIES},
                   "optimization": "select:knapsack-capacity,backfill:none",
                   "optimization-capability": "select:knapsack,backfill:none",
                   "binpacking": "select:binpacking,backfill:none", "random": "select:random-packing,backfill:none"}
#: How compare's run.json writes its start and end.
TIME = "%Y-%m-%dT%H:%M:%S%z"
#: Per-window metrics (window_metrics) and their labels.
METRICS = ("mean_wait_h", "max_wait_h", "max_wait_small_h", "max_wait_large_h", "mean_bsld")
LABELS = {"mean_wait_h": "mean wait (h)", "max_wait_h": "max wait (h)", "max_wait_small_h": "max wait small (h)",
          "max_wait_large_h": "max wait large (h)", "mean_bsld": "mean bsld"}


def whole_part_row(workload, commit: bool, policy: str = "fcfs", agent: Agent | None = None) -> dict[str, float]:
    """One episode by a built-in priority policy, or by a DRAS checkpoint taking both levels (in
    process, window 50 as it was trained)."""
    if agent is None:
        result = simulate(workload, SimConfig(commit_pick=commit), policy=policy)
    else:
        result = simulate(workload, SimConfig(commit_pick=commit, window=50), agents={k: agent for k in agent.kinds})
    wait = (result.jobs["start"] - result.jobs["submit"]) / 3600.0
    large = workload.size > workload.procs // 4
    return {"mean_wait_h": float(wait.mean()), "max_wait_h": float(wait.max()),
            "max_wait_large_h": float(wait[large].max()) if large.any() else float("nan"),
            "mean_bsld": float(result.summary["mean_bsld"])}


def whole_part(args) -> str:
    workload = load_workload({"trace": str(args.trace), "train_fraction": args.train_fraction, "part": "test"})
    t0 = time.perf_counter()
    lines = [f"# Persistent reservations: {workload.name}, test part ({len(workload)} jobs) as one episode", "",
             "| policy | reservation | mean wait (h) | max wait (h) | max wait, large jobs (h) | mean bsld |",
             "|---|---|---:|---:|---:|---:|"]
    runs = [(p, {"policy": p}) for p in POLICIES if p != "random"]
    runs += [(name, {"agent": load_agent(f"model:{path}")}) for name, path in args.agent]
    for name, how in runs:
        for commit in (False, True):
            r = whole_part_row(workload, commit, **how)
            lines.append(f"| {name} | {'kept' if commit else 're-made'} | {r['mean_wait_h']:.2f} | "
                         f"{r['max_wait_h']:.1f} | {r['max_wait_large_h']:.1f} | {r['mean_bsld']:.2f} |")
    lines.append(f"\n_{time.perf_counter() - t0:.0f} s; large: more than {workload.procs // 4} processors._")
    return "\n".join(lines) + "\n"


def window_metrics(jobs: dict[str, np.ndarray], procs: int) -> dict[str, float]:
    """One window's metrics; a size class with no job in the window gives NaN (left out of its pairs)."""
    wait = jobs["wait"] / 3600.0
    large = jobs["size"] >= LARGE_SHARE * procs

    def worst(hit: np.ndarray) -> float:
        return float(wait[hit].max()) if hit.any() else float("nan")

    return {"mean_wait_h": float(wait.mean()), "max_wait_h": float(wait.max()), "max_wait_small_h": worst(~large),
            "max_wait_large_h": worst(large), "mean_bsld": float(jobs["bsld"].mean())}


def validation(run_dir: Path, args) -> list[dict[str, float]]:
    """The greedy validation curve of a run, every `--pick-every`-th epoch (512-job windows, as in training)."""
    setting = SimpleNamespace(trace=args.trace, train_fraction=args.train_fraction, jobs=512)
    return validation_curve(run_dir, setting, every=args.pick_every)


def picked_checkpoint(model: Path, args) -> Path:
    """The epoch checkpoint beside `model` with the best validation return (every N-th epoch)."""
    rows = validation(model.parent, args)
    if not rows:
        raise SystemExit(f"--pick-every {args.pick_every}: no epoch checkpoints in {model.parent}")
    best = max(rows, key=lambda r: r["return"])
    print(f"{model.parent.name}: epoch {int(best['epoch'])} (validation return {best['return']:.3f}, "
          f"mean wait {best['mean_wait_h']:.2f} h)", flush=True)
    return model.parent / f"epoch_{int(best['epoch']):06d}.pt"


def plot_curves(agents: list[tuple[str, str]], args, path: Path) -> None:
    """Per agent's run: the training return per epoch and the greedy validation return of every
    `--pick-every`-th epoch (the curve its checkpoint is picked from)."""
    training = Panel("training return (sampling policy)")
    validated = Panel(f"validation return (greedy, every {args.pick_every}th epoch)")
    for name, model in agents:
        run_dir = Path(model).parent
        training.runs({f"_{name}": run_dir})
        valid = validation(run_dir, args)
        validated.lines[name] = ([r["epoch"] for r in valid], [r["return"] for r in valid], {"marker": "o", "markersize": 3})
    write_curves([training, validated], path, columns=2, size=(6, 4))


def windows(args) -> tuple[str, dict]:
    """Run (unless --reuse) and sum up the windows comparison."""
    specs = {name: f"{spec},window:50" for name, spec in WINDOW_POLICIES.items() if name in args.builtin}
    specs.update({name: f"select/backfill:model:{path},easy,window:50" for name, path in args.agent})
    rules = {rule: RULES[rule] for rule in args.rules}
    out = args.windows
    if not args.reuse:
        cmd = [HPCGYM, "compare", "--trace", str(args.trace), "--train-fraction", str(args.train_fraction),
               "--part", "test", "--jobs", "512", "--samples", str(args.samples), "--seed", "7",
               "--workers", str(args.workers), "--out", str(out), "--force", "--inproc"]
        for name, spec in specs.items():
            for rule, option in rules.items():
                cmd += ["--policy", f"{name}.{rule}={spec},{option}"]
        run(cmd)
    saved = json.loads((out / "run.json").read_text())
    seconds = (datetime.strptime(saved["finished"], TIME) - datetime.strptime(saved["started"], TIME)).total_seconds()
    procs = load_workload({"trace": str(args.trace)}).procs
    values: dict[str, dict[str, dict[str, list[float]]]] = {}
    for name in specs:
        values[name] = {}
        for rule in rules:
            tables = sorted((out / "jobs" / f"{name}.{rule}").glob("seq-*.csv"))
            rows = [window_metrics(read_jobs(p), procs) for p in tables]
            values[name][rule] = {m: [r[m] for r in rows] for m in METRICS}
    results = {"trace": args.trace.name, "windows": args.samples, "jobs": 512, "seeds": f"7..{6 + args.samples}",
               "large_from_procs": int(np.ceil(LARGE_SHARE * procs)), "seconds": seconds, "policies": {}}
    head = ["policy", "reservation", *(LABELS[m] for m in METRICS)]
    table = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * len(METRICS)]
    both = len(rules) == 2
    diffs = ["| policy | " + " | ".join(f"{LABELS[m]}: kept - re-made [95% CI]" for m in METRICS) + " |",
             "|---|" + "---|" * len(METRICS)]
    versus = [f"| policy | reservation | " + " | ".join(f"{LABELS[m]}: - {args.versus} [95% CI]" for m in METRICS)
              + " |", "|---|---|" + "---|" * len(METRICS)]
    for name in specs:
        entry = {"spec": specs[name], "mean": {}, "diff": {}, "versus": {}, "windows": {  # NaN (no large job in a window) as null
            rule: {m: [None if np.isnan(v) else v for v in vs] for m, vs in by_metric.items()}
            for rule, by_metric in values[name].items()}}
        for rule in rules:
            entry["mean"][rule] = {m: float(np.nanmean(values[name][rule][m])) for m in METRICS}
            table.append(f"| {name} | {RULE_LABELS[rule]} | "
                         + " | ".join(f"{entry['mean'][rule][m]:.2f}" for m in METRICS) + " |")
            if args.versus and name != args.versus:
                entry["versus"][rule] = {m: paired(values[name][rule][m], values[args.versus][rule][m])
                                         for m in METRICS}
                versus.append(f"| {name} | {RULE_LABELS[rule]} | "
                              + " | ".join(fmt(entry["versus"][rule][m]) for m in METRICS) + " |")
        if both:
            entry["diff"] = {m: paired(values[name]["kept"][m], values[name]["remade"][m]) for m in METRICS}
            diffs.append(f"| {name} | " + " | ".join(fmt(entry["diff"][m]) for m in METRICS) + " |")
        results["policies"][name] = entry
    if args.versus:
        results["versus"] = args.versus
    text = "\n".join([
        f"# Persistent reservations on {args.trace.name}: {args.samples} test windows of 512 jobs "
        f"(seeds 7..{6 + args.samples})",
        "", "Means over the windows of each window's value; large jobs use at least "
        f"{LARGE_SHARE:.0%} of the machine ({int(np.ceil(LARGE_SHARE * procs))} processors or more); "
        "window 50 for everyone.", "", *table,
        *(["", "Paired differences over the windows (kept - re-made; bootstrap 95% CI, 10,000 resamples, seed 7):",
           "", *diffs] if both else []),
        *(["", f"Paired differences over the windows against {args.versus} under the same rule (bootstrap 95% "
           "CI, 10,000 resamples, seed 7):", "", *versus] if args.versus else []),
        "", f"_{seconds:.0f} s for the comparison (`hpcgym compare`, {args.workers} worker(s))._"]) + "\n"
    return text, results


def fmt(diff: dict[str, float | int]) -> str:
    return f"{diff['mean']:+.2f} [{diff['ci_low']:+.2f}, {diff['ci_high']:+.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--train-fraction", type=float, default=0.8)
    parser.add_argument("--windows", type=Path, help="compare on test windows, into this folder")
    parser.add_argument("--agent", action="append", default=[], type=lambda s: tuple(s.split("=", 1)),
                        help="NAME=CHECKPOINT: a DRAS checkpoint (select+backfill) to run too; repeat it")
    parser.add_argument("--builtin", default=",".join(WINDOW_POLICIES),
                        help="with --windows: the built-in policies to compare, comma-separated (default: all)")
    parser.add_argument("--pick-every", type=int, default=0, metavar="N",
                        help="replace each --agent checkpoint by the epoch of its run, among every N-th, with the "
                             "best greedy validation return (as the paper picks its models); 0: the final one")
    parser.add_argument("--rules", default="remade,kept",
                        help="with --windows: the reservation rules to run each policy under (remade, kept)")
    parser.add_argument("--versus", metavar="POLICY",
                        help="with --windows: also each policy's paired difference to this one (a --builtin name "
                             "or an --agent NAME), under the same rule, e.g. optimization")
    parser.add_argument("--samples", type=int, default=10, help="test windows")
    parser.add_argument("--workers", type=int, default=1, help="hpcgym compare workers")
    parser.add_argument("--reuse", action="store_true", help="sum up the comparison already in --windows")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path, help="with --windows: the numbers as JSON")
    parser.add_argument("--curves", type=Path, metavar="PNG",
                        help="only this: the --agent runs' training and validation curves (needs --pick-every)")
    args = parser.parse_args()
    args.builtin = chosen(parser, "--builtin", args.builtin, WINDOW_POLICIES)
    args.rules = chosen(parser, "--rules", args.rules, RULES)
    if args.versus and args.versus not in [*args.builtin, *(name for name, _ in args.agent)]:
        parser.error(f"--versus {args.versus}: not among the compared policies (--builtin, --agent NAME)")
    if args.curves:
        if not args.pick_every:
            parser.error("--curves draws the validation curve of every --pick-every N-th epoch: give --pick-every")
        plot_curves(args.agent, args, args.curves)
        return
    if args.pick_every:
        args.agent = [(name, str(picked_checkpoint(Path(path), args))) for name, path in args.agent]
    made = provenance({k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                      [path for _, path in args.agent])
    if args.windows is None:
        text = whole_part(args)
    else:
        text, results = windows(args)
        if args.json:
            args.json.write_text(json.dumps({**results, "provenance": made}, indent=1) + "\n")
    text = f"{provenance_markdown(made)}\n\n{text}"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
