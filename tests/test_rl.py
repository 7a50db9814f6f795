"""The RL toolkit (agents/rl): GAE by hand, masking, each algorithm learning a problem with a
known optimum, seeded determinism and exact resuming, checkpoints served over the protocol, and
the Gymnasium bridge under Gymnasium's own checker.

Everything runs on one CPU thread with tiny networks, so the whole file takes seconds.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")
torch.set_num_threads(1)

from click.testing import CliRunner  # noqa: E402

from hpcgym.agents.rl.algorithms import get_algorithm  # noqa: E402
from hpcgym.agents.rl.checkpoint import (CheckpointError, load_checkpoint, make_checkpoint,  # noqa: E402
                                         save_checkpoint)
from hpcgym.agents.rl.dql import DQLConfig, dql_update  # noqa: E402
from hpcgym.agents.rl.policy import ActorCritic, MaskedCategorical, QNetwork, choose  # noqa: E402
from hpcgym.agents.rl.runner import Runner  # noqa: E402
from hpcgym.agents.rl.serve import RLAgent  # noqa: E402
from hpcgym.agents.rl.storage import NStepReturns, ReplayBuffer, RolloutStorage, discounted_returns, gae  # noqa: E402
from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings, eval_seed  # noqa: E402

from .agents_for_tests import write_trace  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_local = Path(sys.executable).parent / "hpcgym"
HPCGYM = str(_local) if _local.exists() else (shutil.which("hpcgym") or "hpcgym")
ALGORITHMS = ("pg", "a2c", "ppo", "dql")


# ------------------------------------------------------------------------------------------ a tiny env
class TwoSlots(gym.Env):
    """Two jobs on show at every step; one is good (+1), the other not (0); 4 steps an episode.

    Observation (2 slots x 3 features): [slot valid, slot is the good one, time step / length].
    With `mask_prob`, the bad slot is sometimes masked out; taking a masked action raises. With
    `delayed`, all reward comes at the end (the number of good picks), as the hpcgym `bsld`
    reward does. The optimum: always the good slot (return 4).
    """

    LENGTH = 4

    def __init__(self, mask_prob: float = 0.25, delayed: bool = False) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2, 3), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.mask_prob, self.delayed = mask_prob, delayed

    def _observe(self) -> np.ndarray:
        self.good = int(self.np_random.integers(2))
        self.mask = np.ones(2, np.int8)
        if self.np_random.random() < self.mask_prob:
            self.mask[1 - self.good] = 0
        obs = np.zeros((2, 3), np.float32)
        obs[:, 0] = self.mask
        obs[self.good, 1] = 1.0
        obs[:, 2] = self.t / self.LENGTH
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.score = 0, 0
        return self._observe(), {"action_mask": self.mask}

    def step(self, action):
        if not self.mask[action]:
            raise AssertionError(f"masked action {action} taken")
        self.score += int(action == self.good)
        self.t += 1
        done = self.t == self.LENGTH
        reward = (self.score if done else 0) if self.delayed else int(action == self.good)
        if done:
            return np.zeros((2, 3), np.float32), float(reward), True, False, {"action_mask": np.zeros(2, np.int8)}
        return self._observe(), float(reward), False, False, {"action_mask": self.mask}


#: Small, fast settings with which each algorithm solves TwoSlots within a few epochs.
TINY = {
    "pg": {"hidden": [16], "lr": 0.01},
    "a2c": {"hidden": [16], "lr": 0.01, "n_steps": 8},
    "ppo": {"hidden": [16], "lr": 0.01, "minibatch_size": 64, "update_epochs": 4},
    "dql": {"hidden": [32], "lr": 0.005, "learning_starts": 50, "eps_decay_steps": 400, "target_update": 50},
}


def random_states(n: int, seed: int = 123) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n random TwoSlots states (any step, either slot good, some masked): obs, masks, optimum."""
    rng = np.random.default_rng(seed)
    good = rng.integers(0, 2, n)
    mask = np.ones((n, 2), bool)
    masked = rng.random(n) < 0.3
    mask[masked, 1 - good[masked]] = False
    obs = np.zeros((n, 2, 3), np.float32)
    obs[:, :, 0] = mask
    obs[np.arange(n), good, 1] = 1.0
    obs[:, :, 2] = rng.integers(0, TwoSlots.LENGTH, n)[:, None] / TwoSlots.LENGTH
    return obs, mask, good


def tiny_trainer(algorithm: str, out: Path, epochs: int, seed: int = 0, delayed: bool = False,
                 net: str = "mlp") -> Trainer:
    settings = TrainSettings(algorithm=algorithm, config={**TINY[algorithm], "net": net}, epochs=epochs,
                             trajectories=16, envs=4, seed=seed, eval_episodes=0)
    return Trainer(settings, out, device="cpu", env_fn=lambda i: TwoSlots(delayed=delayed), progress=False,
                   log=lambda m: None)


