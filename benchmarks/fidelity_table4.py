"""Reproduce the heuristic columns of Table 4 of the RL backfilling paper with hpcgym.

    python benchmarks/fidelity_table4.py                          # Markdown on stdout
    python benchmarks/fidelity_table4.py --markdown /tmp/table4.md

Paper: E. Kolker-Hicks, D. Zhang, D. Dai, "A Reinforcement Learning Based Backfilling Strategy
for HPC Batch Jobs", SC-W 2023 (papers/003 in this project). Table 4 reports the mean bounded
slowdown (bsld, tau = 10 s) over 10 random 1024-job sequences for FCFS, SJF, WFP3 and F1 with
EASY backfilling, EASY using requested times ("EASY") and actual run times ("EASY-AR").

What is computed (every seed is fixed and printed; docs/fidelity.md explains the results):

* **main**: hpcgym as shipped. `read_swf` cleaning, the first `--pool` (10,000) jobs of each
  trace (the paper uses the first 10K jobs, section 4.1.2), `random_window(pool, 1024, seed)`
  for each seed of `--seeds`, `simulate(..., SimConfig(backfill="easy", estimate=...))` with the
  default overrun "run". EASY-AR is `estimate="actual"`.
* **second seed set** (`--seeds2`): the same with other seeds, to show how unstable a mean of
  10 heavy-tailed samples is. Per-sequence values and min/median/max are printed for both.
* **sensitivity**: windows from the whole trace instead of the first 10K jobs; overrun "kill".
* **ladder towards the paper's code** (DIR-LAB RLBackfilling: `bfTorch.py` driven by
  `compare-make-table.py`, read from its public source; no code copied), each step adding one
  trait of that code to the previous one:
  1. the paper script's 10 windows: starts drawn uniformly in [1024, 10000 - 1024 - 1) of the
     first 10,000 jobs by a numpy RandomState seeded as gym 0.21 seeds it with seed 1
     (`gym021_random_state`);
  2. its trace cleaning: jobs with run time -1 (cancelled) are kept as 10 s jobs and only run
     time 0 is dropped; size = max(allocated, requested) processors; jobs in job-id order;
  3. its AR (the run time replaces the requested time in the job record, so SJF/F1 also sort
     by it) and its WFP3 (it reads the wait of a queued job as `scheduled_time - submit` with
     `scheduled_time = -1`, which turns the score into the static ((1+s)/r)^3 * n);
  4. its heuristic scheduling loop, as the simulator's `rlbf-scw` preset
     (`environment.config.PRESETS`): once the head job blocks, its shadow time is computed once
     from requested times, and until the head fits only jobs ending strictly before that shadow
     time are backfilled, scanned in submit order whatever the policy (no "extra processors"
     rule; a reservation in the past, from a job that overran its request, allows no
     backfilling at all); one event per scheduling pass. Requests are those the code holds
     (for AR a cancelled job's request is its recorded run time, -1).
  Step 4 comes within 0.01 of every heuristic number of Table 4 (the report prints each
  difference, and whether rounding or truncating to two decimals gives the printed digits;
  docs/fidelity.md quotes them). The last row
  repeats step 4 with the windows a later version of the code would draw (a numpy Generator
  seeded with 1), to show how much the choice of 10 windows alone moves the means.
* **which trait matters**: step 4 with one textbook-EASY trait (TEXTBOOK_TRAITS) switched back
  on at a time, through the preset's options (all of them on are hpcgym's defaults, step 3).
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from hpcgym.environment.priorities import PriorityPolicy
from hpcgym.environment.config import PRESETS, SimConfig
from hpcgym.environment.sequences import random_window, window
from hpcgym.environment.simulator import simulate
from hpcgym.environment.swf import read_swf
from hpcgym.environment.workload import Workload
from hpcgym.gymbridge.provenance import provenance, provenance_markdown

JOBS = 1024
POOL = 10_000
PAPER_SEED = 1

#: Table 4 of the paper (heuristic columns only); None where the paper prints "-".
PAPER = {
    "SDSC-SP2": (1595.11, 412.01, 2167.83, 187.63, 1083.11, 1098.21),
    "HPC2N": (127.38, 50.55, 122.03, 24.03, 97.38, 71.94),
    "Lublin1": (235.81, None, 73.30, None, 133.87, 75.06),
    "Lublin2": (247.60, None, 91.99, None, 318.35, 148.24),
}

#: (label, trace file stem, paper row or None)
TRACES = (
    ("SDSC-SP2", "SDSC-SP2-1998-4.2-cln", "SDSC-SP2"),
    ("HPC2N", "HPC2N-2002-2.2-cln", "HPC2N"),
    ("lublin_256", "lublin_256", "Lublin1"),
    ("lublin-aaroh", "lublin-aaroh", None),
)

#: (column, policy, actual-run-time estimate?)
COLUMNS = (
    ("FCFS+EASY", "fcfs", False),
    ("FCFS+EASY-AR", "fcfs", True),
    ("SJF+EASY", "sjf", False),
    ("SJF+EASY-AR", "sjf", True),
    ("WFP3+EASY", "wfp3", False),
    ("F1+EASY", "f1", False),
)

#: The WFP3 score as the paper's code evaluates it for queued jobs (wait = -1 - s).
WFP3_PAPER_CODE = PriorityPolicy(
    "wfp3-papercode", "((1 + s) / r)^3 * n",
    lambda j, now, seed: ((1.0 + j["submit"].astype(np.float64)) / j["requested"]) ** 3 * j["size"])


def default_traces_dir() -> Path:
    env = os.environ.get("HPCGYM_TRACES")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def parse_seeds(text: str) -> list[int]:
    """"0-9" or "0,3,7" or "0-4,10-14" -> list of ints."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        seeds.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return seeds


