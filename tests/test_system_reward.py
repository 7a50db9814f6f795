"""The dense system slowdown rewards (IRL's rewards A and I), checked against values worked out
by hand, and the identity that reward A adds up to minus the sum of the jobs' slowdowns.

Three jobs on one processor, FCFS: J1 submitted 0 runs 100 s, J2 submitted 0 runs 10 s, J3
submitted 50 runs 20 s. J1 runs 0-100, J2 100-110, J3 110-130. External select decisions come
at t = 0 (twice), 50, 100 (twice) and 110; the episode ends at 130.

Reward A (rate: minus the sum of 1/t_j over the jobs in the system), per decision:
  t = 0: nothing has elapsed: 0 (both times).
  t = 50: J1 50/100 + J2 50/10 + J3 0 = 5.5.
  t = 100: J1 50/100 + J2 50/10 + J3 50/20 = 8 (then 0 at the second decision at 100).
  t = 110: J2 10/10 + J3 10/20 = 1.5.  End (130): J3 20/20 = 1.
  Sum 16 = slowdowns 100/100 + 110/10 + 80/20 = 1 + 11 + 4.
Reward I (rate: minus the sum of (w_j + t_j)/t_j, in job-seconds here, /3600 for hours):
  t = 50: J1 50 + J2 int_0^50 (tau + 10)/10 = 175: 225.
  t = 100: J1 50 + J2 int_50^100 (tau + 10)/10 = 425 + J3 int_50^100 (tau - 50 + 20)/20 = 112.5: 587.5.
  t = 110: J2 10 * 110/10 = 110 + J3 int_100^110 (tau - 30)/20 = 37.5: 147.5.  End: J3 20 * 80/20 = 80.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.environment.errors import ConfigError
from hpcgym.environment.rewards import REWARDS, get_reward
from hpcgym.environment.simulator import Simulation
from hpcgym.environment.swf import read_swf
from hpcgym.environment.workload import Workload


def three_jobs() -> Workload:
    return Workload(name="three", procs=1, job_id=np.array([1, 2, 3]), submit=np.array([0, 0, 50]),
                    run=np.array([100, 10, 20]), size=np.array([1, 1, 1]), requested=np.array([100, 10, 20]),
                    user=np.array([1, 1, 1]))


def rewards_of(spec: str, workload: Workload) -> tuple[list[tuple[int, float]], float, dict]:
    """(time, step reward) per decision of an FCFS run with an external select agent taking the
    first candidate, the end reward, and the summary."""
    reward = get_reward(spec).make()
    sim = Simulation(workload, policy="fcfs", external=["select"])
    decision, steps = sim.reset(), []
    while decision is not None:
        steps.append((decision.time, reward.step(sim)))
        decision = sim.step([decision.candidates[0]])
    summary = sim.result().summary
    return steps, reward.end(sim, summary), summary


def test_reward_a_by_hand():
    steps, end, _ = rewards_of("system_slowdown", three_jobs())
    assert [t for t, _ in steps] == [0, 0, 50, 100, 100, 110]
    assert [r for _, r in steps] == pytest.approx([0, 0, -5.5, -8, 0, -1.5])
    assert end == pytest.approx(-1.0)


def test_reward_i_by_hand():
    steps, end, _ = rewards_of("system_wait_slowdown", three_jobs())
    assert [r * 3600 for _, r in steps] == pytest.approx([0, 0, -225, -587.5, 0, -147.5])
    assert end * 3600 == pytest.approx(-80)


def test_a_scaled_reward_is_the_hand_worked_one_times_k():
    """0.5*system_slowdown: half of reward A's hand-worked values; in a sum, only its own part."""
    steps, end, _ = rewards_of("0.5*system_slowdown", three_jobs())
    assert [r for _, r in steps] == pytest.approx([0, 0, -2.75, -4, 0, -0.75])
    assert end == pytest.approx(-0.5)
    steps, end, _ = rewards_of("2*system_slowdown+system_slowdown", three_jobs())
    assert sum(r for _, r in steps) + end == pytest.approx(-48.0)  # 3 x the sum 16 above


def test_max_wait_prices_the_longest_wait_at_the_end_only():
    """FCFS on one processor: J1 waits 0, J2 100 s (J1's run), J3 submitted at 50 starts at 110: 60 s.
    The longest wait, 100 s, is 1/36 h; 0.5*max_wait halves it; no step reward."""
    steps, end, summary = rewards_of("max_wait", three_jobs())
    assert all(r == 0 for _, r in steps) and summary["max_wait"] == 100
    assert end == pytest.approx(-100 / 3600)
    assert rewards_of("0.5*max_wait", three_jobs())[1] == pytest.approx(-50 / 3600)


@pytest.mark.parametrize("bad", ["x*system_slowdown", "inf*system_slowdown", "0.5*", "0.5*nothing"])
def test_a_bad_scale_is_one_line(bad):
    with pytest.raises(ConfigError, match="reward") as refused:
        get_reward(bad)
    assert "\n" not in str(refused.value)


def test_estimate_variant_reads_the_request():
    """Requests twice the run times halve every term of reward A."""
    w = three_jobs().with_columns(requested=np.array([200, 20, 40]))
    steps, end, _ = rewards_of("system_slowdown_estimate", w)
    assert sum(r for _, r in steps) + end == pytest.approx(-8.0)


def test_reward_a_adds_up_to_minus_the_slowdowns_on_a_real_trace(traces_dir):
    """Over a whole episode the integral of sum 1/t_j is sum (end - submit)/t_j (t_j >= 1 s)."""
    w = read_swf(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz").take(slice(0, 300))
    steps, end, summary = rewards_of("system_slowdown", w)
    runs = np.maximum(w.run, 1)
    result = Simulation(w, policy="fcfs").run({})   # the same schedule: the agent takes the first candidate
    expected = -np.sum((result.jobs["end"] - result.jobs["submit"]) / runs)
    assert sum(r for _, r in steps) + end == pytest.approx(expected, rel=1e-9)
    assert all(r <= 0 for _, r in steps)


def test_the_env_offers_them():
    from .test_service import Net, hello

    offered = Net().request(b"a", hello("x", ["select"]))["env"]["rewards"]
    for name in ("system_slowdown", "system_slowdown_estimate", "system_wait_slowdown"):
        assert offered[name] == REWARDS[name].description
