"""Does every agent learn from every seed? A few epochs of each preset on several training seeds.

For each preset and seed it runs `hpcgym train ...` (printed first), reads the run's curve.csv and
prints the curve's start and end (mean return and decisions per episode, first and last epoch),
the share of episodes cut at the step cap, the kills per episode of the last epoch, and a verdict:

    degenerates   episodes grow past 1.5x their first length, or most episodes of the last epoch
                  hit the step cap: the policy stalls its schedule (rejects, kills, waits)
    worsens       the return falls by more than the tolerance
    improves      the return rises by more than the tolerance
    flat          none of these

The tolerance is the larger of --tolerance times the first epoch's |return| (at least 1e-3) and
the curve's own jitter, the spread of its epoch-to-epoch changes (with 3 or more epochs): an agent
whose windows differ from epoch to epoch (raw bsld returns) moves that much without learning, so
`flat` is no failure.

A training curve on raw returns follows how hard each epoch's windows are (a harder window means
more decisions and a lower return too), so with --eval K the first epoch's checkpoint and the
final model also play the same K held-out windows, and a second verdict compares them there: the
mean paired change of the return under the training reward, last minus first, with its
bootstrap 95% interval: improves or worsens when the interval leaves 0, else flat. The policies
play as they trained, sampling (DQL greedily); a greedy policy often does not show what
training changed (an inspector whose rejections stay below one half accepts everything). One run of this script prints the whole table and writes it,
with the commit and command that made it, to --out/seed_robustness.json.

    .venv/bin/python benchmarks/seed_robustness.py                      # every preset, seeds 0-2
    .venv/bin/python benchmarks/seed_robustness.py --preset schedinspector-code --seeds 0-15 --epochs 10
    .venv/bin/python benchmarks/seed_robustness.py --preset rlbf-scw --eval 10   # also on fixed windows
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from paper_runs import HPCGYM, ROOT, TRACES_DIR

from hpcgym.agents.rl.checkpoint import load_checkpoint
from hpcgym.gymbridge.compare.stats import bootstrap_ci
from hpcgym.gymbridge.provenance import provenance
from hpcgym.gymbridge.training.trainer import TrainSettings, eval_seed, make_env

SDSC = "SDSC-SP2-1998-4.2-cln.swf.gz"
#: preset -> the `hpcgym train` arguments of its run (epochs, seed and out are added); the
#: trajectories per epoch are cut where the paper's would make a seed take many minutes.
PRESETS: dict[str, list[str]] = {
    "pg": ["pg", "--trace", "lublin_256.swf.gz", "--jobs", "128", "--trajectories", "20"],
    "a2c": ["a2c", "--trace", "lublin_256.swf.gz", "--jobs", "128", "--trajectories", "20"],
    "ppo": ["ppo", "--trace", "lublin_256.swf.gz", "--jobs", "128", "--trajectories", "20"],
    "dql": ["dql", "--trace", "lublin_256.swf.gz", "--jobs", "128", "--trajectories", "20"],
    "schedinspector-code": ["schedinspector", "--trace", SDSC, "--semantics", "code"],
    "schedinspector-textbook": ["schedinspector", "--trace", SDSC, "--semantics", "textbook"],
    "rlbf-public": ["rlbf", "--trace", SDSC, "--semantics", "public", "--trajectories", "20"],
    "rlbf-scw": ["rlbf", "--trace", SDSC, "--semantics", "scw", "--trajectories", "20"],
    "rlschert-kill": ["rlschert", "--trace", SDSC, "--kind", "kill"],
    "rlschert-select_kill": ["rlschert", "--trace", SDSC, "--kind", "select_kill"],
    "dras-ppo": ["dras-ppo", "--trace", SDSC, "--trajectories", "8"],
    "dras-a2c": ["dras-a2c", "--trace", SDSC, "--trajectories", "8"],
    "irl-dqn": ["irl-dqn", "--trace", SDSC, "--trajectories", "4"],
}
LONGER = 1.5   # episodes this much longer than at the start: the policy is stalling the schedule


def seeds_from(text: str) -> list[int]:
    """`0-2,7` -> [0, 1, 2, 7]."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def jitter(curve: list[float]) -> float:
    """The standard deviation of a curve's epoch-to-epoch changes (0 with fewer than 3 epochs)."""
    steps = [b - a for a, b in zip(curve, curve[1:])]
    if len(steps) < 2:
        return 0.0
    mean = sum(steps) / len(steps)
    return (sum((d - mean) ** 2 for d in steps) / (len(steps) - 1)) ** 0.5


