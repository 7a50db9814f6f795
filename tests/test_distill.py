"""Distilling agents into trees (IRL, seed paper 004): DAgger reaches an exact shallow tree for a
teacher whose rule a tree can express, the critical-state filter, the tree file round trip, a tree
served over ipc://, and one clear line for each bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from hpcgym.agents.base import PriorityAgent
from hpcgym.agents.candidates import CandidateFeatures
from hpcgym.agents.distill import AgentTeacher, Samples, dagger, fit_tree, rollout
from hpcgym.agents.encoders import get_encoder
from hpcgym.agents.records import DecisionLog
from hpcgym.agents.tree import TreeAgent, load_tree
from hpcgym.environment.config import SimConfig
from hpcgym.environment.errors import HpcgymError
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload, sim_config
from hpcgym.environment.swf import read_swf
from hpcgym.gymbridge.cli import main
from hpcgym.gymbridge.distill.program_teacher import ProgramTeacher

from .agents_for_tests import write_trace
from .test_rl import HPCGYM, ROOT

pytest.importorskip("sklearn")
WINDOW = 20


def sjf_setup(window: int = WINDOW):
    teacher = AgentTeacher(PriorityAgent("sjf"), window)
    features = CandidateFeatures(get_encoder("jobs+nodes", window), ("select",), window)
    meta = {"kinds": ["select"], "encoder": "jobs+nodes", "window": window, "procs": None,
            "features": features.names, "relative": True}
    return teacher, features, meta


def test_dagger_on_an_sjf_teacher_reaches_full_agreement_with_a_depth_one_tree(traces_dir):
    """Shortest job first is one test on the rank of the requested time among the candidates, so
    a depth-1 tree can be exact: every held-out decision agrees and the schedule is SJF's."""
    jobs = read_swf(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz")
    train, test = jobs.take(slice(0, 600)), jobs.take(slice(600, 900))
    teacher, features, meta = sjf_setup()
    config = SimConfig(window=WINDOW)
    steps = dagger(teacher, features, train, test, config, "fcfs", depth=1, iterations=2, critical=3,
                   mode="classification", meta=meta)
    last = steps[-1]
    assert last.tree.node_count == 3 and last.tree.features[last.tree.feature[0]] == "requested-rank"
    assert last.test.choice > 100                       # many decisions had a real choice ...
    assert last.test.agreed == last.test.taught          # ... and the tree agreed on every one
    sjf = simulate(test, config, agents={"select": PriorityAgent("sjf")})
    assert last.test.summary == sjf.summary
    assert last.test.summary != simulate(test, config).summary   # not FCFS: the choice mattered


def test_a_teacher_program_over_the_protocol_teaches_what_the_same_rule_teaches_in_process(traces_dir):
    """DAgger with a teacher in another process: the tree drives, the program's answers are the
    labels. WFP3 mixes wait, size and request, so a depth-2 tree cannot copy it exactly and its
    disagreements show the labels are the program's, not the tree's own choices."""
    jobs = read_swf(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz")
    train, test = jobs.take(slice(0, 400)), jobs.take(slice(400, 600))
    _, features, meta = sjf_setup()
    config = SimConfig(window=WINDOW)
    program = ProgramTeacher(f"{sys.executable} -m hpcgym.gymbridge.compare.agent_process wfp3 --connect {{addr}} "
                             "--kinds select --timeout 30", ("select",), WINDOW)
    runs = [dagger(teacher, features, train, test, config, "fcfs", depth=2, iterations=1, critical=3,
                   mode="classification", meta=meta)[-1]
            for teacher in (AgentTeacher(PriorityAgent("wfp3"), WINDOW), program)]
    in_process, over_protocol = runs
    assert 0 < in_process.test.agreed < in_process.test.taught      # the tree is not the teacher
    for a, b in [(in_process.tree.feature, over_protocol.tree.feature),
                 (in_process.tree.threshold, over_protocol.tree.threshold)]:
        assert np.array_equal(a, b)
    assert (over_protocol.test.taught, over_protocol.test.agreed) == (in_process.test.taught, in_process.test.agreed)
    assert over_protocol.test.summary == in_process.test.summary


def test_the_critical_state_filter_keeps_exactly_the_decisions_above_the_threshold():
    samples = Samples()
    for q in (1, 3, 4, 7, 3, 10):   # one row per decision, its value its queue length
        samples.add(np.array([[q]], np.float32), np.array([q]), q)
    x, y = samples.arrays(critical=3)
    assert y.tolist() == [4, 7, 10] and x[:, 0].tolist() == [4, 7, 10]
    assert samples.arrays()[1].tolist() == [1, 3, 4, 7, 3, 10]
    with pytest.raises(HpcgymError, match="no decision with a queue longer than 10"):
        fit_tree(samples, 2, "regression", 10, 0, {})


def test_a_saved_tree_reloads_to_identical_decisions(tmp_path, traces_dir):
    jobs = read_swf(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz").take(slice(0, 500))
    teacher, features, meta = sjf_setup()
    data = rollout(jobs, SimConfig(window=WINDOW), "fcfs", teacher, features, "classification").samples
    tree = fit_tree(data, 6, "classification", None, 0, meta)
    loaded = load_tree(tree.save(tmp_path / "t.npz"))
    x, _ = data.arrays()
    assert np.array_equal(loaded.predict(x), tree.predict(x)) and loaded.meta == tree.meta
    config = SimConfig(window=WINDOW)
    assert simulate(jobs, config, agents={"select": TreeAgent(loaded)}).jobs["start"].tolist() == \
        simulate(jobs, config, agents={"select": TreeAgent(tree)}).jobs["start"].tolist()


def test_numpy_predictions_equal_scikit_learns():
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(1)
    x = rng.random((400, 5)).astype(np.float32)
    y = x[:, 0] * 3 - x[:, 2] + rng.normal(0, 0.1, 400)
    est = DecisionTreeRegressor(max_depth=7, random_state=0).fit(x, y)
    from hpcgym.agents.tree import TreeModel

    tree = TreeModel.from_sklearn(est, {"mode": "regression"})
    probe = rng.random((1000, 5)).astype(np.float32)
    assert np.array_equal(tree.predict(probe), est.predict(probe))


def test_a_tree_served_over_ipc_gives_the_in_process_schedule(tmp_path, ipc_dir):
    trace = write_trace(tmp_path / "t.swf", jobs=300, procs=32, seed=3)
    workload = read_swf(trace)
    teacher, features, meta = sjf_setup(128)
    data = rollout(workload.take(slice(0, 200)), SimConfig(), "fcfs", teacher, features, "classification").samples
    path = fit_tree(data, 4, "classification", 3, 0, meta).save(tmp_path / "tree.npz")
    seed = 4
    spec = {"trace": str(trace), "jobs": 60, "sample": seed}
    reference = simulate(load_workload(spec, seed), sim_config({}, seed), agents={"select": TreeAgent(path)})
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = subprocess.Popen([HPCGYM, "env", "--bind", bind, "--trace", str(trace)], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        served = subprocess.run([HPCGYM, "agent", "--model", str(path), "--connect", bind, "--seed", str(seed),
                                 "--jobs", "60", "--sample", str(seed), "--json", "--timeout", "30"],
                                cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert served.returncode == 0, served.stderr
        line = json.loads(served.stdout.strip().splitlines()[-1])
        assert line["reason"] == "completed"
        assert {k: v for k, v in line.items() if k not in ("episode", "reason")} == dict(reference.summary)
    finally:
        env.kill()
        env.wait(timeout=10)


def test_the_distill_command_writes_trees_rules_and_pictures(tmp_path, traces_dir):
    out = tmp_path / "d"
    r = CliRunner().invoke(main, ["distill", "sjf", "--trace", str(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"),
                                  "--train-jobs", "300", "--test-jobs", "200", "--depth", "1", "--iterations", "1",
                                  "--window", "20", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "distill.json").read_text())["iterations"]
    assert [(row["method"], row["agreement"]) for row in rows] == [("irl", 1.0), ("dagger", 1.0)]
    assert (out / "irl-d1.txt").read_text().startswith("if requested-rank <= 0.5:")
    assert (out / "irl-d1.png").stat().st_size > 0
    shown = CliRunner().invoke(main, ["tree", str(out / "irl-d1.npz")])
    assert shown.exit_code == 0 and "requested-rank" in shown.output


# ------------------------------------------------------------------------------------------ bad input
def one_line_error(args: list[str]) -> str:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    return r.output


def test_a_teacher_of_another_kind_is_refused(tmp_path, traces_dir):
    out = one_line_error(["distill", "sjf", "--kind", "backfill", "--trace",
                          str(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"), "--train-jobs", "50", "--test-jobs", "50",
                          "--out", str(tmp_path / "x")])
    assert "teacher sjf takes select decisions, not backfill" in out


def test_an_empty_recording_is_refused(tmp_path, traces_dir):
    path = DecisionLog("select", "jobs+nodes", WINDOW).save(tmp_path / "empty.npz")
    out = one_line_error(["distill", "--records", str(path), "--trace", str(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"),
                          "--train-jobs", "50", "--test-jobs", "50", "--out", str(tmp_path / "x")])
    assert "holds no decisions" in out


def test_a_file_that_is_not_a_tree_is_refused(tmp_path):
    records = DecisionLog("select", "jobs+nodes", WINDOW).save(tmp_path / "records.npz")
    text = tmp_path / "notes.npz"
    text.write_text("not a tree")
    for path in (records, text, tmp_path / "missing.npz"):
        out = one_line_error(["tree", str(path)])
        assert "tree file" in out
    with pytest.raises(HpcgymError, match="not a tree file"):
        TreeAgent(records)


@pytest.mark.slow
def test_the_irl_teacher_trains_and_distils_by_regression_on_its_q_values(tmp_path):
    """`hpcgym train irl-dqn` (a small real run) makes the paper's teacher: the irl encoder's
    3 inputs per job, window 20, 32-16-8 ReLU per-job layers, select and backfill, reward A. Its
    tree is fitted on the Q-values: the R^2 on held-out states is reported and the tree reads the
    paper's features."""
    from hpcgym.agents.rl.checkpoint import load_checkpoint

    trace = write_trace(tmp_path / "t.swf", jobs=400, procs=32, seed=7)
    r = CliRunner().invoke(main, ["train", "irl-dqn", "--trace", str(trace), "--jobs", "80", "--epochs", "1",
                                  "--trajectories", "2", "--envs", "1", "--eval-episodes", "0", "--device", "cpu",
                                  "--no-progress", "--out", str(tmp_path / "dqn")])
    assert r.exit_code == 0, r.output
    ckpt = load_checkpoint(tmp_path / "dqn" / "model.pt")
    settings = ckpt.trainer["settings"]
    assert (ckpt.algorithm, ckpt.kind, ckpt.encoder, ckpt.window) == ("dql", "select+backfill", "irl", 20)
    assert (ckpt.config["net"], ckpt.config["hidden"], ckpt.config["activation"], ckpt.config["eps_decay"]) == (
        "conv", [32, 16, 8], "relu", 0.995)
    assert (settings["reward"], settings["no_wait"], ckpt.config["table"]) == ("system_slowdown", True, [0, 20, 3])
    out = tmp_path / "trees"
    r = CliRunner().invoke(main, ["distill", f"model:{tmp_path / 'dqn' / 'model.pt'}", "--trace", str(trace),
                                  "--train-jobs", "250", "--test-jobs", "150", "--depth", "6", "--iterations", "2",
                                  "--methods", "irl", "--no-relative", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    result = json.loads((out / "distill.json").read_text())
    assert result["mode"] == "regression"
    teacher = tmp_path / "dqn" / "model.pt"   # provenance: the teacher checkpoint's sha256
    assert result["provenance"]["checkpoints"] == {
        str(teacher.resolve()): __import__("hashlib").sha256(teacher.read_bytes()).hexdigest()}
    assert result["provenance"]["settings"]["depths"] == [6] and result["provenance"]["settings"]["threads"] == 1
    last = result["iterations"][-1]
    assert 0.5 < last["r2"] <= 1.0 and 0.0 < last["agreement"] <= 1.0
    tree = load_tree(out / "irl-d6.npz")
    assert tree.features == ["size", "requested", "utilization", "kind=select", "kind=backfill"]
    assert tree.meta["mode"] == "regression" and tree.depth <= 6
    # the tree may read other features than its teacher, over the same slots
    r = CliRunner().invoke(main, ["distill", f"model:{tmp_path / 'dqn' / 'model.pt'}", "--trace", str(trace),
                                  "--train-jobs", "250", "--test-jobs", "150", "--depth", "4", "--iterations", "1",
                                  "--methods", "irl", "--no-relative", "--encoder", "jobs", "--out", str(out / "jobs"),
                                  "--no-progress"])
    assert r.exit_code == 0, r.output
    tree = load_tree(out / "jobs" / "irl-d4.npz")
    assert tree.meta["encoder"] == "jobs" and "wait" in tree.features and "utilization" not in tree.features
    assert 0.0 < json.loads((out / "jobs" / "distill.json").read_text())["iterations"][-1]["agreement"] <= 1.0


def test_a_checkpoint_teacher_labels_a_batch_as_it_labels_each_decision(traces_dir):
    """A tree's rollout is labelled in one batch after the episode: every label (action, slot,
    scores) must be the one the teacher gives that decision alone, in the same order."""
    from hpcgym.agents.distill import make_teacher
    from hpcgym.agents.runtime import load_agent

    model = ROOT / "docs/results/schedinspector/agents/si-SDSC-SP2-1998-4.2-cln-sjf-code/model.pt"
    teacher = make_teacher(load_agent(f"model:{model}"), WINDOW)
    alone, prepared = [], []

    class Capture(PriorityAgent):
        kinds = ("inspect",)

        def act(self, decision):
            alone.append(teacher.label(decision))
            prepared.append(teacher.prepare(decision))
            return alone[-1][0]

    workload = read_swf(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz").take(slice(0, 150))
    config = SimConfig(backfill="none", exact_requests=True, commit_pick=True)
    simulate(workload, config, policy="sjf", agents={"inspect": Capture("sjf")})
    batch = teacher.labels(prepared)
    assert len(batch) == len(alone) > 50
    assert len({label[1] for label in alone}) == 2  # both accept and reject occur: the order matters
    for (action, slot, scores), (action1, slot1, scores1) in zip(batch, alone):
        assert (action, slot) == (action1, slot1)
        np.testing.assert_allclose(scores, scores1, rtol=1e-5, atol=1e-6)


def test_a_teacher_program_without_an_address_or_that_dies_is_refused(tmp_path, traces_dir):
    trace = ["--trace", str(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"), "--train-jobs", "50", "--test-jobs", "50",
             "--out", str(tmp_path / "x")]
    assert "has no {addr}" in one_line_error(["distill", "cmd:./my_agent --join", *trace])
    out = one_line_error(["distill", f"cmd:{sys.executable} -c 'import sys; sys.exit(3)' {{addr}}", *trace])
    assert "teacher program" in out and "exited with status 3" in out


def test_the_summary_prints_a_dash_for_an_undefined_r2(capsys):
    """Classification has no scores, so no R2: the table says "-", not nan (issue 45)."""
    from hpcgym.gymbridge.distill.command import _print_summary

    row = {"iteration": 1, "method": "irl", "depth": 3, "nodes": 7, "agreement": 0.9, "agreement_choice": 0.8,
           "r2": float("nan"), "mean_wait": 10.0, "mean_slowdown": 1.5}
    metrics = {"mean_wait": 12.0, "mean_slowdown": 1.7}
    _print_summary([row], metrics, "fcfs", metrics, 1)
    last = capsys.readouterr().out.splitlines()[-1]
    assert "nan" not in last and last.split()[5] == "-" and last.split()[4] == "0.800", last