# --------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class PaperCodeTrace:
    """A trace as the paper's code loads it (step 2: `read_swf(cleaning="rlbf-scw")`), with the
    requests that code's AR holds: the run time as recorded in the trace, -1 for a cancelled job
    (it is copied before -1 becomes 10 s; hpcgym's simulator takes such requests as given)."""

    workload: Workload
    requested_ar: np.ndarray

    @classmethod
    def load(cls, path: Path, procs: int) -> PaperCodeTrace:
        workload = read_swf(path, procs, cleaning="rlbf-scw")
        with gzip.open(path, "rt") as fh:
            rows = [line.split() for line in fh if line.strip() and not line.lstrip().startswith(";")]
        recorded = {int(r[0]): int(float(r[3])) for r in rows}
        return cls(workload, np.array([recorded[j] for j in workload.job_id.tolist()], dtype=np.int64))

    def head(self, n: int) -> PaperCodeTrace:
        return PaperCodeTrace(self.workload.take(slice(0, n)), self.requested_ar[:n])

    def window(self, start: int) -> PaperWindow:
        w = window(self.workload, JOBS, start)
        return PaperWindow(w, w.with_columns(name=f"{w.name}-ar", requested=self.requested_ar[start:start + JOBS]))


@dataclass(frozen=True)
class PaperWindow:
    workload: Workload
    ar: Workload  # the same jobs with the code's AR requests


def gym021_random_state(seed: int) -> np.random.RandomState:
    """A numpy RandomState seeded the way gym 0.21's `seeding.np_random(seed)` seeds it: the
    first 8 bytes of sha512(str(seed)), read as a little-endian integer, split into 32-bit words
    (the paper's repository states it was tested with gym 0.21)."""
    value = int.from_bytes(hashlib.sha512(str(seed).encode()).digest()[:8], "little")
    words = []
    while value:
        value, word = divmod(value, 2**32)
        words.append(word)
    return np.random.RandomState(words or [0])