def verdict(first: dict[str, float], last: dict[str, float], tolerance: float, noise: float = 0.0) -> str:
    tol = max(1e-3, tolerance * abs(first["return"]), noise)
    if last["length"] > LONGER * first["length"] or last.get("truncated", 0.0) > 0.5:
        return "degenerates"
    if last["return"] < first["return"] - tol:
        return "worsens"
    return "improves" if last["return"] > first["return"] + tol else "flat"


def fixed_windows(folder: Path, episodes: int, report: bool = False) -> dict[str, object] | None:
    """The first epoch's checkpoint and the final model on the same `episodes` held-out windows
    (reset seeds eval_seed(seed) + k), each window played once sampled (with the same generator
    for both, seeded by k) and once greedy: returns under the training reward, and the verdict on
    the paired change of the return of the mode that trained (sampled; greedy for DQL, whose
    sampled actions are not its exploration). Kept in OUT/fixed_windows.json."""
    import numpy as np

    path = folder / "fixed_windows.json"
    kept = json.loads(path.read_text()) if path.exists() else None
    if kept is not None and kept["episodes"] == episodes:
        return kept
    first = folder / "epoch_000001.pt"
    if report or not first.exists() or not (folder / "model.pt").exists():
        return None
    settings = TrainSettings.from_json(load_checkpoint(first).trainer["settings"])
    env = make_env(settings, workload=settings.workload)   # a curriculum's real windows, not its phases
    cap = settings.max_steps or 1_000_000
    returns: dict[str, dict[str, list[float]]] = {}
    for name, checkpoint in (("first", first), ("last", folder / "model.pt")):
        algo = load_checkpoint(checkpoint).build("cpu")
        returns[name] = {"sampled": [], "greedy": []}
        for mode in ("sampled", "greedy"):
            for k in range(episodes):
                obs, info = env.reset(seed=eval_seed(settings.seed) + k)
                rng, total = np.random.default_rng(k), 0.0
                for _ in range(cap):
                    mask = np.asarray(info["action_mask"], dtype=bool)
                    action = int(algo.act(obs[None], mask[None], greedy=mode == "greedy", rng=rng)[0])
                    obs, reward, terminated, truncated, info = env.step(action)
                    total += float(reward)
                    if terminated or truncated:
                        break
                returns[name][mode].append(total)
    mode = "greedy" if settings.algorithm == "dql" else "sampled"
    change = [b - a for a, b in zip(returns["first"][mode], returns["last"][mode])]
    low, high = bootstrap_ci(change, 10_000, seed=0)
    result = {"provenance": provenance({"episodes": episodes, "mode": mode}, [first, folder / "model.pt"]),
              "episodes": episodes, "mode": mode, "returns": returns,
              "first": float(np.mean(returns["first"][mode])), "last": float(np.mean(returns["last"][mode])),
              "change": float(np.mean(change)), "interval": [low, high],
              "verdict": "improves" if low > 0 else "worsens" if high < 0 else "flat"}
    path.write_text(json.dumps(result, indent=1))
    return result


