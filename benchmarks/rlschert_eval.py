"""RLSchert evaluation (docs/rlschert.md): the paper's Tables 7 and 8 (mean slowdown and mean
completion time of Tetris, Random, SJF, Tetris*, SAF, each without and with the rule-based kill,
and the RL kill agent where one is trained) under each predictor, over two disjoint seed sets of
test-part windows, through `hpcgym compare` (paired differences to SJF with 95% bootstrap CIs),
with the orderings beside the paper's.

    python benchmarks/rlschert_eval.py --out runs/rlschert-eval                    # both traces
    python benchmarks/rlschert_eval.py --traces SDSC-SP2 --predictors running --samples 5

The baselines run on hpcgym's event simulator, not the paper's discrete-time DeepRM one: SJF and
SAF are priority orders with EASY backfilling; Tetris, Tetris* and Random (`random-packing`) are
packing agents that start jobs that fit and never reserve (`--backfill none`). Reservations use
the predictions (`estimate: predicted`). The `learned` model is fitted on each trace's training
part first (`hpcgym predict fit`). An RL kill agent is read from RUNS/rlschert-TRACE/model.pt
(`hpcgym train rlschert`) when it exists; its rows are left out otherwise. Outputs in OUT:
compare folders, results.json and results.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from paper_runs import HPCGYM, TRACES_DIR, argument_parser, compare, run

TRACES = {"SDSC-SP2": "SDSC-SP2-1998-4.2-cln", "HPC2N": "HPC2N-2002-2.2-cln"}
PREDICTORS = ("running", "user_history", "learned")
TRAIN_FRACTION = 0.8
#: The paper's baselines as hpcgym policies (SJF first: the differences are to it).
BASELINES = {"sjf": "sjf", "saf": "saf", "tetris": "select:tetris,backfill:none",
             "tetris-star": "select:tetris-star,backfill:none", "random": "select:random-packing,backfill:none"}
KILL = "kill:rlschert-rule"
#: The paper's orderings (Tables 7 and 8, lower is better; kill helps slowdown, barely completion time).
PAPER_ORDER = "RLSchert < DeepRM < SAF ~ Tetris* < SJF < Random < Tetris"
METRICS = {"mean_slowdown": "mean slowdown", "mean_response": "mean completion time (s)"}


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


def policies(args, trace: str, predictor: str) -> dict[str, str]:
    options = f"prediction:{prediction(args, trace, predictor)},estimate:predicted"
    table = {}
    for name, spec in BASELINES.items():
        table[name] = f"{spec},{options}"
        table[f"{name}-kill"] = f"{spec},{options},{KILL}"
    agent = args.runs / f"rlschert-{TRACES[trace]}" / "model.pt"
    if agent.is_file():
        table["rlschert"] = f"fcfs,{options},kill:model:{agent.resolve()}"
    return table


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
    lines = ["# RLSchert: results (benchmarks/rlschert_eval.py)", "",
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
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    traces = [t for t in TRACES if t in args.traces.split(",")]
    predictors = [p for p in PREDICTORS if p in args.predictors.split(",")]
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
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "results.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
