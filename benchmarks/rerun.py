"""Rerun a committed results file from its own record (issue 41): the command its `provenance`
holds, run again from this checkout with every output redirected into a temporary folder, and its
numbers compared with the committed file's, leaf by leaf (timings and provenance left out).

    python benchmarks/rerun.py docs/results/rlbf/public-3seeds/delay-study.json
    python benchmarks/rerun.py FILE... --out runs/rerun --json docs/results/reruns.json

Identical means every number equal to the last digit; otherwise the differing leaves are counted
and the largest absolute and relative difference named, with the first few paths. --json keeps
one entry per file (a file rerun again replaces its entry), each with the commit it reran at;
docs/claims.md lists them.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from paper_runs import HPCGYM, ROOT

from hpcgym.gymbridge.provenance import git_commit, provenance

#: Options whose value is where a command writes: sent to the temporary folder instead.
OUTPUTS = ("--out", "--json", "--markdown", "--windows")
#: Leaves that measure the machine, not the result.
TIMINGS = {"seconds", "setup", "total", "us_per_decision", "tree_us_per_decision", "per_second", "made", "elapsed",
           "train", "distill", "wall_s", "cpu_s"}


def redirected(command: str, folder: Path) -> list[str]:
    """The recorded command with its interpreter and tool made this checkout's and every output
    option pointed into `folder` (one subfolder per option; `--out` added where none is given)."""
    argv = shlex.split(command)
    if not argv:
        raise SystemExit("empty command in provenance")
    argv[0] = {"python": sys.executable, "hpcgym": HPCGYM}.get(argv[0], argv[0])
    seen = False
    for i, arg in enumerate(argv[:-1]):
        if arg in OUTPUTS:
            seen = True
            name = Path(argv[i + 1]).name if arg in ("--json", "--markdown") else ""
            target = folder / arg.lstrip("-") / name if name else folder / arg.lstrip("-")
            target.parent.mkdir(parents=True, exist_ok=True)
            argv[i + 1] = str(target)
    folder.mkdir(parents=True, exist_ok=True)
    return argv if seen else argv + ["--out", str(folder / "out")]


def numbers(data, path: str = "") -> dict[str, float]:
    """Every numeric leaf of a JSON value by its path, without provenance and timings."""
    if isinstance(data, dict):
        return {k: v for key, value in data.items() if key != "provenance" and key not in TIMINGS
                for k, v in numbers(value, f"{path}/{key}").items()}
    if isinstance(data, list):
        return {k: v for i, value in enumerate(data) for k, v in numbers(value, f"{path}[{i}]").items()}
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        return {}
    return {path or "/": float(data)}


def compare(committed: dict, remade: dict, shown: int = 5) -> dict:
    """Leaf-by-leaf comparison: counts, the largest differences and the first differing paths."""
    old, new = numbers(committed), numbers(remade)
    common = sorted(old.keys() & new.keys())
    differ = [k for k in common if not (old[k] == new[k] or (math.isnan(old[k]) and math.isnan(new[k])))]
    absolute = [abs(new[k] - old[k]) for k in differ]
    relative = [abs(new[k] - old[k]) / abs(old[k]) for k in differ if old[k]]
    return {"numbers": len(old), "compared": len(common), "differ": len(differ),
            "missing": sorted(old.keys() - new.keys())[:shown], "extra": sorted(new.keys() - old.keys())[:shown],
            "max_abs": max(absolute, default=0.0), "max_rel": max(relative, default=0.0),
            "examples": [{"path": k, "committed": old[k], "rerun": new[k]} for k in differ[:shown]],
            "identical": not differ and len(common) == len(old) == len(new)}


def found(folder: Path, committed: Path) -> Path:
    """The rerun's counterpart of `committed`: the file of the same name under `folder`, the one
    whose parent folders match the committed path's the furthest where there are several."""
    hits = sorted(folder.rglob(committed.name))
    if not hits:
        raise FileNotFoundError(f"the rerun wrote no {committed.name} under {folder}")

    def shared_tail(hit: Path) -> int:
        n = 0
        for a, b in zip(reversed(hit.parts), reversed(committed.parts)):
            if a != b:
                break
            n += 1
        return n
    return max(hits, key=shared_tail)


def rerun(file: Path, folder: Path) -> dict:
    committed = json.loads(file.read_text())
    record = committed.get("provenance") or {}
    if not record.get("command"):
        raise SystemExit(f"{file}: no provenance command to rerun")
    argv, commit = redirected(record["command"], folder), git_commit()
    start = time.perf_counter()
    print("$", shlex.join(argv), flush=True)
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    result = {"file": str(file.relative_to(ROOT)) if file.is_relative_to(ROOT) else str(file),
              "recorded_commit": record.get("commit"), "commit": commit, "command": record["command"],
              "rerun": shlex.join(argv), "returncode": done.returncode,
              "wall_s": round(time.perf_counter() - start, 1)}
    if done.returncode:
        return {**result, "error": done.stderr.strip().splitlines()[-5:]}
    return {**result, **compare(committed, json.loads(found(folder, file).read_text()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path, help="committed results JSON files with a provenance block")
    parser.add_argument("--out", type=Path, help="folder for the reruns (default: a temporary one, removed)")
    parser.add_argument("--json", type=Path, help="write the comparisons here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcgym-rerun-") as tmp:
        base = args.out or Path(tmp)
        results = []
        for i, file in enumerate(args.files):
            result = rerun(file.resolve(), (base / f"{i}-{file.stem}").resolve())
            results.append(result)
            verdict = ("failed: " + " | ".join(result["error"]) if "error" in result else "identical" if result["identical"]
                       else f"differs: {result['differ']} of {result['compared']} numbers, max abs {result['max_abs']:.6g}, "
                            f"max rel {result['max_rel']:.3g}")
            print(f"{file}: {verdict} ({result['wall_s']} s)", flush=True)
        if args.json:
            kept = json.loads(args.json.read_text())["reruns"] if args.json.is_file() else []
            done = {r["file"] for r in results}
            entries = sorted([r for r in kept if r["file"] not in done] + results, key=lambda r: r["file"])
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"reruns": entries, "provenance": provenance()}, indent=1) + "\n")
    sys.exit(0 if all(r.get("identical") for r in results) else 1)


if __name__ == "__main__":
    main()
