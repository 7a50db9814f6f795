"""RL backfilling evaluation (docs/rlbackfilling.md): the paper's Table 4 (mean bsld of 10
sequences of 1,024 jobs: FCFS and SJF with EASY, EASY-AR and the RL agent) and Table 5 (each
trace's agent on every trace), in the semantics of the code behind the tables (`scw`) and of the
public code (`public`), over two disjoint seed sets, through `hpcgym compare`; Fig. 1 (EASY with
noisy estimates paired with exact ones, `--fig1`); how often unguarded agents delay the reservation
and what it costs the large jobs; the training cost per epoch and the backfill decisions per second.

    python benchmarks/rlbf_eval.py --runs runs --out runs/rlbf-eval             # evaluate what exists
    python benchmarks/rlbf_eval.py --runs runs --out runs/rlbf-eval --train     # train missing agents first
    python benchmarks/rlbf_eval.py --out runs/rlbf-eval --delay-study AGENT_DIR ...  # penalty / stop agents
    python benchmarks/rlbf_eval.py --out docs/results/rlbf/fig1 --fig1  # Fig. 1: noisy against exact estimates

Agents are read from RUNS/rlbf-TRACE-BASE-SEMANTICS/model.pt (`hpcgym train rlbf --trace TRACE
--base BASE --semantics SEMANTICS`); rows of a missing agent are left out (or, with --train, it
is trained first). Lublin-2 is a STAND-IN generated with `--model lublin2-standin` (docs/lublin.md).
Outputs in OUT: compare folders, results.json and results.md.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from paper_runs import (HPCGYM, TRACES_DIR, argument_parser, chosen, compare, epoch_seconds, loaded, paired,
                        results_provenance, run)

from hpcgym.environment.spec import WorkloadCache
from hpcgym.gymbridge.compare.report import Panel, write_curves
from hpcgym.gymbridge.provenance import provenance_markdown

TRACES = {"SDSC-SP2": "SDSC-SP2-1998-4.2-cln", "HPC2N": "HPC2N-2002-2.2-cln", "Lublin-1": "lublin_256",
          "Lublin-2": "lublin2-standin"}
#: Traces that are not the paper's: generated stand-ins, labelled so in every table.
STAND_INS = {"Lublin-2"}
#: Table 4 of the paper (SC-W code): FCFS+EASY, FCFS+EASY-AR, FCFS+RLBF, SJF+EASY, SJF+EASY-AR, SJF+RLBF;
#: None where it prints "-" (EASY-AR on the Lublin traces, whose requests are the run times)
PAPER_TABLE4 = {"SDSC-SP2": (1595.11, 412.01, 90.65, 2167.83, 187.63, 81.60),
                "HPC2N": (127.38, 50.55, 66.50, 122.03, 24.03, 27.81),
                "Lublin-1": (235.81, None, 178.30, 73.30, None, 24.11),
                "Lublin-2": (247.60, None, 123.00, 91.99, None, 29.09)}
#: How each semantics runs: the simulation preset and compare's options.
SEMANTICS = {"scw": ("rlbf-scw", ["--first-jobs", "10000", "--cleaning", "rlbf-scw"]),
             "public": ("rlbf-public", [])}
BASES = ("fcfs", "sjf")
#: Traces read once for every in-process measurement.
WORKLOADS = WorkloadCache(size=4)
#: Fig. 1's error levels (the paper's 5% to 100%).
FIG1_ERRORS = (0.05, 0.1, 0.2, 0.4, 1.0)
#: Episode seeds of one noise seed: its windows' (and the whole trace's) noise draws, apart from every other's.
FIG1_SEED_STRIDE = 1000
#: The paper script's 10 window starts in the first 10,000 jobs (docs/fidelity.md, ladder L1).
PAPER_STARTS = (1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085)


def trace_path(out: Path, trace: str) -> Path:
    if TRACES[trace] == "lublin2-standin":
        path = out / "lublin2-standin.swf.gz"
        if not path.is_file():
            out.mkdir(parents=True, exist_ok=True)
            run([HPCGYM, "trace", "generate", str(path), "--model", "lublin2-standin", "--procs", "256", "--jobs",
                 "10000", "--seed", "0"])
        return path
    return TRACES_DIR / f"{TRACES[trace]}.swf.gz"


def agent_path(runs: Path, trace: str, base: str, semantics: str) -> Path:
    return runs / f"rlbf-{TRACES[trace]}-{base}-{semantics}" / "model.pt"


def train(runs: Path, out: Path, trace: str, base: str, semantics: str, epochs: int) -> None:
    folder = agent_path(runs, trace, base, semantics).parent
    run([HPCGYM, "train", "rlbf", "--trace", str(trace_path(out, trace)), "--base", base, "--semantics", semantics,
         "--epochs", str(epochs), "--out", str(folder), "--eval-episodes", "0", "--no-progress"]
        + (["--resume"] if (folder / "curve.csv").is_file() else []))


def table4(args, semantics: str, trace: str, seed: int) -> dict:
    preset, extra = SEMANTICS[semantics]
    rules = f"preset:{preset}"
    policies = {}
    for base in BASES:
        policies[f"{base}-easy"] = f"{base},{rules}"
        policies[f"{base}-easy-ar"] = f"{base},{rules},exact_requests:true"
        agent = agent_path(args.runs, trace, base, semantics)
        if agent.is_file():
            policies[f"{base}-rlbf"] = f"{base},{rules},backfill:model:{agent}"
    folder = args.out / f"table4-{semantics}-{TRACES[trace]}-seed{seed}"
    return compare(folder, trace_path(args.out, trace), policies, seed, args.samples, args.jobs, *extra)


def table5(args, semantics: str, trace: str, seed: int) -> dict:
    """Every trace's FCFS- and SJF-based agent on `trace`."""
    preset, extra = SEMANTICS[semantics]
    rules = f"preset:{preset}"
    result = {}
    for base in BASES:
        policies = {f"{base}-easy": f"{base},{rules}"}
        for other in TRACES:
            agent = agent_path(args.runs, other, base, semantics)
            if agent.is_file():
                policies[f"rl-{TRACES[other]}"] = f"{base},{rules},backfill:model:{agent}"
        if len(policies) > 1:
            folder = args.out / f"table5-{semantics}-{base}-{TRACES[trace]}-seed{seed}"
            result[base] = compare(folder, trace_path(args.out, trace), policies, seed, args.samples, args.jobs,
                                   *extra)
    return result