def paper_script_starts(pool_jobs: int, n_seq: int, seeding: str = "gym0.21",
                        seed: int = PAPER_SEED) -> list[int]:
    """Window starts as the paper's evaluation script draws them: uniform in
    [1024, pool - 1024 - 1), once per sequence, from its environment's seeded generator.

    `gym0.21` (the generator of the code that produced Table 4) or `numpy` (the Generator of a
    later version of that code, equal to numpy.random.default_rng(seed)).
    """
    if seeding == "gym0.21":
        rs = gym021_random_state(seed)
        return [int(rs.randint(JOBS, pool_jobs - JOBS - 1)) for _ in range(n_seq)]
    rng = np.random.default_rng(seed)
    return [int(rng.integers(JOBS, pool_jobs - JOBS - 1)) for _ in range(n_seq)]


def actual_as_requested(w: Workload) -> Workload:
    """AR as the paper's code does it: the run time replaces the request everywhere."""
    return w.with_columns(name=f"{w.name}-ar", requested=w.run)


#: Traits of textbook EASY (hpcgym's defaults, docs/semantics.md section 5) that the paper's
#: loop (the `rlbf-scw` preset) lacks, and the options that switch each back on.
TEXTBOOK_TRAITS: dict[str, tuple[str, dict[str, object]]] = {
    "extra": ("backfill also jobs that fit in the processors left over at the shadow time",
              {"easy_extra": True}),
    "reselect": ("re-pick the head job by priority, and recompute its shadow time, after every event",
                 {"commit_pick": False, "keep_shadow": False}),
    "instant": ("apply all events of one instant before scheduling (no pass between them)", {"one_event": False}),
    "policy_order": ("scan backfill candidates in priority order, not submit order", {"backfill_order": "queue"}),
    "inclusive": ("a job may end exactly at the shadow time; a reservation in the past counts as now",
                  {"strict_shadow": False}),
}


# --------------------------------------------------------------------------- running setups
def lib_bsld(win: Workload, policy: str | PriorityPolicy, actual: bool, overrun: str = "run") -> float:
    cfg = SimConfig(backfill="easy", estimate="actual" if actual else "requested", overrun=overrun)
    return float(simulate(win, cfg, policy=policy).summary["mean_bsld"])


def step3_inputs(win: PaperWindow, policy: str, actual: bool) -> tuple[Workload, str | PriorityPolicy]:
    """Ladder step 3's workload and policy for one column: the paper code's AR (the run time as
    the request) and its WFP3 form."""
    return (actual_as_requested(win.workload) if actual else win.workload,
            WFP3_PAPER_CODE if policy == "wfp3" else policy)


def all_traits_options() -> dict[str, object]:
    """The `rlbf-scw` preset with every textbook trait switched back on."""
    options = dict(PRESETS["rlbf-scw"])
    for _what, switch in TEXTBOOK_TRAITS.values():
        options.update(switch)
    return options


def textbook_cross_check(windows: Sequence[PaperWindow]) -> tuple[int, int]:
    """The paper code's loop (the preset) with all five textbook traits back on, given step 3's
    inputs, against hpcgym's defaults in step 3, for every column of Table 4: (sequences whose
    schedules differ in any job's start time, sequences compared)."""
    loop, textbook = SimConfig(**all_traits_options()), SimConfig(backfill="easy")
    differing = compared = 0
    for _column, policy, actual in COLUMNS:
        for win in windows:
            workload, order = step3_inputs(win, policy, actual)
            starts = [simulate(workload, config, policy=order).jobs["start"] for config in (loop, textbook)]
            differing += not np.array_equal(*starts)
            compared += 1
    return differing, compared


def paper_code_bsld(win: Workload, policy: str, traits: frozenset[str] = frozenset()) -> float:
    """Mean bsld of `win` under the paper code's loop (`preset: rlbf-scw`), with the given
    textbook traits switched back on."""
    options = dict(PRESETS["rlbf-scw"])
    for trait in traits:
        options.update(TEXTBOOK_TRAITS[trait][1])
    result = simulate(win, SimConfig(**options), policy=WFP3_PAPER_CODE if policy == "wfp3" else policy)
    return float(result.summary["mean_bsld"])


