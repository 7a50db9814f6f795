"""The command line is deterministic: the same `hpcgym run` twice writes byte-identical per-job CSV
files, for the generated default workload and for an SWF trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcgym.environment.config import SimConfig
from hpcgym.environment.simulator import simulate
from hpcgym.environment.swf import read_swf
from hpcgym.gymbridge.cli import main

# A small SWF trace: 8 processors, ties in submit times, a job overrunning its request (id 4)
# and one with no request (id 6, -1: falls back to its run time). Job ids are not in order.
SMALL_SWF = """\
; Version: 2.2
; Computer: determinism test
; MaxProcs: 8
12 0 -1 100 4 -1 -1 4 120 -1 1 1 -1 -1 -1 -1 -1 -1
3 0 -1 50 6 -1 -1 6 60 -1 1 2 -1 -1 -1 -1 -1 -1
7 0 -1 30 2 -1 -1 2 30 -1 1 1 -1 -1 -1 -1 -1 -1
4 5 -1 200 3 -1 -1 3 90 -1 1 3 -1 -1 -1 -1 -1 -1
9 5 -1 10 8 -1 -1 8 20 -1 1 2 -1 -1 -1 -1 -1 -1
6 5 -1 40 1 -1 -1 1 -1 -1 1 1 -1 -1 -1 -1 -1 -1
1 60 -1 25 5 -1 -1 5 400 -1 1 4 -1 -1 -1 -1 -1 -1
2 60 -1 5 1 -1 -1 1 5 -1 1 4 -1 -1 -1 -1 -1 -1
"""


def run_twice(tmp_path: Path, args: list[str]) -> tuple[bytes, bytes]:
    runner = CliRunner()
    outputs = []
    for k in (1, 2):
        out = tmp_path / f"jobs{k}.csv"
        result = runner.invoke(main, ["run", *args, "--jobs-out", str(out)])
        assert result.exit_code == 0, result.output
        outputs.append(out.read_bytes())
    return outputs[0], outputs[1]


def test_default_workload_csv_is_byte_identical(tmp_path):
    first, second = run_twice(tmp_path, ["--jobs", "2000"])
    assert first == second
    assert len(first.splitlines()) == 2001  # header + 2000 jobs


@pytest.mark.parametrize("options", [
    [],
    ["--policy", "random", "--estimate", "noisy:0.3", "--seed", "7"],
    ["--backfill", "conservative", "--overrun", "kill", "--policy", "wfp3"],
    ["--backfill", "none", "--policy", "lcfs", "--estimate", "actual"],
], ids=["defaults", "random-noisy-seed7", "conservative-kill-wfp3", "none-lcfs-actual"])
def test_swf_csv_is_byte_identical(tmp_path, options):
    trace = tmp_path / "small.swf"
    trace.write_text(SMALL_SWF)
    first, second = run_twice(tmp_path, ["--trace", str(trace), *options])
    assert first == second
    assert len(first.splitlines()) == 9
    # And the CLI writes what an in-process simulation of the same trace writes.
    opts = dict(zip(options[::2], options[1::2]))
    config = SimConfig(backfill=opts.get("--backfill", "easy"), estimate=opts.get("--estimate", "requested"),
                       overrun=opts.get("--overrun", "run"), seed=int(opts.get("--seed", 0)))
    direct = tmp_path / "direct.csv"
    simulate(read_swf(trace), config, policy=opts.get("--policy", "fcfs")).write_jobs_csv(direct)
    assert direct.read_bytes() == first
