"""What the papers' evaluation scripts share: run `hpcgym` commands (printed first), read a
`hpcgym compare` summary and its units, time training epochs from a curve.csv, and record the
provenance of their results (commit, command, options, the checkpoints read)."""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from hpcgym.gymbridge.compare.stats import bootstrap_ci
from hpcgym.gymbridge.provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
_local = Path(sys.executable).parent / "hpcgym"
HPCGYM = str(_local) if _local.exists() else "hpcgym"
TRACES_DIR = ROOT.parent / "shared" / "traces"
#: The summary.csv columns an evaluation reads for each policy.
SUMMARY_KEYS = ("mean_bsld_mean", "mean_bsld_diff", "mean_bsld_ci_low", "mean_bsld_ci_high", "mean_bsld_win_rate",
                "mean_wait_mean", "max_wait_mean", "utilization_mean", "utilization_diff", "utilization_ci_low",
                "utilization_ci_high", *(f"{m}_{k}" for m in ("mean_slowdown", "mean_response")
                                         for k in ("mean", "diff", "ci_low", "ci_high")))


#: Checkpoints and trees this process's evaluations loaded: their hashes go into the results' provenance.
LOADED: list[str] = []
#: A checkpoint or tree in a compare policy item (`model:PATH`, `tree:PATH`, `online:PATH`).
CHECKPOINT_ITEM = re.compile(r"(?:model|tree|online):([^,]+)")


def loaded(path: Path) -> Path:
    """`path`, noted as read by this evaluation (for an agent it loads in process)."""
    LOADED.append(str(path))
    return path


def results_provenance(args: argparse.Namespace) -> dict:
    """The provenance block of an evaluation's results: commit, command, its options and the
    checkpoints it read."""
    def plain(value):
        if isinstance(value, list):
            return [plain(v) for v in value]
        return str(value) if isinstance(value, Path) else value

    return provenance({k: plain(v) for k, v in vars(args).items()}, LOADED)


def run(cmd: list[str], check: bool = True) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=check, cwd=ROOT)


def compare(folder: Path, trace: Path, policies: dict[str, str], seed: int, samples: int, jobs: int,
            *extra: str, failures: bool = False) -> dict[str, dict[str, float | None]]:
    """Run (or resume) `hpcgym compare` of `policies` on `samples` windows of `trace` and return
    each finished policy's mean metrics and paired differences to the first policy; `failures`:
    a policy that fails a window (compare then exits 1) is expected, not an error."""
    cmd = [HPCGYM, "compare", "--trace", str(trace), "--jobs", str(jobs), "--samples", str(samples), "--seed",
           str(seed), "--inproc", "--no-plots", "--out", str(folder), *extra]
    for name, spec in policies.items():
        cmd += ["--policy", f"{name}={spec}"]
        LOADED.extend(CHECKPOINT_ITEM.findall(spec))
    run(cmd + (["--resume"] if (folder / "run.json").is_file() else []), check=not failures)
    with open(folder / "summary.csv", newline="") as f:
        rows = {r["policy"]: r for r in csv.DictReader(f)}
    return {name: {key: _num(rows[name].get(key)) for key in SUMMARY_KEYS}
            for name in policies if rows[name]["status"] == "ok"}


def unit_summaries(folder: Path, name: str) -> list[dict | None]:
    """Per window of policy `name` in a `hpcgym compare` folder, in window order: its run's
    metrics, or None where the unit failed (summary.csv then leaves the policy out)."""
    return [None if unit.name.endswith(".error.json") else json.loads(unit.read_text())["summary"]
            for unit in sorted((folder / "units" / name).glob("seq-*.json"))]


def _num(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def epoch_seconds(folder: Path) -> tuple[int, float]:
    """Epochs trained in `folder` and the mean seconds per epoch, from its curve.csv."""
    with open(folder / "curve.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return len(rows), sum(float(r["seconds"]) for r in rows) / max(len(rows), 1)


def argument_parser(doc: str, out: str, epochs: int, samples: int, jobs: int, seeds: str,
                    traces: list[str]) -> argparse.ArgumentParser:
    """The options every paper evaluation takes: where agents are and results go, training of
    missing agents, and the sequences compared."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=ROOT / "runs")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / out)
    parser.add_argument("--train", action="store_true", help="Train missing agents first.")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--samples", type=int, default=samples)
    parser.add_argument("--jobs", type=int, default=jobs)
    parser.add_argument("--seeds", default=seeds, help="First seed of each disjoint seed set.")
    parser.add_argument("--traces", default=",".join(traces))
    return parser


def spread(values: list[float], number: str = ".2f") -> str:
    """`mean ± sd (min..max)` of the values over training seeds (or the one value), each formatted
    with `number`."""
    if len(values) == 1:
        return f"{values[0]:{number}}"
    return (f"{statistics.mean(values):{number}} ± {statistics.stdev(values):{number.lstrip('+')}} "
            f"({min(values):{number}}..{max(values):{number}})")


def paired(values, reference) -> dict[str, float | int]:
    """values - reference, paired by window (windows where either is NaN left out): the mean and its
    bootstrap 95% CI (10,000 resamples, seed 7, as every study here)."""
    d = np.asarray(values, dtype=float) - np.asarray(reference, dtype=float)
    d = d[~np.isnan(d)]
    low, high = bootstrap_ci(d, 10_000, 7)
    return {"mean": float(d.mean()), "ci_low": low, "ci_high": high, "pairs": int(len(d))}


def chosen(parser: argparse.ArgumentParser, option: str, text: str, known) -> list[str]:
    """The comma-separated names of `text`, each checked against `known` (a typo would otherwise
    silently leave its rows out)."""
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in known]
    if unknown:
        parser.error(f"{option}: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    return names