# ------------------------------------------------------------------------------------------ GAE
def test_gae_by_hand():
    """rewards (1, 0, 2), values (0.5, 1.0, 1.5), gamma 0.9, lambda 0.8 (gamma * lambda = 0.72).

    Rollout cut after step 2, bootstrap V = 2.0:
        delta_2 = 2 + 0.9 * 2.0 - 1.5 = 2.3     A_2 = 2.3
        delta_1 = 0 + 0.9 * 1.5 - 1.0 = 0.35    A_1 = 0.35 + 0.72 * 2.3   = 2.006
        delta_0 = 1 + 0.9 * 1.0 - 0.5 = 1.4     A_0 = 1.4  + 0.72 * 2.006 = 2.84432
        returns = A + V = (3.34432, 3.006, 3.8)

    The episode ends after step 1 (a new one starts at step 2), same bootstrap:
        A_2 = 2.3;  delta_1 = 0 - 1.0 = -1.0, A_1 = -1.0 (nothing carried over the end);
        A_0 = 1.4 + 0.72 * -1.0 = 0.68

    With lambda = 1 the advantage is the discounted return minus the value:
        G = (1 + 0.9 * 0 + 0.81 * (2 + 0.9 * 2), 0 + 0.9 * 3.8, 3.8) = (4.078, 3.42, 3.8)
    """
    r, v = [1.0, 0.0, 2.0], [0.5, 1.0, 1.5]
    adv, ret = gae(r, v, [False, False, False], 2.0, 0.9, 0.8)
    np.testing.assert_allclose(adv, [2.84432, 2.006, 2.3], rtol=1e-12)
    np.testing.assert_allclose(ret, [3.34432, 3.006, 3.8], rtol=1e-12)
    adv, _ = gae(r, v, [False, True, False], 2.0, 0.9, 0.8)
    np.testing.assert_allclose(adv, [0.68, -1.0, 2.3], rtol=1e-12)
    adv, ret = gae(r, v, [False, False, False], 2.0, 0.9, 1.0)
    np.testing.assert_allclose(ret, [4.078, 3.42, 3.8], rtol=1e-12)
    np.testing.assert_allclose(discounted_returns(r, [False] * 3, 2.0, 0.9), [4.078, 3.42, 3.8], rtol=1e-12)
    # the storage gives each env its own sequence, flattened env by env
    storage = RolloutStorage(2)
    for t in range(3):
        storage.add(1, np.zeros(2), np.ones(2, bool), 0, 0.0, v[t], r[t], t == 1)
        storage.add(0, np.zeros(2), np.ones(2, bool), 0, 0.0, v[t], r[t], False)
    storage.set_last_value(0, 2.0)
    storage.set_last_value(1, 2.0)
    adv, _ = storage.advantages(0.9, 0.8)
    np.testing.assert_allclose(adv, [2.84432, 2.006, 2.3, 0.68, -1.0, 2.3], rtol=1e-6)


@pytest.mark.parametrize("target, expected", [
    # one episode, rewards (0, 0, 1), values 0, gamma 1, lambda 0.5: GAE's A = (0.25, 0.5, 1), so
    # its targets A + V are (0.25, 0.5, 1); the return is 1 from every step
    ("gae", [0.25, 0.5, 1.0]),
    ("monte_carlo", [1.0, 1.0, 1.0]),
])
def test_ppo_critic_fits_the_target_it_is_told(target, expected):
    algo = get_algorithm("ppo")((3,), 2, {"hidden": [16], "gae_lambda": 0.5, "target_kl": -1.0, "value_epochs": 400,
                                         "vf_lr": 1e-2, "value_target": target}, seed=0)
    storage = RolloutStorage(1)
    for t, reward in enumerate((0.0, 0.0, 1.0)):
        storage.add(0, np.eye(3)[t], np.ones(2, bool), 0, -0.7, 0.0, reward, t == 2)
    algo.update(storage)
    np.testing.assert_allclose(algo.values(np.eye(3)), expected, atol=0.02)


def test_ppo_refuses_an_unknown_value_target():
    with pytest.raises(ValueError, match="value_target must be gae or monte_carlo"):
        get_algorithm("ppo")((3,), 2, {"value_target": "td"}, seed=0)


def test_runner_seeds_episodes_and_cuts_long_ones():
    """Episode j is reset with seed_of(j) whatever env runs it; max_steps truncates, and the
    truncated step is bootstrapped (gamma * V(last state) added to its reward)."""
    seen = []

    class Recording(TwoSlots):
        def reset(self, *, seed=None, options=None):
            seen.append(seed)
            return super().reset(seed=seed)

    runner = Runner([Recording(), Recording()], lambda j: 100 + j, max_steps=3)
    algo = get_algorithm("ppo")((2, 3), 2, {"hidden": [4], "gamma": 0.5}, seed=0)
    storage, transitions = RolloutStorage(2), []

    def on_step(t):
        transitions.append(t)
        algo.store(storage, t)

    ended = runner.run_epoch(5, algo.sample, on_step)
    assert sorted(seen) == [100, 101, 102, 103, 104] and runner.next_episode == 5
    assert [e.length for e in ended] == [3] * 5 and all(e.info["truncated"] for e in ended)
    cut = [t for t in transitions if t.truncated]
    assert len(cut) == 5 and not any(t.terminated for t in transitions)
    stored = storage.batch()
    expected = [t.reward + 0.5 * float(algo.values(t.next_obs[None])[0]) for t in cut]
    got = [float(r) for r, d in zip(stored["reward"], stored["done"]) if d]
    assert sorted(got) == pytest.approx(sorted(expected)) and sorted(got) != pytest.approx(sorted(t.reward for t in cut))


# ------------------------------------------------------------------------------------------ masking
@pytest.mark.parametrize("net", ["mlp", "conv"])
def test_masked_actions_are_never_chosen_even_with_the_largest_logit(net):
    torch.manual_seed(0)
    model = ActorCritic((4, 3), 5, net=net, hidden=(8,))
    obs = torch.rand(64, 4, 3)
    mask = torch.ones(64, 5, dtype=torch.bool)
    mask[:, 2] = False             # action 2: masked everywhere ...
    mask[::2, 4] = False
    with torch.no_grad():          # ... and given by far the largest logit
        if net == "mlp":
            head = model.actor.body[-1]
            head.weight.zero_()
            head.bias.zero_()
            head.bias[2] = 1e4
        else:                      # only slot 2 has feature 0 set; the one channel sees only it
            obs[:, :, 0] = 0.0
            obs[:, 2, 0] = 1.0
            conv = model.actor.body[0]
            conv.weight.zero_()
            conv.bias.zero_()
            conv.weight[:, 0, 0] = 1.0
            model.actor.score.weight.fill_(1e4)
            model.actor.score.bias.zero_()
    assert int(model.actor(obs).argmax(-1)[0]) == 2
    dist = model.distribution(obs, mask)
    assert torch.all(dist.log_probs[:, 2] == float("-inf"))
    assert torch.all(dist.greedy() != 2)
    scores = model.scores(obs, mask).detach().numpy()
    rng = np.random.default_rng(0)
    for _ in range(200):
        picks = choose(scores, mask.numpy(), rng)
        assert mask.numpy()[np.arange(64), picks].all()
    # log-probabilities, entropy and their gradients stay finite with -inf logits around
    loss = -dist.log_prob(torch.as_tensor(choose(scores, mask.numpy(), None))).mean() - dist.entropy().mean()
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    # a row with nothing valid (after an episode's end) gives a finite distribution, not nan
    empty = MaskedCategorical(torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.bool))
    assert torch.isfinite(empty.entropy()).all()


