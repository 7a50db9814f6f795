"""DRAS (Fan et al., TPDS 2022): the state encoder, the network, and the rewards of eqs. (1), (2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hpcgym.agents.encoders import DRASEncoder
from hpcgym.agents.rl.dras_networks import DRASNetwork, dras_hidden
from hpcgym.agents.encoders import get_encoder
from hpcgym.agents.rl.policy import MaskedCategorical, choose
from hpcgym.environment.rewards import REWARDS, DRASCapability, DRASCapacity, DRASCapacityRuntime, get_reward
from hpcgym.environment.simulator import Simulation
from hpcgym.environment.workload import Workload

torch.set_num_threads(1)


def L(seconds: float) -> float:
    """The toolkit's log time scale: log1p(s) / log1p(one week)."""
    return math.log1p(seconds) / math.log1p(7 * 24 * 3600)


# ------------------------------------------------------------------------------------------ network
def test_hidden_size_rule():
    assert dras_hidden(50, 4360) == (4016, 1008)  # Table 3, Theta: 4000 / 1000
    assert dras_hidden(50, 128) == (208, 56)      # SDSC-SP2
    assert dras_hidden(50, 240) == (304, 80)      # HPC2N
    assert dras_hidden(50, 256) == (320, 80)      # Lublin-256
    assert dras_hidden(1, 4) == (32, 16)          # the floors


@pytest.mark.parametrize("window,nodes,extra", [(3, 6, 0), (10, 32, 1), (50, 128, 0), (20, 256, 1)])
def test_network_output_shapes(window, nodes, extra):
    torch.manual_seed(0)
    net = DRASNetwork(window, nodes, n_actions=window + extra)
    rows = 2 * window + nodes
    obs = torch.rand(5, rows, 2)
    logits, value = net(obs)
    assert logits.shape == (5, window + extra) and value.shape == (5,)
    flat_logits, _ = net(obs.reshape(5, -1))  # a flattened encoder vector works as well
    assert torch.allclose(flat_logits, logits)
    assert net.value(obs).shape == (5,)
    assert net.conv.weight.shape == (1, 1, 1, 2)
    assert net.body[0].in_features == rows and net.hidden == dras_hidden(window, nodes)
    no_value = DRASNetwork(window, nodes, value_head=False)
    assert no_value(obs)[1] is None and no_value(obs)[0].shape == (5, window)


def test_masked_slots_are_never_chosen_even_with_the_largest_logit():
    torch.manual_seed(0)
    window, nodes = 6, 16
    net = DRASNetwork(window, nodes)
    with torch.no_grad():
        net.policy.bias.zero_()
        net.policy.bias[4] = 1e4   # slot 4 (no job there) would win every time
        net.policy.bias[5] = 1e4
    obs = torch.rand(8, 2 * window + nodes, 2)
    mask = torch.as_tensor(np.stack([np.arange(window) < 4] * 8))  # 4 jobs wait: slots 4, 5 invalid
    assert mask[0].tolist() == [True] * 4 + [False] * 2
    raw, _ = net(obs)
    assert (raw.argmax(-1) == 4).all() or (raw.argmax(-1) == 5).all()
    scores = net.scores(obs, mask)
    assert torch.isinf(scores[:, 4:]).all() and (scores[:, 4:] < 0).all()
    assert (scores.argmax(-1) < 4).all()
    dist = net.distribution(obs, mask)
    assert isinstance(dist, MaskedCategorical)
    assert (dist.log_probs[:, 4:].exp() == 0).all()
    rng = np.random.default_rng(0)
    for _ in range(50):
        picks = choose(raw.detach().numpy(), mask.numpy(), rng)
        assert (picks < 4).all()


