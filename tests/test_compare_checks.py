"""`hpcgym compare` refuses what would fail in every unit before any unit runs (issue 45,
friction 6): a checkpoint asked for decision kinds it does not take, and a model policy where
torch is not installed. Each is one line and exit status 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hpcgym.gymbridge.cli import main

from .test_compare import write_trace


def compare(tmp_path: Path, policy: str):
    trace = write_trace(tmp_path / "trace.swf", n_jobs=40)
    return CliRunner().invoke(main, ["compare", "--trace", str(trace), "--jobs", "20", "--samples", "2",
                                     "--no-plots", "--out", str(tmp_path / "out"), "--policy", "fcfs",
                                     "--policy", policy])


@pytest.fixture
def select_checkpoint(tmp_path) -> Path:
    """A checkpoint header of a select model (no weights: compare reads only the header here)."""
    pytest.importorskip("torch")
    from hpcgym.agents.rl.checkpoint import Checkpoint, save_checkpoint

    return save_checkpoint(tmp_path / "select.pt", Checkpoint("ppo", {}, (4,), 2, kind="select", encoder="jobs",
                                                                window=16))


def test_a_checkpoint_of_another_kind_is_refused_up_front(tmp_path, select_checkpoint):
    result = compare(tmp_path, f"m=inspect:model:{select_checkpoint}")
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1, result.output
    assert f"{select_checkpoint} takes select decisions, not inspect" in result.output
    assert f"model:{select_checkpoint} (its own kinds)" in result.output
    assert not (tmp_path / "out").exists()


def test_a_model_policy_without_torch_is_refused_up_front(tmp_path, monkeypatch):
    import hpcgym.agents

    (tmp_path / "m.pt").write_bytes(b"whatever")
    for name in [m for m in sys.modules if m.startswith("hpcgym.agents.rl")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(hpcgym.agents, "rl", None, raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails, as in the light install
    result = compare(tmp_path, f"m=model:{tmp_path / 'm.pt'}")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "needs the rl extra" in result.output and "pip install -e '.[rl]'" in result.output


def test_a_ray_cluster_it_cannot_join_is_one_line_naming_token_authentication(tmp_path, monkeypatch):
    """`--executor ray --address` where ray.init fails (here: as a `ray start` cluster with token
    authentication refuses a client without it): one line saying what to set, exit 2, not Ray's
    traceback (issue 45, friction 3)."""
    ray = pytest.importorskip("ray")

    def refuse(**kwargs):
        raise ConnectionError("Failed to connect to GCS at address 10.0.0.1:6379\nmore lines of Ray's")

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    trace = write_trace(tmp_path / "trace.swf", n_jobs=40)
    result = CliRunner().invoke(main, ["compare", "--trace", str(trace), "--jobs", "20", "--samples", "1",
                                       "--no-plots", "--out", str(tmp_path / "out"), "--policy", "fcfs",
                                       "--executor", "ray", "--address", "10.0.0.1:6379"])
    assert result.exit_code == 2, result.output
    said = [line for line in result.output.splitlines() if not line.startswith("compare: ")]  # but progress
    assert len(said) == 1, result.output
    assert "cannot join the Ray cluster at 10.0.0.1:6379: Failed to connect to GCS" in result.output
    assert "export RAY_AUTH_MODE=token" in result.output
