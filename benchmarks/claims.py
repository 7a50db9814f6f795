"""The claims ledger (docs/claims.md, issue 43): one row per headline claim of the five papers, with
hpcgym's number read from the committed results file that holds it, so no number in the ledger is
typed by hand. Each claim is declared below as data: the paper's figure, the results file(s), how
our number is read from them, and the verdict (a rule over that number, or a fixed verdict with its
reason where the files cannot decide it). tests/test_claims.py regenerates the ledger and compares.

    python benchmarks/claims.py                  # rewrite docs/claims.md
    python benchmarks/claims.py --check          # exit 1 if docs/claims.md is not what the files give
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from paper_runs import ROOT, paired, spread
from rlbf_eval import PAPER_TABLE4 as RLBF_TABLE4
from rlschert_eval import PAPER_TABLE9
from schedinspector_eval import PAPER_TABLE4 as SI_TABLE4
from schedinspector_eval import PAPER_TABLE5_SJF

RESULTS = ROOT / "docs" / "results"
LEDGER = ROOT / "docs" / "claims.md"
SEEDS = (0, 1, 2)
#: Verdicts, in the order the summary counts them.
VERDICTS = ("reproduced", "partly", "not reproduced", "one seed: not a headline", "untestable here", "pending")
#: The cell of a row whose results file is not made yet (a study still training or rerunning).
PENDING = "pending: its results file is not made yet"


@dataclass
class Ours:
    """hpcgym's cell: its text, every number that text shows (raw, for the test to find), and how many
    training seeds hold the claim (None where a rule does not count seeds)."""
    parts: list[str] = field(default_factory=list)
    numbers: list[float] = field(default_factory=list)
    held: int | None = None
    seeds: int = 0

    def num(self, value: float, spec: str = ",.2f") -> str:
        self.numbers.append(float(value))
        return f"{value:{spec}}"

    def spread(self, values: list[float], spec: str = ",.2f") -> str:
        """paper_runs.spread of `values`, each of its numbers noted."""
        self.numbers += [statistics.mean(values), min(values), max(values)]
        if len(values) > 1:
            self.numbers.append(statistics.stdev(values))
        return spread(values, spec)

    def ci(self, diff: float, low: float, high: float) -> str:
        return f"{self.num(diff, '+,.1f')} [{self.num(low, '+,.1f')}, {self.num(high, '+,.1f')}]"

    @property
    def text(self) -> str:
        return "; ".join(self.parts) if self.parts else PENDING

    @property
    def quote(self) -> str:
        """The headline number a paper page quotes beside its link to the row."""
        return self.parts[0] if self.parts else PENDING


Reader = Callable[[list[dict]], Ours]
Verdict = Callable[[Ours], tuple[str, str]]


@dataclass(frozen=True)
class Claim:
    key: str
    paper: str
    claim: str
    figure: str
    files: tuple[str, ...]
    ours: Reader
    verdict: Verdict
    budget: str


@cache
def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def dig(data: dict, path: str):
    """The value at a '/'-separated path; a key may itself contain '/', so the longest matching
    prefix is taken first."""
    parts = path.split("/")
    while parts:
        for n in range(len(parts), 0, -1):
            key = "/".join(parts[:n])
            if key in data:
                data, parts = data[key], parts[n:]
                break
        else:
            raise KeyError(path)
    return data


def pct(value: float, base: float) -> float:
    return 100 * (value - base) / base


# Readers: how a claim's number comes out of its file(s).

def versus_base(table: str, agents: str, metric: str = "mean_bsld", base: str = "base",
                utilization_points: float | None = 5.0) -> Reader:
    """A `hpcgym compare` table (base and one row per training seed, `agents` with {s} for the seed):
    the spread of `metric` over the seeds, the base, and each seed's paired difference with its CI.
    A seed holds when its CI lies below 0 and (`utilization_points`) its utilization is within that
    many points of the base's: a gain bought by idling the machine is not the paper's gain."""
    def read(files: list[dict]) -> Ours:
        rows = dig(files[0], table)
        ours = Ours(seeds=len(SEEDS), held=0)
        seeds = [rows[agents.format(s=s)] for s in SEEDS]
        ours.parts.append(ours.spread([r[f"{metric}_mean"] for r in seeds]))
        ours.parts.append(f"{base} {ours.num(rows[base][f'{metric}_mean'])}")
        ours.parts.append("per seed " + ", ".join(
            ours.ci(r[f"{metric}_diff"], r[f"{metric}_ci_low"], r[f"{metric}_ci_high"]) for r in seeds))
        if utilization_points is not None:
            ours.parts.append("utilization % " + ", ".join(ours.num(100 * r["utilization_mean"], ".1f") for r in seeds)
                              + f" (base {ours.num(100 * rows[base]['utilization_mean'], '.1f')})")
        for r in seeds:
            kept = utilization_points is None or \
                100 * (rows[base]["utilization_mean"] - r["utilization_mean"]) <= utilization_points
            ours.held += r[f"{metric}_ci_high"] < 0 and kept
        return ours
    return read


def utilization_cost(table: str, agents: str, points: float) -> Reader:
    """Each seed's utilization against the base's (%); a seed holds when it costs under `points`."""
    def read(files: list[dict]) -> Ours:
        rows = dig(files[0], table)
        base = 100 * rows["base"]["utilization_mean"]
        util = [100 * rows[agents.format(s=s)]["utilization_mean"] for s in SEEDS]
        ours = Ours(seeds=len(SEEDS), held=sum(base - u < points for u in util))
        ours.parts += [ours.spread(util), f"base {ours.num(base)}"]
        return ours
    return read


def whole_trace(files: list[dict]) -> Ours:
    """Section 5's replay: each seed's bsld and share of rejected picks over the whole trace."""
    data = files[0]
    agents = [data["agents"][str(s)] for s in SEEDS]
    ours = Ours(seeds=len(SEEDS))
    ours.parts.append(ours.spread([a["metrics"]["mean_bsld"] for a in agents]))
    ours.parts.append(f"SJF alone {ours.num(data['base']['mean_bsld'])}")
    ours.parts.append("rejected % " + ", ".join(ours.num(100 * a["rejection_ratio"], ".1f") for a in agents))
    ours.held = sum(a["metrics"]["mean_bsld"] < data["base"]["mean_bsld"] for a in agents)
    return ours


def dras_policies(files: list[dict], agents: tuple[str, ...], metric: str, rule: str = "remade") -> list[float]:
    """`metric` of each agent in its persistent_reservations JSON (one file per agent, or all in one)."""
    if len(files) == 1:
        files = files * len(agents)
    return [f["policies"][a]["mean"][rule][metric] for f, a in zip(files, agents)]


def dras_versus_fcfs(agents: tuple[str, ...], metric: str, ratio: bool = False) -> Reader:
    """The agents' `metric` against FCFS/B's on the same windows. The files hold no per-window values
    and no paired difference to FCFS/B, so no CI: a seed holds when its mean is lower (or, `ratio`,
    the cell shows the multiple of FCFS/B's and a seed holds within 1.5 times it)."""
    def read(files: list[dict]) -> Ours:
        values = dras_policies(files, agents, metric)
        fcfs = files[0]["policies"]["fcfs-easy"]["mean"]["remade"][metric]
        ours = Ours(seeds=len(values))
        ours.parts += [ours.spread(values), f"FCFS/B {ours.num(fcfs)}"]
        if ratio:
            ours.parts.append(", ".join(ours.num(v / fcfs, ".1f") for v in values) + " times FCFS/B's")
            ours.held = sum(v <= 1.5 * fcfs for v in values)
        else:
            ours.parts.append("change " + ", ".join(ours.num(pct(v, fcfs), "+.0f") + "%" for v in values))
            ours.held = sum(v < fcfs for v in values)
        ours.parts.append("no paired CI against FCFS/B in the file")
        return ours
    return read


def dras_versus(agents: tuple[str, ...], metric: str, reference: str) -> Reader:
    """The agents' paired difference to `reference` (the knapsack of the same objective), per seed."""
    def read(files: list[dict]) -> Ours:
        policies = files[0]["policies"]
        ours = Ours(seeds=len(agents), held=0)
        ours.parts.append(ours.spread([policies[a]["mean"]["remade"][metric] for a in agents]))
        ours.parts.append(f"{reference} {ours.num(policies[reference]['mean']['remade'][metric])}")
        diffs = [policies[a]["versus"]["remade"][metric] for a in agents]
        ours.parts.append("per seed " + ", ".join(ours.ci(d["mean"], d["ci_low"], d["ci_high"]) for d in diffs))
        ours.held = sum(d["ci_high"] < 0 for d in diffs)
        return ours
    return read


def dras_ranking(metric: str) -> Reader:
    """The four update rules' `metric` over the training seeds, and per seed the windows' paired
    difference mean(PPO, A2C) - mean(PG, DQL) (bootstrap 95% CI, 10,000 resamples, seed 7): a seed
    holds the paper's ranking when that CI lies below 0."""
    def read(files: list[dict]) -> Ours:
        policies = files[0]["policies"]
        windows = {name: np.asarray(p["windows"]["remade"][metric], dtype=float) for name, p in policies.items()}
        ours = Ours(seeds=len(SEEDS), held=0)
        for algo in ("ppo", "a2c", "pg", "dql"):
            values = [policies[f"{algo}-s{s}"]["mean"]["remade"][metric] for s in SEEDS]
            ours.parts.append(f"{algo.upper()} {ours.spread(values)}")
        ours.parts.append(f"FCFS/B {ours.num(policies['fcfs-easy']['mean']['remade'][metric])}")
        cells = []
        for s in SEEDS:
            diff = paired((windows[f"ppo-s{s}"] + windows[f"a2c-s{s}"]) / 2, (windows[f"pg-s{s}"] + windows[f"dql-s{s}"]) / 2)
            cells.append(ours.ci(diff["mean"], diff["ci_low"], diff["ci_high"]))
            ours.held += diff["ci_high"] < 0
        ours.parts.append("PPO and A2C's mean minus PG and DQL's, per seed " + ", ".join(cells))
        return ours
    return read


def optimization_max_wait(files: list[dict]) -> Ours:
    """The capability knapsack's max wait as a multiple of each agent's (the paper: about 2)."""
    policies = files[0]["policies"]
    opt = policies["optimization-capability"]["mean"]["remade"]["max_wait_h"]
    ratios = [opt / policies[f"ppo-flag-s{s}"]["mean"]["remade"]["max_wait_h"] for s in SEEDS]
    ours = Ours(seeds=len(SEEDS), held=sum(r >= 1.5 for r in ratios))
    ours.parts += [ours.spread(ratios), f"optimization's max wait {ours.num(opt)} h"]
    return ours


def rlbf_windows(windows: str, base: str = "EASY") -> Reader:
    """The `scw` agents on the delay study's seed set `windows` ("paper": the paper's own 10 windows;
    "0": windows 0-9 of the agents' training distribution): the spread of their bsld over the
    training seeds the file holds (s0, s1, s2), `base` (their base with EASY, alone), and each
    seed's paired difference to it over the windows (bootstrap 95% CI, 10,000 resamples, seed 7,
    as the other studies)."""
    return lambda files: rlbf_seed_set(files, windows, base)


def rlbf_seed_set(files: list[dict], windows: str, base: str = "EASY") -> Ours:
    data = files[0]
    folders = [f"s{s}" for s in SEEDS if f"s{s}" in data]
    if not folders or any(windows not in data[f] for f in folders):
        return Ours()
    totals = [data[f][windows] for f in folders]
    ours = Ours(seeds=len(folders), held=0)
    ours.parts.append(ours.spread([t["mean_bsld_rl"] for t in totals]))
    ours.parts.append(f"{base} {ours.num(totals[0]['mean_bsld_easy'])}")
    cells = []
    for t in totals:
        diff = paired(t["bsld_rl"], t["bsld_easy"])
        cells.append(ours.ci(diff["mean"], diff["ci_low"], diff["ci_high"]))
        ours.held += diff["ci_high"] < 0
    ours.parts.append("per seed " + ", ".join(cells))
    return ours


rlbf_paper_windows = rlbf_windows("paper")


def rlbf_easy_paper_windows(files: list[dict]) -> Ours:
    """EASY (FCFS base) on the paper's 10 windows, as the delay study replays it."""
    data = files[0]
    if "paper" not in data["s0"]:
        return Ours()
    ours = Ours()
    ours.parts.append(ours.num(data["s0"]["paper"]["mean_bsld_easy"]))
    return ours


def one_row(table: str, policy: str, base: str, metric: str = "mean_bsld") -> Reader:
    """One agent (a single training seed) against `base` in a compare table, with the paired CI."""
    def read(files: list[dict]) -> Ours:
        rows = dig(files[0], table)
        r = rows[policy]
        ours = Ours(seeds=1, held=int(r[f"{metric}_ci_high"] < 0))
        ours.parts += [ours.num(r[f"{metric}_mean"]), f"{base} {ours.num(rows[base][f'{metric}_mean'])}",
                       "Δ " + ours.ci(r[f"{metric}_diff"], r[f"{metric}_ci_low"], r[f"{metric}_ci_high"])]
        return ours
    return read


def fig1_noisy(files: list[dict]) -> Ours:
    """Fig. 1 (rlbf_eval.py --fig1): per arm (FCFS and SJF with +-E noise, FCFS with over-estimates
    only), the level with the lowest mean paired difference to exact run times over the noise seeds,
    each seed's CI over the windows and its whole-trace difference. A noise seed holds for the FCFS
    +-E level that most seeds hold for (CI below 0)."""
    ours = Ours(seeds=len(files[0]["noise_seeds"]))
    arms = (("fcfs", "noisy-", "FCFS ±"), ("sjf", "noisy-", "SJF ±"), ("fcfs", "over-", "FCFS over-only +"))
    for base, arm, label in arms:
        levels = {k: list(v.values()) for k, v in files[0][base].items() if k.startswith(arm)}
        best = min(levels, key=lambda k: statistics.mean(r["diff"] for r in levels[k]))
        runs = levels[best]
        level = ours.num(100 * float(best.removeprefix(arm)), "g")
        ours.parts += [f"{label}{level}% minus exact {ours.spread([r['diff'] for r in runs], '+.2f')}",
                       "per noise seed " + ", ".join(ours.ci(r["diff"], r["ci_low"], r["ci_high"]) for r in runs),
                       "whole trace " + ", ".join(ours.num(r["whole_diff"], "+.2f") for r in runs)]
        if ours.held is None:
            ours.held = max(sum(r["ci_high"] < 0 for r in v) for v in levels.values())
    return ours


def final_trees(data: dict) -> dict[tuple[str, int], dict]:
    """A distill.json's trees of its last DAgger iteration by (method, depth)."""
    last = max(i["iteration"] for i in data["iterations"])
    return {(i["method"], i["depth"]): i for i in data["iterations"] if i["iteration"] == last}


def distilled(method: str, depths: tuple[int, ...], against: str, limit: float) -> Reader:
    """IRL's final trees of `method` at `depths`, one distill.json per teacher seed: the spread over
    the seeds of each depth's mean wait and slowdown change against the teacher ('teacher_test') or
    FCFS + EASY ('base_test'), in %. A seed holds when every change is at most `limit` %. One test
    window per seed and no per-job records in the file: no paired CI."""
    def read(files: list[dict]) -> Ours:
        ours = Ours(seeds=len(files), held=0)
        changes: dict[tuple[int, str], list[float]] = {}
        for data in files:
            trees, ref = final_trees(data), data[against]
            seed = [pct(trees[(method, d)][m], ref[m]) for d in depths for m in ("mean_wait", "mean_slowdown")]
            for (d, m), change in zip([(d, m) for d in depths for m in ("mean_wait", "mean_slowdown")], seed):
                changes.setdefault((d, m), []).append(change)
            ours.held += all(c <= limit for c in seed)
        for depth in depths:
            ours.parts.append(f"depth {ours.num(depth, 'd')}: wait {ours.spread(changes[(depth, 'mean_wait')], '+.1f')}%, "
                              f"slowdown {ours.spread(changes[(depth, 'mean_slowdown')], '+.1f')}%")
        ours.parts.append("reference wait " + ", ".join(ours.num(d[against]["mean_wait"], ",.0f") for d in files) + " s")
        return ours
    return read


def tree_sizes(files: list[dict]) -> Ours:
    """IRL's trees against DAgger's at the depths every teacher seed's file has: node counts and
    IRL's saving in %, spread over the seeds. A seed holds when IRL saves at least half the
    paper's 34% at some depth."""
    trees = [final_trees(data) for data in files]
    depths = sorted(set.intersection(*({d for _, d in t} for t in trees)))
    ours = Ours(seeds=len(files), held=0)
    saving = {d: [100 * (t[("dagger", d)]["nodes"] - t[("irl", d)]["nodes"]) / t[("dagger", d)]["nodes"] for t in trees]
              for d in depths}
    for depth in depths:
        irl = ", ".join(ours.num(t[("irl", depth)]["nodes"], ",d") for t in trees)
        dagger = ", ".join(ours.num(t[("dagger", depth)]["nodes"], ",d") for t in trees)
        ours.parts.append(f"depth {ours.num(depth, 'd')}: {ours.spread(saving[depth], '.1f')}% smaller ({irl} vs {dagger} nodes)")
    ours.held = sum(max(saving[d][k] for d in depths) >= 17 for k in range(len(files)))
    return ours


def teachers_versus_fcfs(kind: str) -> Reader:
    """Reward A's three teachers (or trees, `kind` '-tree') against FCFS + EASY: mean wait change (%)."""
    def read(files: list[dict]) -> Ours:
        data = files[0]
        fcfs = data["fcfs_easy"]["mean_wait_mean"]
        change = [pct(data["teachers"][f"A-s{s}{kind}"]["mean_wait_mean"], fcfs) for s in SEEDS]
        ours = Ours(seeds=len(SEEDS), held=sum(c <= -50 for c in change))
        ours.parts += [ours.spread(change) + " % wait", f"FCFS + EASY {ours.num(fcfs, ',.0f')} s"]
        return ours
    return read


def reward_a_versus_i(files: list[dict]) -> Ours:
    """Reward A against I, means over three teacher seeds, per checkpoint (epochs 3, 6, 12) and the
    depth-8 trees: change of mean wait and slowdown in %. The claim holds where A is >= 33% better."""
    ours = Ours(seeds=len(SEEDS), held=0)
    for data in files:
        settings, change = data["provenance"]["settings"], data["change_A_vs_I_pct"]
        if settings.get("distill"):  # the trees' file: the final teachers distilled at this depth
            label, prefix = f"trees at depth {ours.num(settings['distill'], 'd')}", "trees/"
        else:
            label, prefix = f"teachers at epoch {ours.num(int(re.search(r'[0-9]+', settings['checkpoint'])[0]), 'd')}", "teachers/"
        wait, slowdown = change[f"{prefix}mean_wait_mean"], change[f"{prefix}mean_slowdown_mean"]
        ours.parts.append(f"{label}: {ours.num(wait, '+.1f')}% / {ours.num(slowdown, '+.1f')}%")
    return ours


def slowdown_versus_sjf(table: str, agents: str) -> Reader:
    """RLSchert's tables: the agents' mean slowdown against SJF's with each seed's paired CI."""
    return versus_base(table, agents, metric="mean_slowdown", base="sjf", utilization_points=None)


def share_sweep(files: list[dict]) -> Ours:
    """Table 9: RLSchert's mean slowdown at shares 0 and 1 (windows 0..), per training seed."""
    shares = files[0]["shares"]["SDSC-SP2/0"]
    at = {s: [shares[f"rlschert-s{seed}-s{s}"]["mean_slowdown_mean"] for seed in SEEDS] for s in (0, 100)}
    ours = Ours(seeds=len(SEEDS))
    full, none = (ours.num(shares[f"sjf-s{s}"]["share"], "g") for s in (100, 0))
    ours.parts += [f"share {full}: {ours.spread(at[100])}", f"share {none}: {ours.spread(at[0])}",
                   f"SJF at share {full}: {ours.num(shares['sjf-s100']['mean_slowdown_mean'])}"]
    ours.held = sum(a < b and a < shares["sjf-s100"]["mean_slowdown_mean"] for a, b in zip(at[100], at[0]))
    return ours


def dras_start_kinds(half: str) -> Reader:
    """Table 4's two halves, PPO and A2C over the seeds: `jobs`, the share of jobs started by
    backfilling (a seed holds when both its agents backfill most jobs); `hours`, the share of
    processor-seconds (node hours) of reserved jobs (a seed holds when it is both agents' largest)."""
    kinds = ("ready", "reserved", "backfilled")

    def holds(row: dict) -> bool:
        if half == "jobs":
            return row["backfilled_jobs"] > 0.5
        return row["reserved_work"] == max(row[f"{k}_work"] for k in kinds)

    def read(files: list[dict]) -> Ours:
        jobs, ours = files[0]["jobs"], Ours(seeds=len(SEEDS))
        key, what = ("backfilled_jobs", "backfilled % jobs") if half == "jobs" else ("reserved_work", "reserved % proc-s")
        for algo in ("PPO", "A2C"):
            ours.parts.append(f"{algo} {what} {ours.spread([100 * jobs[f'{algo.lower()}-s{s}'][key] for s in SEEDS], '.1f')}")
        if half == "hours":
            ours.parts.append("ready % proc-s " + ", ".join(
                f"{a} {ours.spread([100 * jobs[f'{a.lower()}-s{s}']['ready_work'] for s in SEEDS], '.1f')}" for a in ("PPO", "A2C")))
        ours.parts.append(f"FCFS/B {ours.num(100 * jobs['fcfs-easy'][key], '.1f')}")
        ours.held = sum(all(holds(jobs[f"{a}-s{s}"]) for a in ("ppo", "a2c")) for s in SEEDS)
        return ours
    return read


def nothing(files: list[dict]) -> Ours:
    """A claim no committed file measures (the verdict says why)."""
    return Ours(parts=["no committed measurement"])


# Verdicts.

def by_seeds(what: str, without_ci: bool = False) -> Verdict:
    """Reproduced on every seed, partly on some, not on none; `what` says what a seed must show.
    `without_ci`: the file has no paired CI for the comparison, so the verdict is partly at best."""
    def verdict(ours: Ours) -> tuple[str, str]:
        if not ours.parts or ours.held is None:
            return "pending", "awaits its results file"
        if ours.seeds == 1:
            return "one seed: not a headline", f"{what}: {'yes' if ours.held else 'no'} on its one seed"
        if ours.seeds < 3:
            return "one seed: not a headline", f"{ours.held} of only {ours.seeds} seeds {what}"
        label = "reproduced" if ours.held == ours.seeds else "partly" if ours.held else "not reproduced"
        if without_ci and label == "reproduced":
            return "partly", f"{ours.held} of {ours.seeds} seeds {what}, but no paired CI in the file"
        return label, f"{ours.held} of {ours.seeds} seeds {what}"
    return verdict


def fixed(label: str, reason: str) -> Verdict:
    def verdict(ours: Ours) -> tuple[str, str]:
        return (label, reason) if ours.parts else ("pending", "awaits its results file")
    return verdict


def within(paper: float, tolerance: float) -> Verdict:
    """A heuristic cell (no training seed): reproduced within `tolerance` (relative) of the paper's."""
    def verdict(ours: Ours) -> tuple[str, str]:
        if not ours.parts:
            return "pending", "awaits its results file"
        off = abs(ours.numbers[0] - paper) / paper
        return ("reproduced" if off <= tolerance else "not reproduced"), f"{100 * off:.2f}% off the paper's"
    return verdict


SI = "SchedInspector"
#: What a SchedInspector seed must show (5 points: the paper's largest utilization cost, Lublin F1, is 4.3).
HOLDS = "beat the base (CI below 0, utilization within 5 points)"
SI_BUDGET = "60 epochs x 100 traj. (SDSC-SP2, Lublin), 40 (CTC-SP2, HPC2N); paper: converged within about 40"
T4 = "schedinspector/seeds/results.json"
#: IRL's distillations, one distill.json per teacher seed (seed 0 the first).
IRL_SP2 = ("irl/sdsc-sp2/distill/distill.json", "irl/seeds/sdsc-sp2-s1/distill.json", "irl/seeds/sdsc-sp2-s2/distill.json")
IRL_DS = ("irl/sdsc-ds/distill/distill.json", "irl/seeds/sdsc-ds-s1/distill.json", "irl/seeds/sdsc-ds-s2/distill.json")
IRL_BUDGET = "teachers 12 episodes each (3 epochs); paper: trained DQN"
CLAIMS: tuple[Claim, ...] = (
    Claim("si-t4-sdsc", SI, "Table 4: the inspector lowers SJF's bsld on SDSC-SP2",
          f"{SI_TABLE4['SDSC-SP2'][0]} -> {SI_TABLE4['SDSC-SP2'][2]}", (T4,),
          versus_base("table4/SDSC-SP2/0", "sdsc-s{s}"), by_seeds(HOLDS),
          SI_BUDGET),
    Claim("si-t4-cancelled", SI, "Table 4, SDSC-SP2 with cancelled jobs kept (the paper's cleaning)",
          f"{SI_TABLE4['SDSC-SP2'][0]} -> {SI_TABLE4['SDSC-SP2'][2]}", ("schedinspector/seeds-cancelled/results-code.json",),
          versus_base("table4/SDSC-SP2/0", "sdsc-s{s}"), by_seeds(HOLDS),
          SI_BUDGET),
    Claim("si-t4-ctc", SI, "Table 4: CTC-SP2's own agent", f"{SI_TABLE4['CTC-SP2'][0]} -> {SI_TABLE4['CTC-SP2'][2]}", (T4,),
          versus_base("table4/CTC-SP2/0", "own-s{s}"), by_seeds(HOLDS),
          SI_BUDGET),
    Claim("si-t4-hpc2n", SI, "Table 4: HPC2N's own agent", f"{SI_TABLE4['HPC2N'][0]} -> {SI_TABLE4['HPC2N'][2]}", (T4,),
          versus_base("table4/HPC2N/0", "own-s{s}"), by_seeds(HOLDS),
          SI_BUDGET),
    Claim("si-t4-lublin", SI, "Table 4: Lublin's own agent", f"{SI_TABLE4['Lublin'][0]} -> {SI_TABLE4['Lublin'][2]}", (T4,),
          versus_base("table4/Lublin/0", "own-s{s}"), by_seeds(HOLDS),
          SI_BUDGET),
    Claim("si-t4-transfer", SI, "Table 4: the SDSC-SP2 agent transfers to Lublin",
          f"{SI_TABLE4['Lublin'][0]} -> {SI_TABLE4['Lublin'][1]}", (T4,),
          versus_base("table4/Lublin/0", "sdsc-s{s}"), by_seeds(HOLDS),
          SI_BUDGET),
    Claim("si-t5", SI, "Table 5 / abstract: utilization cost typically under 1% (SDSC-SP2, no backfilling)",
          f"{PAPER_TABLE5_SJF['SDSC-SP2'][0][0]} -> {PAPER_TABLE5_SJF['SDSC-SP2'][0][1]} %", (T4,),
          utilization_cost("table4/SDSC-SP2/0", "sdsc-s{s}", 1.0), by_seeds("cost under 1 point"), SI_BUDGET),
    Claim("si-fig7-lcfs", SI, "Fig. 7: LCFS gains most of the other bases", "bsld improvement 144.9, 39.1% rejected",
          ("schedinspector/seeds-fig7/results-lcfs.json",), versus_base("table4/SDSC-SP2/0", "sdsc-s{s}"),
          by_seeds(HOLDS), "40 epochs; paper: converged curves"),
    Claim("si-fig7-srf", SI, "Fig. 7: SRF gains", "bsld improvement 52.9, 41.0% rejected",
          ("schedinspector/seeds-fig7/results-srf.json",), versus_base("table4/SDSC-SP2/0", "sdsc-s{s}"),
          by_seeds(HOLDS), "40 epochs; paper: converged curves"),
    Claim("si-fig7-saf", SI, "Fig. 7: SAF gains", "bsld improvement 34.5, 48.2% rejected",
          ("schedinspector/seeds-fig7/results-saf.json",), versus_base("table4/SDSC-SP2/0", "sdsc-s{s}"),
          by_seeds(HOLDS), "40 epochs; paper: converged curves"),
    Claim("si-fig7-fcfs", SI, "Fig. 7: FCFS gains nothing", "never positive; rejects 5% at the end",
          ("schedinspector/seeds-fig7/results-fcfs.json",), versus_base("table4/SDSC-SP2/0", "sdsc-s{s}"),
          fixed("reproduced", "all three agents end at accept-all, equal to the base"), "40 epochs; paper: converged curves"),
    Claim("si-fig8-f1", SI, "Fig. 8: F1 improved on every trace, least on CTC-SP2", "13.6% (CTC-SP2) .. 95% (Lublin)",
          ("schedinspector/seeds-f1/results.json",), versus_base("table4/CTC-SP2/0", "own-s{s}"),
          by_seeds(HOLDS), "40 epochs; paper: converged curves"),
    Claim("si-slurm", SI, "Section 4.5: Slurm multifactor with EASY", "82.9 -> 62.4 (24.7% better)",
          ("schedinspector/seeds-multifactor/results.json",), versus_base("table4/SDSC-SP2/0", "sdsc-s{s}"),
          by_seeds(HOLDS),
          "40 epochs; the paper's code's two-term multifactor not built"),
    Claim("si-replay", SI, "Section 5: the whole SDSC-SP2 trace, rejections stop above a queue delay",
          "30% of 24.0 M inspections rejected, none above delay 0.22", ("schedinspector/seeds/replay/replay.json",),
          whole_trace, fixed("not reproduced", "rejections do not stop at a queue-delay level, the share rejected is far "
                                   "above the paper's, and one seed stalls"),
          SI_BUDGET),
    Claim("dras-wait", "DRAS", "Fig. 7: DRAS lowers the mean wait against FCFS/B (eq. 1, capability)",
          "best of all methods (Theta)", ("dras/versus-optimization-capability.json",),
          dras_versus_fcfs(tuple(f"ppo-flag-s{s}" for s in SEEDS), "mean_wait_h"),
          by_seeds("lower than FCFS/B in the mean", without_ci=True), "480 episodes of 512 jobs; paper: 100 week-long jobsets (Theta)"),
    Claim("dras-maxwait", "DRAS", "Fig. 7 / Section 6.2: max wait kept near FCFS/B's (eq. 1, large jobs flagged)",
          "FCFS/B lowest, DRAS close", ("dras/versus-optimization-capability.json",),
          dras_versus_fcfs(tuple(f"ppo-flag-s{s}" for s in SEEDS), "max_wait_h", ratio=True),
          by_seeds("within 1.5 times FCFS/B's"), "480 episodes of 512 jobs; paper: 100 week-long jobsets (Theta)"),
    Claim("dras-maxwait-capacity", "DRAS", "Max wait near FCFS/B's under eq. (2), 10x budget, PPO",
          "FCFS/B lowest, DRAS close", tuple(f"dras/persistent-reservations-windows-10x{s}-sdsc-sp2.json"
                                             for s in ("", "-seed1", "-seed2")),
          dras_versus_fcfs(("dras-ppo-10x", "dras-ppo-10x-s1", "dras-ppo-10x-s2"), "max_wait_h", ratio=True),
          by_seeds("within 1.5 times FCFS/B's"), "960 episodes (10x), validation flat; paper: 100 week-long jobsets"),
    Claim("dras-opt-capability", "DRAS", "All DRAS methods outperform Optimization: bsld, eq. (1)",
          "DRAS ahead of the knapsack", ("dras/versus-optimization-capability.json",),
          dras_versus(tuple(f"ppo-flag-s{s}" for s in SEEDS), "mean_bsld", "optimization-capability"),
          by_seeds("below the knapsack (CI below 0)"), "480 episodes of 512 jobs; paper: 100 week-long jobsets"),
    Claim("dras-opt-capability-wait", "DRAS", "All DRAS methods outperform Optimization: mean wait, eq. (1)",
          "DRAS ahead of the knapsack", ("dras/versus-optimization-capability.json",),
          dras_versus(tuple(f"ppo-flag-s{s}" for s in SEEDS), "mean_wait_h", "optimization-capability"),
          by_seeds("below the knapsack (CI below 0)"), "480 episodes of 512 jobs; paper: 100 week-long jobsets"),
    Claim("dras-opt-capacity", "DRAS", "All DRAS methods outperform Optimization: mean wait, eq. (2), PPO",
          "DRAS ahead of the knapsack", ("dras/versus-optimization-capacity.json",),
          dras_versus(tuple(f"ppo-s{s}" for s in SEEDS), "mean_wait_h", "optimization"),
          by_seeds("below the knapsack (CI below 0)"), "960 episodes (10x), validation flat; paper: 100 week-long jobsets"),
    Claim("dras-opt-maxwait", "DRAS", "Optimization's max wait is twice DRAS's (eq. 1)", "about 2x (Theta)",
          ("dras/versus-optimization-capability.json",), optimization_max_wait,
          by_seeds("at 1.5x or more"), "480 episodes of 512 jobs; paper: 100 week-long jobsets"),
    Claim("dras-ranking", "DRAS", "Fig. 7: PPO and A2C ahead of PG and DQL (mean wait, eq. 2)",
          "PPO best, A2C close, DQL worst", ("dras/ranking-10x-sdsc-sp2.json",), dras_ranking("mean_wait_h"),
          by_seeds("put PPO and A2C ahead (CI below 0)"), "960 episodes (10x) each; paper: 100 week-long jobsets"),
    Claim("dras-ranking-bsld", "DRAS", "Fig. 7: PPO and A2C ahead of PG and DQL (bsld, eq. 2)",
          "PPO best, A2C close, DQL worst", ("dras/ranking-10x-sdsc-sp2.json",), dras_ranking("mean_bsld"),
          by_seeds("put PPO and A2C ahead (CI below 0)"), "960 episodes (10x) each; paper: 100 week-long jobsets"),
    Claim("dras-table4", "DRAS", "Table 4: most jobs started by backfilling", "79.7-84.8% of jobs backfilled",
          ("dras/table4-10x-sdsc-sp2.json",), dras_start_kinds("jobs"), by_seeds("backfill most jobs (PPO and A2C)"),
          "120 epochs x 8 episodes of 512 jobs (10x); paper: 100 week-long jobsets"),
    Claim("dras-table4-hours", "DRAS", "Table 4: reserved jobs take the most node hours",
          "47.6-55.0% of core hours reserved", ("dras/table4-10x-sdsc-sp2.json",), dras_start_kinds("hours"),
          by_seeds("give reserved jobs the largest share of node hours (PPO and A2C)"),
          "120 epochs x 8 episodes of 512 jobs (10x); paper: 100 week-long jobsets"),
    Claim("rlbf-scw-easy", "RL backfilling", "Table 4: FCFS+EASY on the paper's windows (scw)",
          f"{RLBF_TABLE4['SDSC-SP2'][0]:,}", ("rlbf/scw-unguarded-relative/delay-study-scw-relative-130.json",),
          rlbf_easy_paper_windows, within(RLBF_TABLE4["SDSC-SP2"][0], 0.01), "no training"),
    Claim("rlbf-scw-fcfs", "RL backfilling", "Table 4: FCFS+RLBF far below EASY (scw, paper's windows)",
          f"{RLBF_TABLE4['SDSC-SP2'][2]} against EASY {RLBF_TABLE4['SDSC-SP2'][0]:,}",
          ("rlbf/scw-unguarded-relative/delay-study-scw-relative-130.json",), rlbf_paper_windows,
          by_seeds("below EASY (CI below 0)"), "130 epochs (2.6x the paper's 50), flat on the paper's windows since 100"),
    Claim("rlbf-scw-fcfs-trained", "RL backfilling", "The same on the agents' own training distribution (scw, seeds 0-9)",
          f"{RLBF_TABLE4['SDSC-SP2'][2]} against EASY {RLBF_TABLE4['SDSC-SP2'][0]:,} (the paper's windows)",
          ("rlbf/scw-unguarded-relative/delay-study-scw-relative-130.json",), rlbf_windows("0"),
          by_seeds("below EASY (CI below 0)"), "130 epochs (2.6x the paper's 50), flat on the paper's windows since 100"),
    Claim("rlbf-scw-sjf", "RL backfilling", "Table 4: SJF+RLBF far below EASY (scw, paper's windows)",
          f"{RLBF_TABLE4['SDSC-SP2'][5]} against EASY {RLBF_TABLE4['SDSC-SP2'][3]:,}", ("rlbf/scw-sjf-3seeds/delay-study.json",),
          rlbf_windows("paper", "SJF+EASY"), by_seeds("below SJF+EASY (CI below 0)"), "50 epochs, as the paper"),
    Claim("rlbf-public-fcfs", "RL backfilling", "RLBF beats EASY (public code's rules, FCFS, seeds 0-9)",
          f"{RLBF_TABLE4['SDSC-SP2'][2]} against EASY {RLBF_TABLE4['SDSC-SP2'][0]:,}", ("rlbf/public-3seeds/delay-study.json",),
          rlbf_windows("0"), by_seeds("below EASY (CI below 0)"), "50 epochs, as the paper"),
    Claim("rlbf-hpc2n", "RL backfilling", "Table 4: FCFS+RLBF below EASY on HPC2N (scw, paper's windows)",
          f"{RLBF_TABLE4['HPC2N'][2]} against EASY {RLBF_TABLE4['HPC2N'][0]}", ("rlbf/hpc2n-scw-3seeds/delay-study.json",),
          rlbf_windows("paper"), by_seeds("below EASY (CI below 0)"), "50 epochs, as the paper"),
    Claim("rlbf-fig1", "RL backfilling", "Fig. 1: noisy estimates can beat exact run times under EASY",
          "FCFS best at +20%; only SJF best with exact run times", ("rlbf/fig1/fig1.json",), fig1_noisy,
          by_seeds("(noise draws) have an FCFS ±E level below exact (CI over the windows below 0; the same E on each)"),
          "no training; noise seeds, not training seeds; 1,024-job windows and the whole trace (the paper's)"),
    Claim("rlschert-sjf", "RLSchert", "Table 7 / 9: RLSchert below SJF (running predictor)",
          f"{PAPER_TABLE9['RLSchert'][3]} against SJF {PAPER_TABLE9['SJF'][3]}",
          ("rlschert/imitated/e30/eval-running/results.json",),
          slowdown_versus_sjf("tables/SDSC-SP2/running/0", "rlschert-s{s}"), by_seeds("below SJF (CI below 0)"),
          "30 epochs of 16 episodes (12-16% of the paper's 250), curves flat"),
    Claim("rlschert-deeprm", "RLSchert", "Table 7: DeepRM below SJF", "DeepRM < SJF",
          ("rlschert/imitated/eval-running/results.json",),
          slowdown_versus_sjf("tables/SDSC-SP2/running/0", "deeprm_sjf-s{s}"), by_seeds("below SJF (CI below 0)"),
          "10 epochs of imitation; paper: 250 steps"),
    Claim("rlschert-table9", "RLSchert", "Table 9: RLSchert improves as more jobs get running predictions",
          f"{PAPER_TABLE9['RLSchert'][0]} -> {PAPER_TABLE9['RLSchert'][3]} (SJF {PAPER_TABLE9['SJF'][0]})",
          ("rlschert/queue-visible/table9.json",), share_sweep, by_seeds("improve with the share and end below SJF"),
          "10 epochs from DeepRM-SJF; paper: 250 steps"),
    Claim("rlschert-rule-kill", "RLSchert", "Table 7: the rule-based kill barely moves SJF", "10.29 -> 10.25",
          ("rlschert/tables7-8-sdsc-sp2.json",), one_row("tables/SDSC-SP2/running/0", "sjf-kill", "sjf", "mean_slowdown"),
          fixed("reproduced", "no effect (CI spans 0), as the paper's small change"), "no training"),
    Claim("rlschert-fig9", "RLSchert", "Fig. 9: the imitation term makes training faster and better",
          "faster and better", (), nothing,
          fixed("untestable here", "runs made before three recipe fixes (step cap, kill prior, kill labels); not rerun"),
          "20 epochs of 8 episodes; paper: 250 steps"),
    Claim("irl-sp2-fidelity", "IRL", "Trees within 3% of the DQN on SP2 (depths 10, 12)", "within +3%",
          IRL_SP2, distilled("irl", (10, 12), "teacher_test", 3.0),
          by_seeds("within +3% of their teacher's wait and slowdown at both depths (one test window each)"),
          IRL_BUDGET),
    Claim("irl-ds-fidelity", "IRL", "Trees within 5% of the DQN on DataStar (depths 10, 12)", "within +5%",
          IRL_DS, distilled("irl", (10, 12), "teacher_test", 5.0),
          by_seeds("within +5% of their teacher's wait and slowdown at both depths (one test window each)"),
          IRL_BUDGET),
    Claim("irl-size", "IRL", "IRL's trees up to 34% smaller than DAgger's (SP2)", "up to -34%",
          IRL_SP2, tree_sizes, by_seeds("with an IRL tree at least 17% (half the paper's saving) smaller at some depth"),
          IRL_BUDGET),
    Claim("irl-fcfs", "IRL", "IRL up to 70% better than FCFS on SP2 (wait)", "up to -70%",
          ("irl/rewards-seeds/trees-d8/results.json",), teachers_versus_fcfs("-tree"),
          by_seeds("at least 50% below FCFS"), "teachers 48 episodes (12 epochs); paper: trained DQN"),
    Claim("irl-reward", "IRL", "Fig. 5: reward A up to 66% better than reward I (wait, slowdown)", "up to -66%",
          ("irl/rewards-seeds/epoch3/results.json", "irl/rewards-seeds/epoch6/results.json",
           "irl/rewards-seeds/epoch12/results.json", "irl/rewards-seeds/trees-d8/results.json"), reward_a_versus_i,
          fixed("not reproduced", "A is worse or ties at epochs 3 and 12 and for the trees; better only at epoch 6, "
                "where one reward-I teacher fell to FCFS"), "teachers 12-48 episodes; paper: trained DQN"),
)


def read(claim: Claim) -> Ours:
    """The claim's cell from its files; empty (pending) while one of them is not made yet."""
    if not all((RESULTS / f).is_file() for f in claim.files):
        return Ours()
    return claim.ours([load(f) for f in claim.files])


def row(claim: Claim) -> tuple[Ours, str, str]:
    ours = read(claim)
    label, reason = claim.verdict(ours)
    return ours, label, reason


def link(name: str) -> str:
    return f"[{name}](results/{name})"


def reruns() -> list[str]:
    """The Reruns section: results files rerun from their recorded commands (benchmarks/rerun.py)."""
    if not (RESULTS / "reruns.json").is_file():
        return []
    lines = ["", "## Reruns", "", "Results files rerun from their own recorded command at a later commit, their numbers",
             "compared leaf by leaf with the committed file (`python benchmarks/rerun.py FILE...`,",
             f"{link('reruns.json')}; timings left out).", "",
             "| file | recorded at | rerun at | numbers | result |", "|---|---|---|---:|---|"]
    for r in load("reruns.json")["reruns"]:
        name = r["file"].removeprefix("docs/results/")
        if "error" in r:
            result = "failed: " + r["error"][-1]
        elif r["identical"]:
            result = "**identical**"
        else:
            result = (f"**differs** in {r['differ']:,} of {r['compared']:,} (largest {r['max_abs']:.3g}, "
                      f"{100 * r['max_rel']:.3g}% relative)")
        lines.append(f"| {link(name)} | {(r['recorded_commit'] or '?')[:7]} | {r['commit'][:7]} | "
                     f"{r.get('numbers', 0):,} | {result} |")
    return lines


def ledger() -> str:
    """docs/claims.md, from the results files."""
    rows = [(claim, *row(claim)) for claim in CLAIMS]
    papers = list(dict.fromkeys(c.paper for c in CLAIMS))
    counts = {p: Counter(label for c, _, label, _ in rows if c.paper == p) for p in papers}
    lines = [
        "# The papers' claims: a ledger generated from the results files",
        "",
        "Generated by `python benchmarks/claims.py` from the committed results files under `docs/results/`;",
        "`tests/test_claims.py` fails when a number here differs from its file. Do not edit by hand: change",
        "the claim's declaration in `benchmarks/claims.py` or rerun the study. hpcgym's cell gives the",
        "spread over training seeds as mean ± sd (min..max) and each seed's paired difference to the",
        "paper's baseline with its bootstrap 95% CI where the file has them. A seed holds a claim as the",
        "verdict's reason says; reproduced: every seed, partly: some, not reproduced: none. The paper",
        "pages (docs/dras.md, schedinspector.md, rlbackfilling.md, rlschert.md, irl.md) keep the detail.",
        "",
        "| paper | " + " | ".join(VERDICTS) + " | claims |",
        "|---|" + "---:|" * (len(VERDICTS) + 1),
        *(f"| {p} | " + " | ".join(str(counts[p][v]) for v in VERDICTS) + f" | {sum(counts[p].values())} |"
          for p in papers),
        "",
    ]
    for paper in papers:
        lines += [f"## {paper}", "", "| claim | paper | hpcgym | verdict | budget | file |", "|---|---|---|---|---|---|"]
        for claim, ours, label, reason in rows:
            if claim.paper == paper:
                files = "<br>".join(link(f) for f in claim.files) or "none"
                lines.append(f'| <a id="{claim.key}"></a>{claim.claim} | {claim.figure} | {ours.text} | '
                             f"**{label}**: {reason} | {claim.budget} | {files} |")
        lines.append("")
    lines += ["## Commands", "", "Each results file's commit and command, from its `provenance`.", "",
              "| file | commit | command |", "|---|---|---|"]
    for name in dict.fromkeys(f for c in CLAIMS for f in c.files if (RESULTS / f).is_file()):
        prov = load(name)["provenance"]
        lines.append(f"| {link(name)} | {prov['commit'][:7]} | `{prov['command']}` |")
    lines += reruns()
    open_rows = [(c, label, reason) for c, _, label, reason in rows
                 if label in ("one seed: not a headline", "untestable here", "pending")]
    lines += ["", "## Open work", "", "Rows that are not yet a headline verdict (issue 43 items 1, 7 and 12):", ""]
    lines += [f"- [{c.paper}: {c.claim}](#{c.key}): {label}, {reason}." for c, label, reason in open_rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with docs/claims.md instead of writing it")
    args = parser.parse_args()
    text = ledger()
    if args.check:
        sys.exit(0 if LEDGER.read_text() == text else 1)
    LEDGER.write_text(text)
    print(f"wrote {LEDGER.relative_to(ROOT)}: {len(CLAIMS)} claims")


if __name__ == "__main__":
    main()