def fig1(args) -> dict:
    """Fig. 1 as a paired study: FCFS and SJF with EASY (hpcgym's textbook rules) on SDSC-SP2 with
    requested, exact and noisy estimates (`noisy:E`: the run time times 1 + E u, u uniform in
    [-1, 1]), on the trace cut into disjoint windows of --jobs jobs and on the whole trace (the
    paper's setup); for FCFS also `over-E`, the paper's "+E%" read as over-estimates only (u in
    [0, 1]). The noise is the only random element: each noise seed redraws it on the same
    windows, and each estimate is paired with exact run times window by window (bootstrap 95% CI,
    10,000 resamples, seed 7, as the ledger's other RL backfilling rows)."""
    from hpcgym.environment.simulator import simulate
    from hpcgym.environment.spec import WorkloadSpec, sim_config

    trace = str(trace_path(args.out, "SDSC-SP2"))
    whole = WORKLOADS.load(WorkloadSpec(trace=trace).for_episode(0))
    starts = list(range(0, len(whole) - args.jobs + 1, args.jobs))
    episodes = [WORKLOADS.load(WorkloadSpec(trace=trace, jobs=args.jobs, start=s).for_episode(0)) for s in starts]
    episodes.append(whole)
    noise_seeds = [int(n) for n in args.noise_seeds.split(",")]

    def bsld(base: str, estimate: str, noise: int, over: float | None = None) -> dict:
        values = []
        for k, w in enumerate(episodes):
            seed = FIG1_SEED_STRIDE * noise + k
            if over is not None:  # "+E%" read as over-estimates only, given to EASY as the requests
                u = np.random.default_rng(seed).uniform(0.0, 1.0, len(w))
                w = dataclasses.replace(w, requested=np.rint(w.run * (1.0 + over * u)))
            values.append(simulate(w, sim_config({"estimate": estimate}, seed), policy=base).summary["mean_bsld"])
        return {"windows": values[:-1], "whole": values[-1]}

    def versus(run: dict, exact: dict) -> dict:
        diff = paired(run["windows"], exact["windows"])
        return {**run, "mean": float(np.mean(run["windows"])), "diff": diff["mean"], "ci_low": diff["ci_low"],
                "ci_high": diff["ci_high"], "whole_diff": run["whole"] - exact["whole"]}

    result = {"trace": TRACES["SDSC-SP2"], "jobs": args.jobs, "starts": starts, "whole_jobs": len(whole),
              "errors": list(FIG1_ERRORS), "noise_seeds": noise_seeds,
              "episode_seed": f"{FIG1_SEED_STRIDE} x noise seed + window index (the whole trace: {len(starts)})"}
    for base in BASES:
        exact = bsld(base, "actual", 0)  # requests and run times draw nothing: one run each
        rows = {"exact": {**exact, "mean": float(np.mean(exact["windows"]))},
                "requested": versus(bsld(base, "requested", 0), exact)}
        for e in FIG1_ERRORS:
            rows[f"noisy-{e:g}"] = {str(n): versus(bsld(base, f"noisy:{e:g}", n), exact) for n in noise_seeds}
            print(f"{base} noisy-{e:g}: done", flush=True)
            if base == "fcfs":  # SJF orders by the request: over-estimates there would change its order too
                rows[f"over-{e:g}"] = {str(n): versus(bsld(base, "requested", n, e), exact) for n in noise_seeds}
        result[base] = rows
    return result


