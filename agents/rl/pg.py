"""REINFORCE with a learned value baseline: whole episodes per epoch, then steps on -mean(log pi(a_t|s_t) (G_t -
V(s_t))) + vf_coef mean((V - G_t)^2); the baseline only lowers the variance."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .algorithm import ActorCriticAlgorithm, PolicyNetworkConfig, episode_stats, explained_variance
from .storage import RolloutStorage


@dataclass
class PGConfig(PolicyNetworkConfig):
    lr: float = 1e-3
    gamma: float = 1.0               # episodes are finite; the papers use undiscounted returns
    vf_coef: float = 0.5
    value_iters: int = 1             # extra baseline-only steps after the policy step
    normalize_advantages: bool = True
    max_grad_norm: float = 0.5


def pg_update(model, optimizer_step, batch: dict[str, torch.Tensor], returns: torch.Tensor,
              config: PGConfig) -> dict[str, float]:
    """One REINFORCE-with-baseline step on a batch of whole episodes; then baseline fitting."""
    with torch.no_grad():
        advantages = returns - model.value(batch["obs"])
        if config.normalize_advantages and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    dist = model.distribution(batch["obs"], batch["mask"])
    policy_loss = -(dist.log_prob(batch["action"]) * advantages).mean()
    value_loss = ((model.value(batch["obs"]) - returns) ** 2).mean()
    grad_norm = optimizer_step(policy_loss + config.vf_coef * value_loss)
    for _ in range(config.value_iters - 1):
        optimizer_step(config.vf_coef * ((model.value(batch["obs"]) - returns) ** 2).mean())
    return {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(),
            "entropy": dist.entropy().mean().item(), "grad_norm": grad_norm}


class PG(ActorCriticAlgorithm):
    name = "pg"
    Config = PGConfig

    def train_epoch(self, runner, episodes: int) -> dict[str, float]:
        storage, ended = self.collect(runner, episodes)
        return {**episode_stats(ended), **self.update(storage)}

    def update(self, storage: RolloutStorage) -> dict[str, float]:
        """One update on the steps in `storage`: Monte-Carlo returns (bootstrapped from its last
        values where a sequence does not end), then `pg_update`."""
        batch = storage.batch(self.device)
        returns = torch.as_tensor(storage.monte_carlo_returns(self.config.gamma), device=self.device,
                                  dtype=torch.float32)
        stats = pg_update(self.model, self.clip_and_step, batch, returns, self.config)
        with torch.no_grad():
            stats["explained_variance"] = explained_variance(self.model.value(batch["obs"]), returns)
        return stats