# ------------------------------------------------------------------------------------------ encoder
def _observation():
    return {
        "time": 1000, "procs": 6, "free": 1, "queue_length": 2,
        "queue": {"id": [7, 8], "submit": [1000, -85400], "size": [2, 3], "requested": [3600, 60],
                  "estimate": [3600, 60], "wait": [0, 86400], "rejections": [0, 0], "user": [1, 2]},
        # listed out of order on purpose: the encoder sorts by estimated end
        "running": {"id": [1, 2], "start": [900, 500], "size": [3, 2], "requested": [160, 495],
                    "estimated_end": [1060, 995]},
        "context": {},
    }


def test_encoder_on_a_hand_built_observation():
    """W = 3, N = 6 processors, priority_size = 3; L(s) = log1p(s) / log1p(604800):
    L(3600) = 8.18897 / 13.31265 = 0.61513, L(60) = 4.11087 / 13.31265 = 0.30879,
    L(86400) = 11.36675 / 13.31265 = 0.85383, L(0) = 0. 2W + N = 12 rows:

        job 7:  [2/6, L(3600)] [0 (size 2 < 3), L(0)]   = [0.33333, 0.61513] [0, 0]
        job 8:  [3/6, L(60)]   [1 (size 3 >= 3), L(86400)] = [0.5, 0.30879] [1, 0.85383]
        slot 2: padding, [0, 0] [0, 0]
        node 0: free                               [1, 0]
        nodes 1-2: job 2 (2 procs), estimated end 995 < now 1000, so 0 left: [0, 0] [0, 0]
        nodes 3-5: job 1 (3 procs), ends at 1060, 60 s left: [0, 0.30879] x 3
    """
    enc = get_encoder("dras", 3, 6, priority_size=3)
    assert isinstance(enc, DRASEncoder) and enc.shape == (12, 2) and enc.size == 24
    table = enc.encode(_observation()).reshape(enc.shape)
    expected = np.array([
        [2 / 6, 0.61513], [0, 0],
        [0.5, 0.30879], [1, 0.85383],
        [0, 0], [0, 0],
        [1, 0], [0, 0], [0, 0], [0, 0.30879], [0, 0.30879], [0, 0.30879]])
    assert np.allclose(table, expected, atol=1e-5)
    assert table[0, 1] == pytest.approx(L(3600), abs=1e-6) and table[3, 1] == pytest.approx(L(86400), abs=1e-6)
    # without priority_size the flag is 0
    assert get_encoder("dras", 3, 6).encode(_observation()).reshape(12, 2)[3, 0] == 0
    space = enc.observation_space()
    assert space.shape == (24,)
    with pytest.raises(ValueError):
        get_encoder("dras", 3, None)


def _workload(rows, procs=10):
    rows = np.array(rows, dtype=np.int64)  # id, submit, run, size (requested = run)
    return Workload(name="tiny", procs=procs, job_id=rows[:, 0], submit=rows[:, 1], run=rows[:, 2],
                    size=rows[:, 3], requested=rows[:, 2], user=np.zeros(len(rows), np.int64))


def test_encoder_on_a_simulation_observation():
    sim = Simulation(_workload([[1, 0, 100, 4], [2, 0, 50, 8], [3, 5, 10, 2]]), external=["select"])
    d = sim.reset()
    d = sim.step([1])                      # job 1 runs on 4 of 10 processors
    enc = get_encoder("dras", 4, 10)
    table = enc.encode(d.observation).reshape(enc.shape)
    assert table.min() >= 0 and table.max() <= 1
    assert table[0, 0] == pytest.approx(0.8)            # job 2: 8 of 10
    assert np.all(table[2:8] == 0)                      # slots 1-3 padding
    nodes = table[8:]
    assert nodes[:6, 0].sum() == 6 and np.all(nodes[:6, 1] == 0)
    assert np.all(nodes[6:, 0] == 0) and np.allclose(nodes[6:, 1], L(100))


