"""RLSchert with against without the imitation term (docs/rlschert.md): the paper says the
rule-based teacher makes training faster and better (its Fig. 9). `hpcgym train rlschert` on
SDSC-SP2's training part, once with the preset's imitation weight (0.5 falling linearly to 0 over
--imitation-epochs update epochs) and once with `imitation_coef=0`, from the same seeds (the same
initial network and the same training windows). Each final greedy policy runs on held-out windows
of the test part (the training command's own evaluation, beside FCFS and the rule-based kill), and
so do the checkpoints of epoch 1 and every --eval-every-th epoch (one set of held-out windows for
all runs, through hpcgym compare): the held-out learning curve.

    python benchmarks/rlschert_imitation.py                       # 3 seeds, 20 epochs of 8 episodes
    python benchmarks/rlschert_imitation.py --seeds 0 --epochs 4  # a quick look

Both arms run the preset's teacher (the unguided one labels and ignores it), so their seconds per
epoch compare. Outputs: training folders under RUNS/rlschert-imitation/ARM-seedS, and in OUT
imitation_curves.csv (one row per arm, seed and epoch), imitation_eval.csv (one row per arm, seed,
policy and held-out window; policy epochNN: a checkpoint), imitation_curves.png and imitation.md.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from paper_runs import HPCGYM, ROOT, TRACES_DIR, compare, epoch_seconds, run, unit_summaries

from hpcgym.gymbridge.compare.report import Panel, write_curves
from hpcgym.gymbridge.compare.unit import MAX_KILLS_PER_JOB
from hpcgym.gymbridge.training.trainer import eval_seed

TRACE = TRACES_DIR / "SDSC-SP2-1998-4.2-cln.swf.gz"
#: The arms: the preset's imitation weight, and none.
ARMS = {"teacher": [], "none": ["--set", "imitation_coef=0"]}
LABELS = {"teacher": "imitation on", "none": "imitation off"}
#: Columns of curve.csv kept in the curves file.
CURVE_KEYS = ("return", "length", "entropy", "imitation_loss", "imitation_weight", "seconds")
#: Held-out metrics of each policy's windows.
EVAL_KEYS = ("mean_slowdown", "mean_bsld", "mean_response", "kills", "lost_work")
#: The simulation of `hpcgym train rlschert`'s episodes, as compare policy options.
OPTIONS = "prediction:running,estimate:predicted,window:8"
#: Kills at which compare stops a 200-job window (over MAX_KILLS_PER_JOB per job).
FAILED_KILLS = MAX_KILLS_PER_JOB * 200 + 1


def train(args, arm: str, seed: int) -> Path:
    """Train one arm from `seed` unless its folder already holds the finished run."""
    folder = args.runs / "rlschert-imitation" / f"{arm}-seed{seed}"
    if not (folder / "eval.json").is_file():
        run([HPCGYM, "train", "rlschert", "--trace", str(args.trace), "--train-fraction", "0.8", "--epochs",
             str(args.epochs), "--trajectories", str(args.trajectories), "--seed", str(seed), "--eval-episodes",
             str(args.eval_episodes), "--set", f"imitation_epochs={args.imitation_epochs}", "--no-progress",
             "--out", str(folder), *ARMS[arm]])
    return folder


def curve_rows(folder: Path, arm: str, seed: int) -> list[dict]:
    with open(folder / "curve.csv", newline="") as f:
        return [{"arm": arm, "seed": seed, "epoch": int(r["epoch"]),
                 **{k: float(r[k]) if r.get(k) not in (None, "") else None for k in CURVE_KEYS}}
                for r in csv.DictReader(f)]


def eval_rows(folder: Path, arm: str, seed: int) -> list[dict]:
    """The held-out windows of the final greedy policy (`ppo`), FCFS and the rule-based kill. When
    the policy failed a window (over compare's kill limit), eval.json drops all its windows: the
    finished ones are read from its compare units, the failed ones are rows without metrics."""
    data = json.loads((folder / "eval.json").read_text())
    episodes = {policy: eps for policy, eps in data["per_episode"].items() if policy != "seed"}
    for policy in data.get("failed", {}):
        episodes[policy] = unit_summaries(folder / "eval", policy)  # `ppo` is its own folder name
    return window_rows(episodes, arm, seed)


def checkpoint_rows(args, folder: Path, arm: str, seed: int) -> list[dict]:
    """The greedy policies of epoch 1's and every --eval-every-th epoch's checkpoints on the held-out
    windows of seed 0's evaluation (the same for every run), through hpcgym compare."""
    epochs = sorted({1, *range(args.eval_every, args.epochs + 1, args.eval_every)})
    policies = {f"epoch{e:02d}": f"fcfs,{OPTIONS},kill:model:{folder / f'epoch_{e:06d}.pt'}" for e in epochs}
    compare(folder / "checkpoints", args.trace, policies, eval_seed(0), args.eval_episodes, 200,
            "--train-fraction", "0.8", "--part", "test", failures=True)
    return window_rows({name: unit_summaries(folder / "checkpoints", name) for name in policies}, arm, seed)


def window_rows(episodes: dict[str, list[dict | None]], arm: str, seed: int) -> list[dict]:
    """One row per policy and window; a failed window (over compare's kill limit) has no metrics."""
    return [{"arm": arm, "seed": seed, "policy": policy, "window": k, "status": "ok" if ep else "failed",
             **{key: ep.get(key) if ep else None for key in EVAL_KEYS}}
            for policy, eps in episodes.items() for k, ep in enumerate(eps)]


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def imitation(rows: list[dict]) -> str:
    """The mean imitation loss of rows, `-` once the weight is 0 (the loss is not logged then)."""
    losses = [r["imitation_loss"] for r in rows if r["imitation_loss"] is not None]
    return f"{mean(losses):.2f}" if losses else "-"


def checkpoint_windows(evals: list[dict], arm: str, seed: int, epoch: int) -> list[dict]:
    return [r for r in evals if (r["arm"], r["seed"], r["policy"]) == (arm, seed, f"epoch{epoch:02d}")]


def held_out(evals: list[dict], arm: str, seed: int, epoch: int, key: str) -> float:
    """The mean of `key` over the held-out windows of a run's checkpoint: the finished ones, and
    for `kills` also the failed ones, counted at the limit where compare stopped them (a floor)."""
    rows = checkpoint_windows(evals, arm, seed, epoch)
    return mean([r[key] if r["status"] == "ok" else FAILED_KILLS for r in rows
                 if r["status"] == "ok" or key == "kills"])


def held_out_cell(evals: list[dict], arm: str, seed: int, epoch: int) -> str:
    """`mean slowdown / kills` over a checkpoint's finished windows, and how many failed."""
    rows = checkpoint_windows(evals, arm, seed, epoch)
    ok = [r for r in rows if r["status"] == "ok"]
    failed = f"{len(rows) - len(ok)} failed" if len(ok) < len(rows) else ""
    if not ok:
        return f"all {failed}"
    text = f"{mean([r['mean_slowdown'] for r in ok]):.1f} / {mean([r['kills'] for r in ok]):,.0f}"
    return f"{text} (+{failed})" if failed else text


def plot(curves: list[dict], evals: list[dict], path: Path) -> None:
    """Training return and held-out kills and slowdown of the greedy checkpoints per epoch, each
    seed faint, the arms' means over seeds bold."""
    panels = [Panel("training return (eq. 9, sampled actions)"),
              Panel(f"held-out kills per window (greedy; failed = {FAILED_KILLS:,})", yscale="symlog"),
              Panel("held-out mean slowdown (greedy)", yscale="log")]
    checkpoints = sorted({int(r["policy"][5:]) for r in evals if r["policy"].startswith("epoch")})
    for arm, color in zip(ARMS, ("tab:blue", "tab:red")):
        rows = [r for r in curves if r["arm"] == arm]
        seeds, epochs = sorted({r["seed"] for r in rows}), sorted({r["epoch"] for r in rows})
        series = [(panels[0], epochs,
                   lambda s, e: mean([r["return"] for r in rows if (r["seed"], r["epoch"]) == (s, e)]))]
        series += [(panel, checkpoints, lambda s, e, key=key: held_out(evals, arm, s, e, key))
                   for panel, key in zip(panels[1:], ("kills", "mean_slowdown"))]
        for panel, xs, value in series:
            for seed in seeds:
                panel.lines[f"_{arm} {seed}"] = (xs, [value(seed, x) for x in xs],
                                                 {"color": color, "alpha": 0.3, "linewidth": 0.8, "marker": None})
            panel.lines[LABELS[arm]] = (xs, [mean([value(s, x) for s in seeds]) for x in xs],
                                        {"color": color, "linewidth": 2, "marker": None})
    write_curves(panels, path, title="RLSchert kill agent on SDSC-SP2, with and without the imitation term",
                 columns=3, dpi=80, size=(4.7, 3.6))


def markdown(curves: list[dict], evals: list[dict], args) -> str:
    seeds = sorted({r["seed"] for r in curves})
    epochs = sorted({r["epoch"] for r in curves})
    lines = ["# RLSchert: with against without the imitation term (benchmarks/rlschert_imitation.py)", "",
             f"SDSC-SP2 training part, {args.epochs} epochs of {args.trajectories} episodes of 200 jobs, seeds "
             f"{', '.join(map(str, seeds))}; imitation weight 0.5 falling to 0 over {args.imitation_epochs} epochs "
             "(on) or 0 (off). Mean over seeds per epoch.", "",
             "| epoch | return on | return off | on higher in seeds | length on | length off | imitation loss on |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for e in epochs:
        on = {r["seed"]: r for r in curves if r["arm"] == "teacher" and r["epoch"] == e}
        off = {r["seed"]: r for r in curves if r["arm"] == "none" and r["epoch"] == e}
        both = [s for s in on if s in off]
        higher = sum(on[s]["return"] > off[s]["return"] for s in both)
        lines.append(f"| {e} | {mean([r['return'] for r in on.values()]):,.0f} | "
                     f"{mean([r['return'] for r in off.values()]):,.0f} | {higher}/{len(both)} | "
                     f"{mean([r['length'] for r in on.values()]):,.0f} | "
                     f"{mean([r['length'] for r in off.values()]):,.0f} | {imitation(list(on.values()))} |")
    checkpoints = sorted({int(r["policy"][5:]) for r in evals if r["policy"].startswith("epoch")})
    lines += ["", f"Held-out windows ({args.eval_episodes}, the same for every run), greedy checkpoints: mean "
              "slowdown / kills per window over the finished windows (failed: stopped by compare at over 100 kills "
              "per job).",
              "", "| epoch | " + " | ".join(f"{LABELS[arm]}, seed {s}" for arm in ARMS for s in seeds) + " |",
              "|---:|" + "---:|" * len(ARMS) * len(seeds)]
    for e in checkpoints:
        lines.append(f"| {e} | " + " | ".join(held_out_cell(evals, arm, s, e) for arm in ARMS for s in seeds) + " |")
    lines += ["", "Seconds per epoch (mean over epochs and seeds): " + ", ".join(
        f"{LABELS[arm]} {mean([r['seconds'] for r in curves if r['arm'] == arm]):.1f}" for arm in ARMS), "",
        "Held-out windows of the test part, final greedy policy (mean over the finished windows):", "",
        "| arm | seed | policy | mean slowdown | mean completion (s) | kills | lost work (proc-s) |",
        "|---|---:|---|---:|---:|---:|---:|"]
    for arm in ARMS:
        for seed in seeds:
            mine = [r for r in evals if r["arm"] == arm and r["seed"] == seed]
            for policy in dict.fromkeys(r["policy"] for r in mine if not r["policy"].startswith("epoch")):
                rows = [r for r in mine if r["policy"] == policy and r["status"] == "ok"]
                failed = sum(r["policy"] == policy and r["status"] == "failed" for r in mine)
                note = f" ({failed} more failed: over 100 kills per job)" if failed else ""
                lines.append(f"| {arm} | {seed} | {policy}{note} | {mean([r['mean_slowdown'] for r in rows]):.2f} | "
                             f"{mean([r['mean_response'] for r in rows]):,.0f} | "
                             f"{mean([r['kills'] for r in rows]):.1f} | {mean([r['lost_work'] for r in rows]):,.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=TRACE if TRACE.is_file() else Path(TRACE.name))
    parser.add_argument("--runs", type=Path, default=ROOT / "runs")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "rlschert")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--trajectories", type=int, default=8)
    parser.add_argument("--imitation-epochs", type=int, default=10)
    parser.add_argument("--eval-episodes", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=5,
                        help="Evaluate the checkpoints of epoch 1 and of every this many epochs.")
    args = parser.parse_args()
    curves, evals = [], []
    for seed in (int(s) for s in args.seeds.split(",")):
        for arm in ARMS:
            folder = train(args, arm, seed)
            curves += curve_rows(folder, arm, seed)
            evals += eval_rows(folder, arm, seed) + checkpoint_rows(args, folder, arm, seed)
            print(f"{arm} seed {seed}: {epoch_seconds(folder)[1]:.1f} s per epoch", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "imitation_curves.csv", curves)
    write_csv(args.out / "imitation_eval.csv", evals)
    plot(curves, evals, args.out / "imitation_curves.png")
    (args.out / "imitation.md").write_text(markdown(curves, evals, args))
    print(markdown(curves, evals, args))


if __name__ == "__main__":
    main()
