"""Deep Q-learning with replay and a target network (max over the next state's valid actions only). `n_step=1` is DQN
(the DRAS and IRL recipes); the default (None) is the Monte Carlo return, since hpcgym's end-of-episode rewards make
one-step targets diverge (docs/performance.md, "Learning across seeds")."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from .algorithm import Adam, Algorithm, NetworkConfig, episode_stats
from .policy import QNetwork, choose, masked_logits
from .storage import NStepReturns, ReplayBuffer


@dataclass
class DQLConfig(NetworkConfig):
    activation: str = "relu"
    lr: float = 5e-4
    gamma: float = 1.0
    buffer_size: int = 20_000
    batch_size: int = 64
    learning_starts: int = 200
    train_freq: int = 1
    target_update: int = 250
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay_steps: int = 5_000
    eps_decay: float | None = None  # set: epsilon *= eps_decay per gradient update, down to eps_end (DRAS: 0.995)
    double: bool = False            # Double DQN: pick a' with the online net, value it with the target
    n_step: int | None = None       # steps summed before bootstrapping (None: the whole episode, Monte Carlo; 1: DQN)
    max_grad_norm: float = 10.0
    # runs recorded before n_step existed (713fd18) bootstrapped after one step
    RECORDED_BEFORE: ClassVar[dict[str, Any]] = {"n_step": 1}


def epsilon(config: DQLConfig, step: int, updates: int = 0) -> float:
    """Linear from eps_start to eps_end over eps_decay_steps env steps, or with `eps_decay`
    geometric per gradient update (as DRAS-DQL: 1.0, decaying by 0.995)."""
    if config.eps_decay is not None:
        return max(config.eps_end, config.eps_start * config.eps_decay ** updates)
    frac = min(1.0, step / max(1, config.eps_decay_steps))
    return config.eps_start + frac * (config.eps_end - config.eps_start)


def dql_update(q: nn.Module, target: nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
               config: DQLConfig) -> dict[str, float]:
    """One minibatch step on the masked-max TD target."""
    with torch.no_grad():
        next_mask = batch["next_mask"]
        if config.double:
            best = masked_logits(q(batch["next_obs"]), next_mask).argmax(1, keepdim=True)
            next_q = target(batch["next_obs"]).gather(1, best).squeeze(1)
        else:
            next_q = masked_logits(target(batch["next_obs"]), next_mask).max(1).values
        # A terminal state (discount 0) or one with no valid action is worth 0: never read its -inf/garbage max.
        next_q = torch.where((batch["discount"] == 0) | ~next_mask.any(1), torch.zeros_like(next_q), next_q)
        y = batch["reward"] + batch["discount"] * next_q
    q_taken = q(batch["obs"]).gather(1, batch["action"].unsqueeze(1)).squeeze(1)
    loss = nn.functional.smooth_l1_loss(q_taken, y)
    optimizer.zero_grad()
    loss.backward()
    grad_norm = float(nn.utils.clip_grad_norm_(q.parameters(), config.max_grad_norm))
    optimizer.step()
    return {"loss": loss.item(), "q": q_taken.mean().item(), "grad_norm": grad_norm}


class DQL(Algorithm):
    name = "dql"
    Config = DQLConfig

    def build(self) -> None:
        c = self.config
        if c.net == "dras":  # DRAS-DQL: the per-job Q network
            from .dras_networks import dras_network

            self.q = dras_network(self.obs_shape, self.n_actions, c.table, c.hidden, q_values=True).to(self.device)
        else:
            self.q = QNetwork(self.obs_shape, self.n_actions, c.net, c.hidden, c.activation, c.table).to(self.device)
        self.target = copy.deepcopy(self.q)
        self.optimizer = Adam(self.q.parameters(), lr=c.lr)
        self.buffer = ReplayBuffer(c.buffer_size, self.obs_shape, self.n_actions)
        self.env_steps = 0

    def acting_network(self) -> nn.Module:
        return self.q

    def epsilon_greedy(self, obs: np.ndarray, mask: np.ndarray, rngs: Sequence[np.random.Generator] | None = None
                       ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A runner policy: row r explores (uniform over its valid actions) with probability
        epsilon, drawn from rngs[r] (without them, from the algorithm's generator)."""
        greedy = choose(self.scores(obs, mask), mask, None)
        uniform = choose(np.zeros(mask.shape), mask, self.rng if rngs is None else rngs)
        draws = self.rng.random(len(obs)) if rngs is None else np.array([g.random() for g in rngs])
        explore = draws < epsilon(self.config, self.env_steps, self.updates)
        return np.where(explore, uniform, greedy), {}

    def train_epoch(self, runner, episodes: int) -> dict[str, float]:
        c = self.config
        losses: list[dict[str, float]] = []
        returns: dict[int, NStepReturns] = {}

        def on_step(t) -> None:
            # a truncated episode is not terminal: its next state keeps its value
            pending = returns.setdefault(t.env, NStepReturns(c.n_step, c.gamma))
            for transition in pending.push(t.obs, t.mask, t.action, t.reward, t.next_obs, t.next_mask,
                                           t.terminated, t.truncated):
                self.buffer.add(*transition)
            self.env_steps += 1
            # n-step transitions reach the buffer n steps late (Monte Carlo ones at the episode's end)
            if self.env_steps >= c.learning_starts and self.env_steps % c.train_freq == 0 and self.buffer.size:
                losses.append(dql_update(self.q, self.target, self.optimizer,
                                         self.buffer.sample(c.batch_size, self.rng, self.device), c))
                self.updates += 1
                if self.updates % c.target_update == 0:
                    self.target.load_state_dict(self.q.state_dict())

        ended = runner.run_epoch(episodes, self.epsilon_greedy, on_step)
        mean = {k: float(np.mean([x[k] for x in losses])) for k in losses[0]} if losses else {}
        return {**episode_stats(ended), **mean, "epsilon": epsilon(c, self.env_steps, self.updates), "updates": len(losses)}

    def acting_state(self) -> dict[str, Any]:
        return {**super().acting_state(), "env_steps": self.env_steps}   # epsilon's clock

    def load_acting_state(self, state: dict[str, Any]) -> None:
        super().load_acting_state(state)
        self.env_steps = int(state["env_steps"])

    def extra_state(self) -> dict[str, Any]:
        return {"env_steps": self.env_steps, "buffer": self.buffer.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.env_steps = int(state.get("env_steps", 0))
        if "buffer" in state:
            self.buffer.load_state_dict(state["buffer"], self.config.gamma)