# ------------------------------------------------------------------------------------------ rewards
def test_dras_rewards_on_a_tiny_scenario():
    """10 processors, FCFS, external select. Jobs (id, submit, run, size):
    A (1, 0, 100, 10), B (2, 10, 50, 4), C (3, 40, 50, 3), D (4, 70, 50, 6).

    t=0: decision 1 (queue A): start A.
    t=10: decision 2 (queue B). Since decision 1: S = {A}, t_A = 0, queue at the pick = {A}
      (B came later), t_max = 0 so the wait term is 0; n = 10, N_used = 10:
      eq. 1 = 0 + (1/3)(10/10) + (1/3)(10/10) = 2/3. eq. 2: J = {} -> 0. Wait.
    t=40, t=70: decisions 3, 4 (C, D arrive): nothing started -> 0 and 0. Wait.
    t=100: A ends, decision 5 (queue B, C, D): nothing started -> 0. Start B and D (4 + 6 = 10).
    t=100: decision 6 (queue C). S = {B, D}: t_B = 90, t_D = 30, mean 60; C waited 60, so
      t_max = 90; mean size 5; N_used = 10:
      eq. 1 = (1/3)(60/90) + (1/3)(5/10) + (1/3)(10/10) = 2/9 + 1/6 + 1/3 = 13/18.
      eq. 2: J = {C}, c = 3 waiting at the decision: -(1/60) / 3 = -1/180; read with run
      times (dras_capacity_runtime; C's estimate is its request, 50 s): -(1/50) / 3 = -1/150. Wait.
    t=150: B, D end; decision 7 (queue C): 0. Start C (t_C = 110).
    End: S = {C}, t_max = 110: eq. 1 = (1/3)(110/110) + (1/3)(3/10) + (1/3)(3/10) = 8/15;
      eq. 2: J = {} -> 0.
    """
    sim = Simulation(_workload([[1, 0, 100, 10], [2, 10, 50, 4], [3, 40, 50, 3], [4, 70, 50, 6]]),
                     external=["select"])
    capability, capacity, runtime = DRASCapability(), DRASCapacity(), DRASCapacityRuntime()
    plan = [[1], None, None, None, [2, 4], None, [3]]
    got = []
    d = sim.reset()
    times = []
    for action in plan:
        assert d is not None and d.kind == "select"
        times.append(d.time)
        got.append((capability.step(sim), capacity.step(sim), runtime.step(sim)))
        d = sim.step(action)
    assert d is None and times == [0, 10, 40, 70, 100, 100, 150]
    summary = sim.result().summary
    got.append((capability.end(sim, summary), capacity.end(sim, summary), runtime.end(sim, summary)))
    expected = [(0, 0, 0), (2 / 3, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0), (13 / 18, -1 / 180, -1 / 150), (0, 0, 0),
                (8 / 15, 0, 0)]
    assert np.allclose(got, expected, atol=1e-12)
    assert sim.started_count == 4
    assert [s[0] for s in sim.started_since(1)] == [1, 3, 2]   # indices of B, D, C


def test_capability_weights_and_the_table():
    assert DRASCapability((1, 0, 0)).w1 == 1.0
    assert isinstance(get_reward("dras_capability").make(), DRASCapability)
    assert isinstance(get_reward("dras_capacity").make(), DRASCapacity)
    assert isinstance(get_reward("dras_capacity_runtime").make(), DRASCapacityRuntime)


def test_env_service_offers_the_dras_rewards():
    from .test_service import Net, hello

    welcome = Net().request(b"a", hello("x", ["select"]))
    assert welcome["type"] == "welcome"
    offered = welcome["env"]["rewards"]
    for name in ("dras_capability", "dras_capacity"):
        assert name in REWARDS and offered[name] == REWARDS[name].description


def test_the_dras_encoder_is_found_by_name_in_a_fresh_process():
    import subprocess
    import sys

    code = ("from hpcgym.agents.encoders import get_encoder; "
            "e = get_encoder('dras', 4, 8); print(type(e).__name__, e.observation_space(4, 8).shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "DRASEncoder"