def test_slot_conv_computing_repeated_rows_once_gives_the_convolution_over_every_slot():
    """The conv network computes rows equal to an observation's last row (padding) once; its
    outputs and gradients must be those of the plain kernel-size-1 convolution over all slots."""
    from hpcgym.agents.rl.networks import SlotConv

    torch.manual_seed(3)
    rows = torch.rand(5, 8, 3)
    rows[0, 4:] = torch.tensor([0.0, 1.0, 1.0])        # a short queue, padded
    rows[1, 2] = rows[1, 7]                           # a row equal to the last, not at the end
    rows[2, :] = rows[2, 0]                           # every row the same
    obs = torch.cat([rows.flatten(1), torch.rand(5, 2)], dim=1)   # two globals after the table
    net = SlotConv((obs.shape[1],), 8 + 2, (6, 4), "relu", table=(0, 8, 3))
    got = net(obs)
    full = torch.cat([rows, obs[:, 24:].unsqueeze(1).expand(-1, 8, -1)], dim=2).transpose(1, 2)
    h = net.body(full)                                # the nn.Conv1d layers themselves
    want = torch.cat([net.score(h).squeeze(1), net.pooled(h.mean(dim=2))], dim=1)
    assert torch.allclose(got, want, atol=1e-6)
    (g_got,) = torch.autograd.grad(got.square().sum(), net.body[0].weight)
    (g_want,) = torch.autograd.grad(want.square().sum(), net.body[0].weight)
    assert torch.allclose(g_got, g_want, atol=1e-5)


def test_dql_target_takes_the_max_over_valid_actions_only():
    """Q(s, .) = (7.5, 0, 0) and Q_target(s', .) = (5, 100, 7) everywhere; two transitions
    taking action 0 with reward 1: one into s' with action 1 masked, one into a terminal s'.

    Targets: 1 + max(5, 7) = 8 (not 1 + 100) and 1. Huber (beta 1) gradients on Q(s, 0), batch
    mean: (7.5 - 8) / 2 = -0.25 and clip(7.5 - 1, -1, 1) / 2 = +0.5; one SGD step (lr 1) on the
    output bias: 7.5 - 0.25 = 7.25. (With the masked 100 counted: -0.5 + 0.5 = 0, no change.)
    """
    q = QNetwork((2,), 3, hidden=(4,))
    target = QNetwork((2,), 3, hidden=(4,))
    with torch.no_grad():
        for net, bias in ((q, [7.5, 0.0, 0.0]), (target, [5.0, 100.0, 7.0])):
            net.q.body[-1].weight.zero_()
            net.q.body[-1].bias.copy_(torch.tensor(bias))
    batch = {"obs": torch.zeros(2, 2), "action": torch.tensor([0, 0]), "reward": torch.tensor([1.0, 1.0]),
             "next_obs": torch.zeros(2, 2), "next_mask": torch.tensor([[True, False, True], [False, False, False]]),
             "discount": torch.tensor([1.0, 0.0]), "mask": torch.ones(2, 3, dtype=torch.bool)}
    dql_update(q, target, torch.optim.SGD(q.parameters(), lr=1.0), batch, DQLConfig(gamma=1.0, max_grad_norm=1e9))
    assert q.q.body[-1].bias[0].item() == pytest.approx(7.25)


@pytest.mark.parametrize("terminated, discounts", [(True, (0.0, 0.0)), (False, (0.25, 0.5))])
def test_n_step_returns_by_hand(terminated, discounts):
    """gamma 0.5, n 2, rewards 1, 2, 4 on states 0, 1, 2 into state 3, where the episode ends.

    Step 2 completes state 0's transition: 1 + 0.5 * 2 = 2, bootstrapped from state 2 with
    0.5^2 = 0.25. The end flushes the rest: state 1: 2 + 0.5 * 4 = 4, state 2: 4, into state 3;
    worth nothing after a terminal step, else bootstrapped with 0.5^2 and 0.5 (a cut episode).
    """
    returns = NStepReturns(n=2, gamma=0.5)
    mask = np.ones(2, dtype=bool)
    steps = [returns.push(np.array([s]), mask, s, r, np.array([s + 1]), mask, s == 2 and terminated,
                          s == 2 and not terminated) for s, r in ((0, 1.0), (1, 2.0), (2, 4.0))]
    assert steps[0] == []
    (first,) = steps[1]
    assert (first[2], first[3], first[4][0], first[6]) == (0, 2.0, 2, 0.25)
    assert [(t[2], t[3], t[4][0], t[6]) for t in steps[2]] == [(1, 4.0, 3, discounts[0]), (2, 4.0, 3, discounts[1])]
    assert returns.pending == []