def fig1_markdown(data: dict) -> str:
    """The Fig. 1 study as a table: each estimate's mean bsld and its paired difference to exact run times."""
    lines = ["# RL backfilling Fig. 1: EASY with noisy estimates on SDSC-SP2 (benchmarks/rlbf_eval.py --fig1)", "",
             provenance_markdown(data["provenance"]), "",
             (f"{len(data['starts'])} disjoint windows of {data['jobs']:,} jobs and the whole trace "
              f"({data['whole_jobs']:,} jobs); hpcgym's textbook EASY. Mean bsld over the windows, its paired "
              "difference to exact run times with the bootstrap 95% CI, and the whole trace's difference; one "
              "cell per noise seed."), "",
             "| base | estimate | noise seed | mean bsld | minus exact [95% CI] | whole trace | minus exact |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for base in BASES:
        for name, row in data[base].items():
            for seed, r in (row.items() if name.startswith(("noisy", "over")) else [("-", row)]):
                diff = "" if name == "exact" else f"{r['diff']:+.2f} [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]"
                whole = "" if name == "exact" else f"{r['whole_diff']:+.2f}"
                lines.append(f"| {base.upper()} | {name} | {seed} | {r['mean']:.2f} | {diff} | {r['whole']:.2f} | {whole} |")
    return "\n".join(lines) + "\n"


def study_windows(checkpoint, jobs: int, seeds: str | list[int]) -> list:
    """The windows a delay study plays, all cut from the job source the agent was trained on (its
    trace, cleaning and first jobs, from the checkpoint): random windows `seeds`, the training
    distribution, or with `seeds="paper"` the paper script's 10 fixed windows."""
    trained = checkpoint.trained_workload()
    if seeds == "paper":
        return [trained.with_window(jobs=jobs, start=start) for start in PAPER_STARTS]
    return [trained.with_window(jobs=jobs, sample=seed) for seed in seeds]


def reservation_delays(args, base: str | None, agent_file: Path, seeds: str | list[int]) -> dict | None:
    """An unguarded agent in process on `study_windows`, in the simulation options it was trained
    in: its bsld per window, how many of its backfills delayed the reservation, by how much, and
    the max wait of jobs larger than a quarter of the cluster, beside the base + EASY alone (the
    base the agent was trained on where `base` is None)."""
    from hpcgym.agents.rl.checkpoint import load_checkpoint
    from hpcgym.agents.rl.serve import RLAgent
    from hpcgym.environment.simulator import Simulation
    from hpcgym.environment.spec import sim_config

    if not agent_file.is_file():
        return None
    checkpoint = load_checkpoint(loaded(agent_file))
    options = {k: v for k, v in checkpoint.trained_options().items() if k not in ("window", "policy")}
    base = base or checkpoint.trained_options().get("policy", "fcfs")
    windows = study_windows(checkpoint, args.jobs, seeds)
    print(f"{agent_file}: its training workload with {windows[0].changes_from(checkpoint.trained_workload())}",
          flush=True)
    agent = RLAgent(agent_file)
    totals = {"episodes": 0, "bsld_rl": [], "bsld_easy": [], "backfills": 0, "delays": 0, "delay_s": 0,
              "max_wait_large_rl": 0, "max_wait_large_easy": 0}
    for index, spec in enumerate(windows):
        workload = WORKLOADS.load(spec.for_episode(index))
        large = workload.size > workload.procs // 4
        sim = Simulation(workload, sim_config(options, index), policy=base, external={"backfill"})
        with_agent = sim.run({"backfill": agent})
        alone = Simulation(workload, sim_config(options, index), policy=base).run()
        totals["episodes"] += 1
        totals["backfills"] += int((with_agent.jobs["start_kind"] == 2).sum())
        totals["delays"] += sim.reservation_delays
        totals["delay_s"] += sim.reservation_delay_s
        for key, result in (("rl", with_agent), ("easy", alone)):
            totals[f"bsld_{key}"].append(result.summary["mean_bsld"])
            waits = (result.jobs["start"] - result.jobs["submit"])[large]
            totals[f"max_wait_large_{key}"] = max(totals[f"max_wait_large_{key}"], int(waits.max()) if len(waits) else 0)
    for key in ("rl", "easy"):
        totals[f"mean_bsld_{key}"] = sum(totals[f"bsld_{key}"]) / len(windows)
    return totals


def delay_study(args, folders: list[Path]) -> dict:
    """`reservation_delays` of the given agent folders (each trained by `hpcgym train rlbf`, on its
    own base) on the paper's windows and on both seed sets of the training distribution."""
    seed_sets = {str(s): list(range(int(s), int(s) + args.samples)) for s in args.seeds.split(",")}
    return {folder.name: {name: reservation_delays(args, None, folder / "model.pt", seeds)
                          for name, seeds in {"paper": "paper", **seed_sets}.items()} for folder in folders}


def decision_rate(args, trace: str, base: str, semantics: str, windows: int = 5) -> dict | None:
    """Backfill decisions per second of the served kernel actor, in process, on windows of its
    own training workload."""
    import torch

    from hpcgym.agents.rl.checkpoint import load_checkpoint
    from hpcgym.agents.rl.serve import RLAgent
    from hpcgym.environment.simulator import simulate
    from hpcgym.environment.spec import sim_config

    agent_file = agent_path(args.runs, trace, base, semantics)
    if not agent_file.is_file():
        return None
    torch.set_num_threads(1)
    checkpoint = load_checkpoint(loaded(agent_file))
    agent, count = RLAgent(loaded(agent_file)), [0]

    class Counting:
        kinds = ("backfill",)

        def act(self, decision):
            count[0] += 1
            return agent.act(decision)

    workloads = [WORKLOADS.load(spec.to_dict()) for spec in study_windows(checkpoint, 256, list(range(windows)))]
    options = {k: v for k, v in checkpoint.trained_options().items() if k not in ("window", "policy")}
    base = base or checkpoint.trained_options().get("policy", "fcfs")
    t0 = time.perf_counter()
    for workload in workloads:
        simulate(workload, sim_config(options), policy=base, agents={"backfill": Counting()})
    seconds = time.perf_counter() - t0
    return {"decisions": count[0], "seconds": seconds, "per_second": count[0] / seconds}


def plot_curves(runs: Path, path: Path) -> None:
    """Training return per epoch of every agent in RUNS, a panel per semantics."""
    panels = []
    for semantics in SEMANTICS:
        folders = [f for f in sorted(runs.glob(f"rlbf-*-{semantics}")) if (f / "curve.csv").is_file()]
        panels.append(Panel(f"RL backfilling, {semantics} semantics", ylabel="mean return (training episodes)").runs(
            {f.name[len("rlbf-"):-len(semantics) - 1]: f for f in folders}))
    write_curves(panels, path, dpi=110, size=(5.5, 4))


def cell(rows: dict, name: str) -> str:
    row = rows.get(name)
    if not row or row.get("mean_bsld_mean") is None:
        return "-"
    if row.get("mean_bsld_diff") is None or row.get("mean_bsld_ci_low") is None:
        return f"{row['mean_bsld_mean']:,.2f}"
    return f"{row['mean_bsld_mean']:,.2f} ({row['mean_bsld_diff']:+,.1f} [{row['mean_bsld_ci_low']:+,.1f}, " \
           f"{row['mean_bsld_ci_high']:+,.1f}])"


def markdown(results: dict, seeds: list[int]) -> str:
    lines = ["# RL backfilling: results (benchmarks/rlbf_eval.py)", "", provenance_markdown(results["provenance"]), ""]
    columns = [f"{b}-{c}" for b in BASES for c in ("easy", "easy-ar", "rlbf")]
    for semantics in SEMANTICS:
        for seed in seeds:
            lines += [f"## Table 4, {semantics} semantics, seeds {seed}..{seed + results['samples'] - 1}", "",
                      "Mean bsld (paired difference to FCFS + EASY, the first column, with its 95% bootstrap CI).", "",
                      "| trace | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
            for trace in TRACES:
                rows = results["table4"].get(f"{semantics}/{trace}/{seed}", {})
                cells = [cell(rows, c) for c in columns]
                label = f"{trace} (stand-in)" if trace in STAND_INS else trace
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
                if semantics == "scw" and seed == seeds[0]:
                    paper = ("-" if v is None else f"{v:,.2f}" for v in PAPER_TABLE4[trace])
                    lines.append(f"| {trace}, paper | " + " | ".join(paper) + " |")
            lines.append("")
    lines += ["## Table 5: each trace's agent on every trace", "",
              "Mean bsld (paired difference to the base policy with EASY, 95% bootstrap CI).", ""]
    for key, bases in results["table5"].items():
        for base, rows in bases.items():
            lines.append(f"* {key}, {base.upper()}: " + ", ".join(f"{name} {cell(rows, name)}" for name in rows))
    lines += ["", "## Unguarded agents (public semantics): reservation delays", ""]
    for key, value in results["delays"].items():
        lines.append(f"* {key}: {value}")
    lines += ["", "## Cost", ""]
    for key, value in results["cost"].items():
        lines.append(f"* {key}: {value}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argument_parser(__doc__, "rlbf-eval", 50, 10, 1024, "0,100", list(TRACES))
    parser.add_argument("--semantics", default=",".join(SEMANTICS), help="Comma-separated: scw, public.")
    parser.add_argument("--delay-study", nargs="+", type=Path, metavar="AGENT_DIR",
                        help="Only this: the given agents' bsld and reservation delays on the paper's 10 windows "
                             "and both seed sets, on the workload and in the options each was trained in "
                             "(OUT/delay-study.json).")
    parser.add_argument("--fig1", action="store_true",
                        help="Only this: Fig. 1, EASY with requested, exact and noisy estimates on SDSC-SP2's "
                             "disjoint --jobs windows and the whole trace, on each --noise-seeds (OUT/fig1.json).")
    parser.add_argument("--noise-seeds", default="0,1,2,3,4", help="Fig. 1: the noise draws, comma-separated.")
    args = parser.parse_args()
    if args.delay_study:
        study = delay_study(args, args.delay_study)
        study["provenance"] = results_provenance(args)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "delay-study.json").write_text(json.dumps(study, indent=1))
        print(json.dumps(study, indent=1))
        return
    if args.fig1:
        study = fig1(args)
        study["provenance"] = results_provenance(args)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fig1.json").write_text(json.dumps(study, indent=1))
        (args.out / "fig1.md").write_text(fig1_markdown(study))
        print(fig1_markdown(study))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    traces = chosen(parser, "--traces", args.traces, TRACES)
    semantics_list = chosen(parser, "--semantics", args.semantics, SEMANTICS)
    if args.train:
        for semantics in semantics_list:
            for trace in traces:
                for base in BASES:
                    train(args.runs, args.out, trace, base, semantics, args.epochs)
    results: dict = {"samples": args.samples, "jobs": args.jobs, "table4": {}, "table5": {}, "delays": {}, "cost": {}}
    for semantics in semantics_list:
        for trace in traces:
            for seed in seeds:
                results["table4"][f"{semantics}/{trace}/{seed}"] = table4(args, semantics, trace, seed)
                results["table5"][f"{semantics}/{trace}/{seed}"] = table5(args, semantics, trace, seed)
            for base in BASES:
                folder = agent_path(args.runs, trace, base, semantics).parent
                if (folder / "curve.csv").is_file():
                    epochs, per_epoch = epoch_seconds(folder)
                    results["cost"][f"{semantics}/{trace}/{base}: epochs, seconds per epoch"] = (epochs, round(per_epoch, 1))
                    results["cost"][f"{semantics}/{trace}/{base}: backfill decisions per second"] = decision_rate(
                        args, trace, base, semantics)
                if semantics == "public":
                    results["delays"][f"{trace}/{base}"] = reservation_delays(
                        args, base, agent_path(args.runs, trace, base, "public"), list(range(args.samples)))
    plot_curves(args.runs, args.out / "rlbf-curves.png")
    results["provenance"] = results_provenance(args)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (args.out / "results.md").write_text(markdown(results, seeds))
    print(markdown(results, seeds))


if __name__ == "__main__":
    main()