def run_setup(windows: Sequence[Workload] | Sequence[PaperWindow], setup: str,
              traits: frozenset[str] = frozenset()) -> dict[str, list[float]]:
    """Per-sequence mean bsld for each column of Table 4 under one setup.

    main / kill: hpcgym on hpcgym windows. papertraits (ladder step 3): hpcgym on paper-code
    windows, AR as the paper's code does it, WFP3 in the paper code's form. paperloop (step 4):
    the same under the `rlbf-scw` preset, with the code's AR requests and the given textbook
    `traits` switched back on.
    """
    out: dict[str, list[float]] = {}
    for column, policy, actual in COLUMNS:
        vals = []
        for win in windows:
            if setup in ("main", "kill"):
                vals.append(lib_bsld(win, policy, actual, "kill" if setup == "kill" else "run"))
            elif setup == "papertraits":
                vals.append(lib_bsld(*step3_inputs(win, policy, actual), False))
            elif setup == "paperloop":
                vals.append(paper_code_bsld(win.ar if actual else win.workload, policy, traits))
            else:
                raise ValueError(setup)
        out[column] = vals
    return out


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}"


def describe(windows: Sequence[Workload], pool: Workload) -> str:
    index = {int(j): k for k, j in enumerate(pool.job_id.tolist())}
    return ", ".join(f"{index[int(w.job_id[0])]} (job {int(w.job_id[0])})" for w in windows)


@click.command()
@click.option("--traces", "traces", type=click.Path(file_okay=False, path_type=Path),
              default=default_traces_dir, show_default="$HPCGYM_TRACES or ../shared/traces")
