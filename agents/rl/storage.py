"""Rollout storage with GAE, n-step returns and a replay buffer. `dones[t]`: the episode ended right after step t
(nothing is bootstrapped across it); `last_value`: V after the last stored step."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def gae(rewards: Sequence[float], values: Sequence[float], dones: Sequence[bool], last_value: float,
        gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns (advantages + values) of one env's consecutive steps.

        delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}

    lam = 1 gives the Monte Carlo return minus the baseline; lam = 0 the one-step TD error.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    dones = np.asarray(dones, dtype=bool)
    advantages = np.zeros(len(rewards))
    next_value, next_advantage = float(last_value), 0.0
    for t in reversed(range(len(rewards))):
        live = 0.0 if dones[t] else 1.0
        delta = rewards[t] + gamma * next_value * live - values[t]
        next_advantage = delta + gamma * lam * live * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values


def discounted_returns(rewards: Sequence[float], dones: Sequence[bool], last_value: float,
                       gamma: float) -> np.ndarray:
    """G_t = r_t + gamma * G_{t+1}, restarting after each done (the REINFORCE target)."""
    returns = np.zeros(len(rewards))
    running = float(last_value)
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running * (0.0 if dones[t] else 1.0)
        returns[t] = running
    return returns


class RolloutStorage:
    """What on-policy methods collect: per env, its steps in order; flattened by `batch`."""

    #: `teacher`: the action a teacher agent would take in the step's state, -1 where none
    #: (imitation, agents/rl/imitation.py).
    FIELDS = ("obs", "mask", "action", "logp", "value", "reward", "done", "teacher")
    DTYPES = {"mask": torch.bool, "action": torch.long, "done": torch.bool, "teacher": torch.long}

    def __init__(self, n_envs: int) -> None:
        self.n_envs = n_envs
        self.steps: list[dict[str, list]] = [{f: [] for f in self.FIELDS} for _ in range(n_envs)]
        self.last_values = [0.0] * n_envs

    def add(self, env: int, obs: np.ndarray, mask: np.ndarray, action: int, logp: float, value: float,
            reward: float, done: bool, teacher: int = -1) -> None:
        self.add_steps(env, [obs], [mask], [action], [logp], [value], [reward], [done], [teacher])

    def add_steps(self, env: int, obs: np.ndarray, mask: np.ndarray, action: Sequence[int], logp: Sequence[float],
                  value: Sequence[float], reward: Sequence[float], done: Sequence[bool],
                  teacher: Sequence[int]) -> None:
        """Add consecutive steps of env at once (one row or entry per step in each)."""
        s = self.steps[env]
        for name, v in zip(self.FIELDS, (obs, mask, action, logp, value, reward, done, teacher)):
            s[name].extend(v)

    def discard_open(self, env: int) -> None:
        """Drop env's steps since its last episode end (an episode thrown away unfinished)."""
        s = self.steps[env]
        keep = len(s["done"])
        while keep and not s["done"][keep - 1]:
            keep -= 1
        for values in s.values():
            del values[keep:]

    def set_last_value(self, env: int, value: float) -> None:
        """V of the state after env's last stored step (bootstrap when that step did not end it)."""
        self.last_values[env] = float(value)

    def __len__(self) -> int:
        return sum(len(s["action"]) for s in self.steps)

    def advantages(self, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
        """GAE advantages and returns of every stored step, in `batch` order."""
        adv, ret = [], []
        for env, s in enumerate(self.steps):
            if s["action"]:
                a, r = gae(s["reward"], s["value"], s["done"], self.last_values[env], gamma, lam)
                adv.append(a)
                ret.append(r)
        return (np.concatenate(adv), np.concatenate(ret)) if adv else (np.zeros(0), np.zeros(0))

    def monte_carlo_returns(self, gamma: float) -> np.ndarray:
        out = [discounted_returns(s["reward"], s["done"], self.last_values[env], gamma)
               for env, s in enumerate(self.steps) if s["action"]]
        return np.concatenate(out) if out else np.zeros(0)

    def batch(self, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """Every stored step as tensors: obs, mask, action, logp, value, reward, done, teacher."""
        steps = [s for s in self.steps if s["action"]]
        out = {}
        for name in self.FIELDS:
            values = [v for s in steps for v in s[name]]
            array = np.stack(values) if name in ("obs", "mask") else np.asarray(values)
            out[name] = torch.as_tensor(array, device=device).to(self.DTYPES.get(name, torch.float32))
        return out


class NStepReturns:
    """One env's steps as n-step transitions (s_t, a_t, R, s_{t+k}, gamma^k, 0 after a terminal step), since a reward
    that comes only at the end of a long episode would reach early states one biased bootstrap at a time."""

    def __init__(self, n: int | None, gamma: float) -> None:
        """n None: Monte Carlo (every transition waits for its episode's end)."""
        self.n, self.gamma = n, gamma
        self.pending: list[tuple[np.ndarray, np.ndarray, int, float]] = []

    def push(self, obs, mask, action, reward, next_obs, next_mask, terminated: bool, truncated: bool) -> list[tuple]:
        """Add one step; return the transitions it completes, oldest first."""
        self.pending.append((obs, mask, action, float(reward)))
        if terminated or truncated:
            return self._flush(next_obs, next_mask, terminated)
        if self.n is None or len(self.pending) < self.n:
            return []
        ret = sum(self.gamma ** k * r for k, (*_, r) in enumerate(self.pending))
        o, m, a, _ = self.pending.pop(0)
        return [(o, m, a, ret, next_obs, next_mask, self.gamma ** self.n)]

    def _flush(self, next_obs, next_mask, terminated: bool) -> list[tuple]:
        out, ret = [], 0.0
        for k, (o, m, a, r) in enumerate(reversed(self.pending), start=1):
            ret = r + self.gamma * ret
            out.append((o, m, a, ret, next_obs, next_mask, 0.0 if terminated else self.gamma ** k))
        self.pending = []
        return out[::-1]


class ReplayBuffer:
    """A ring buffer of transitions (s, mask, a, R, s', mask', discount) for off-policy learning:
    the target is R + discount * max Q(s', .), discount 0 when s' is terminal."""

    FIELDS = ("obs", "mask", "action", "reward", "next_obs", "next_mask", "discount")

    def __init__(self, capacity: int, obs_shape: Sequence[int], n_actions: int) -> None:
        self.capacity, self.size, self.pos = capacity, 0, 0
        self.obs, self.next_obs = (np.zeros((capacity, *obs_shape), dtype=np.float32) for _ in range(2))
        self.mask, self.next_mask = (np.zeros((capacity, n_actions), dtype=bool) for _ in range(2))
        self.action = np.zeros(capacity, dtype=np.int64)
        self.reward, self.discount = (np.zeros(capacity, dtype=np.float32) for _ in range(2))

    def add(self, obs, mask, action, reward, next_obs, next_mask, discount) -> None:
        i = self.pos
        self.obs[i], self.mask[i], self.action[i], self.reward[i] = obs, mask, action, reward
        self.next_obs[i], self.next_mask[i], self.discount[i] = next_obs, next_mask, discount
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator,
               device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        idx = rng.integers(0, self.size, size=batch_size)
        return {name: torch.as_tensor(getattr(self, name)[idx], device=device) for name in self.FIELDS}

    def state_dict(self) -> dict:
        n = self.size
        return {"size": n, "pos": self.pos,
                **{name: torch.from_numpy(getattr(self, name)[:n].copy()) for name in self.FIELDS}}

    def load_state_dict(self, state: dict, gamma: float = 1.0) -> None:
        """`gamma` reads a buffer saved before the discount field (one-step, with `done`)."""
        n = self.size = int(state["size"])
        self.pos = int(state["pos"])
        if "discount" not in state:
            state = {**state, "discount": gamma * (~state["done"]).float()}
        for name in self.FIELDS:
            getattr(self, name)[:n] = state[name].numpy()
