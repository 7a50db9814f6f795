"""Train a paper's agent briefly with `hpcgym train`, then serve its checkpoint with `hpcgym env`
and `hpcgym agent --model` as real processes over ipc://, and compare with the same agent in
process (shared by the SchedInspector and RL backfilling tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from .agents_for_tests import write_trace


def train_small(tmp_path: Path, algorithm: str, jobs: int, *flags: str) -> tuple[Path, Path]:
    """A 200-job trace and a 1-epoch `hpcgym train ALGORITHM` on it: (trace, checkpoint)."""
    from hpcgym.gymbridge.cli import main

    trace = write_trace(tmp_path / "t.swf", jobs=200, procs=32, seed=4)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", algorithm, "--trace", str(trace), "--jobs", str(jobs), "--epochs", "1",
                                       "--trajectories", "4", "--envs", "2", "--out", str(out),
                                       "--eval-episodes", "0", "--no-progress", *flags])
    assert result.exit_code == 0, result.output
    return trace, out / "model.pt"


def served_summary(trace: Path, model: Path, ipc_dir: Path, env_flags: list[str], jobs: int, sample: int,
                   sampling_seed: int) -> dict[str, Any]:
    """The summary of one episode of the seeded sampling agent served over ipc://."""
    hpcgym = [str(Path(sys.executable).parent / "hpcgym")]
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = subprocess.Popen([*hpcgym, "env", "--bind", bind, "--trace", str(trace), *env_flags],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        served = subprocess.run([*hpcgym, "agent", "--model", str(model), "--sampling", "--sampling-seed",
                                 str(sampling_seed), "--connect", bind, "--jobs", str(jobs), "--sample", str(sample),
                                 "--json", "--timeout", "30"], capture_output=True, text=True, timeout=120)
        assert served.returncode == 0, served.stderr
        line = json.loads(served.stdout.strip().splitlines()[-1])
        return {k: v for k, v in line.items() if k not in ("episode", "reason")}
    finally:
        env.kill()
        env.wait(timeout=10)
