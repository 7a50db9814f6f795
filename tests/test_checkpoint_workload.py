"""A run carries its workload: `WorkloadSpec` as one typed value, a checkpoint's training
workload read back from it, and RL backfilling's delay study evaluating its agents on that
workload (issue 41: it once rebuilt the workload by hand and dropped the cleaning and the first
10,000 jobs, so every `scw` row described windows the agents were never trained on)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from hpcgym.environment.errors import ConfigError
from hpcgym.environment.sequences import window
from hpcgym.environment.spec import WORKLOAD_KEYS, WorkloadSpec
from hpcgym.environment.swf import read_swf

ROOT = Path(__file__).resolve().parents[1]
E120 = ROOT / "docs" / "results" / "rlbf" / "scw-unguarded-relative" / "e120"
SP2 = "SDSC-SP2-1998-4.2-cln.swf.gz"


def test_a_workload_spec_is_checked_as_a_resets_workload_map_is():
    with pytest.raises(ConfigError, match="jobs must be at least 1"):
        WorkloadSpec(jobs=0)
    with pytest.raises(ConfigError, match="unknown workload key"):
        WorkloadSpec.from_dict({"jobz": 3})
    with pytest.raises(ConfigError, match="wrong type"):
        WorkloadSpec.from_dict({"jobs": "many"})
    with pytest.raises(ConfigError, match="first_jobs limits where random windows start"):
        WorkloadSpec(jobs=8, start=0, first_jobs=100)
    assert list(WORKLOAD_KEYS) == [f for f in WorkloadSpec.__dataclass_fields__]


def test_another_window_keeps_the_job_source_and_says_what_it_changed():
    trained = WorkloadSpec.from_dict({"trace": SP2, "cleaning": "rlbf-scw", "jobs": 256, "sample": True,
                                      "first_jobs": 10_000})
    sampled = trained.with_window(jobs=1024, sample=7)
    assert sampled.to_dict() == {"trace": SP2, "cleaning": "rlbf-scw", "jobs": 1024, "sample": 7,
                                 "first_jobs": 10_000}
    fixed = trained.with_window(jobs=1024, start=1981)  # first_jobs limits random windows only
    assert fixed.to_dict() == {"trace": SP2, "cleaning": "rlbf-scw", "jobs": 1024, "start": 1981}
    assert fixed.changes_from(trained) == ("jobs: 256 -> 1024, start: (unset) -> 1981, sample: True -> (unset), "
                                           "first_jobs: 10000 -> (unset)")
    assert trained.changes_from(trained) == ""
    with pytest.raises(ConfigError, match="unknown window key"):
        trained.with_window(cleaning="hpcgym")


def test_a_per_episode_sample_draws_each_episodes_own_window():
    spec = WorkloadSpec(jobs=64, sample=True, generate_jobs=2_000)
    assert spec.for_episode(5)["sample"] == 5
    assert not np.array_equal(spec.load(1).submit, spec.load(2).submit)
    assert np.array_equal(spec.load(3).submit, WorkloadSpec(jobs=64, sample=3, generate_jobs=2_000).load(3).submit)


def _delay_study():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import rlbf_eval

    return rlbf_eval


def test_the_delay_study_cuts_its_windows_from_the_checkpoints_training_workload(traces_dir, monkeypatch):
    """The e120 agents were trained on the first 10,000 SDSC-SP2 jobs with `rlbf-scw` cleaning:
    with no workload flag, every window of the study comes from there, cancelled jobs kept."""
    pytest.importorskip("torch")
    from hpcgym.agents.rl.checkpoint import load_checkpoint

    monkeypatch.setenv("HPCGYM_TRACES", str(traces_dir))  # the checkpoint names the trace where it was trained
    checkpoint = load_checkpoint(E120 / "s0" / "model.pt")
    pool = read_swf(traces_dir / SP2, cleaning="rlbf-scw").take(slice(0, 10_000))
    textbook = set(read_swf(traces_dir / SP2).job_id.tolist())
    study = _delay_study()
    for spec in study.study_windows(checkpoint, 1024, list(range(5))):
        jobs = study.WORKLOADS.load(spec.to_dict())
        start = int(np.flatnonzero(pool.job_id == jobs.job_id[0])[0])  # fails if the job is not in the pool
        expected = window(pool, 1024, start)
        assert np.array_equal(jobs.job_id, expected.job_id) and np.array_equal(jobs.run, expected.run)
        assert set(jobs.job_id.tolist()) - textbook, "no cancelled job kept: not rlbf-scw cleaning"


@pytest.mark.slow  # the agent decides every backfill of 10 windows of 1,024 jobs
def test_the_delay_studys_paper_windows_give_the_papers_easy(traces_dir, monkeypatch):
    """On the paper's 10 windows the study's EASY column is Table 4's FCFS+EASY for SDSC-SP2,
    1,595.11 (the RL backfilling paper; docs/fidelity.md's ladder step L4)."""
    pytest.importorskip("torch")
    monkeypatch.setenv("HPCGYM_TRACES", str(traces_dir))
    study = _delay_study()
    args = type("Args", (), {"jobs": 1024})()
    totals = study.reservation_delays(args, "fcfs", E120 / "s0" / "model.pt", "paper")
    assert totals["episodes"] == 10 and len(totals["bsld_rl"]) == 10
    assert abs(totals["mean_bsld_easy"] - 1595.11) < 0.01
    assert totals["mean_bsld_rl"] == pytest.approx(float(np.mean(totals["bsld_rl"])))


@pytest.mark.slow  # the agent decides every backfill of 10 windows of 1,024 jobs
def test_the_delay_study_plays_an_sjf_agent_on_its_own_base(traces_dir, monkeypatch):
    """An agent trained on an SJF base is measured against SJF+EASY: on the paper's windows Table
    4's SJF+EASY for SDSC-SP2, 2,167.83 to the paper's truncated digits (docs/fidelity.md step L4;
    FCFS's 1,595.11 before the study read the base from the checkpoint)."""
    pytest.importorskip("torch")
    monkeypatch.setenv("HPCGYM_TRACES", str(traces_dir))
    args = type("Args", (), {"jobs": 1024})()
    agent = ROOT / "docs/results/rlbf/agents/rlbf-SDSC-SP2-1998-4.2-cln-sjf-scw/model.pt"
    totals = _delay_study().reservation_delays(args, None, agent, "paper")
    assert abs(totals["mean_bsld_easy"] - 2167.83) < 0.01


def test_compare_names_what_differs_from_a_models_training_workload(traces_dir, monkeypatch):
    """Every policy of a comparison plays the comparison's sequences; a checkpoint trained on other
    jobs gets one line naming the difference, and none when the jobs are the same kind."""
    pytest.importorskip("torch")
    from hpcgym.gymbridge.compare.command import _trained_elsewhere
    from hpcgym.gymbridge.compare.plan import SequenceSpec
    from hpcgym.gymbridge.compare.policy import parse_policy

    monkeypatch.setenv("HPCGYM_TRACES", str(traces_dir))
    policies = [parse_policy(f"rl=fcfs,preset:rlbf-scw,backfill:model:{E120 / 's0' / 'model.pt'}")]
    whole = SequenceSpec(trace=str(traces_dir / SP2), jobs=256, samples=3)
    [line] = _trained_elsewhere(policies, whole)
    assert "'rl'" in line and "cleaning: rlbf-scw -> hpcgym" in line and "first_jobs: 10000 -> (unset)" in line
    own = SequenceSpec(trace=SP2, jobs=256, samples=3, cleaning="rlbf-scw", first_jobs=10_000)
    assert _trained_elsewhere(policies, own) == []
