"""RLSchert evaluation (docs/rlschert.md): the paper's Tables 7 and 8 (mean slowdown and mean
completion time of Tetris, Random, SJF, Tetris*, SAF, each without and with the rule-based kill,
and the RL agents where they are trained) under each predictor, over two disjoint seed sets of
test-part windows, through `hpcgym compare` (paired differences to SJF with 95% bootstrap CIs),
with the orderings beside the paper's. With --shares, the paper's Table 9 instead: the running
predictor revising only a share of the jobs (`prediction: running:share=S`), SJF without and with
the rule-based kill (and the RL agents) at each share: kills, lost work, mean slowdown and mean
completion time, paired differences to SJF at the first share and of each kill to SJF at its share.

    python benchmarks/rlschert_eval.py --out runs/rlschert-eval                    # every trace
    python benchmarks/rlschert_eval.py --traces SDSC-SP2 --predictors running --samples 5
    python benchmarks/rlschert_eval.py --traces SDSC-SP2 --shares 0,0.5,0.8,1 --out runs/rlschert-table9

The baselines run on hpcgym's event simulator, not the paper's discrete-time DeepRM one: SJF and
SAF are priority orders with EASY backfilling; Tetris, Tetris* and Random (`random-packing`) are
packing agents that start jobs that fit and never reserve (`--backfill none`). Reservations use
the predictions (`estimate: predicted`). The `learned` model is fitted on each trace's training
part first (`hpcgym predict fit`). The RL agents are read from RUNS/deeprm-TRACE/model.pt (`hpcgym
train rlschert --kind select`: the paper's DeepRM, no kill) and RUNS/rlschert-TRACE/model.pt (`hpcgym
train rlschert`, kind kill or select_kill) when they exist, and RUNS/NAME-TRACE-sS/model.pt as the rows
NAME-sS (one per training seed S); their rows are left out otherwise; served greedily, or with
--sampled sampling their actions (`sampled:PATH`). Outputs in OUT:
compare folders, results.json and results.md (with --shares: table9.json and table9.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from paper_runs import HPCGYM, TRACES_DIR, argument_parser, chosen, compare, results_provenance, run, unit_summaries

from hpcgym.gymbridge.compare.stats import bootstrap_ci
from hpcgym.gymbridge.provenance import provenance_markdown

#: KTH-SP2: a second trace whose test windows queue (HPC2N's barely do).
TRACES = {"SDSC-SP2": "SDSC-SP2-1998-4.2-cln", "HPC2N": "HPC2N-2002-2.2-cln", "KTH-SP2": "KTH-SP2-1996-2.1-cln"}
PREDICTORS = ("running", "user_history", "learned")
TRAIN_FRACTION = 0.8
#: The paper's baselines as hpcgym policies (SJF first: the differences are to it).
BASELINES = {"sjf": "sjf", "saf": "saf", "tetris": "select:tetris,backfill:none",
             "tetris-star": "select:tetris-star,backfill:none", "random": "select:random-packing,backfill:none"}
KILL = "kill:rlschert-rule"
#: The paper's orderings (Tables 7 and 8, lower is better; kill helps slowdown, barely completion time).
PAPER_ORDER = "RLSchert < DeepRM < SAF ~ Tetris* < SJF < Random < Tetris"
METRICS = {"mean_slowdown": "mean slowdown", "mean_response": "mean completion time (s)"}
#: The paper's Table 9: mean slowdown with shares 0, 0.5, 0.8, 1 of the jobs predicted while running.
PAPER_TABLE9 = {"SJF": (10.29, 10.29, 10.29, 10.29), "RLSchert": (9.63, 8.55, 8.36, 8.32)}
#: Table 9's metrics, per window: those with paired differences, then the kills' counts.
SHARE_METRICS = {**METRICS, "kills": "kills", "lost_work": "lost work (proc-s)"}
RESAMPLES = 10_000


def trace_path(trace: str) -> Path:
    """The trace in the shared folder beside the checkout, else by bare name in $HPCGYM_TRACES."""
    path = TRACES_DIR / f"{TRACES[trace]}.swf.gz"
    return path if path.is_file() else Path(path.name)


def prediction(args, trace: str, predictor: str) -> str:
    """The `prediction` option of a predictor; `learned` fitted on the training part once."""
    if predictor != "learned":
        return predictor
    model = args.out / f"model-{TRACES[trace]}.json"
    if not model.is_file():
        args.out.mkdir(parents=True, exist_ok=True)
        run([HPCGYM, "predict", "fit", "--trace", str(trace_path(trace)), "--train-fraction", str(TRAIN_FRACTION),
             "--out", str(model)])
    return f"learned:{model.resolve()}"


#: The RL rows, each read from RUNS/NAME-TRACE/model.pt when it exists: `deeprm` (`hpcgym train
#: rlschert --kind select`, no kill, no teacher), `deeprm_sjf` (the same, imitating SJF at first:
#: `--teacher sjf`) and `rlschert` (kind kill or select_kill); and from RUNS/NAME-TRACE-sS/model.pt,
#: the agent of training seed S, as the row NAME-sS.
RL_AGENTS = ("deeprm", "deeprm_sjf", "rlschert")


def rl_agents(args, trace: str) -> dict[str, Path]:
    """The trained RL agents of `trace`, by row name; each takes the kinds it was trained on."""
    found = {}
    for name in RL_AGENTS:
        found[name] = args.runs / f"{name}-{TRACES[trace]}" / "model.pt"
        for seeded in sorted(args.runs.glob(f"{name}-{TRACES[trace]}-s*/model.pt")):
            found[f"{name}-{seeded.parent.name.rsplit('-', 1)[1]}"] = seeded
    return {name: path.resolve() for name, path in found.items() if path.is_file()}


def served(args) -> str:
    """How the RL agents are served: the spec prefix of their checkpoints."""
    return "sampled" if args.sampled else "model"


def policies(args, trace: str, predictor: str) -> dict[str, str]:
    options = f"prediction:{prediction(args, trace, predictor)},estimate:predicted"
    table = {}
    for name, spec in BASELINES.items():
        table[name] = f"{spec},{options}"
        table[f"{name}-kill"] = f"{spec},{options},{KILL}"
    for name, agent in rl_agents(args, trace).items():
        table[name] = f"fcfs,{options},{served(args)}:{agent}"
    return table


def share_policies(args, trace: str, shares: list[float]) -> dict[str, tuple[float, str | None, str]]:
    """Table 9's policies by name: (share, the no-kill policy of the same share or None, spec);
    SJF at the first share first (the baseline of compare's differences)."""
    table: dict[str, tuple[float, str | None, str]] = {}
    agents = rl_agents(args, trace)
    for share in shares:
        options = f"prediction:running:share={share:g},estimate:predicted"
        plain = f"sjf-s{share * 100:g}"
        table[plain] = (share, None, f"sjf,{options}")
        table[f"sjf-kill-s{share * 100:g}"] = (share, plain, f"sjf,{options},{KILL}")
        for name, agent in agents.items():
            table[f"{name}-s{share * 100:g}"] = (share, plain, f"fcfs,{options},{served(args)}:{agent}")
    return table


def window_values(folder: Path, name: str) -> dict[str, np.ndarray]:
    """Per window (in seed order), each SHARE_METRICS value of policy `name` (one that finished
    every window: those in summary.csv)."""
    units = unit_summaries(folder, name)
    return {m: np.array([u[m] for u in units], dtype=np.float64) for m in SHARE_METRICS}


def share_rows(folder: Path, table: dict, summary: dict) -> dict[str, dict]:
    """Each policy's means, compare's paired difference to the baseline and, for a kill, the
    paired difference to SJF without kill at its share (its own bootstrap, as compare's)."""
    values = {name: window_values(folder, name) for name in summary}
    rows = {}
    for name, (share, plain, _) in table.items():
        if name not in summary:
            continue
        row = {"share": share, **{f"{m}_mean": float(values[name][m].mean()) for m in SHARE_METRICS}}
        row.update({f"{m}_{s}": summary[name][f"{m}_{s}"] for m in METRICS for s in ("diff", "ci_low", "ci_high")})
        if plain in values:
            for m in METRICS:
                d = values[name][m] - values[plain][m]
                row[f"{m}_kill"] = float(d.mean())
                row[f"{m}_kill_low"], row[f"{m}_kill_high"] = bootstrap_ci(d, RESAMPLES, 0)
        rows[name] = row
    return rows


def table9_markdown(results: dict) -> str:
    paper = ", ".join(f"{who} " + " / ".join(f"{v:g}" for v in values) for who, values in PAPER_TABLE9.items())
    lines = ["# RLSchert's Table 9: the share of jobs with a running predictor (benchmarks/rlschert_eval.py)", "",
             provenance_markdown(results["provenance"]), "",
             f"{results['samples']} windows of {results['jobs']} jobs per seed set from each trace's test part "
             f"(last {1 - TRAIN_FRACTION:.0%}); `prediction: running:share=S`, `estimate: predicted`, EASY. Means "
             "per window; (paired difference to the first row, 95% bootstrap CI, by hpcgym compare); kill effect: "
             "the paired difference to SJF without kill at the same share; RL agents served "
             f"{'sampling their actions' if results.get('rl_served') == 'sampled' else 'greedily'}. Paper (mean "
             f"slowdown at 0 / 50 / 80 / 100%): {paper}.", ""]
    for key, rows in results["shares"].items():
        trace, seed = key.split("/")
        lines += [f"## {trace}, seeds {seed}..{int(seed) + results['samples'] - 1}", "",
                  "| policy | share | kills | lost work (proc-s) | " + " | ".join(METRICS.values()) + " | "
                  + " | ".join(f"kill effect on {label}" for label in METRICS.values()) + " |",
                  "|---|---:|---:|---:|" + "---:|" * 2 * len(METRICS)]
        for name, row in rows.items():
            effect = [f"{row[f'{m}_kill']:+,.2f} [{row[f'{m}_kill_low']:+,.2f}, {row[f'{m}_kill_high']:+,.2f}]"
                      if f"{m}_kill" in row else "" for m in METRICS]
            lines.append(f"| {name} | {row['share']:g} | {row['kills_mean']:.1f} | {row['lost_work_mean']:,.0f} | "
                         + " | ".join(cell(row, m) for m in METRICS) + " | " + " | ".join(effect) + " |")
        lines.append("")
    return "\n".join(lines)


def ordering(rows: dict, metric: str) -> str:
    """Policies from best to worst by mean; equal means (to 0.01) joined by `=`."""
    done = sorted((round(row[f"{metric}_mean"], 2), name) for name, row in rows.items()
                  if row.get(f"{metric}_mean") is not None)
    groups: dict[float, list[str]] = {}
    for value, name in done:
        groups.setdefault(value, []).append(name)
    return " < ".join(" = ".join(names) for names in groups.values())


def cell(row: dict | None, metric: str) -> str:
    if not row or row.get(f"{metric}_mean") is None:
        return "-"
    text = f"{row[f'{metric}_mean']:,.2f}"
    if row.get(f"{metric}_ci_low") is None:
        return text
    return f"{text} ({row[f'{metric}_diff']:+,.2f} [{row[f'{metric}_ci_low']:+,.2f}, {row[f'{metric}_ci_high']:+,.2f}])"


def markdown(results: dict) -> str:
    lines = ["# RLSchert: results (benchmarks/rlschert_eval.py)", "", provenance_markdown(results["provenance"]), "",
             f"{results['samples']} windows of {results['jobs']} jobs per seed set from each trace's test part "
             f"(last {1 - TRAIN_FRACTION:.0%}); mean (paired difference to SJF, 95% bootstrap CI). "
             f"Paper's ordering: {PAPER_ORDER}.", ""]
    for key, rows in results["tables"].items():
        trace, predictor, seed = key.split("/")
        names = list(rows)
        lines += [f"## {trace}, prediction {predictor}, seeds {seed}..{int(seed) + results['samples'] - 1}", "",
                  "| policy | " + " | ".join(METRICS.values()) + " |", "|---|" + "---:|" * len(METRICS)]
        lines += [f"| {name} | " + " | ".join(cell(rows.get(name), m) for m in METRICS) + " |" for name in names]
        lines += [""] + [f"* ordering by {label}: {ordering(rows, m)}" for m, label in METRICS.items()] + [""]
    return "\n".join(lines)


def main() -> None:
    parser = argument_parser(__doc__, "rlschert-eval", 0, 10, 200, "0,100", list(TRACES))
    parser.add_argument("--predictors", default=",".join(PREDICTORS), help="Comma-separated: " + ", ".join(PREDICTORS))
    parser.add_argument("--shares", help="Table 9 instead: shares of jobs with a running predictor, e.g. 0,0.5,0.8,1.")
    parser.add_argument("--sampled", action="store_true", help="Serve the RL agents sampling their actions "
                        "(sampled:PATH) instead of greedily.")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    traces = chosen(parser, "--traces", args.traces, TRACES)
    if args.shares:
        table9(args, traces, seeds, [float(s) for s in args.shares.split(",")])
        return
    predictors = chosen(parser, "--predictors", args.predictors, PREDICTORS)
    results: dict = {"samples": args.samples, "jobs": args.jobs, "tables": {}}
    for trace in traces:
        for predictor in predictors:
            table = policies(args, trace, predictor)
            for seed in seeds:
                folder = args.out / f"{TRACES[trace]}-{predictor}-seed{seed}"
                results["tables"][f"{trace}/{predictor}/{seed}"] = compare(
                    folder, trace_path(trace), table, seed, args.samples, args.jobs, "--train-fraction",
                    str(TRAIN_FRACTION), "--part", "test", "--metric", "mean_slowdown")
    args.out.mkdir(parents=True, exist_ok=True)
    results["provenance"] = results_provenance(args)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "results.md").write_text(markdown(results))
    print(markdown(results))


def table9(args, traces: list[str], seeds: list[int], shares: list[float]) -> None:
    """The share sweep: one compare per trace and seed set, all shares' policies on the same windows."""
    results: dict = {"samples": args.samples, "jobs": args.jobs, "rl_served": served(args), "shares": {}}
    for trace in traces:
        table = share_policies(args, trace, shares)
        for seed in seeds:
            folder = args.out / f"{TRACES[trace]}-shares-seed{seed}"
            summary = compare(folder, trace_path(trace), {name: spec for name, (_, _, spec) in table.items()}, seed,
                              args.samples, args.jobs, "--train-fraction", str(TRAIN_FRACTION), "--part", "test",
                              "--metric", "mean_slowdown")
            results["shares"][f"{trace}/{seed}"] = share_rows(folder, table, summary)
    args.out.mkdir(parents=True, exist_ok=True)
    results["provenance"] = results_provenance(args)
    (args.out / "table9.json").write_text(json.dumps(results, indent=1))
    (args.out / "table9.md").write_text(table9_markdown(results))
    print(table9_markdown(results))


if __name__ == "__main__":
    main()
