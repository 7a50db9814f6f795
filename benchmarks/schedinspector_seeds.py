"""SchedInspector's Table 4 over several training seeds (docs/schedinspector.md): each trace's SJF
agent trained from seeds 0-2, then every agent against the SJF base on the same 50 windows of 256
jobs (two disjoint window sets), as the mean and spread over the training seeds. With --base, the
same for another base policy (Fig. 7's FCFS, LCFS, SRF, SAF on SDSC-SP2; Fig. 8's F1 on each trace).

    python benchmarks/schedinspector_seeds.py --runs runs/si-seeds --train       # train missing, compare
    python benchmarks/schedinspector_seeds.py --runs docs/results/schedinspector/seeds --out OUT
    python benchmarks/schedinspector_seeds.py --runs runs/si-textbook --semantics textbook --traces SDSC-SP2 --train
    python benchmarks/schedinspector_seeds.py --runs runs/si-f1 --base f1 --epochs 40 --train
    python benchmarks/schedinspector_seeds.py --runs docs/results/schedinspector/seeds --replay --out OUT

Agents are read from RUNS/seedS/si-TRACE-BASE-SEMANTICS/model.pt (`hpcgym train schedinspector
--trace TRACE --base BASE --semantics SEMANTICS --epochs E --seed S`, E = 60 for SDSC-SP2 and
Lublin, 40 for CTC-SP2 and HPC2N, as the single-seed agents were, unless --epochs says otherwise;
code semantics unless --semantics says otherwise; --cleaning rlbf-scw keeps the trace's cancelled
jobs as 10 s jobs, in training and in the windows compared); with --train a missing one is trained
(or resumed) first. One `hpcgym compare` per trace and window set holds the base and every agent, so
all are paired on the same windows. Outputs in OUT: results.json and results.md. With --replay, Section 5
instead: each seed's SDSC-SP2 SJF agent (code semantics) over the whole trace as one episode, beside
SJF alone under the same rules (replay.json and replay.md).
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import schedinspector_eval
from paper_runs import HPCGYM, TRACES_DIR, argument_parser, chosen, compare, results_provenance, spread
from schedinspector_eval import PAPER_TABLE4, PAPER_TABLE5_F1, PAPER_TABLE5_SJF, RULES, TRACES, fmt_diff

from hpcgym.environment.swf import CLEANINGS
from hpcgym.gymbridge.provenance import provenance_markdown

#: Training epochs of each trace's agent (those of the committed single-seed agents).
EPOCHS = {"SDSC-SP2": 60, "Lublin": 60, "CTC-SP2": 40, "HPC2N": 40}
#: The base policies the paper inspects: Table 4's SJF, Fig. 7's four others (SDSC-SP2), Fig. 8's F1,
#: Section 4.5's Slurm multifactor (with --backfill easy).
BASES = ("sjf", "fcfs", "lcfs", "srf", "saf", "f1", "multifactor")
#: What the paper reports for a base other than SJF, per trace where it says: Fig. 7's converged
#: training improvement (bsld) and rejection ratio; Fig. 8's text names F1's smallest bar.
PAPER_OTHER_BASES = {("fcfs", "SDSC-SP2"): "never positive; rejects 5%",
                     ("lcfs", "SDSC-SP2"): "improvement 144.9; rejects 39.1%",
                     ("srf", "SDSC-SP2"): "improvement 52.9; rejects 41.0%",
                     ("saf", "SDSC-SP2"): "improvement 34.5; rejects 48.2%",
                     ("f1", "CTC-SP2"): "improvement 13.6%",
                     ("multifactor", "SDSC-SP2"): "82.9 -> 62.4 (with EASY)"}
#: Table 5's utilization (%) base / inspected, without and with backfilling, where the paper gives it.
PAPER_TABLE5 = {"sjf": PAPER_TABLE5_SJF, "f1": PAPER_TABLE5_F1}


def agent_dir(runs: Path, trace: str, seed: int, semantics: str = "code", base: str = "sjf") -> Path:
    """RUNS/seedS/si-TRACE-BASE-SEMANTICS: schedinspector_eval's layout, one folder per training seed."""
    return schedinspector_eval.agent_dir(runs / f"seed{seed}", trace, base, semantics)