@click.option("--seeds", default="0-9", show_default=True, help="random_window seeds, main set")
@click.option("--seeds2", default="10-19", show_default=True, help="second seed set")
@click.option("--pool", default=POOL, show_default=True, help="sample from the first N jobs (0: whole trace)")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write the Markdown report to this file")
def main(traces: Path, seeds: str, seeds2: str, pool: int, markdown: Path | None) -> None:
    t_start = time.perf_counter()
    seeds_a, seeds_b = parse_seeds(seeds), parse_seeds(seeds2)
    lines: list[str] = []
    emit = lines.append
    col_names = [c for c, _, _ in COLUMNS]
    head = "| trace | " + " | ".join(col_names) + " |"
    rule = "|---|" + "---:|" * len(col_names)

    emit("# Table 4 (heuristic columns) of the RL backfilling paper, reproduced with hpcgym\n")
    made = provenance({"seeds": seeds, "seeds2": seeds2, "pool": pool, "traces": str(traces)},
                      argv=[__file__, "--seeds", seeds, "--seeds2", seeds2, "--pool", str(pool)])
    emit(provenance_markdown(made) + "  ")
    emit(f"Sequences: {JOBS} jobs; main seeds {seeds_a}; second seeds {seeds_b}; pool: "
         f"{'whole trace' if pool == 0 else f'first {pool} jobs'}; paper-script seed {PAPER_SEED}.  ")
    emit("Metric: mean bounded slowdown (tau = 10 s) per sequence, averaged over the sequences.\n")

    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    starts_text: dict[str, dict[str, str]] = {}
    n_paper = len(seeds_a)
    cross_check = (0, 0)   # (sequences whose schedules differ, sequences compared)
    for label, stem, _row in TRACES:
        path = traces / f"{stem}.swf.gz"
        full = read_swf(path)
        pooled = full if pool == 0 else full.take(slice(0, min(pool, len(full))))
        code = PaperCodeTrace.load(path, full.procs)
        code_pool = code if pool == 0 else code.head(min(pool, len(code.workload)))
        win_a = [random_window(pooled, JOBS, s) for s in seeds_a]
        win_b = [random_window(pooled, JOBS, s) for s in seeds_b]
        win_whole = [random_window(full, JOBS, s) for s in seeds_a]
        p_starts = paper_script_starts(len(pooled), n_paper)
        win_p_ours = [window(pooled, JOBS, s) for s in p_starts]
        pc_starts = paper_script_starts(len(code_pool.workload), n_paper)
        win_p_code = [code_pool.window(s) for s in pc_starts]
        pc_starts_np = paper_script_starts(len(code_pool.workload), n_paper, seeding="numpy")
        win_p_code_np = [code_pool.window(s) for s in pc_starts_np]
        starts_text[label] = {
            "main (random_window, main seeds)": describe(win_a, pooled),
            "second seed set": describe(win_b, pooled),
            "whole trace (main seeds)": describe(win_whole, full),
            "L1: paper-script starts on the hpcgym job list": describe(win_p_ours, pooled),
            "L2-L4: paper-script starts on the paper-code job list":
                describe([w.workload for w in win_p_code], code_pool.workload),
            "later code's seeding, paper-code job list":
                describe([w.workload for w in win_p_code_np], code_pool.workload)}
        results[label] = {
            "main": run_setup(win_a, "main"),
            "seeds2": run_setup(win_b, "main"),
            "whole": run_setup(win_whole, "main"),
            "kill": run_setup(win_a, "kill"),
            "L1 paper windows": run_setup(win_p_ours, "main"),
            "L2 + paper cleaning": run_setup([w.workload for w in win_p_code], "main"),
            "L3 + paper AR and WFP3 form": run_setup(win_p_code, "papertraits"),
            "L4 + paper EASY loop": run_setup(win_p_code, "paperloop"),
            "L4, later code's seeding": run_setup(win_p_code_np, "paperloop"),
        }
        for trait in TEXTBOOK_TRAITS:
            results[label][f"L4 + {trait}"] = run_setup(win_p_code, "paperloop", frozenset({trait}))
        checked = textbook_cross_check(win_p_code)
        cross_check = (cross_check[0] + checked[0], cross_check[1] + checked[1])
        print(f"[{label}: done at {time.perf_counter() - t_start:.0f} s]", file=sys.stderr)

    def mean_row(label: str, setup: str) -> str:
        vals = results[label][setup]
        return f"| {label} | " + " | ".join(fmt(float(np.mean(vals[c]))) for c in col_names) + " |"

    def paper_line(row: str) -> str:
        return f"| paper {row} | " + " | ".join(fmt(x) for x in PAPER[row]) + " |"

    emit("## Main table: hpcgym (main setup, mean of the main seeds) beside the paper\n")
    emit(head)
    emit(rule)
    for label, _stem, row in TRACES:
        emit(mean_row(label, "main"))
        if row:
            emit(paper_line(row))
    emit(paper_line("Lublin2"))
    emit("\nFor the Lublin traces requested time = run time, so EASY and EASY-AR coincide; the paper "
         "prints its single Lublin value under FCFS+EASY and SJF+EASY. lublin-aaroh is *not* the "
         "paper's Lublin2 (see docs/fidelity.md); its row has no paper counterpart.\n")

    emit("## Spread over the sequences (main seeds): min / median / max\n")
    emit(head)
    emit(rule)
    for label, _stem, _row in TRACES:
        vals = results[label]["main"]
        spread = (f"{np.min(vals[c]):,.1f} / {np.median(vals[c]):,.1f} / {np.max(vals[c]):,.1f}"
                  for c in col_names)
        emit(f"| {label} | " + " | ".join(spread) + " |")

    emit("\n## Second seed set: same setup, other sequences (mean)\n")
    emit(head)
    emit(rule)
    for label, _stem, _row in TRACES:
        emit(mean_row(label, "seeds2"))

    emit("\n## Sensitivity of the main setup (mean)\n")
    for setup, title in (("whole", "windows drawn from the whole trace (main seeds)"),
                         ("kill", "overrun kill: jobs end at their requested time (main windows)")):
        emit(f"\n### {title}\n")
        emit(head)
        emit(rule)
        for label, _stem, _row in TRACES:
            emit(mean_row(label, setup))

    emit("\n## Ladder towards the paper's code (mean; each step adds one trait of that code)\n")
    ladder = ("L1 paper windows", "L2 + paper cleaning", "L3 + paper AR and WFP3 form",
              "L4 + paper EASY loop", "L4, later code's seeding")
    emit("| trace | step | " + " | ".join(col_names) + " |")
    emit("|---|---|" + "---:|" * len(col_names))
    for label, _stem, row in TRACES:
        for setup in ("main",) + ladder:
            name = "L0 main" if setup == "main" else setup
            emit(f"| {label} | {name} | " + " | ".join(
                fmt(float(np.mean(results[label][setup][c]))) for c in col_names) + " |")
        if row:
            emit(f"| {label} | paper ({row}) | " + " | ".join(fmt(x) for x in PAPER[row]) + " |")
    diffs = [abs(float(np.mean(results[label]["L4 + paper EASY loop"][c])) - x)
             for label, _stem, row in TRACES if row
             for c, x in zip(col_names, PAPER[row]) if x is not None]
    emit(f"\nStep L4 against the paper: largest absolute difference {max(diffs):.4f} over "
         f"{len(diffs)} numbers (the paper prints two decimals, mostly truncated).\n")
    emit("Per number: step L4 at full precision, the paper, and whether L4 rounded or truncated to "
         "two decimals prints the paper's digits.\n")
    emit("| trace | column | L4 | paper | abs diff | rounded same | truncated same |")
    emit("|---|---|---:|---:|---:|---|---|")
    same_rounded = same_truncated = 0
    for label, _stem, row in TRACES:
        if not row:
            continue
        for c, x in zip(col_names, PAPER[row]):
            if x is None:
                continue
            ours = float(np.mean(results[label]["L4 + paper EASY loop"][c]))
            rounded = f"{ours:.2f}" == f"{x:.2f}"
            truncated = f"{math.floor(ours * 100) / 100:.2f}" == f"{x:.2f}"
            same_rounded += rounded
            same_truncated += truncated
            emit(f"| {label} | {c} | {ours:,.4f} | {fmt(x)} | {abs(ours - x):.4f} | "
                 f"{'yes' if rounded else 'no'} | {'yes' if truncated else 'no'} |")
    emit(f"\nSame digits as the paper: {same_rounded} of {len(diffs)} when L4 is rounded to two "
         f"decimals, {same_truncated} of {len(diffs)} when it is truncated.\n")

    emit("\n## Which trait of the paper's loop matters: step L4 with one textbook-EASY trait switched on\n")
    for trait, (what, options) in TEXTBOOK_TRAITS.items():
        emit(f"* `{trait}`: {what} ({', '.join(f'{k}: {v}' for k, v in options.items())})")
    emit("")
    emit("| trace | loop | " + " | ".join(col_names) + " |")
    emit("|---|---|" + "---:|" * len(col_names))
    for label, _stem, _row in TRACES:
        for setup in ["L4 + paper EASY loop"] + [f"L4 + {t}" for t in TEXTBOOK_TRAITS]:
            name = "paper loop (L4)" if setup == "L4 + paper EASY loop" else setup.replace("L4 + ", "+ ")
            emit(f"| {label} | {name} | " + " | ".join(
                fmt(float(np.mean(results[label][setup][c]))) for c in col_names) + " |")
    emit(f"\nCross-check: the paper loop with all five traits on, given step L3's inputs, against hpcgym's "
         f"defaults in step L3: {cross_check[0]} of {cross_check[1]} sequences differ in any job's start time.\n")
    emit("\n## Windows (start index in the sampled job list, first job id)\n")
    for label, _stem, _row in TRACES:
        emit(f"* **{label}**")
        for setup, text in starts_text[label].items():
            emit(f"  * {setup}: {text}")

    emit("\n## Per-sequence values\n")
    for setup in ("main", "seeds2", "L4 + paper EASY loop"):
        n_seq = len(results[TRACES[0][0]][setup][col_names[0]])
        emit(f"\n### {setup}\n")
        emit("| trace | column | " + " | ".join(f"#{k}" for k in range(n_seq)) + " |")
        emit("|---|---|" + "---:|" * n_seq)
        for label, _stem, _row in TRACES:
            for c in col_names:
                emit(f"| {label} | {c} | " + " | ".join(f"{v:.1f}" for v in results[label][setup][c]) + " |")

    emit(f"\n_Computed in {time.perf_counter() - t_start:.0f} s._")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if markdown is not None:
        markdown.write_text(text)


if __name__ == "__main__":
    main()
