"""Proximal policy optimisation (clipped objective, GAE, a KL early stop), as the RL scheduling papers train, with the
options their runs need: imitation (RLSchert), a Monte Carlo critic target, separate value passes (SchedInspector's)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .algorithm import ActorCriticAlgorithm, PolicyNetworkConfig, episode_stats, explained_variance
from .imitation import imitation_loss
from .storage import RolloutStorage


@dataclass
class PPOConfig(PolicyNetworkConfig):
    lr: float = 3e-4
    vf_lr: float | None = None      # the critic's learning rate (None: lr)
    value_net: str | None = None    # the critic's network (None: net); RL backfilling: conv actor, mlp critic
    gamma: float = 1.0
    gae_lambda: float = 0.97
    clip: float = 0.2
    update_epochs: int = 8          # passes over the collected batch
    value_epochs: int | None = None  # separate value passes after the policy's (None: one summed loss)
    minibatch_size: int = 1024
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    target_kl: float | None = 0.02  # None: never stop early
    normalize_advantages: bool = True
    max_grad_norm: float = 0.5
    imitation_coef: float = 0.0     # alpha_t at the first update (0: no imitation term)
    imitation_epochs: int = 1       # update epochs over which alpha_t falls linearly to 0
    pretrain_epochs: int = 0        # update epochs of imitation alone before PPO (0: none)
    value_target: str = "gae"       # the critic's target: "gae" (A + V_old) or "monte_carlo" (the return)

    def __post_init__(self) -> None:
        if isinstance(self.imitation_coef, bool) or not isinstance(self.imitation_coef, (int, float)) \
                or not 0 <= self.imitation_coef < float("inf"):
            raise ValueError(f"imitation_coef must be a finite number >= 0, got {self.imitation_coef!r}")
        for name, least, what in (("imitation_epochs", 1, "the epochs over which the imitation weight falls to 0"),
                                  ("pretrain_epochs", 0, "update epochs of imitation alone before PPO")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} ({what}) must be an integer >= {least}, got {value!r}")
        if self.value_target not in ("gae", "monte_carlo"):
            raise ValueError(f"value_target must be gae or monte_carlo, got {self.value_target!r}")

    def imitation_weight(self, epoch: int) -> float:
        """alpha_t at update epoch `epoch` (0-based), counted from the end of pretraining."""
        return self.imitation_coef * max(0.0, 1.0 - (epoch - self.pretrain_epochs) / self.imitation_epochs)

    def pretraining(self, epoch: int) -> bool:
        """Whether update epoch `epoch` (0-based) fits the teacher's actions alone."""
        return epoch < self.pretrain_epochs


