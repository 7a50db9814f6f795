"""DRAS evaluation (docs/dras.md): train DRAS-PG/A2C/PPO/DQL on a trace's training part with the
three-phase curriculum, once per objective (eq. 1 capability, eq. 2 capacity), then compare them
with `hpcgym compare` against FCFS+EASY, the knapsack optimizer, BinPacking and Random on windows
of the test part, and sum up what the paper reports: the usual metrics, the share of jobs (and
of processor-seconds) started ready / reserved / backfilled (Table 4), and the largest wait per
job size class (Fig. 8, starvation).

    python benchmarks/dras_eval.py --out runs/dras-eval               # SDSC-SP2, both objectives
    python benchmarks/dras_eval.py --out runs/dras-eval --skip-training   # re-run the comparison
    python benchmarks/dras_eval.py --out runs/t4 --json T4.json --agent NAME=MODEL ...  # Table 4 only

Every step is an `hpcgym` command (printed before it runs), so each can be repeated by hand.
Outputs in OUT: OBJECTIVE/ALGO/ (training runs: curve.csv, model.pt), OBJECTIVE/compare/,
curves-OBJECTIVE.png (learning curves), results-OBJECTIVES.json and .md (the tables of docs/dras.md).
With PPO among the algorithms, DRAS-PPO also schedules the whole test part as one episode over
the protocol, static (greedy; sampling) and dynamic (sampling with online updates, `--online`).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from hpcgym.gymbridge.compare.report import Panel, write_curves
from hpcgym.gymbridge.provenance import provenance, provenance_markdown

ROOT = Path(__file__).resolve().parents[1]
_local = Path(sys.executable).parent / "hpcgym"
HPCGYM = str(_local) if _local.exists() else "hpcgym"
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "SDSC-SP2-1998-4.2-cln.swf.gz"
START_KINDS = ("ready", "reserved", "backfilled")
#: objective -> the reward spec dras_OBJECTIVE and the knapsack optimizing the same objective
KNAPSACKS = {"capability": "knapsack", "capacity": "knapsack-capacity",
             "capacity_runtime": "knapsack-capacity-runtime"}
#: a job is "large" from this share of the machine's processors up (our threshold; the paper
#: compares small and large jobs on Theta without a number in its text)
LARGE_SHARE = 0.2


def run(cmd: list[str]) -> None:
    """Run an hpcgym command, echoing it."""
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def training_seconds(folder: Path) -> float:
    """The seconds a training run's epochs took (its curve.csv), setup and checkpoints aside."""
    with open(folder / "curve.csv", newline="") as f:
        return sum(float(r["seconds"]) for r in csv.DictReader(f))


def train(args, objective: str, algorithm: str, out: Path) -> None:
    cmd = [HPCGYM, "train", f"dras-{algorithm}", "--trace", str(args.trace), "--train-fraction", str(args.train_fraction),
           "--jobs", str(args.jobs), "--epochs", str(args.epochs), "--trajectories", str(args.trajectories),
           "--envs", str(args.envs), "--reward", f"dras_{objective}", "--curriculum", args.curriculum,
           "--seed", str(args.seed), "--out", str(out), "--eval-episodes", "0", "--no-progress"]
    run(cmd)


def policies(objective: str, folder: Path, algorithms: list[str]) -> list[str]:
    """FCFS+EASY (FCFS/B) first, the baseline, the optimizer with the same objective, the packers, then
    the DRAS agents taking both levels; everyone sees DRAS's window of 50 jobs."""
    knapsack = KNAPSACKS[objective]
    specs = ["fcfs-easy=fcfs,easy,window:50", f"optimization=select:{knapsack},backfill:none,window:50",
             "binpacking=select:binpacking,backfill:none,window:50",
             "random=select:random-packing,backfill:none,window:50"]
    specs += [f"dras-{a}=select/backfill:model:{folder / a / 'model.pt'},easy,window:50" for a in algorithms]
    return specs