def last_return(folder: Path) -> float | None:
    """The training curve's last mean relative reward."""
    with open(folder / "curve.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["return"]) if rows else None


def main() -> None:
    parser = argument_parser(__doc__, "si-seeds-eval", 0, 50, 256, "0,100000", list(TRACES))
    parser.add_argument("--agent-seeds", default="0,1,2", help="the training seeds of the agents")
    parser.add_argument("--semantics", choices=sorted(RULES), default="code", help="the agents' (and base's) rules")
    parser.add_argument("--cleaning", choices=CLEANINGS, default="hpcgym", help="the traces' SWF cleaning rule")
    parser.add_argument("--base", choices=BASES, default="sjf", help="the base policy the agents inspect")
    parser.add_argument("--backfill", choices=("none", "easy"), default="none",
                        help="the base's backfilling, in training and comparison (Section 4.5: easy)")
    parser.add_argument("--max-rejections", type=int, help="compare with this cap on a pick's rejections in place "
                        "of the code's 72 (training keeps the recipe's)")
    parser.add_argument("--train-jobs", type=int, help="with --train: jobs per training window (default: the "
                        "recipe's 128; --jobs is the compared windows')")
    parser.add_argument("--replay", action="store_true", help="Section 5 over the seeds: each seed's SDSC-SP2 SJF "
                        "agent (code semantics) over the whole trace, rejections by queue delay")
    args = parser.parse_args()
    if args.replay and (args.base, args.semantics, args.backfill, args.cleaning) != ("sjf", "code", "none", "hpcgym"):
        parser.error("--replay replays the paper's Section 5 agents: SJF base, code semantics, no backfilling, "
                     "hpcgym cleaning; drop --base, --semantics, --backfill and --cleaning")
    args.out.mkdir(parents=True, exist_ok=True)
    agent_seeds = [int(s) for s in args.agent_seeds.split(",")]
    if args.replay:
        results = replay(args.runs, args.out, agent_seeds)
        results["provenance"] = results_provenance(args)
        (args.out / "replay.json").write_text(json.dumps(results, indent=2) + "\n")
        (args.out / "replay.md").write_text(replay_markdown(results))
        print((args.out / "replay.md").read_text())
        return
    window_seeds = [int(s) for s in args.seeds.split(",")]
    traces = chosen(parser, "--traces", args.traces, TRACES)
    if args.train:
        for trace in dict.fromkeys(["SDSC-SP2", *traces]):
            for seed in agent_seeds:
                if not (agent_dir(args.runs, trace, seed, args.semantics, args.base) / "model.pt").is_file():
                    schedinspector_eval.train(args.runs / f"seed{seed}", trace, args.base, args.semantics,
                                              args.epochs or EPOCHS[trace], seed, args.cleaning, args.train_jobs,
                                              args.backfill)
    rules = RULES[args.semantics].replace("backfill:none", f"backfill:{args.backfill}") \
        + ("" if args.max_rejections is None else f",max_rejections:{args.max_rejections}")
    results: dict = {"table4": {}, "training": {}}
    for trace in traces:
        policies = {"base": f"{args.base},{rules}"}
        for owner in dict.fromkeys(["SDSC-SP2", trace]):
            tag = "sdsc" if owner == "SDSC-SP2" else "own"
            for seed in agent_seeds:
                model = agent_dir(args.runs, owner, seed, args.semantics, args.base) / "model.pt"
                if model.is_file():
                    policies[f"{tag}-s{seed}"] = f"{args.base},{rules},inspect:model:{model}"
                    results["training"][f"{owner}/{seed}"] = last_return(model.parent)
        for window_seed in window_seeds:
            folder = args.out / f"compare-{trace}-seed{window_seed}"
            results["table4"][f"{trace}/{window_seed}"] = compare(folder, TRACES_DIR / f"{TRACES[trace]}.swf.gz",
                                                                  policies, window_seed, args.samples, args.jobs,
                                                                  "--cleaning", args.cleaning)
    results["provenance"] = results_provenance(args)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "results.md").write_text(markdown(results, traces, window_seeds, agent_seeds, args))
    print((args.out / "results.md").read_text())


def replay(runs: Path, out: Path, agent_seeds: list[int]) -> dict:
    """Section 5 for each training seed's SDSC-SP2 SJF agent, and SJF alone over the same whole trace."""
    trace = TRACES_DIR / f"{TRACES['SDSC-SP2']}.swf.gz"
    base = subprocess.run([HPCGYM, "run", "--trace", str(trace), "--policy", "sjf", "--backfill", "none",
                           "--exact-requests", "--commit-pick", "--json"], check=True, capture_output=True, text=True)
    agents = {}
    for seed in agent_seeds:
        folder = out / f"replay-seed{seed}"
        folder.mkdir(exist_ok=True)
        agents[str(seed)] = schedinspector_eval.replay_analysis(runs / f"seed{seed}", folder)
    return {"base": json.loads(base.stdout), "agents": agents}


def replay_markdown(results: dict) -> str:
    base = results["base"]
    lines = ["# SchedInspector Section 5 over training seeds: the whole SDSC-SP2 trace as one episode", "",
             provenance_markdown(results["provenance"]), "",
             f"SJF alone under the same rules (code semantics, no backfilling): mean bsld {base['mean_bsld']:.2f}, "
             f"utilization {100 * base['utilization']:.2f}%, longest wait {base['max_wait'] / 3600:.1f} h.", "",
             "| training seed | mean bsld | utilization (%) | longest wait (h) | inspections | rejected | "
             "largest queue delay rejected (seen) |", "|---|---|---|---|---|---|---|"]
    for seed, r in results["agents"].items():
        if r is None:
            lines.append(f"| {seed} | (no agent) | | | | | |")
            continue
        m = r["metrics"]
        delay = "-" if r["largest_delay_rejected"] is None else f"{r['largest_delay_rejected']:.3f}"
        lines.append(f"| {seed} | {m['mean_bsld']:.2f} | {100 * m['utilization']:.2f} | {m['max_wait'] / 3600:.1f} | "
                     f"{r['inspections']:,} | {r['rejections']:,} ({100 * r['rejection_ratio']:.1f}%) | "
                     f"{delay} ({r['largest_delay_seen']:.3f}) |")
    lines += ["", "Paper: 24,044,629 inspections, 30% rejected, none above a queue delay of 0.22.", ""]
    return "\n".join(lines)