def test_slot_conv_puts_its_row_scores_after_the_first_outputs_it_is_told():
    """table (0, 4, 3, 1), 6 outputs: output 0 and output 5 come from the pooled rows (the kill
    kind's no-kill action is output 0), outputs 1-4 score rows 0-3 with one kernel; so swapping
    two rows swaps their two scores and leaves the pooled outputs as they were."""
    from hpcgym.agents.rl.networks import SlotConv

    torch.manual_seed(0)
    net = SlotConv((4 * 3 + 2,), 6, (5,), "tanh", out_gain=1.0, table=(0, 4, 3, 1))
    obs = torch.randn(1, 4 * 3 + 2)
    swapped = obs.clone()
    swapped[0, 0:3], swapped[0, 6:9] = obs[0, 6:9], obs[0, 0:3]    # rows 0 and 2
    out, out_swapped = net(obs)[0], net(swapped)[0]
    assert torch.allclose(out_swapped[[0, 2, 4, 5]], out[[0, 2, 4, 5]], atol=1e-6)
    assert torch.allclose(out_swapped[[1, 3]], out[[3, 1]], atol=1e-6)
    assert not torch.allclose(out[1], out[3])


def test_a_greedy_pick_among_equal_job_rows_takes_the_first_valid_one():
    """A kernel network scores equal rows alike in exact arithmetic; a build whose kernels round
    them apart must not decide which equal job runs (docs/irl.md). Rows 1 and 3 are equal, as are
    0 and 2; an MLP weighs every slot apart, so its pick stands."""
    from hpcgym.agents.rl.networks import first_equal_slot

    obs = np.array([[0.1, 0.2, 0.3], [0.5, 0.5, 0.5], [0.1, 0.2, 0.3], [0.5, 0.5, 0.5], [0, 0, 0]], np.float32)
    mask = np.array([True, True, True, True, False])
    conv = QNetwork((5, 3), 5, net="conv", hidden=(4,))
    assert [first_equal_slot(conv, obs, mask, s) for s in range(4)] == [0, 1, 0, 1]
    assert first_equal_slot(conv, obs, np.array([True, False, True, True, False]), 3) == 3   # row 1 not valid
    assert first_equal_slot(QNetwork((5, 3), 5, net="mlp", hidden=(4,)), obs, mask, 3) == 3


def test_monte_carlo_targets_value_a_long_episode_with_a_reward_only_at_its_end():
    """A 60-step episode, 16 equivalent actions at every step, reward -1 on the last step only
    (gamma 1): every Q(s, a) is -1. Twenty random episodes in the replay buffer, 1,000 updates.

    With one-step targets (n_step 1, the DQN rule) the max over 16 noisy estimates lifts every
    bootstrap and nothing anchors the early states: Q(s_0, .) averaged near +7.5 and rising
    (measured), as plain DQL's Q rose to +212 on the terminal bsld reward. With Monte Carlo
    targets (DQL's default, n_step None) every state is learned from its real return."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    steps, actions = 60, 16
    states = rng.normal(size=(steps + 1, 8)).astype(np.float32)
    mask = np.ones(actions, dtype=bool)
    config = DQLConfig(gamma=1.0, lr=1e-3)
    buffer = ReplayBuffer(5_000, (8,), actions)
    for _ in range(20):
        returns = NStepReturns(config.n_step, config.gamma)
        for t in range(steps):
            last = t == steps - 1
            for transition in returns.push(states[t], mask, int(rng.integers(actions)), -1.0 if last else 0.0,
                                           states[t + 1], mask, last, False):
                buffer.add(*transition)
    q = QNetwork((8,), actions, hidden=(32, 32))
    target = QNetwork((8,), actions, hidden=(32, 32))
    target.load_state_dict(q.state_dict())
    optimizer = torch.optim.Adam(q.parameters(), lr=config.lr)
    for update in range(1, 1_001):
        dql_update(q, target, optimizer, buffer.sample(64, rng), config)
        if update % 50 == 0:
            target.load_state_dict(q.state_dict())
    with torch.no_grad():
        values = q(torch.as_tensor(states[:steps]))
    state_values = values.mean(1)  # over the actions: a few samples each, so single ones stray further
    assert (state_values + 1).abs().max().item() < 0.3, state_values


# ------------------------------------------------------------------------------------------ learning
@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_algorithm_learns_the_optimum(algorithm, tmp_path):
    """A few epochs on TwoSlots (a quarter of the states with the bad slot masked: a masked
    action would raise in the env): the greedy policy then picks the good slot from random states."""
    obs, mask, good = random_states(200)
    trainer = tiny_trainer(algorithm, tmp_path, epochs=20 if algorithm != "dql" else 12)
    history = trainer.train()
    assert (trainer.algo.act(obs, mask) == good).all()
    assert history[-1]["return"] > 3.0  # of 4 (random: 2.5); sampling or epsilon still explores


@pytest.mark.slow
def test_ppo_learns_from_a_delayed_reward_with_the_conv_network(tmp_path):
    """All reward at the episode's end (like the bsld reward), and the per-slot conv network."""
    obs, mask, good = random_states(200)
    trainer = tiny_trainer("ppo", tmp_path, epochs=25, delayed=True, net="conv")
    trainer.train()
    assert (trainer.algo.act(obs, mask) == good).all()


def two_job_trace(path: Path) -> Path:
    """Ten processors, two jobs of ten processors submitted together: job 1 runs 1000 s, job 2
    runs 10 s. The queue shows [1, 2]; the optimum starts job 2 (slot 1) first:
    bsld (1 + 1010/1000) / 2 = 1.005, against (1 + 1010/10) / 2 = 51 the other way."""
    path.write_text("; MaxProcs: 10\n"
                    "1 0 -1 1000 10 -1 -1 10 1000 -1 1 1 1 1 1 1 -1 -1\n"
                    "2 0 -1 10 10 -1 -1 10 10 -1 1 1 1 1 1 1 -1 -1\n")
    return path


