"""Full-trace schedules, job for job, against a stored reference: a guard for refactoring.

The reference in tests/data/ is this simulator's own output, recorded before the backfilling code
was rewritten for speed (commit 531a04a). Storing a program's own output is no proof that it is
right (the hand-worked tests and the textbook replay of test_fidelity.py are); it proves only that
a refactoring changed no start time and no start kind of any job on whole real traces.

    python -m tests.schedule_regression --check           # every case, against the reference
    python -m tests.schedule_regression --write           # re-record (only for an intended change)

Small cases keep their arrays (tests/data/schedules.npz); all cases keep a sha256 of them
(tests/data/schedule_digests.json), so big traces are checked without storing megabytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from hpcgym.environment.config import SimConfig
from hpcgym.environment.simulator import simulate
from hpcgym.environment.swf import read_swf

DATA = Path(__file__).resolve().parent / "data"
ARRAYS = DATA / "schedules.npz"
DIGESTS = DATA / "schedule_digests.json"


class Case(NamedTuple):
    trace: str
    backfill: str
    policy: str = "fcfs"
    procs: int | None = None  # None: the header's; fewer processors overload the trace
    overrun: str = "run"
    estimate: str = "requested"

    @property
    def key(self) -> str:
        procs = f"@{self.procs}" if self.procs else ""
        return f"{self.trace}{procs}/{self.backfill}/{self.policy}/{self.overrun}/{self.estimate}"


KTH, SDSC, CTC, HPC2N, LUBLIN = ("KTH-SP2-1996-2.1-cln", "SDSC-SP2-1998-4.2-cln", "CTC-SP2-1996-3.1-cln",
                                 "HPC2N-2002-2.2-cln", "lublin_256")

#: Cases the unit test replays (whole traces, a few seconds each once backfilling is fast); their
#: arrays are stored, so a failure names the first job that moved.
TEST_CASES = (
    Case(KTH, "easy"), Case(KTH, "conservative"), Case(KTH, "none"),
    Case(KTH, "conservative", "sjf"), Case(KTH, "conservative", "wfp3"),
    Case(KTH, "conservative", overrun="kill"), Case(KTH, "conservative", estimate="noisy:0.3"),
    Case(KTH, "easy", "wfp3"), Case(LUBLIN, "conservative"), Case(LUBLIN, "easy", "sjf"),
    Case(SDSC, "easy", procs=64),
)
#: Further cases checked by digest only, from this script (minutes).
SLOW_CASES = (
    Case(SDSC, "easy"), Case(SDSC, "conservative"), Case(SDSC, "conservative", "sjf"),
    Case(CTC, "easy"), Case(CTC, "conservative"), Case(HPC2N, "easy"), Case(SDSC, "easy", "sjf", procs=64),
    Case(KTH, "easy", procs=50), Case(KTH, "conservative", procs=50), Case(HPC2N, "conservative"),
)


def schedule(traces: Path, case: Case) -> np.ndarray:
    """Start time and start kind of every job, in the workload's job order, as one int64 (2, n)."""
    workload = read_swf(traces / f"{case.trace}.swf.gz", procs=case.procs)
    config = SimConfig(backfill=case.backfill, overrun=case.overrun, estimate=case.estimate)
    jobs = simulate(workload, config, policy=case.policy).jobs
    return np.stack([np.asarray(jobs["start"], dtype=np.int64), np.asarray(jobs["start_kind"], dtype=np.int64)])


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype="<i8").tobytes()).hexdigest()


def first_difference(got: np.ndarray, want: np.ndarray) -> str:
    """A line naming the first job whose start or start kind differs."""
    if got.shape != want.shape:
        return f"{got.shape[1]} jobs scheduled, the reference has {want.shape[1]}"
    bad = np.flatnonzero((got != want).any(axis=0))
    j = int(bad[0])
    return (f"{len(bad)} job(s) differ; first at position {j}: start {got[0, j]} kind {got[1, j]}, "
            f"reference start {want[0, j]} kind {want[1, j]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the reference from this code")
    parser.add_argument("--check", action="store_true", help="compare this code with the reference")
    parser.add_argument("--quick", action="store_true", help="only the unit test's cases")
    parser.add_argument("--slow", action="store_true", help="only the cases the unit test leaves out")
    parser.add_argument("--traces", type=Path, default=None, help="trace folder (default: the tests')")
    args = parser.parse_args(argv)
    if args.write == args.check:
        parser.error("give exactly one of --write or --check")
    from tests.conftest import locate_traces

    traces = args.traces or locate_traces()
    if traces is None:
        parser.error("trace folder not found: set HPCGYM_TRACES or pass --traces")
    cases = TEST_CASES if args.quick else SLOW_CASES if args.slow else TEST_CASES + SLOW_CASES
    digests = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}
    arrays = dict(np.load(ARRAYS)) if ARRAYS.exists() else {}
    failed = 0
    for case in cases:
        t0 = time.perf_counter()
        got = schedule(traces, case)
        took = time.perf_counter() - t0
        if args.write:
            digests[case.key] = digest(got)
            if case in TEST_CASES:
                arrays[case.key] = got
            DATA.mkdir(exist_ok=True)  # saved case by case: the slowest may be cut short
            DIGESTS.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
            np.savez_compressed(ARRAYS, **arrays)
            status = "recorded"
        elif case.key not in digests:
            status = "no reference"
        elif digest(got) == digests[case.key]:
            status = "same"
        else:
            failed += 1
            status = "DIFFERENT" + (f": {first_difference(got, arrays[case.key])}" if case.key in arrays else "")
        print(f"{case.key:<60} {took:7.2f} s  {status}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
