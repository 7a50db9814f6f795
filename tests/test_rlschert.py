"""RLSchert's pieces: kill with re-estimation, the running-job features and the rule-based kill
teacher, on cases worked out by hand.

Kill with re-estimation (three processors, FCFS, EASY, estimate `predicted`; a predictor that
says the first value below before a run and the truth from each run's first revision, 100 s in):
  J1 (1 proc, runs 1000 s, predicted 200) and J2 (1 proc, 3000 s, predicted 3000) start at 0.
  t=100: J1's prediction becomes 1000 (more than twice 200): the kill agent kills it; 100
         processor-seconds are lost; it requeues with estimate 1000 and restarts at once (2 free).
  t=150: J3 (2 procs, 100 s) does not fit: reserved; shadow = J1's estimated end 100 + 1000.
  t=160: J4 (1 proc, 500 s): 160 + 500 <= 1100: backfilled. (Requeued with its old estimate 200,
         J1 would be expected to end at 300 and J4 would wait for J1's revision at 200.)
  t=1100: J1 ends; J3 runs 1100-1200.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from hpcgym.agents.encoders import get_encoder
from hpcgym.agents.rlschert import RuleKill
from hpcgym.environment import simulator
from hpcgym.environment.config import SimConfig
from hpcgym.environment.errors import ConfigError
from hpcgym.environment.simulator import simulate
from tests.test_predictions import Stepped, jobs


class KillWhenDoubled:
    kinds = ("kill",)

    def act(self, decision):
        r = decision.observation["running"]
        for job, p0, p in zip(r["id"], r["prediction0"], r["prediction"]):
            if p > 2 * p0:
                return job
        return None


def test_a_killed_job_requeues_with_its_current_prediction(monkeypatch):
    monkeypatch.setattr(simulator, "RunningModel", lambda spec, run, seed: Stepped([200, 3000, 100, 500], True))
    w = jobs([0, 0, 150, 160], [1000, 3000, 100, 500], [1, 1, 2, 1], [5000, 3000, 100, 500], procs=3)
    result = simulate(w, SimConfig(prediction="running", estimate="predicted"), agents={"kill": KillWhenDoubled()})
    j = result.jobs
    assert j["start"].tolist() == [100, 0, 1100, 160]
    assert j["end"].tolist() == [1100, 3000, 1200, 660]
    assert j["kills"].tolist() == [1, 0, 0, 0]
    assert j["lost_work"].tolist() == [100, 0, 0, 0]


def running(now, rows, procs=8):
    """An observation whose running table has `rows` of (id, start, submit, prediction0, prediction, size)."""
    cols = list(zip(*rows)) if rows else [[]] * 6
    names = ("id", "start", "submit", "prediction0", "prediction", "size")
    return {"time": now, "procs": procs, "running": dict(zip(names, map(list, cols)))}


def kill(rows, now=1000):
    return RuleKill().act(SimpleNamespace(observation=running(now, rows)))


def test_rule_kill_on_hand_cases():
    # elapsed 200 <= 600; 600 < 3000 < 4000; changed by 3400 / 600 > 100%
    assert kill([(5, 800, 0, 600, 4000, 1)]) == 5
    assert kill([(5, 0, 0, 600, 4000, 1)]) is None       # ran 1000 s, longer than its pre-run 600
    assert kill([(5, 800, 0, 3000, 7000, 1)]) is None    # not predicted under 50 min before
    assert kill([(5, 800, 0, 1400, 3000, 1)]) is None    # not over 50 min now
    assert kill([(5, 800, 0, 2000, 3500, 1)]) is None    # changed by 75% only
    assert kill([(5, 400, 0, 600, 1200, 1), (6, 900, 0, 100, 3100, 1), (7, 900, 0, 100, 3100, 1)]) == 6
    assert kill([]) is None
    with pytest.raises(ConfigError, match="reads run-time predictions"):
        RuleKill().act(SimpleNamespace(observation={"time": 0, "running": {"id": [1], "start": [0]}}))


def test_running_prediction_features_by_hand():
    enc = get_encoder("rlschert", 2, 8)
    table = enc.encode(running(1000, [(5, 800, 500, 600, 1800, 4)])).reshape(2, 7)
    log = lambda s: math.log1p(s) / math.log1p(7 * 24 * 3600)  # noqa: E731
    # present, pre-run 600, current 1800, elapsed 200, since submit 500, change 2 -> 2/3, size 4/8
    assert table[0] == pytest.approx([1, log(600), log(1800), log(200), log(500), 2 / 3, 0.5], rel=1e-6)
    assert not table[1].any()
    with pytest.raises(ValueError, match="reads run-time predictions"):
        enc.encode({"time": 0, "procs": 8, "running": {"id": [1]}})


def dense_rewards(spec: str, monkeypatch) -> tuple[list[tuple[int, float]], float]:
    """test_system_reward's three jobs on one processor (FCFS, a select agent taking the first
    candidate: J1 0-100, J2 100-110, J3 110-130), predicted 50, 20 and 40 s before they run; J1's
    prediction becomes 100 at its revision 40 s in (so a select decision comes at 40 too)."""
    from hpcgym.environment.rewards import get_reward
    from hpcgym.environment.simulator import Simulation

    monkeypatch.setattr(simulator, "RunningModel", lambda spec, run, seed: Stepped([50, 20, 40], True, period=40))
    w = jobs([0, 0, 50], [100, 10, 20], [1, 1, 1], [100, 10, 20], procs=1)
    sim = Simulation(w, SimConfig(prediction="running"), external=["select"])
    reward = get_reward(spec).make()
    decision, steps = sim.reset(), []
    while decision is not None:
        steps.append((decision.time, reward.step(sim)))
        decision = sim.step([decision.candidates[0]])
    return steps, reward.end(sim, sim.result().summary)


def test_eq9_predicted_slowdown_by_hand(monkeypatch):
    """Rate: minus the sum of 1/prediction, each job's prediction as of the step (J1's is 100 from 40 on).
    To 40: J1 40/100 + J2 40/20 = 2.4. To 50: 0.1 + 0.5. To 100: J1 0.5 + J2 2.5 + J3 50/40 = 4.25.
    To 110: J2 0.5 + J3 0.25. End (130): J3 0.5."""
    steps, end = dense_rewards("system_slowdown_prediction", monkeypatch)
    assert [t for t, _ in steps] == [0, 0, 40, 50, 100, 100, 110]
    assert [r for _, r in steps] == pytest.approx([0, 0, -2.4, -0.6, -4.25, 0, -0.75])
    assert end == pytest.approx(-0.5)


def test_eq10_jobs_in_system_by_hand(monkeypatch):
    """Job-seconds in the system: to 40: 80; to 50: 20; to 100: 150; to 110: 20; end: 20. In all
    290 = the response times 100 + 110 + 80."""
    steps, end = dense_rewards("system_jobs", monkeypatch)
    assert [r * 3600 for _, r in steps] == pytest.approx([0, 0, -80, -20, -150, 0, -20])
    assert end * 3600 == pytest.approx(-20)


def test_eq9_needs_predictions():
    from hpcgym.environment.rewards import get_reward

    with pytest.raises(ConfigError, match="reads run-time predictions"):
        get_reward("system_slowdown_prediction").check(SimConfig())


def test_compare_fails_a_unit_whose_policy_never_stops_killing(tmp_path):
    """An always-kill policy never ends its episode (each kill requeues the job): the compare unit
    fails with one line once it has killed more than 100 times per job."""
    from hpcgym.environment.swf import write_swf
    from hpcgym.gymbridge.compare.policy import parse_policy
    from hpcgym.gymbridge.compare.unit import UnitFailed, _run_inproc

    trace = tmp_path / "two.swf"
    write_swf(trace, jobs([0, 0], [5000, 5000], [1, 1], [5000, 5000]))
    task = {"seed": 0, "options": {"prediction": "running", "estimate": "predicted"}}
    with pytest.raises(UnitFailed, match="killed 201 times in one episode"):
        _run_inproc(parse_policy("kill:tests.test_rlschert:KillFirst,fcfs"), task, trace)
    with pytest.raises(UnitFailed, match="killed 201 times in one episode"):  # the same with the joint kind
        _run_inproc(parse_policy("select_kill:tests.test_rlschert:KillFirstJoint,fcfs"), task, trace)


class KillFirst:
    kinds = ("kill",)

    def act(self, decision):
        return decision.candidates[0]


class KillFirstJoint:
    """select_kill: kill the first running job offered, else start the first queued one."""

    kinds = ("select_kill",)

    def act(self, decision):
        running = decision.candidates[decision.context["queued"]:]
        return running[0] if running else decision.candidates[0]


@pytest.mark.parametrize("kind, slots, kill_slots", [("kill", 9, range(1, 9)), ("select_kill", 17, range(8, 16))])
def test_the_kill_prior_makes_an_untrained_policy_kill_at_its_rate(kind, slots, kill_slots):
    """With every slot open, an untrained PPO actor kills with probability 8 e^b / (z + 8 e^b),
    z the other open slots: b = ln(0.001 / 0.999 / 8) gives 0.001 for kill (z = 1) and
    0.001 / (9 - 8 * 0.001) ~ 1.1e-4 for select_kill (z = 9), where zero biases give 8/9 and 8/17."""
    torch = pytest.importorskip("torch")
    from hpcgym.agents.rl.ppo import PPO
    from hpcgym.agents.slots import kill_prior

    obs = np.random.default_rng(0).normal(size=(64, 12)).astype(np.float32)
    mask = np.ones((64, slots), np.int8)
    cases = [({}, None, 8 / slots), ({}, kill_prior(kind, 8, 1e-3), None)]
    if kind == "kill":  # the kernel network: one score for each running job's row, after the no-kill action
        obs = np.random.default_rng(0).normal(size=(64, 8 * 3 + 4)).astype(np.float32)
        cases.append(({"net": "conv", "table": [0, 8, 3, 1], "hidden": [8]}, kill_prior(kind, 8, 1e-3), None))
    for net, bias, expected in cases:
        algo = PPO(obs.shape[1:], slots, {**net, "initial_bias": bias}, seed=3)
        p_kill = torch.softmax(torch.as_tensor(algo.scores(obs, mask)), -1)[:, list(kill_slots)].sum(-1).numpy()
        if expected is None:
            z = slots - 8
            expected = 8 * (1e-3 / 0.999 / 8) / (z + 8 * (1e-3 / 0.999 / 8))
        assert np.allclose(p_kill, expected, rtol=0.05), (kind, bias is not None, p_kill.mean(), expected)


def test_kill_prior_and_initial_bias_refuse_what_they_cannot_set():
    pytest.importorskip("torch")
    from hpcgym.agents.rl.ppo import PPO
    from hpcgym.agents.slots import kill_prior
    from hpcgym.environment.errors import HpcgymError

    with pytest.raises(HpcgymError, match="kill and select_kill kinds"):
        kill_prior("select", 8, 1e-3)
    with pytest.raises(HpcgymError, match="between 0 and 1"):
        kill_prior("kill", 8, 1.0)
    with pytest.raises(ValueError, match="3 values for 9 action slots"):
        PPO((12,), 9, {"initial_bias": [0.0, -1.0, -1.0]})
    with pytest.raises(ValueError, match="the same for its 8 table rows"):  # rows are outputs 0-7 here, not 1-8
        PPO((2 * 8 * 3,), 9, {"net": "conv", "table": [0, 8, 3], "initial_bias": kill_prior("kill", 8, 1e-3)})


@pytest.mark.slow
def test_an_untrained_kill_policy_finishes_its_episodes_only_with_the_kill_prior(tmp_path):
    """A policy that never kills ends a 40-job window of this trace in about 200 kill decisions;
    the untrained policy with the preset's prior (1 kill in 1,000 decisions) ends each episode
    that way, where a near-uniform start (`initial_bias=null`) kills at 8 in 9 decisions, each
    kill requeues a job, and episodes run on to the 1,000-decision cap (the stalled trainings of
    docs/rlschert.md, "Why the kill agents stalled")."""
    import csv

    from click.testing import CliRunner

    from hpcgym.gymbridge.cli import main

    from .agents_for_tests import write_trace

    trace = write_trace(tmp_path / "t.swf", jobs=200, procs=32, seed=3)
    curves = {}
    for arm, extra in (("prior", []), ("uniform", ["--set", "initial_bias=null"])):
        result = CliRunner().invoke(main, ["train", "rlschert", "--kind", "kill", "--trace", str(trace), "--jobs", "40",
                                           "--trajectories", "4", "--envs", "4", "--epochs", "1", "--max-steps", "1000",
                                           "--eval-episodes", "0", "--no-progress", "--out", str(tmp_path / arm), *extra])
        assert result.exit_code == 0, result.output
        with open(tmp_path / arm / "curve.csv", newline="") as f:
            curves[arm] = next(csv.DictReader(f))
    prior, uniform = curves["prior"], curves["uniform"]
    assert float(prior["truncated"]) == 0 and float(prior["kills"]) <= 1 and float(prior["length"]) < 400, prior
    # (kills are counted at an episode's end: the uniform arm's episodes are mostly cut before theirs)
    assert float(uniform["truncated"]) > 0 and float(uniform["length"]) > 2.5 * float(prior["length"]), uniform


def test_the_selecting_kinds_see_the_queue(tmp_path):
    """RLSchert's select and select_kill runs choose queue slots, so their observation must show
    the jobs in them (the paper's waiting-job slots). At a window's first decision nothing runs, so
    without the queue two windows of different jobs look the same; with it, queue row 0's size
    column is the first queued job's size / processors (write_trace: 32 processors)."""
    pytest.importorskip("gymnasium")
    import hpcgym.gymbridge as gb
    from hpcgym.agents.encoders import JobTableEncoder
    from hpcgym.environment.swf import read_swf

    from .agents_for_tests import write_trace

    trace = write_trace(tmp_path / "t.swf", jobs=80, procs=32, seed=5)
    sizes = read_swf(trace).size
    for kind in ("select", "select_kill"):
        firsts = []
        for start in (0, 40):
            env = gb.make(kind, recipe="rlschert", workload={"trace": str(trace), "jobs": 20, "start": start})
            obs, _ = env.reset(seed=0)
            assert obs[JobTableEncoder.COLUMNS.index("size")] == pytest.approx(sizes[start] / 32), kind
            firsts.append(obs)
        assert not np.array_equal(*firsts), kind


def test_a_select_agent_starts_a_joint_one_slot_by_slot():
    """--init-from (agents.rl.checkpoint.start_from): a select network's row for queue job k and
    its wait row start the select_kill network's rows of the same meaning, so among the queued jobs
    and waiting the joint policy's first choices are the select agent's. Its kill rows start as the
    wait row shifted by the kill prior, so where only killing or waiting is allowed (an empty
    queue, a state a select agent never meets) it kills with the prior's probability, 1e-3, even
    when the select agent's wait is very unlikely (here a wait bias of -20: kill rows left at their
    fresh start would then kill almost surely, as the first such run did: 99 kills per episode).
    A run with another observation is refused by name."""
    torch = pytest.importorskip("torch")
    from hpcgym.agents.rl.checkpoint import CheckpointError, make_checkpoint, start_from
    from hpcgym.agents.rl.ppo import PPO
    from hpcgym.agents.slots import kill_prior

    w, features = 8, 20
    obs = np.random.default_rng(1).normal(size=(32, features)).astype(np.float32)
    select = PPO((features,), w + 1, {"hidden": [16]}, seed=1)
    for p in select.modules()["model"].parameters():  # a trained network, not a fresh one
        p.data.normal_(0, 1, generator=torch.Generator().manual_seed(7))
    output_bias = [p for n, p in select.modules()["model"].named_parameters() if p.shape == (w + 1,)]
    output_bias[0].data[w] = -20.0   # a select agent that never waits
    source = make_checkpoint(select, kind="select", encoder="jobs+rlschert+nodes", window=w)
    joint = PPO((features,), 2 * w + 1, {"hidden": [16], "initial_bias": kill_prior("select_kill", w, 1e-3)}, seed=2)
    start_from(joint, source, "select_kill", "jobs+rlschert+nodes", w)

    no_kill = np.ones((32, 2 * w + 1), np.int8)
    no_kill[:, w:2 * w] = 0
    p_select = torch.softmax(torch.as_tensor(select.scores(obs, np.ones((32, w + 1), np.int8))), -1).numpy()
    p_joint = torch.softmax(torch.as_tensor(joint.scores(obs, no_kill)), -1).numpy()
    assert np.allclose(p_joint[:, :w], p_select[:, :w], atol=1e-5)
    assert np.allclose(p_joint[:, 2 * w], p_select[:, w], atol=1e-5)
    kill_or_wait = np.zeros((32, 2 * w + 1), np.int8)
    kill_or_wait[:, w:] = 1
    p_kill = torch.softmax(torch.as_tensor(joint.scores(obs, kill_or_wait)), -1)[:, w:2 * w].sum(-1).numpy()
    assert np.allclose(p_kill, 1e-3, rtol=0.05), p_kill   # the prior's odds against waiting, in every state

    with pytest.raises(CheckpointError, match="give --encoder jobs\\+rlschert\\+nodes"):
        start_from(PPO((features,), w + 1, {"hidden": [16]}), source, "kill", "rlschert+nodes", w)
    with pytest.raises(CheckpointError, match="another network"):
        start_from(PPO((features,), 2 * w + 1, {"hidden": [32]}), source, "select_kill", "jobs+rlschert+nodes", w)