@pytest.mark.slow
def test_ppo_on_the_real_env_finds_the_short_job_first(tmp_path):
    from hpcgym.gymbridge import make

    trace = two_job_trace(tmp_path / "two.swf")
    settings = TrainSettings(algorithm="ppo", workload={"trace": str(trace)}, options={"window": 4}, encoder="jobs",
                             config={"hidden": [16], "lr": 0.01, "minibatch_size": 32, "update_epochs": 4},
                             epochs=8, trajectories=8, envs=2, seed=1, eval_episodes=0)
    trainer = Trainer(settings, tmp_path / "run", device="cpu", progress=False, log=lambda m: None)
    trainer.train()
    env = make("select", workload={"trace": str(trace)}, options={"window": 4}, encoder="jobs")
    obs, info = env.reset(seed=5)
    assert info["action_mask"].tolist() == [1, 1, 0, 0, 0]  # two jobs, cannot wait (nothing runs)
    done = False
    first = int(trainer.algo.act(obs[None], info["action_mask"][None])[0])
    assert first == 1
    while not done:
        obs, _, done, _, info = env.step(int(trainer.algo.act(obs[None], info["action_mask"][None])[0]))
    assert info["metrics"]["mean_bsld"] == pytest.approx(1.005)


# ------------------------------------------------------------------------------------------ determinism
def _curve(path: Path) -> list[dict[str, str]]:
    with open(path / "curve.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(f)]


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {f"{m}.{n}": t for m, sd in trainer.algo.weights().items() for n, t in sd.items()}


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ppo", "dql"])
def test_same_seed_same_weights_and_curve_and_resume_is_exact(algorithm, tmp_path):
    runs = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        trainer = tiny_trainer(algorithm, tmp_path / name, epochs=4, seed=seed)
        trainer.train()
        runs[name] = trainer
    wa, wb, wc = (_weights(runs[k]) for k in "abc")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert _curve(tmp_path / "a") == _curve(tmp_path / "b")
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)     # another seed, another run
    # 2 epochs, stop, resume to 4: the same as 4 straight (weights, optimizer, RNG, episodes)
    tiny_trainer(algorithm, tmp_path / "r", epochs=2, seed=7).train()
    resumed = tiny_trainer(algorithm, tmp_path / "r", epochs=4, seed=7)
    resumed.train(resume=True)
    wr = _weights(resumed)
    assert all(torch.equal(wa[k], wr[k]) for k in wa)
    assert _curve(tmp_path / "r") == _curve(tmp_path / "a")
    files = ["epoch_000001.pt", "epoch_000002.pt", "epoch_000003.pt", "epoch_000004.pt", "model.pt"]
    if algorithm == "dql":  # the replay buffer is kept beside the newest checkpoint only
        files.insert(4, "epoch_000004.replay.pt")
    assert sorted(p.name for p in (tmp_path / "r").glob("*.pt")) == files


def test_checkpoint_round_trip_keeps_everything(tmp_path):
    algo = get_algorithm("a2c")((2, 3), 2, {"hidden": [8], "net": "conv"}, seed=3)
    algo.rng.random(5)
    path = save_checkpoint(tmp_path / "c.pt", make_checkpoint(algo, encoder="jobs", window=2, epoch=4,
                                                              env={"workload": {"trace": tmp_path}}))
    ckpt = load_checkpoint(path)
    assert (ckpt.algorithm, ckpt.kind, ckpt.encoder, ckpt.window, ckpt.epoch) == ("a2c", "select", "jobs", 2, 4)
    assert ckpt.config["net"] == "conv" and ckpt.config["hidden"] == [8]
    back = ckpt.build()
    obs, mask, _ = random_states(20)
    np.testing.assert_array_equal(back.scores(obs, mask), algo.scores(obs, mask))
    assert back.rng.random() == algo.rng.random()
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not an hpcgym checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")


# ------------------------------------------------------------------------------------------ the bridge
def test_gymnasium_check_env_and_a_random_masked_rollout(tmp_path):
    from gymnasium.utils.env_checker import check_env

    from hpcgym.gymbridge import make

    trace = write_trace(tmp_path / "t.swf", jobs=40, procs=32, seed=2)
    env = make("select", workload={"trace": str(trace), "jobs": 30, "sample": True}, encoder="jobs", seed=3)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=11)
    done, steps, total = False, 0, 0.0
    while not done:
        assert env.observation_space.contains(obs)
        action = env.action_space.sample(mask=info["action_mask"])
        obs, reward, done, truncated, info = env.step(action)
        total += reward
        steps += 1
        assert not truncated
    assert steps >= 15 and total == pytest.approx(-info["metrics"]["mean_bsld"])


# ------------------------------------------------------------------------------------------ command line


@pytest.mark.slow
def test_resume_takes_a_new_checkpoint_cadence(tmp_path):
    """`--resume --checkpoint-every N` writes every N-th epoch from then on (and the last), where
    the run began with 1; the rest of the settings stay the run's own, and a note names the options
    given with `--resume` that it does not apply."""
    from hpcgym.gymbridge.cli import main

    trace = write_trace(tmp_path / "t.swf", jobs=60, procs=32, seed=4)
    out = tmp_path / "run"
    common = ["train", "ppo", "--trace", str(trace), "--jobs", "30", "--window", "8", "--trajectories", "2",
              "--envs", "1", "--hidden", "8", "--out", str(out), "--eval-episodes", "0", "--device", "cpu",
              "--no-progress"]
    for extra in (["--epochs", "1"], ["--epochs", "4", "--resume", "--checkpoint-every", "3"]):
        result = CliRunner().invoke(main, [*common, *extra])
        assert result.exit_code == 0, result.output
    assert "not with --envs, --hidden, --jobs, --trace, --trajectories, --window given here" in result.output
    assert "--checkpoint-every" not in result.output.split("note:")[1].split("\n")[0]
    assert sorted(p.name for p in out.glob("epoch_*.pt")) == ["epoch_000001.pt", "epoch_000003.pt", "epoch_000004.pt"]
    assert [r["epoch"] for r in _curve(out)] == ["1", "2", "3", "4"]


