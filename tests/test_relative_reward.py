"""The `relative:` reward family, checked against values worked out by hand.

Two jobs on one processor, both submitted at t = 0: J1 runs 100 s, J2 runs 10 s (requests = run
times). FCFS runs J1 first: J1 waits 0 (bsld 1), J2 waits 100 (bsld 110 / 10 = 11); mean bsld 6,
max bsld 11, mean wait 50 s. SJF runs J2 first: J2 waits 0 (bsld 1), J1 waits 10 (bsld 110 / 100
= 1.1); mean bsld 1.05, max bsld 1.1, mean wait 5 s. Both end at 110 s with 110 busy seconds:
utilization 1 either way.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.environment.errors import ConfigError
from hpcgym.environment.rewards import RELATIVE_SYNTAX, RelativeReward, get_reward
from hpcgym.environment.service import EnvService
from hpcgym.environment.simulator import Simulation
from hpcgym.environment.workload import Workload


def two_jobs() -> Workload:
    return Workload(name="two", procs=1, job_id=np.array([1, 2]), submit=np.array([0, 0]), run=np.array([100, 10]),
                    size=np.array([1, 1]), requested=np.array([100, 10]), user=np.array([1, 1]))


def end_reward(spec: str, policy: str) -> float:
    sim = Simulation(two_jobs(), policy=policy)
    result = sim.run({})
    return get_reward(spec).make().end(sim, result.summary)


@pytest.mark.parametrize("spec, expected", [
    ("relative:bsld:pct:sjf", (1.05 - 6) / 1.05),
    ("relative:bsld:pct_max:sjf", (1.05 - 6) / 6),
    ("relative:bsld:diff:sjf", 1.05 - 6),
    ("relative:bsld:winloss:sjf", -1.0),
    ("relative:wait:pct:sjf", (5 - 50) / 5),
    ("relative:wait:pct_max:sjf", (5 - 50) / 3600 / 1.0),  # hours; max(base, x, 1) = 1
    ("relative:mbsld:diff:sjf", 1.1 - 11),
    ("relative:util:diff:sjf", 0.0),
    ("relative:util:winloss:sjf", 0.0),
    ("relative:bsld", 0.0),                                 # base = the episode's own policy
])
def test_fcfs_against_an_sjf_base(spec, expected):
    assert end_reward(spec, "fcfs") == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_sjf_against_an_fcfs_base_is_a_gain():
    assert end_reward("relative:bsld:pct:fcfs", "sjf") == pytest.approx((6 - 1.05) / 6)
    assert end_reward("relative:bsld:winloss:fcfs", "sjf") == 1.0


def test_the_base_run_uses_no_agent_and_the_episode_options():
    """An external select agent that picks the shortest job scores against the episode's FCFS:
    the base run must not reuse the agent (else the reward would be 0)."""
    sim = Simulation(two_jobs(), policy="fcfs", external=["select"])
    decision = sim.reset()
    while decision is not None:
        jobs = decision.observation["queue"]
        decision = sim.step(jobs["id"][int(np.argmin(jobs["requested"]))])
    reward = RelativeReward("bsld", "pct_max")
    assert reward.end(sim, sim.result().summary) == pytest.approx((6 - 1.05) / 6)


def test_over_the_service_the_episode_end_carries_the_relative_reward(tmp_path):
    trace = tmp_path / "two.swf"
    trace.write_text("; MaxProcs: 1\n1 0 -1 100 1 -1 -1 1 100 -1 1 1 1 1 1 1 -1 -1\n"
                     "2 0 -1 10 1 -1 -1 1 10 -1 1 1 1 1 1 1 -1 -1\n")
    svc = EnvService({"workload": {"trace": str(trace)}, "policy": "sjf"})  # the env's priority policy
    (_, welcome), = svc.handle_message(b"a", {"type": "hello", "protocol": "1.0", "agent": "a", "kinds": []})
    assert RELATIVE_SYNTAX in welcome["env"]["rewards"]
    (_, end), = svc.handle_message(b"a", {"type": "reset", "reward": "relative:bsld:pct:fcfs"})
    assert end["type"] == "episode_end" and end["reward"] == pytest.approx((6 - 1.05) / 6)


@pytest.mark.parametrize("spec, words", [
    ("relative", "relative:METRIC"),
    ("relative:", "relative:METRIC"),
    ("relative:slowness", "unknown metric 'slowness'"),
    ("relative:bsld:ratio", "unknown form 'ratio'"),
    ("relative:bsld:pct:nosuch", "unknown policy 'nosuch'"),
    ("relative:bsld:pct:sjf:sjf:extra", "relative:METRIC"),
    ("relative:bsld:pct:fcfs:diagonal", "unknown backfill scan order"),
    ("bslt", "relative:METRIC"),
])
def test_bad_specs_name_the_problem(spec, words):
    with pytest.raises(ConfigError, match=words):
        get_reward(spec)


def test_a_bad_spec_in_a_reset_is_an_error_reply_and_the_service_keeps_going(tmp_path):
    svc = EnvService({"workload": {"generate_jobs": 8, "procs": 8}})
    svc.handle_message(b"a", {"type": "hello", "protocol": "1.0", "agent": "a", "kinds": []})
    (_, reply), = svc.handle_message(b"a", {"type": "reset", "reward": "relative:bsld:pct:nosuch"})
    assert reply["type"] == "error" and "nosuch" in reply["message"]
    (_, reply), = svc.handle_message(b"a", {"type": "reset", "reward": "relative:bsld"})
    assert reply["type"] == "episode_end" and reply["reward"] == 0.0