def read_jobs(path: Path) -> dict[str, np.ndarray]:
    """A per-job CSV's numeric columns (`allocated_resources`, an interval set, is left out)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0] if k != "allocated_resources"}


def job_tables(compare: Path, procs: int) -> dict[str, dict[str, float]]:
    """Per policy, over all its sequences: start-kind shares of jobs and of processor-seconds,
    and the largest wait (hours) of small and of large jobs."""
    out = {}
    for folder in sorted((compare / "jobs").iterdir()):
        jobs = [read_jobs(p) for p in sorted(folder.glob("seq-*.csv"))]
        cols = {k: np.concatenate([j[k] for j in jobs]) for k in jobs[0]}
        work = cols["run"] * cols["size"]
        row = {}
        for code, name in enumerate(START_KINDS):
            hit = cols["start_kind"] == code
            row[f"{name}_jobs"] = float(hit.mean())
            row[f"{name}_work"] = float(work[hit].sum() / work.sum())
        large = cols["size"] >= LARGE_SHARE * procs
        row["max_wait_small_h"] = float(cols["wait"][~large].max() / 3600) if (~large).any() else float("nan")
        row["max_wait_large_h"] = float(cols["wait"][large].max() / 3600) if large.any() else float("nan")
        out[folder.name] = row
    return out


VALIDATION_SEEDS = [2 ** 30 + k for k in range(4)]


def validation_curve(run_dir: Path, args, every: int = 1) -> list[dict[str, float]]:
    """Each epoch's checkpoint (or every `every`-th), greedy, on the same 4 windows of the training
    part (seeds no training episode uses): mean return and mean wait per epoch, as the paper's
    convergence plots validate each snapshot. Cached in run_dir/validation.csv (validation-eN.csv)."""
    cache = run_dir / ("validation.csv" if every == 1 else f"validation-e{every}.csv")
    if cache.exists():
        with open(cache, newline="") as f:
            return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    from hpcgym.agents.rl.checkpoint import load_checkpoint
    from hpcgym.agents.runtime import serve_on_one_thread
    from hpcgym.gymbridge.training.trainer import TrainSettings, make_env

    serve_on_one_thread()  # one decision at a time: on a busy machine two threads made it 27x slower
    rows = []
    for path in sorted(p for p in run_dir.glob("epoch_*.pt")
                       if p.stem[len("epoch_"):].isdigit() and int(p.stem[len("epoch_"):]) % every == 0):
        ckpt = load_checkpoint(path)
        settings = TrainSettings.from_json(ckpt.trainer["settings"], curriculum=None)
        workload = {"trace": str(args.trace), "train_fraction": args.train_fraction, "part": "train",
                    "jobs": args.jobs, "sample": True}
        env, algo = make_env(settings, workload), ckpt.build()
        returns, waits = [], []
        for seed in VALIDATION_SEEDS:
            obs, info = env.reset(seed=seed)
            total, done = 0.0, False
            while not done:
                action = int(algo.act(obs[None], np.asarray(info["action_mask"], bool)[None])[0])
                obs, reward, done, _, info = env.step(action)
                total += reward
            returns.append(total)
            waits.append(info["metrics"]["mean_wait"] / 3600)
        rows.append({"epoch": ckpt.epoch, "episodes": int(ckpt.trainer["next_episode"]),
                     "return": float(np.mean(returns)), "mean_wait_h": float(np.mean(waits))})
    with open(cache, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return rows


def plot_curves(folder: Path, algorithms: list[str], objective: str, path: Path, args) -> None:
    """Training return (the sampling / epsilon-greedy policy, per phase: phases differ in load)
    and the greedy validation return and mean wait per epoch; phase boundaries dashed."""
    from hpcgym.gymbridge.training.trainer import parse_curriculum

    phases = parse_curriculum(args.curriculum, args.epochs * args.trajectories)
    bounds = tuple(itertools.accumulate(episodes for _, episodes in phases[:-1]))
    panels = [Panel(title, xlabel="training episodes", vlines=bounds) for title in (
        "training return (behaviour policy)", "validation return (greedy)", "validation mean wait (h, greedy)")]
    for a in algorithms:
        label = f"DRAS-{a.upper()}"
        panels[0].runs({label: folder / a}, x="episodes_total")
        valid = validation_curve(folder / a, args)
        for panel, key in zip(panels[1:], ("return", "mean_wait_h")):
            panel.lines[label] = ([r["episodes"] for r in valid], [r[key] for r in valid])
    write_curves(panels, path, title=f"DRAS on {args.trace.name.split('-')[0]}-{args.trace.name.split('-')[1]}, "
                 f"{objective} reward (phases: {', '.join(p for p, _ in phases)})", columns=3, size=(5, 3.8))


def dynamic(args, objective: str, folder: Path) -> dict[str, dict]:
    """Static vs dynamic DRAS-PPO (the paper's Fig. 10) over the whole test part as one episode:
    `hpcgym env` with the objective's reward, and `hpcgym agent --model` served greedily, by
    sampling, and sampling with online updates (`--online`), each a fresh agent process."""
    import tempfile

    from hpcgym.environment.spec import load_workload
    from hpcgym.environment.swf import write_swf

    test = folder / "test-part.swf"
    write_swf(test, load_workload({"trace": str(args.trace), "train_fraction": args.train_fraction, "part": "test"}))
    model = folder / "ppo" / "model.pt"
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        bind = f"ipc://{tmp}/env.ipc"
        env = subprocess.Popen([HPCGYM, "env", "--bind", bind, "--trace", str(test), "--reward", f"dras_{objective}",
                                "--decision-timeout", "300"], cwd=ROOT, stderr=subprocess.DEVNULL)
        try:
            for name, extra in (("static, greedy", []), ("static, sampling", ["--sampling"]),
                                ("dynamic", ["--online", "--online-save", str(folder / "ppo-online.pt")])):
                cmd = [HPCGYM, "agent", "--model", str(model), "--connect", bind, "--seed", "0", "--json",
                       "--timeout", "300", *extra]
                print("$", " ".join(cmd), flush=True)
                t0 = time.perf_counter()
                done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
                out[name] = {**json.loads(done.stdout.strip().splitlines()[-1]),
                             "seconds": time.perf_counter() - t0, "log": done.stderr.strip().splitlines()[-1:]}
        finally:
            env.terminate()
            env.wait(timeout=30)
    return out


def compare_test(args, specs: list[str], out: Path) -> dict[str, dict]:
    """`hpcgym compare` of `specs` on the test windows every table here uses; its summary rows by policy."""
    cmd = [HPCGYM, "compare", "--trace", str(args.trace), "--train-fraction", str(args.train_fraction),
           "--part", "test", "--jobs", str(args.jobs), "--samples", str(args.samples), "--seed", "7",
           "--workers", str(args.workers), "--out", str(out), "--force"]
    run(cmd + [x for spec in specs for x in ("--policy", spec)])
    with open(out / "summary.csv", newline="") as f:
        return {r["policy"]: r for r in csv.DictReader(f)}


def start_kinds(args) -> None:
    """Table 4 for already trained agents (`--agent`): FCFS/B and the agents on the same test
    windows, no training; writes `--json`."""
    agents = dict(a.split("=", 1) for a in args.agent)
    specs = ["fcfs-easy=fcfs,easy,window:50"] + [f"{n}=select/backfill:model:{m},easy,window:50" for n, m in agents.items()]
    summary = compare_test(args, specs, args.out / "compare")
    settings = {k: str(v) for k, v in vars(args).items()}
    results = {"settings": settings, "summary": summary, "jobs": job_tables(args.out / "compare", args.procs),
               "provenance": provenance(settings, agents.values())}
    args.json.write_text(json.dumps(results, indent=1) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    p.add_argument("--procs", type=int, default=128, help="the trace's processors (size classes)")
    p.add_argument("--train-fraction", type=float, default=0.8)
    p.add_argument("--jobs", type=int, default=512, help="jobs per training episode and per test sequence")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--trajectories", type=int, default=8, help="episodes per epoch")
    p.add_argument("--envs", type=int, default=4)
    p.add_argument("--curriculum", default="sampled,real,synthetic")
    p.add_argument("--samples", type=int, default=10, help="test sequences")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--objectives", default="capacity,capability,capacity_runtime",
                   help=f"among {', '.join(KNAPSACKS)} (eq. 2 read with waits / with run times)")
    p.add_argument("--algorithms", default="ppo,a2c,pg,dql")
    p.add_argument("--parallel", type=int, default=1, help="training runs at once")
    p.add_argument("--workers", type=int, default=2, help="hpcgym compare workers")
    p.add_argument("--skip-training", action="store_true")
    p.add_argument("--skip-dynamic", action="store_true", help="no static vs dynamic DRAS-PPO run")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--agent", action="append", default=[], metavar="NAME=MODEL",
                   help="only count start kinds (Table 4) of these trained agents, no training; needs --json")
    p.add_argument("--json", type=Path, help="with --agent: the results file")
    args = p.parse_args()
    if args.agent:
        if args.json is None or any("=" not in a for a in args.agent):
            p.error("--agent takes NAME=MODEL (repeat it) and needs --json FILE for the results")
        return start_kinds(args)
    algorithms = args.algorithms.split(",")
    results: dict = {"settings": {k: str(v) for k, v in vars(args).items()}, "objectives": {}}
    for objective in args.objectives.split(","):
        folder = args.out / objective
        if not args.skip_training:
            for a in algorithms:
                shutil.rmtree(folder / a, ignore_errors=True)
            with ThreadPoolExecutor(args.parallel) as pool:
                list(pool.map(lambda a: train(args, objective, a, folder / a), algorithms))
        seconds = {a: training_seconds(folder / a) for a in algorithms}
        plot_curves(folder, algorithms, objective, args.out / f"curves-{objective}.png", args)
        compare = folder / "compare"
        summary = compare_test(args, policies(objective, folder, algorithms), compare)
        results["objectives"][objective] = {"train_seconds": seconds, "summary": summary,
                                            "jobs": job_tables(compare, args.procs)}
        if "ppo" in algorithms and not args.skip_dynamic:
            results["objectives"][objective]["dynamic"] = dynamic(args, objective, folder)
    results["provenance"] = provenance(results["settings"], [args.out / objective / a / "model.pt"
                                                             for objective in results["objectives"] for a in algorithms])
    name = "results-" + "-".join(results["objectives"])
    (args.out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / f"{name}.md").write_text(markdown(results))
    print((args.out / f"{name}.md").read_text())


def markdown(results: dict) -> str:
    lines = [provenance_markdown(results["provenance"]), ""]
    for objective, r in results["objectives"].items():
        lines += [f"### {objective} objective", ""]
        if r["train_seconds"]:
            lines += ["training seconds: " + ", ".join(f"DRAS-{a.upper()} {s:.0f}" for a, s in r["train_seconds"].items()),
                      ""]
        lines += ["| policy | mean wait (h) | max wait (h) | mean bsld | utilization | ready / reserved / backfilled "
                  "(% jobs) | reserved (% proc-s) | max wait small / large (h) |", "|---|---|---|---|---|---|---|---|"]
        for name, s in r["summary"].items():
            if s["status"] != "ok":
                lines.append(f"| {name} | failed: {s['error']} |")
                continue
            j = r["jobs"].get(name, {})
            shares = " / ".join(f"{100 * j.get(f'{k}_jobs', float('nan')):.1f}" for k in START_KINDS)
            lines.append(f"| {name} | {float(s['mean_wait_mean']) / 3600:.2f} | {float(s['max_wait_mean']) / 3600:.1f} | "
                         f"{float(s['mean_bsld_mean']):.1f} | {float(s['utilization_mean']):.3f} | {shares} | "
                         f"{100 * j.get('reserved_work', float('nan')):.1f} | "
                         f"{j.get('max_wait_small_h', float('nan')):.1f} / {j.get('max_wait_large_h', float('nan')):.1f} |")
        lines.append("")
        if r.get("dynamic"):
            lines += ["| DRAS-PPO on the whole test part | mean wait (h) | max wait (h) | mean bsld | utilization | seconds |",
                      "|---|---|---|---|---|---|"]
            for name, m in r["dynamic"].items():
                lines.append(f"| {name} | {m['mean_wait'] / 3600:.2f} | {m['max_wait'] / 3600:.1f} | {m['mean_bsld']:.1f} | "
                             f"{m['utilization']:.3f} | {m['seconds']:.0f} |")
            lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