@pytest.mark.slow
def test_train_command_then_serve_the_checkpoint_over_the_protocol(tmp_path, ipc_dir):
    """`hpcgym train` (in process), `--resume`, then `hpcgym env` + `hpcgym agent --model` as
    subprocesses: the served policy schedules exactly as the in-process one (greedy, and sampling
    with a seed). The held-out evaluation is a comparison of `hpcgym compare`'s harness whose
    numbers are the greedy policy's in the env it was trained in, on the held-out seeds."""
    from hpcgym.environment.simulator import simulate
    from hpcgym.environment.spec import load_workload, sim_config
    from hpcgym.gymbridge import make
    from hpcgym.gymbridge.cli import main

    trace = write_trace(tmp_path / "t.swf", jobs=80, procs=32, seed=4)
    out = tmp_path / "run"
    common = ["train", "ppo", "--trace", str(trace), "--jobs", "40", "--window", "16", "--trajectories", "4",
              "--envs", "2", "--hidden", "16", "--set", "minibatch_size=64", "--out", str(out), "--seed", "3",
              "--eval-episodes", "2", "--device", "cpu", "--no-progress"]
    result = CliRunner().invoke(main, [*common, "--epochs", "1"])
    assert result.exit_code == 0, result.output
    assert "held-out evaluation" in result.output and "sjf" in result.output
    result = CliRunner().invoke(main, [*common, "--epochs", "2", "--resume"])
    assert result.exit_code == 0, result.output
    assert [r["epoch"] for r in _curve(out)] == ["1", "2"]
    evaluation = json.loads((out / "eval.json").read_text())
    assert set(evaluation["summary"]) == {"ppo", "fcfs", "sjf"} and evaluation["episodes"] == 2
    # a run folder is not overwritten by accident
    again = CliRunner().invoke(main, [*common, "--epochs", "1"])
    assert again.exit_code == 2 and "--resume" in again.output

    model = out / "model.pt"
    ckpt = load_checkpoint(model)
    assert (ckpt.algorithm, ckpt.kind, ckpt.window, ckpt.encoder) == ("ppo", "select", 16, "jobs+nodes")
    # provenance: the first start and the resume, the resume naming the checkpoint it continued
    first, resume = ckpt.trainer["provenance"]
    digest = __import__("hashlib").sha256((out / "epoch_000001.pt").read_bytes()).hexdigest()
    assert first["checkpoints"] == {} and resume["checkpoints"] == {str((out / "epoch_000001.pt").resolve()): digest}
    assert resume["settings"]["epochs"] == 2 and first["commit"] == resume["commit"]
    assert evaluation["provenance"]["checkpoints"] == {
        str(model.resolve()): __import__("hashlib").sha256(model.read_bytes()).hexdigest()}

    # the in-process reference: the policy in HpcEnv (as trained), and as an Agent in simulate()
    env = make("select", workload={"trace": str(trace), "jobs": 40, "sample": True}, options={"window": 16})
    algo = ckpt.build()

    def greedy_episode(seed: int) -> dict:
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, done, _, info = env.step(int(algo.act(obs[None], info["action_mask"][None])[0]))
        return info["metrics"]

    # the evaluation: the harness of `hpcgym compare` (in process, one worker), started over after
    # --resume, on the held-out seeds, with the model and the baselines under the training options
    run = json.loads((out / "eval" / "run.json").read_text())
    assert (run["mode"], run["workers"], run["baseline"], len(run["history"])) == ("inproc", 1, "fcfs", 1)
    assert run["policies"][0]["agents"] == [{"kinds": ["select"], "source": "model", "target": str(model.resolve())}]
    assert run["options"] == {"backfill": "easy", "window": 16}
    seeds = evaluation["per_episode"]["seed"]
    assert seeds == run["sample_seeds"] == [eval_seed(3), eval_seed(3) + 1] and min(seeds) >= 2 ** 30
    for k, seed in enumerate(seeds):
        assert evaluation["per_episode"]["ppo"][k] == greedy_episode(seed)
        workload = load_workload({"trace": str(trace), "jobs": 40, "sample": seed}, seed)
        assert evaluation["per_episode"]["sjf"][k] == dict(
            simulate(workload, sim_config({"backfill": "easy", "window": 16}, seed), policy="sjf").summary)
    assert evaluation["summary"]["ppo"]["mean_bsld"] == pytest.approx(
        np.mean([m["mean_bsld"] for m in evaluation["per_episode"]["ppo"]]))

    seed = 21
    reference = greedy_episode(seed)
    workload = load_workload({"trace": str(trace), "jobs": 40, "sample": seed}, seed)
    assert simulate(workload, sim_config({}, seed), agents={"select": RLAgent(model)}).summary == reference
    assert reference != simulate(workload, sim_config({}, seed)).summary  # it is not just FCFS
    sampled = simulate(workload, sim_config({}, seed), agents={"select": RLAgent(model, greedy=False, seed=5)}).summary

    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    procs = []
    try:
        with open(tmp_path / "env.err", "wb") as err:
            procs.append(subprocess.Popen([HPCGYM, "env", "--bind", bind, "--trace", str(trace)], cwd=ROOT,
                                          stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL))
        served = {}
        for name, extra in (("greedy", []), ("sampling", ["--sampling", "--sampling-seed", "5"])):
            agent = subprocess.run([HPCGYM, "agent", "--model", str(model), "--connect", bind, "--seed", str(seed),
                                    "--jobs", "40", "--sample", str(seed), "--json", "--timeout", "30", *extra],
                                   cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert agent.returncode == 0, agent.stderr + (tmp_path / "env.err").read_text()
            line = json.loads(agent.stdout.strip().splitlines()[-1])
            assert line["reason"] == "completed"
            served[name] = {k: v for k, v in line.items() if k not in ("episode", "reason")}
        assert served["greedy"] == reference
        assert served["sampling"] == sampled
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)