def train(preset: str, seed: int, epochs: int, out: Path, extra: list[str], report: bool = False,
          eval_episodes: int = 0) -> dict[str, object]:
    """Train (or resume) one run unless it finished, read its curve and, with `eval_episodes`,
    compare its first and last policies on fixed windows; with `report`, only read what is there
    (an unfinished run is reported with the epochs it has)."""
    folder = out / preset / f"seed{seed}"
    if report and not (folder / "curve.csv").exists():
        return {"preset": preset, "seed": seed, "error": "not run"}
    if not report and not (folder / "model.pt").exists():
        cmd = [HPCGYM, "train", *PRESETS[preset], "--epochs", str(epochs), "--seed", str(seed), "--eval-episodes",
               "0", "--no-progress", "--out", str(folder), *extra]
        if (folder / "curve.csv").exists():
            cmd.append("--resume")
        print("$", " ".join(cmd), flush=True)
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if done.returncode:
            return {"preset": preset, "seed": seed, "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    with open(folder / "curve.csv", newline="") as f:
        rows = [{k: float(v) for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(f)]
    run = {"preset": preset, "seed": seed, "first": rows[0], "last": rows[-1], "epochs": len(rows),
           "curve": [r.get("return") for r in rows]}
    if eval_episodes:
        run["fixed_windows"] = fixed_windows(folder, eval_episodes, report)
    return run


def fixed_windows_line(w: dict[str, object] | None) -> str:
    if w is None:
        return "not evaluated"
    low, high = w["interval"]
    return (f"{w['first']:.4g} -> {w['last']:.4g} ({w['change']:+.3g}, [{low:+.3g}, {high:+.3g}], "
            f"{w['mode']}) {w['verdict']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", choices=sorted(PRESETS),
                        help="a preset to run (repeat; default: all)")
    parser.add_argument("--seeds", default="0-2", help="training seeds, e.g. 0-2 or 0-15 or 4,11")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="trainings run at once")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "seed_robustness",
                        help="run folders (a finished run is read, not retrained; an unfinished one resumed)")
    parser.add_argument("--report", action="store_true",
                        help="train nothing: print the table of the runs in --out as they are")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an algorithm option for every run (hpcgym train --set)")
    parser.add_argument("--eval", type=int, default=0, metavar="K",
                        help="also compare each run's first and last policies on K fixed held-out windows")
    args = parser.parse_args()
    os.environ.setdefault("HPCGYM_TRACES", str(TRACES_DIR))
    extra = [a for kv in args.set for a in ("--set", kv)]
    runs = [(p, s) for p in (args.preset or list(PRESETS)) for s in seeds_from(args.seeds)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda ps: train(*ps, args.epochs, args.out, extra, args.report, args.eval), runs))
    print(f"\n{'preset':<24}{'seed':>5}{'return first':>14}{'last':>10}{'length first':>14}{'last':>8}"
          f"{'capped':>8}{'kills':>8}{'jitter':>9}  verdict      {'fixed windows: return first -> last (change, 95% CI)' if args.eval else ''}")
    for r in results:
        if "error" in r:
            print(f"{r['preset']:<24}{r['seed']:>5}  failed: {r['error']}")
            continue
        first, last = r["first"], r["last"]
        if r["epochs"] < args.epochs:
            r["note"] = f"unfinished: {r['epochs']} of {args.epochs} epochs"
        r["jitter"] = jitter(r["curve"])
        r["verdict"] = verdict(first, last, args.tolerance, r["jitter"])
        print(f"{r['preset']:<24}{r['seed']:>5} {first['return']:>13.4f} {last['return']:>9.4f}"
              f"{first['length']:>14.1f}{last['length']:>8.1f}{last.get('truncated', 0.0):>8.2f}"
              f"{format(last['kills'], '.1f') if 'kills' in last else '-':>8} {r['jitter']:>8.4f}  {r['verdict']:<12} "
              f"{fixed_windows_line(r.get('fixed_windows')) if args.eval else ''}{'  (' + r['note'] + ')' if 'note' in r else ''}")
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"provenance": provenance({"epochs": args.epochs, "eval_windows": args.eval, "seeds": seeds_from(args.seeds),
                                        "tolerance": args.tolerance,
                                        "presets": {p: PRESETS[p] for p in (args.preset or PRESETS)}}),
              "seconds": round(time.perf_counter() - t0, 1), "runs": results}
    (args.out / "seed_robustness.json").write_text(json.dumps(report, indent=1))
    print(f"\n{len(results)} runs in {report['seconds']} s; table in {args.out / 'seed_robustness.json'}")


if __name__ == "__main__":
    main()