def compared(results: dict, traces: list[str], window_seeds: list[int]):
    """(trace, window seed, that comparison's rows) for each comparison in the results."""
    for trace in traces:
        for window_seed in window_seeds:
            if results["table4"].get(f"{trace}/{window_seed}"):
                yield trace, window_seed, results["table4"][f"{trace}/{window_seed}"]


def markdown(results: dict, traces: list[str], window_seeds: list[int], agent_seeds: list[int], args) -> str:
    variant = "" if args.cleaning == "hpcgym" else f", {args.cleaning} cleaning"
    variant += ", EASY backfilling" if args.backfill == "easy" else ", no backfilling"
    if args.max_rejections is not None:
        variant += f", at most {args.max_rejections} rejections of a pick"
    lines = [f"# SchedInspector, Table 4 over training seeds ({args.base.upper()} base, {args.semantics} "
             f"semantics{variant})", "",
             provenance_markdown(results["provenance"]), "",
             f"Mean bsld over the windows; agents trained from seeds {', '.join(map(str, agent_seeds))}: "
             "mean ± standard deviation over the training seeds (min..max), then each seed's paired "
             "difference to the base with its bootstrap 95% CI.", "",
             "| trace | windows | base | SDSC-SP2 agents | own agents | paper |",
             "|---|---|---|---|---|---|"]
    details = ["", "## Each training seed (bsld difference to the base, 95% CI)", "",
               "| trace | windows | agent | " + " | ".join(f"seed {s}" for s in agent_seeds) + " |",
               "|---|---|---|" + "---|" * len(agent_seeds)]
    for trace, window_seed, r in compared(results, traces, window_seeds):
        cells = []
        for tag in ("sdsc", "own"):
            rows = {s: r[f"{tag}-s{s}"] for s in agent_seeds if f"{tag}-s{s}" in r}
            if tag == "own" and trace == "SDSC-SP2":
                cells.append("(same)")
                continue
            cells.append(spread([row["mean_bsld_mean"] for row in rows.values()]) if rows else "-")
            if rows:
                details.append(f"| {trace} | {window_seed}.. | {tag} | "
                               + " | ".join(f"{rows[s]['mean_bsld_mean']:.2f} ({fmt_diff(rows[s], 'mean_bsld')})"
                                            if s in rows else "-" for s in agent_seeds) + " |")
        paper = (" / ".join(f"{v:g}" for v in PAPER_TABLE4[trace]) + " (base / SDSC / own)" if args.base == "sjf"
                 else PAPER_OTHER_BASES.get((args.base, trace), "-"))
        lines.append(f"| {trace} | {window_seed}.. | {r['base']['mean_bsld_mean']:.2f} | {cells[0]} | {cells[1]} "
                     f"| {paper} |")
    lines += details
    lines += ["", f"## Table 5 over the seeds: utilization (%){variant}", "",
              "| trace | windows | base | SDSC-SP2 agents | own agents | paper: base -> inspected |", "|---|---|---|---|---|---|"]
    for trace, window_seed, r in compared(results, traces, window_seeds):
        cells = []
        for tag in ("sdsc", "own"):
            values = [100 * r[f"{tag}-s{s}"]["utilization_mean"] for s in agent_seeds if f"{tag}-s{s}" in r]
            cells.append("(same)" if tag == "own" and trace == "SDSC-SP2" else spread(values) if values else "-")
        paper = (" -> ".join(f"{v:g}" for v in PAPER_TABLE5[args.base][trace][args.backfill == "easy"])
                 if args.base in PAPER_TABLE5 else "-")
        lines.append(f"| {trace} | {window_seed}.. | {100 * r['base']['utilization_mean']:.2f} | {cells[0]} | "
                     f"{cells[1]} | {paper} |")
    lines += ["", "## Training: the last epoch's mean relative reward", "", "| agent | "
              + " | ".join(f"seed {s}" for s in agent_seeds) + " |", "|---|" + "---|" * len(agent_seeds)]
    for owner in dict.fromkeys(["SDSC-SP2", *traces]):
        values = [results["training"].get(f"{owner}/{s}") for s in agent_seeds]
        if any(v is not None for v in values):
            lines.append(f"| {owner} | " + " | ".join("-" if v is None else f"{v:+.3f}" for v in values) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
