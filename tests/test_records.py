"""Decision records (agents/records.py, `hpcgym record`, `hpcgym compare --record`)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hpcgym.agents.records import DecisionLog, RecordingAgent, load_records
from hpcgym.agents.slots import action_slot, slot_action
from hpcgym.environment.config import SimConfig
from hpcgym.environment.simulator import simulate
from hpcgym.environment.workload import Workload
from hpcgym.gymbridge.cli import main

from .agents_for_tests import HalfClusterInspector, write_trace

HIGH = 1 - 1e-5


def test_an_inspectors_decisions_by_hand():
    """4 processors, FCFS, no backfilling; J1 (3 procs, 100 s) and J2 (1 proc, 10 s) at 0. The
    inspector rejects J1 once (more than half the cluster): nothing runs, so the next look is the
    600 s wake-up, where J1 and then J2 are accepted and start."""
    w = Workload(name="two", procs=4, job_id=np.array([1, 2]), submit=np.array([0, 0]), run=np.array([100, 10]),
                 size=np.array([3, 1]), requested=np.array([100, 10]), user=np.array([1, 1]))
    log = DecisionLog("inspect", "schedinspector")
    agent = RecordingAgent(HalfClusterInspector(), log)
    result = simulate(w, SimConfig(backfill="none"), agents={"inspect": agent})
    agent.on_episode_end(dict(result.summary))
    rows = log.arrays()
    assert rows["time"].tolist() == [0, 600, 600] and rows["action"].tolist() == [1, 0, 0]
    assert rows["queue_length"].tolist() == [2, 2, 1] and rows["episode"].tolist() == [0, 0, 0]
    assert rows["mask"].tolist() == [[1, 1]] * 3 and log.episode == 1
    delay = (10 / 100 + 10 / 10) / 128
    np.testing.assert_allclose(rows["features"][0], np.float32([0, HIGH, 0.75, HIGH, HIGH, 0, delay]), rtol=1e-6)
    np.testing.assert_allclose(rows["features"][1], np.float32([600 / 43200, HIGH, 0.75, HIGH, HIGH, 1 / 72, delay]),
                               rtol=1e-6)
    np.testing.assert_allclose(rows["features"][2], np.float32([600 / 43200, 0.1, 0.25, 0.25, HIGH, 0, 1 / 128]),
                               rtol=1e-6)


@pytest.mark.parametrize("kind, ids, slots", [
    ("select", [5, 7, 9], [0, 1, 2, 4]),      # window 4: slot 4 waits
    ("backfill", [5, 7, 9], [0, 2, 4]),       # slot 4 stops
    ("kill", [5, 7], [0, 1, 2]),              # slot 0 kills nothing
    ("inspect", [], [0, 1]),
])
def test_action_slot_inverts_slot_action(kind, ids, slots):
    for slot in slots:
        assert action_slot(kind, slot_action(kind, slot, ids, 4), ids, 4) == slot
    if kind == "select":
        assert action_slot(kind, [5, 7], ids, 4) == -1 and action_slot(kind, [], ids, 4) == 4


def test_env_side_records_equal_in_process_records(tmp_path):
    """The same inspector recorded in process and over the protocol (env-side, as an agent in any
    language would be) gives the same rows."""
    trace = write_trace(tmp_path / "t.swf", jobs=80, procs=32, seed=3)
    files = {}
    for mode in ("inproc", "protocol"):
        out = tmp_path / mode
        args = ["compare", "--trace", str(trace), "--jobs", "40", "--samples", "2", "--workers", "1", "--no-plots",
                "--policy", "h=inspect:tests.agents_for_tests:HalfClusterInspector", "--record", "inspect:schedinspector",
                "--out", str(out)] + (["--inproc"] if mode == "inproc" else [])
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        files[mode] = [load_records(out / "units" / "h" / f"seq-00{k}.records.npz") for k in range(2)]
    for (local, meta), (remote, _) in zip(files["inproc"], files["protocol"]):
        assert meta["episodes"] == 1 and len(local["action"]) > 0 and (local["action"] == 1).any()
        for column in local:
            np.testing.assert_array_equal(local[column], remote[column])


def test_hpcgym_record_merges_the_sequences(tmp_path):
    trace = write_trace(tmp_path / "t.swf", jobs=80, procs=32, seed=3)
    out = tmp_path / "rec.npz"
    result = CliRunner().invoke(main, ["record", "inspect:tests.agents_for_tests:HalfClusterInspector", "--kind",
                                       "inspect", "--trace", str(trace), "--jobs", "30", "--samples", "3",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    columns, meta = load_records(out)
    assert meta["episodes"] == 3 and len(meta["metrics"]) == 3
    assert sorted(set(columns["episode"].tolist())) == [0, 1, 2]
    assert columns["features"].shape[1] == 8 * 128 + 12    # jobs+nodes: 8 columns x 128 rows, 12 horizons


@pytest.mark.parametrize("args, words", [
    (["sjf", "--kind", "inspect"], "no agent taking inspect"),
    (["inspect:tests.agents_for_tests:HalfClusterInspector", "--kind", "select", "--encoder", "schedinspector"],
     "reads inspect decisions only"),
    (["sjf", "--kind", "nope"], "unknown decision kind"),
])
def test_bad_record_requests_are_one_line(tmp_path, args, words):
    result = CliRunner().invoke(main, ["record", *args, "--out", str(tmp_path / "r.npz")])
    assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output
    assert not (tmp_path / "r.npz").exists()


def test_a_file_that_is_not_records_is_refused(tmp_path):
    from hpcgym.environment.errors import HpcgymError

    np.savez(tmp_path / "other.npz", x=np.arange(3))
    with pytest.raises(HpcgymError, match="not a decision records file"):
        load_records(tmp_path / "other.npz")


def test_record_finds_a_bare_trace_name_in_hpcgym_traces(tmp_path, monkeypatch):
    """`hpcgym record --trace NAME` looks NAME up in $HPCGYM_TRACES like every other command
    (issue 28: docs/schedinspector.md's record command failed with "trace ... not found")."""
    folder = tmp_path / "traces"
    folder.mkdir()
    write_trace(folder / "mine.swf", jobs=40, procs=32, seed=3)
    monkeypatch.setenv("HPCGYM_TRACES", str(folder))
    result = CliRunner().invoke(main, ["record", "inspect:tests.agents_for_tests:HalfClusterInspector", "--kind",
                                       "inspect", "--trace", "mine.swf", "--jobs", "20", "--samples", "1",
                                       "--out", str(tmp_path / "rec.npz")])
    assert result.exit_code == 0, result.output
    assert load_records(tmp_path / "rec.npz")[1]["episodes"] == 1