def test_no_wait_policy_acts_the_same_in_the_env_and_as_an_agent(tmp_path):
    """`no_wait` (the papers' select: pick a job whenever one can be picked): the wrapped env's
    greedy episode and the checkpoint served through simulate() schedule alike, and never wait
    while a job could be picked."""
    from hpcgym.agents.slots import drop_last_slot as drop_wait
    from hpcgym.gymbridge.training.trainer import NoWait
    from hpcgym.environment.simulator import simulate
    from hpcgym.environment.spec import load_workload, sim_config
    from hpcgym.gymbridge import make

    assert drop_wait(np.array([1, 0, 1], np.int8)).tolist() == [1, 0, 0]
    assert drop_wait(np.array([0, 0, 1], np.int8)).tolist() == [0, 0, 1]  # nothing else: waiting stays
    trace = write_trace(tmp_path / "t.swf", jobs=50, procs=32, seed=6)
    env = NoWait(make("select", workload={"trace": str(trace)}, options={"window": 8}, encoder="jobs+nodes"))
    algo = get_algorithm("ppo")(env.observation_space.shape, env.action_space.n, {"hidden": [8]}, seed=2)
    obs, info = env.reset(seed=4)
    done, waits = False, 0
    while not done:
        action = int(algo.act(obs[None], info["action_mask"][None])[0])
        waits += action == 8
        obs, _, done, _, info = env.step(action)
    ckpt = make_checkpoint(algo, encoder="jobs+nodes", window=8, env={"no_wait": True})
    served = simulate(load_workload({"trace": str(trace)}, 4), sim_config({}, 4),
                      agents={"select": RLAgent(ckpt)}).summary
    assert served == info["metrics"]
    assert waits == 0


def test_agent_command_needs_an_agent_or_a_model(tmp_path):
    from hpcgym.gymbridge.cli import main

    result = CliRunner().invoke(main, ["agent", "--connect", "ipc:///nonexistent"])
    assert result.exit_code == 2 and "--model" in result.output
    (tmp_path / "junk.pt").write_bytes(b"junk")
    result = CliRunner().invoke(main, ["agent", "--model", str(tmp_path / "junk.pt")])
    assert result.exit_code == 2 and "not an hpcgym checkpoint" in result.output


@pytest.mark.slow
def test_train_outside_a_terminal_logs_one_line_per_epoch_and_notes_the_overlapping_evaluation(tmp_path,
                                                                                               monkeypatch):
    """stderr is no terminal under CliRunner (as in a batch job): no bar, one line per epoch,
    each with the running episode count, and progress lines within epochs (rate-limited; here
    every episode, as the limit is 0 s); and a note that without --train-fraction the held-out
    windows come from the same trace (once, at the start). The CSV agrees with the lines, and
    curve.png draws it."""
    from hpcgym.gymbridge import progress
    from hpcgym.gymbridge.cli import main

    monkeypatch.setattr(progress, "EVERY", 0.0)
    trace = write_trace(tmp_path / "t.swf", jobs=60, procs=32, seed=4)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", "ppo", "--trace", str(trace), "--jobs", "20", "--window", "8",
                                       "--trajectories", "2", "--envs", "1", "--hidden", "8", "--epochs", "3",
                                       "--eval-episodes", "1", "--device", "cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in lines] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    curve = _curve(out)
    for line, row in zip(lines, curve):
        assert f": {row['episodes_total']} episodes, mean return {float(row['return']):.4g}, " \
               f"mean bsld {float(row['mean_bsld']):.4g}, " in line and line.endswith(" s")
    assert [row["episodes_total"] for row in curve] == ["2", "4", "6"]
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # its picture beside it
    within = [line.split(" (")[0] for line in result.output.splitlines() if line.startswith("train: ")]
    assert within == [f"train: {n}/6 episodes" for n in range(0, 7)]
    assert result.output.count("--train-fraction 0.8") == 1
    assert result.output.splitlines()[-1].startswith("  (paired differences")


