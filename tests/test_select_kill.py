"""The joint select+kill decision (RLSchert's single output over select slots, kill slots and
wait), in the simulation, the Gymnasium bridge and over the protocol, on a schedule worked out
by hand.

Three processors, FCFS, EASY, estimate `predicted`; a predictor that says the first value below
before a run and the truth from each run's first revision, 100 s in (tests/test_predictions.py):
  J1 (1 proc, runs 1000 s, predicted 200), J2 (1 proc, 3000 s, predicted 3000) at 0;
  J3 (2 procs, 100 s, predicted 100) at 150; J4 (1 proc, 500 s, predicted 500) at 160.
  t=0:    [1, 2] queued: select 1; [2 | 1]: select 2; [ | 1, 2] (running by estimated end 200,
          3000): wait.
  t=100:  J1's revision says 1000: [ | 1, 2]: kill 1 (100 processor-seconds lost); it requeues with
          estimate 1000, and running jobs are offered no more this instant: [1 | ]: select 1, it
          restarts (2 free).
  t=150:  [3 | 1, 2] (J1 now ends by 1100): select 3: it does not fit (1 free): reserved, shadow 1100.
  t=160:  [3, 4 | 1, 2]: select 4 (fits, ends 660); [3 | 4, 1, 2]: wait.
  t=660:  J4 ends: [3 | 1, 2]: wait.  t=1100: J1 ends: [3 | 2]: select 3; [ | 3, 2]: wait.
  t=1200: [ | 2]: wait.  t=3000: J2 ends, nothing left.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpcgym.environment import simulator
from hpcgym.environment.config import SimConfig
from hpcgym.environment.errors import ConfigError, InvalidAction
from hpcgym.environment.service import EnvService
from hpcgym.environment.simulator import Simulation
from hpcgym.gymbridge.env import HpcEnv, MaskedActionError
from tests.test_predictions import Stepped, jobs

OPTIONS = {"prediction": "running", "estimate": "predicted"}
# (time, queued candidates, running candidates, action) of every decision, as worked out above
SCRIPT = [(0, [1, 2], [], 1), (0, [2], [1], 2), (0, [], [1, 2], None),
          (100, [], [1, 2], 1), (100, [1], [], 1),
          (150, [3], [1, 2], 3),
          (160, [3, 4], [1, 2], 4), (160, [3], [4, 1, 2], None),
          (660, [3], [1, 2], None), (1100, [3], [2], 3), (1100, [], [3, 2], None),
          (1200, [], [2], None)]


@pytest.fixture
def stepped(monkeypatch):
    monkeypatch.setattr(simulator, "RunningModel", lambda spec, run, seed: Stepped([200, 3000, 100, 500], True))


def workload():
    return jobs([0, 0, 150, 160], [1000, 3000, 100, 500], [1, 1, 2, 1], [5000, 3000, 100, 500], procs=3)


def test_the_joint_decision_kills_and_the_job_requeues_with_its_new_estimate(stepped):
    sim = Simulation(workload(), SimConfig(**OPTIONS), external=["select_kill"])
    d = sim.reset()
    for time, queued, running, action in SCRIPT:
        assert (d.kind, d.time, d.candidates, d.context) == ("select_kill", time, queued + running,
                                                             {"queued": len(queued)})
        if (time, action) == (100, 1) and not running:  # right after the kill: requeued, estimate 1000
            q = d.observation["queue"]
            assert q["id"] == [1] and q["estimate"] == [1000] and q["prediction"] == [1000]
        d = sim.step(action)
    assert d is None
    j = sim.result().jobs
    assert j["start"].tolist() == [100, 0, 1100, 160]
    assert j["end"].tolist() == [1100, 3000, 1200, 660]
    assert j["kills"].tolist() == [1, 0, 0, 0] and j["lost_work"].tolist() == [100, 0, 0, 0]


def test_invalid_joint_actions_are_refused_in_one_line_and_change_nothing(stepped):
    sim = Simulation(workload(), SimConfig(**OPTIONS), external=["select_kill"])
    d = sim.reset()
    for _ in range(4):  # to the kill at t=100
        d = sim.step(SCRIPT[sim.pending.step - 1][3])
    assert d.time == 100 and d.candidates == [1]  # after the kill: J2 runs but is not offered
    for action, why in (([1], "not a list"), (2, "job 2 is not a valid select_kill choice"),
                        (99, "job 99 is not a valid select_kill choice"), (True, "expects job ids")):
        with pytest.raises(InvalidAction, match=why) as err:
            sim.step(action)
        assert "\n" not in str(err.value)
        assert sim.pending is d
    for _, _, _, action in SCRIPT[4:]:
        d = sim.step(action)
    assert sim.result().jobs["start"].tolist() == [100, 0, 1100, 160]  # the same schedule as without the refusals

    lone = Simulation(jobs([0], [10], [1], [10]), SimConfig(), external=["select_kill"])
    assert lone.reset().can_wait is False
    with pytest.raises(InvalidAction, match="select_kill cannot wait now"):
        lone.step(None)


def test_the_joint_kind_takes_the_place_of_select_and_kill():
    w = jobs([0], [10], [1], [10])
    for external, config, why in ((["select_kill", "kill"], SimConfig(), "not beside them"),
                                  (["select_kill", "select"], SimConfig(), "not beside them"),
                                  (["select_kill"], SimConfig(commit_pick=True), "turn commit_pick off"),
                                  (["select_kill"], SimConfig(backfill="conservative"), "backfill easy or none")):
        with pytest.raises(ConfigError, match=why):
            Simulation(w, config, external=external)


def swf(path: Path) -> Path:
    rows = [(1, 0, 1000, 1, 5000), (2, 0, 3000, 1, 3000), (3, 150, 100, 2, 100), (4, 160, 500, 1, 500)]
    path.write_text("; MaxProcs: 3\n" + "".join(f"{j} {s} -1 {r} {n} -1 -1 {n} {q} -1 1 1 1 1 1 1 -1 -1\n"
                                                for j, s, r, n, q in rows))
    return path


def test_the_gymnasium_env_has_select_kill_and_wait_slots(stepped, tmp_path):
    w = 4
    env = HpcEnv("select_kill", {"trace": str(swf(tmp_path / "t.swf"))}, {**OPTIONS, "window": w}, reward="none")
    assert env.action_space.n == 2 * w + 1
    _, info = env.reset(seed=0)
    slots = []
    for time, queued, running, action in SCRIPT:
        mask = info["action_mask"]
        assert info["decision"].time == time
        assert np.flatnonzero(mask).tolist() == [*range(len(queued)), *(w + k for k in range(len(running))), 2 * w]
        if (time, queued) == (100, [1]):  # J2 still runs (row 0 of the running table) but is not offered
            with pytest.raises(MaskedActionError, match="one kill per instant"):
                env.step(w)
            assert np.array_equal(env.action_masks(), mask)
        # select slot k < W, kill slot W + row of the running table, wait 2W
        rows = info["decision"].observation["running"]["id"]
        slot = 2 * w if action is None else queued.index(action) if action in queued else w + rows.index(action)
        slots.append(slot)
        _, _, terminated, _, info = env.step(slot)
    assert terminated and info["metrics"]["kills"] == 1
    assert slots[3] == w  # the kill: J1 is row 0 of the running table (estimated end 200 before J2's 3000)


def test_the_joint_kind_over_the_protocol(stepped, tmp_path):
    svc = EnvService({"workload": {"trace": str(swf(tmp_path / "t.swf"))}})
    (_, welcome), = svc.handle_message(b"a", {"type": "hello", "protocol": "1.4", "agent": "joint",
                                              "kinds": ["select_kill"]})
    assert "select_kill" in welcome["env"]["kinds"]
    (_, r), = svc.handle_message(b"a", {"type": "reset", "options": OPTIONS, "records": True})
    for time, queued, running, action in SCRIPT:
        assert (r["kind"], r["time"], r["candidates"]) == ("select_kill", time, queued + running)
        assert r["observation"]["context"] == {"queued": len(queued)}
        if time == 100 and not running:
            (_, err), = svc.handle_message(b"a", {"type": "act", "decision": r["decision"], "action": [1]})
            assert err["code"] == "invalid_action" and "not a list" in err["message"]
            assert err["pending"]["decision"] == r["decision"] and err["pending"]["candidates"] == [1]
        (_, r), = svc.handle_message(b"a", {"type": "act", "decision": r["decision"], "action": action})
    assert r["type"] == "episode_end" and r["jobs"]["start"] == [100, 0, 1100, 160]
    assert r["jobs"]["kills"] == [1, 0, 0, 0]
