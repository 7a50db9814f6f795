"""How training scales with rollout workers: one table for workers 1, 2, 4, ... up to the core count.

    .venv/bin/python benchmarks/train_scaling.py                           # lublin_256, all three agents
    .venv/bin/python benchmarks/train_scaling.py --agents ppo-select --workers 1,2 --epochs 3
    .venv/bin/python benchmarks/train_scaling.py --agents ppo-select --workers 1,2 --rounds 5   # medians
    .venv/bin/python benchmarks/train_scaling.py --agents ppo-select --workers 1,16 --threads 1,4,16
    python benchmarks/train_scaling.py --agents ppo-select,rlbf --workers 1,16 --devices cpu,cuda   # GPU learner

Agents (each with `hpcgym train`'s own settings for it, read back from a one-episode run of the
command, so the presets are the command's and nothing is copied here):

- ppo-select: `hpcgym train ppo --kind select` (MLP 64,64 over jobs+nodes, window 128);
- rlbf: `hpcgym train rlbf` (RL backfilling's per-slot kernel network, public semantics);
- dras-ppo: `hpcgym train dras-ppo` (DRAS's network and curriculum, two decision levels).

For each agent and worker count, `--epochs` epochs of `--trajectories` episodes of 256 jobs from
`--trace`; the row is the last epoch (the first one builds the workers' copies of the policy).
Columns: the epoch's seconds, collect (the episodes played and handed to the learner) and update
apart, decisions/s while collecting, the speed-up of collecting over 1 worker and its parallel
efficiency (speed-up / workers), and the peak RSS of the learner and of the largest worker. 1
worker is the in-process runner. `--threads` repeats each row with the learner's torch threads
(`hpcgym train --threads`): with workers they run the update alone, each worker acting on one.
`--devices cpu,cuda` repeats each row with the learner on each device (`hpcgym train --device`:
with workers the update runs there while the workers act on CPU copies; in process the forward
passes of collection run there too).
The machine's core count and load average are printed: other work beside the benchmark slows
every row, so compare rows of one run; on a shared machine, `--rounds R` runs the rows R times in
turn and gives medians (the same single-threaded work was measured to vary 2x between minutes on
the 2-core development machine).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from hpcgym.agents.rl.checkpoint import load_checkpoint
from hpcgym.gymbridge.training.settings import train_recipe
from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings
from ppo_epoch import time_collection   # benchmarks/ is the script's folder

AGENTS = {"ppo-select": ["ppo", "--kind", "select"], "rlbf": ["rlbf"], "dras-ppo": ["dras-ppo"]}


def preset(agent: str, trace: str, folder: Path) -> TrainSettings:
    """The settings `hpcgym train` makes for `agent`, from a one-episode run of it."""
    out = folder / f"preset-{agent}"
    hpcgym = Path(sys.executable).parent / "hpcgym"
    subprocess.run([str(hpcgym), "train", *AGENTS[agent], "--trace", trace, "--epochs", "1", "--trajectories", "1",
                    "--eval-episodes", "0", "--device", "cpu", "--no-progress", "--out", str(out)],
                   check=True, capture_output=True)
    settings = TrainSettings.from_json(load_checkpoint(out / "epoch_000001.pt").trainer["settings"])
    settings.trajectories = train_recipe(AGENTS[agent][0], None, None, None).trajectories  # not the run's 1
    return settings


def peak_rss_mib(pid: int) -> float:
    """VmHWM of a live process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(settings: TrainSettings, workers: int, threads: int, device: str, epochs: int,
            folder: Path) -> dict[str, float]:
    """The last of `epochs` epochs with `workers` rollout workers, `threads` learner threads and
    the learner on `device`."""
    torch.set_num_threads(threads)
    trainer = Trainer(settings, folder, device=device, progress=False, log=lambda m: None, workers=workers)
    trainer.setup()
    runner, algo = trainer.runner, trainer.algo
    collect = time_collection(runner)
    try:
        for _ in range(epochs):
            collect["s"], steps = 0.0, runner.steps
            t0 = time.perf_counter()
            algo.train_epoch(runner, settings.trajectories)
            total = time.perf_counter() - t0
        worker_rss = max((peak_rss_mib(p.pid) for p in getattr(getattr(runner, "workers", None), "procs", [])),
                         default=float("nan"))
    finally:
        if workers > 1:
            runner.close()
    return {"epoch": total, "collect": collect["s"], "update": total - collect["s"], "decisions": runner.steps - steps,
            "learner_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "worker_rss": worker_rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="lublin_256.swf.gz", help="SWF trace (a path or a name in $HPCGYM_TRACES)")
    parser.add_argument("--agents", default=",".join(AGENTS), help=f"comma-separated, of {', '.join(AGENTS)}")
    parser.add_argument("--workers", help="comma-separated worker counts (default 1, 2, 4, ... up to the cores)")
    parser.add_argument("--trajectories", type=int, help="episodes per epoch (default: the agent's)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", default="1", help="comma-separated learner thread counts (default 1)")
    parser.add_argument("--devices", default="cpu", help="comma-separated learner devices, e.g. cpu,cuda (default cpu)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="times every row runs, the rows taking turns; the table gives medians, and the "
                             "speed-up the median of each round's ratio (each listed)")
    args = parser.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]
    devices = args.devices.split(",")
    unknown = [d for d in devices if d != "cpu" and not d.startswith("cuda")]
    if unknown:
        parser.error(f"--devices: unknown {', '.join(unknown)}; use cpu, cuda or cuda:N")
    on_gpu = any(d.startswith("cuda") for d in devices)
    if on_gpu and not torch.cuda.is_available():
        parser.error("--devices cuda: torch sees no CUDA device here")
    cores = os.cpu_count() or 1
    counts = [int(w) for w in args.workers.split(",")] if args.workers else \
        sorted({*(2 ** k for k in range(cores.bit_length()) if 2 ** k <= cores), cores})
    print(f"{cores} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the start; "
          f"{platform.processor() or platform.machine()}, torch {torch.__version__}"
          + (f" ({torch.cuda.get_device_name()})" if on_gpu else "")
          + f"; trace {args.trace}; "
          f"the last of {args.epochs} epochs per row" + (f", medians of {args.rounds} rounds" if args.rounds > 1 else ""))
    print(f"| agent | workers | threads | learner | epoch s | collect s | update s | decisions/s | collect speed-up "
          f"| efficiency | learner RSS MiB | worker RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for agent in args.agents.split(","):
            settings = preset(agent, args.trace, Path(tmp))
            if args.trajectories:
                settings.trajectories = args.trajectories
            settings.epochs, settings.eval_episodes = args.epochs, 0
            rows = [(w, t, d) for w in counts for t in thread_counts for d in devices]
            runs: dict[tuple[int, int, str], list[dict[str, float]]] = {row: [] for row in rows}
            for r in range(args.rounds):  # the rows take turns, so a shared machine's drift falls on each
                for w, t, d in rows:
                    m = measure(settings, w, t, d, args.epochs, Path(tmp) / f"{agent}-{w}-{t}-{d}-{r}")
                    m["rate"] = m["decisions"] / m["collect"]
                    runs[(w, t, d)].append(m)
            base = runs[rows[0]]
            for w, t, d in rows:
                ms = runs[(w, t, d)]
                median = {key: float(np.median([m[key] for m in ms])) for key in ("epoch", "collect", "update", "rate")}
                speedups = [m["rate"] / b["rate"] for m, b in zip(ms, base)]
                speedup = float(np.median(speedups))
                worker_rss = "-" if w == 1 else f"{max(m['worker_rss'] for m in ms):.0f}"
                each = f" ({', '.join(f'{x:.2f}' for x in speedups)})" if args.rounds > 1 else ""
                print(f"| {agent} | {w} | {t} | {d} | {median['epoch']:.2f} | {median['collect']:.2f} | {median['update']:.2f} "
                      f"| {median['rate']:,.0f} | {speedup:.2f}x{each} | {speedup / w:.0%} "
                      f"| {max(m['learner_rss'] for m in ms):.0f} | {worker_rss} |", flush=True)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
