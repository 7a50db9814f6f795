"""Advantage actor-critic (A2C, synchronous A3C): the envs step together for `n_steps` rounds, then one update on the
GAE advantage bootstrapped from where each episode stands (gae_lambda 1: the n-step return)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .algorithm import ActorCriticAlgorithm, PolicyNetworkConfig, episode_stats, explained_variance
from .storage import RolloutStorage


@dataclass
class A2CConfig(PolicyNetworkConfig):
    lr: float = 7e-4
    gamma: float = 1.0
    gae_lambda: float = 1.0
    n_steps: int = 32               # rounds per update (each round: one step in every running env)
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    normalize_advantages: bool = False
    max_grad_norm: float = 0.5


def a2c_update(model, optimizer_step, batch: dict[str, torch.Tensor], advantages: torch.Tensor,
               returns: torch.Tensor, config: A2CConfig) -> dict[str, float]:
    """One synchronous actor-critic step with an entropy bonus."""
    if config.normalize_advantages and len(advantages) > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    dist = model.distribution(batch["obs"], batch["mask"])
    policy_loss = -(dist.log_prob(batch["action"]) * advantages).mean()
    value_loss = ((model.value(batch["obs"]) - returns) ** 2).mean()
    entropy = dist.entropy().mean()
    grad_norm = optimizer_step(policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy)
    return {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy.item(),
            "grad_norm": grad_norm}


class A2C(ActorCriticAlgorithm):
    name = "a2c"
    Config = A2CConfig

    def train_epoch(self, runner, episodes: int) -> dict[str, float]:
        c = self.config
        runner.start_epoch(episodes)
        ended, updates = [], []
        while not runner.epoch_done:
            storage = RolloutStorage(len(runner.envs))
            for _ in range(c.n_steps):
                ended += runner.round(self.sample, lambda t: self.store(storage, t))
                if runner.epoch_done:
                    break
            for i in runner.running():  # episodes going on: bootstrap from where they stand
                storage.set_last_value(i, float(self.values(runner.obs[i][None])[0]))
            if len(storage):
                updates.append(self.update(storage))
        mean = {k: float(np.mean([u[k] for u in updates])) for k in updates[0]} if updates else {}
        return {**episode_stats(ended), **mean, "updates": len(updates)}

    def update(self, storage: RolloutStorage) -> dict[str, float]:
        """One actor-critic step on the steps in `storage` (one rollout segment): GAE advantages
        and returns, bootstrapped from its last values, then `a2c_update`."""
        c = self.config
        batch = storage.batch(self.device)
        adv, ret = (torch.as_tensor(x, device=self.device, dtype=torch.float32)
                    for x in storage.advantages(c.gamma, c.gae_lambda))
        stats = a2c_update(self.model, self.clip_and_step, batch, adv, ret, c)
        with torch.no_grad():
            stats["explained_variance"] = explained_variance(self.model.value(batch["obs"]), ret)
        return stats