@pytest.mark.slow
def test_train_names_the_algorithm_as_asked_and_keeps_quiet_with_a_chronological_split(tmp_path):
    """dras-ppo is PPO with DRAS's defaults: the summary says dras-ppo, as typed. With
    --train-fraction no overlap note is printed; --no-progress prints no epoch lines either."""
    from hpcgym.gymbridge.cli import main

    trace = write_trace(tmp_path / "t.swf", jobs=80, procs=16, seed=5)
    result = CliRunner().invoke(main, ["train", "dras-ppo", "--trace", str(trace), "--train-fraction", "0.5",
                                       "--jobs", "10", "--window", "4", "--trajectories", "3", "--envs", "1",
                                       "--epochs", "1", "--eval-episodes", "1", "--device", "cpu",
                                       "--no-progress", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert any(line.startswith("dras-ppo on select+backfill: 1 epochs, 3 episodes")
               for line in result.output.splitlines()), result.output
    assert "--train-fraction" not in result.output
    assert not [line for line in result.output.splitlines() if line.startswith(("epoch ", "train: "))]
    table = result.output.split("held-out evaluation")[1].splitlines()
    assert table[2].split()[0] == "dras-ppo"   # the model's row says what was trained, not `ppo`


def test_the_curve_picture_is_a_note_without_matplotlib(tmp_path, monkeypatch, capsys):
    """`hpcgym train` draws curve.png with matplotlib, an optional extra: without it, one line
    says so and the run still succeeds."""
    from hpcgym.gymbridge.training.command import _draw_curve

    (tmp_path / "curve.csv").write_text("epoch,return,seconds\n1,-3.5,0.2\n2,-2.0,0.2\n")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    _draw_curve(tmp_path, "ppo on select")
    assert capsys.readouterr().err == "note: curve.png skipped: matplotlib is not installed (pip install matplotlib)\n"
    assert not (tmp_path / "curve.png").exists()
    monkeypatch.undo()  # matplotlib back
    _draw_curve(tmp_path, "ppo on select")
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_evaluation_table_widens_for_long_names():
    """Every row's numbers start in the same column, whatever the length of the policy names
    (the teacher baselines' names are long)."""
    from hpcgym.gymbridge.training.command import evaluation_table

    metrics = {"mean_bsld": 1.5, "mean_wait": 20.0, "utilization": 0.5, "max_bsld": 3.0}
    long_name = "kill:rlschert-rule,fcfs"
    lines = evaluation_table({"summary": {"rlschert": metrics, long_name: metrics},
                              "failed": {"x": "boom"}}).splitlines()
    assert lines[1].index("1.50") == lines[2].index("1.50") and lines[2].startswith(f"  {long_name}  ")
    assert lines[3] == "  x" + " " * 24 + "failed: boom"   # the longest name (23 characters) and 2 spaces


def test_discarded_episodes_leave_no_steps_and_are_replaced():
    """An env whose episodes last 3 steps when started with an even seed and 10 otherwise: with
    discard_after 5 every odd-seeded episode is thrown away after 5 steps, its steps dropped from
    the storage, and another episode takes its place until 4 have ended."""
    from hpcgym.agents.rl.runner import Runner
    from hpcgym.agents.rl.storage import RolloutStorage

    class Lengths(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            self.left = 3 if seed % 2 == 0 else 10
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.left -= 1
            return np.zeros(1, np.float32), 1.0, self.left == 0, False, {}

    storage = RolloutStorage(1)
    runner = Runner([Lengths()], seed_of=lambda j: j, discard_after=5)

    def policy(obs, mask, rngs):
        return np.zeros(len(obs), int), {}

    ended = runner.run_epoch(4, policy, lambda t: storage.add(t.env, t.obs, t.mask, t.action, 0.0, 0.0, t.reward,
                                                              t.done), storage.discard_open)
    assert [e.seed for e in ended] == [0, 2, 4, 6] and runner.discarded == 3     # seeds 1, 3, 5 thrown away
    assert len(storage) == 4 * 3 and all(storage.steps[0]["done"][k] == (k % 3 == 2) for k in range(12))
    with pytest.raises(ValueError, match="drop their steps"):
        Runner([Lengths()], seed_of=lambda j: j, discard_after=5).run_epoch(1, policy)


def test_learning_curve_figures_read_every_run_and_keep_resumed_gaps(tmp_path):
    """The docs' curve figures and train's curve.png come from one package function: a panel
    reads each run's column by label, an empty cell (a column added on a resume) is a gap, not a
    zero, and the picture is written."""
    from hpcgym.gymbridge.compare.report import Panel, read_curve, write_curves

    for name, text in (("a", "epoch,return,kills\n1,-3.5,\n2,-2.0,4\n"), ("b", "epoch,return\n1,1.0\n2,0.5\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "curve.csv").write_text(text)
    kills = read_curve(tmp_path / "a")["kills"]
    assert math.isnan(kills[0]) and kills[1] == 4.0
    panel = Panel("return").runs({"seed a": tmp_path / "a", "seed b": tmp_path / "b" / "curve.csv"})
    assert panel.lines == {"seed a": ([1.0, 2.0], [-3.5, -2.0]), "seed b": ([1.0, 2.0], [1.0, 0.5])}
    write_curves([panel, Panel("kills").runs({"a": tmp_path / "a"}, y="kills")], tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_adam_steps_as_torchs_without_importing_dynamo():
    # the same updates bit for bit as torch.optim.Adam, and no torch._dynamo import (1.3 s a
    # process) on the way: checked in a fresh interpreter
    code = ("import sys, torch\n"
            "from hpcgym.agents.rl.algorithm import Adam\n"
            "torch.manual_seed(0)\n"
            "x, nets = torch.randn(16, 5), [torch.nn.Linear(5, 3) for _ in range(2)]\n"
            "nets[1].load_state_dict(nets[0].state_dict())\n"
            "start = nets[0].weight.detach().clone()\n"
            "def train(net, opt):\n"
            "    for _ in range(20):\n"
            "        opt.zero_grad(); (net(x) ** 2).mean().backward(); opt.step()\n"
            "train(nets[0], Adam(nets[0].parameters(), lr=1e-2))\n"
            "assert 'torch._dynamo' not in sys.modules\n"
            "train(nets[1], torch.optim.Adam(nets[1].parameters(), lr=1e-2))\n"
            "assert not torch.equal(nets[0].weight, start)\n"
            "assert all(torch.equal(a, b) for a, b in zip(nets[0].parameters(), nets[1].parameters()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_free_threads_caps_by_affinity_and_idle_cores(monkeypatch):
    from hpcgym.gymbridge.training import trainer

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(trainer.time, "sleep", lambda s: None)
    # /proc/stat: 4 cores; between the two reads 400 ticks, 150 idle and 50 iowait: 4 * 200/400 = 2 cores idle
    stats = iter(["cpu 100 0 100 100 0 0 0 0\ncpu0 1\ncpu1 1\ncpu2 1\ncpu3 1\n",
                  "cpu 200 0 200 250 50 0 0 0\ncpu0 1\ncpu1 1\ncpu2 1\ncpu3 1\n"])
    monkeypatch.setattr("builtins.open", lambda *a, **k: __import__("io").StringIO(next(stats)))
    assert trainer.free_threads(8) == 2
    assert trainer.free_threads(1) == 1   # one thread asked: nothing read
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert trainer.free_threads(8) == 1   # one usable core (taskset): nothing read
