"""Run-time predictions over the protocol (1.4): the `prediction` option of a reset, bounded as a
shared env must bound it, and each job's pre-run and current prediction in the observations of
agents that speak 1.4 (PROTOCOL.md sections 4 and 6; docs/rlschert.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcgym.environment.predictions import fit_prerun_model
from hpcgym.protocol.messages import PROTOCOL_VERSION
from hpcgym.environment.service import EnvService, Limits
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload, sim_config

from .agents_for_tests import PredictionLog, write_trace
from .test_sockets import TOKEN, Children, start_env, wait_exit

# job, submit, run, size, requested, user: A and B (user 1) end at 100 and 400; C (user 1) is
# submitted at 400, after both, so user history predicts it (100 + 300 + 1) // 2 = 200 s; D (user 2,
# no history) is predicted its request, 600 s, and waits behind C on 4 processors.
JOBS = [(1, 0, 100, 4, 500, 1), (2, 0, 300, 4, 500, 1), (3, 400, 10, 4, 1000, 1), (4, 400, 50, 4, 600, 2)]


def swf(path: Path, jobs=JOBS) -> Path:
    lines = ["; MaxProcs: 4"] + [f"{j} {s} -1 {r} {n} -1 -1 {n} {q} -1 1 {u} 1 1 1 1 -1 -1" for j, s, r, n, q, u in jobs]
    path.write_text("\n".join(lines) + "\n")
    return path


def hello(svc: EnvService, peer: bytes, protocol: str, kinds: list[str]) -> dict:
    (_, reply), = svc.handle_message(peer, {"type": "hello", "protocol": protocol, "agent": "a", "kinds": kinds,
                                            "session": peer.decode()})
    return reply


def reset(svc: EnvService, peer: bytes, options: dict, **more) -> dict:
    (_, reply), = svc.handle_message(peer, {"type": "reset", "options": options, **more})
    return reply


def test_a_1_4_agent_sees_each_jobs_predictions_and_a_1_3_agent_does_not(tmp_path):
    svc = EnvService({"workload": {"trace": str(swf(tmp_path / "t.swf"))}})
    assert hello(svc, b"new", "1.4", ["kill"])["protocol"] == PROTOCOL_VERSION  # the env's own
    d = reset(svc, b"new", {"prediction": "user_history"})
    while d["time"] < 400:  # kill decisions at 0 and 100 (A, then B running): kill nothing
        (_, d), = svc.handle_message(b"new", {"type": "act", "decision": d["decision"], "action": None})
    obs = d["observation"]
    assert d["kind"] == "kill" and d["time"] == 400 and d["candidates"] == [3]
    assert obs["running"]["prediction0"] == [200] and obs["running"]["prediction"] == [200]
    assert obs["running"]["submit"] == [400]
    assert obs["queue"]["id"] == [4] and obs["queue"]["prediction"] == [600]

    assert hello(svc, b"old", "1.3", ["kill"])["type"] == "welcome"
    d = reset(svc, b"old", {"prediction": "user_history"})
    assert set(d["observation"]["running"]) == {"id", "start", "size", "requested", "estimated_end"}
    assert set(d["observation"]["queue"]) == {"id", "submit", "size", "requested", "estimate", "wait", "rejections",
                                              "user"}


def test_the_welcome_lists_the_prediction_rewards_and_a_reset_can_ask_for_them(tmp_path):
    svc = EnvService({"workload": {"trace": str(swf(tmp_path / "t.swf"))}})
    rewards = hello(svc, b"p", "1.4", ["kill"])["env"]["rewards"]
    assert {"system_slowdown_prediction", "system_jobs"} <= set(rewards)
    # eq. (10): minus the job-hours in the system. A 0-100, B 100-400 (waiting 0-100), C 400-410,
    # D 410-460 (waiting 400-410): 100 + 400 + 10 + 60 = 570 job-seconds over the episode
    r, total = reset(svc, b"p", {"prediction": "user_history"}, reward="system_jobs"), 0.0
    while r["type"] == "decision":
        total += r["reward"]
        (_, r), = svc.handle_message(b"p", {"type": "act", "decision": r["decision"], "action": None})
    assert r["type"] == "episode_end" and total + r["reward"] == pytest.approx(-570 / 3600)
    bad = reset(svc, b"p", {}, reward="system_slowdown_prediction")
    assert bad["code"] == "bad_request" and "set the option prediction" in bad["message"]


def test_the_prediction_option_is_bounded_on_a_shared_env(tmp_path):
    traces, models = tmp_path / "traces", tmp_path / "models"
    traces.mkdir(), models.mkdir()
    trace = swf(traces / "t.swf")
    fit_prerun_model(load_workload({"trace": str(trace)})).save(models / "m.json")
    (models / "notes.json").write_text("{}")
    (tmp_path / "outside.json").write_text((models / "m.json").read_text())
    svc = EnvService({"workload": {"trace": "t.swf"}},
                     limits=Limits(trace_dirs=(traces,), model_dirs=(models,), max_trace_bytes=1 << 20))
    hello(svc, b"p", "1.4", ["kill"])
    assert reset(svc, b"p", {"prediction": "learned:m.json"})["type"] == "decision"  # by name, from its folder
    refusals = {
        "oracle": "unknown prediction 'oracle'",
        5: "prediction must be a string",
        "running:0.4,0.1,0.03,1": "PERIOD must be at least 60 s",
        "learned:" + str(tmp_path / "outside.json"): "serves prediction models only from its prediction model folders",
        "learned:../outside.json": "serves prediction models only from its prediction model folders",
        "learned:missing.json": "no such prediction model in this env's prediction model folders",
        "learned:notes.json": "is not an hpcgym run-time model",
        "learned:" + str(models): "not a regular file",
    }
    for given, why in refusals.items():
        r = reset(svc, b"p", {"prediction": given})
        assert r["type"] == "error" and r["code"] == "bad_request" and why in r["message"], (given, r)
        assert "\n" not in r["message"]
    # an env with trace folders and no model folders opens no model at all
    closed = EnvService({"workload": {"trace": "t.swf"}}, limits=Limits(trace_dirs=(traces,)))
    hello(closed, b"p", "1.4", ["kill"])
    r = reset(closed, b"p", {"prediction": "learned:" + str(models / "m.json")})
    assert r["code"] == "bad_request" and "serves no prediction models" in r["message"]
    # user history on a trace without user ids
    no_users = swf(traces / "anon.swf", [(j, s, r, n, q, -1) for j, s, r, n, q, _ in JOBS])
    r = reset(svc, b"p", {"prediction": "user_history"}, workload={"trace": no_users.name})
    assert r["code"] == "bad_request" and "user_history needs user ids" in r["message"]


def test_a_remote_kill_agent_sees_the_same_predictions_and_gets_the_same_schedule(tmp_path, ipc_dir):
    """`hpcgym env` and `hpcgym agent` as two processes over ipc://: the rule-based kill, reading
    the running predictor's revisions, kills the same jobs at the same times as in process."""
    trace = write_trace(tmp_path / "t.swf", jobs=60, procs=32, seed=1, longest=12000)
    options = {"prediction": "running", "estimate": "predicted"}
    local = PredictionLog()
    expected = simulate(load_workload({"trace": str(trace)}, 5), sim_config(options, 5), agents={"kill": local})
    assert expected.summary["kills"] >= 2  # the rule fires on this trace: the comparison means something

    children = Children(tmp_path)
    try:
        bind = f"ipc://{ipc_dir / 'env.ipc'}"
        start_env(children, bind, "--trace", str(trace))
        log = tmp_path / "seen.json"
        agent = children.start("agent", "tests.agents_for_tests:PredictionLog", "--connect", bind, "--seed", "5",
                               "--prediction", "running", "--estimate", "predicted", "--json", "--timeout", "20",
                               name="agent", env={"HPCGYM_TEST_LOG": str(log), **TOKEN})
        rc, _ = wait_exit(agent, 120)
        assert rc == 0, children.stderr(agent)
        line = json.loads(children.stdout(agent))
    finally:
        children.kill_all()
    assert json.loads(log.read_text()) == json.loads(json.dumps(local.seen))
    assert line["reason"] == "completed" and line["kills"] == expected.summary["kills"]
    assert line["mean_bsld"] == pytest.approx(expected.summary["mean_bsld"], rel=1e-12)
    assert line["lost_work"] == expected.summary["lost_work"]


def test_hpcgym_env_refuses_a_bad_default_prediction_in_one_line(tmp_path):
    from click.testing import CliRunner

    from hpcgym.gymbridge.cli import main

    result = CliRunner().invoke(main, ["env", "--bind", f"ipc://{tmp_path / 'e.ipc'}", "--prediction", "oracle"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "unknown prediction 'oracle'" in result.output