def ppo_update(model, optimizer_step, batch: dict[str, torch.Tensor], advantages: torch.Tensor,
               returns: torch.Tensor, config: PPOConfig, rng: np.random.Generator,
               imitation: float = 0.0, clone: bool = False) -> dict[str, float]:
    """The clipped-objective passes over one batch (plus `imitation` times the imitation term; with `clone`, the
    imitation term alone, without the clipped objective and the KL stop); returns the last minibatch's statistics."""
    n = len(advantages)
    batch = {**batch, "adv": advantages, "ret": returns}
    keys = ("obs", "mask", "action", "logp", "adv", *(("teacher",) if imitation > 0 else ()),
            *(("ret",) if config.value_epochs is None else ()))
    stats: dict[str, float] = {}
    stepped = None   # the distribution of the last minibatch stepped on, whose entropy `stats` reports
    stopped = False
    for _ in range(config.update_epochs):
        order = rng.permutation(n)
        for start in range(0, n, config.minibatch_size):
            idx = torch.as_tensor(order[start:start + config.minibatch_size], device=advantages.device)
            # the columns read, each gathered once (index_select: several times faster than indexing)
            mb = {key: batch[key].index_select(0, idx) for key in keys}
            adv = mb["adv"]
            if config.normalize_advantages and len(idx) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            dist = model.distribution(mb["obs"], mb["mask"])
            log_ratio = dist.log_prob(mb["action"]) - mb["logp"]
            ratio = log_ratio.exp()
            policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - config.clip, 1 + config.clip) * adv).mean()
            # without an entropy bonus the entropy stays out of the graph (with it, 13-40% of the time
            # of a minibatch's loss and backward); the one reported is computed once, after the passes
            loss = 0.0 if clone else policy_loss
            if config.ent_coef and not clone:
                loss = policy_loss - config.ent_coef * dist.entropy().mean()
            if imitation > 0:
                imitated = imitation_loss(dist, mb["teacher"])
                loss = loss + imitation * imitated
            if config.value_epochs is None:
                value_loss = ((model.value(mb["obs"]) - mb["ret"]) ** 2).mean()
                loss = loss + config.vf_coef * value_loss
            with torch.no_grad():
                approx_kl = float(((ratio - 1) - log_ratio).mean())
                clip_fraction = float(((ratio - 1).abs() > config.clip).float().mean())
            if not clone and config.target_kl is not None and approx_kl > config.target_kl:
                stopped = True  # this minibatch already moved too far: do not step on it
                break
            if clone and not loss.requires_grad:
                continue  # pretraining, no state of this minibatch labelled, the critic on its own passes
            grad_norm = optimizer_step(loss)
            stepped = dist
            stats = {"policy_loss": policy_loss.item(), "entropy": float("nan"), "approx_kl": approx_kl,
                     "clip_fraction": clip_fraction, "grad_norm": grad_norm}
            if config.value_epochs is None:
                stats["value_loss"] = value_loss.item()
            if imitation > 0:
                stats["imitation_loss"] = imitated.item()
        if stopped:
            break
    for _ in range(config.value_epochs or 0):
        order = rng.permutation(n)
        for start in range(0, n, config.minibatch_size):
            idx = torch.as_tensor(order[start:start + config.minibatch_size], device=advantages.device)
            value_loss = ((model.value(batch["obs"].index_select(0, idx)) - returns.index_select(0, idx)) ** 2).mean()
            optimizer_step(value_loss)
            stats["value_loss"] = value_loss.item()
    if stepped is not None:
        with torch.no_grad():
            stats["entropy"] = stepped.entropy().mean().item()
    stats["kl_stop"] = float(stopped)
    return stats


class PPO(ActorCriticAlgorithm):
    name = "ppo"
    Config = PPOConfig

    epochs_done = 0   # update epochs so far (the imitation weight's clock)

    def train_epoch(self, runner, episodes: int) -> dict[str, float]:
        storage, ended = self.collect(runner, episodes)
        return {**episode_stats(ended), **self.update(storage)}

    def extra_state(self) -> dict[str, int]:
        return {"epochs_done": self.epochs_done}

    def load_extra_state(self, state: dict[str, int]) -> None:
        self.epochs_done = int(state.get("epochs_done", 0))

    def update(self, storage: RolloutStorage) -> dict[str, float]:
        """The clipped passes over the steps in `storage`: GAE advantages and returns (bootstrapped from its last values
        where a sequence does not end), then `ppo_update`; `updates` is the number of gradient steps it took."""
        c = self.config
        batch = storage.batch(self.device)
        adv, ret = storage.advantages(c.gamma, c.gae_lambda)
        if c.value_target == "monte_carlo":
            ret = storage.monte_carlo_returns(c.gamma)
        adv, ret = (torch.as_tensor(x, device=self.device, dtype=torch.float32) for x in (adv, ret))
        before = self.updates
        clone = c.pretraining(self.epochs_done)
        weight = 1.0 if clone else c.imitation_weight(self.epochs_done)
        stats = ppo_update(self.model, self.clip_and_step, batch, adv, ret, c, self.rng, weight, clone)
        self.epochs_done += 1
        if c.imitation_coef or c.pretrain_epochs:
            stats["imitation_weight"] = weight
            stats["pretraining"] = float(clone)
        with torch.no_grad():
            stats["explained_variance"] = explained_variance(self.model.value(batch["obs"]), ret)
        return {**stats, "updates": self.updates - before}
