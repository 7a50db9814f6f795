"""Online adaptation of a served checkpoint, DRAS's "dynamic DRAS-PPO" (section 6): it keeps training while it
schedules, far more rarely than in training, so a served policy drifts slowly (docs/agents.md)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ...environment.decisions import Action, Decision
from ...environment.errors import HpcgymError
from ..slots import slot_action
from .checkpoint import Checkpoint, make_checkpoint, save_checkpoint
from .serve import RLAgent
from .storage import RolloutStorage

#: Algorithms whose checkpoints can adapt online (on-policy, with an `update(storage)`).
ONLINE_ALGORITHMS = ("pg", "a2c", "ppo")
DEFAULT_EVERY = 1000  #: Default decisions per update (docs/agents.md says why).
LR_DIVISOR = 10.0  #: Default learning rate: the checkpoint's, divided by this.
REWARD_SOURCES = ("auto", "env", "metrics")


class OnlineRLAgent(RLAgent):
    """A checkpoint's policy that keeps learning while it serves; `seed` drives its sampling
    (on-policy data) and the update's own randomness (PPO's minibatch order)."""

    def __init__(self, model: str | Path | Checkpoint, *, every: int = DEFAULT_EVERY, lr: float | None = None,
                 save: str | Path | None = None, seed: int = 0, reward: str = "auto",
                 device: str = "cpu") -> None:
        super().__init__(model, greedy=False, seed=seed, device=device)
        ckpt, algo = self.checkpoint, self.algorithm
        if ckpt.algorithm not in ONLINE_ALGORITHMS or not callable(getattr(algo, "update", None)):
            raise HpcgymError(f"online adaptation needs an on-policy checkpoint ({', '.join(ONLINE_ALGORITHMS)}); "
                              f"this one is {ckpt.algorithm} (off-policy: serve it without --online)")
        if int(every) < 1:
            raise HpcgymError(f"online: every must be at least 1 decision, got {every}")
        self.every = int(every)
        self.final_min = max(1, self.every // 2)
        self.train_lr = float(algo.config.lr)
        self.lr = self.train_lr / LR_DIVISOR if lr is None else float(lr)
        if not self.lr > 0:
            raise HpcgymError(f"online: the learning rate must be positive, got {lr}")
        for optimizer in algo.optimizers().values():
            for group in optimizer.param_groups:
                group["lr"] = self.lr
        self.seed = int(seed)
        algo.rng = self.rng                      # one seeded stream: sampling and the update's shuffles
        self.trained_reward = ckpt.env.get("reward")
        self.reward_source = self._reward_source(reward)
        self.save_path = Path(save) if save is not None else None
        self.storage = RolloutStorage(1)
        self.pending: dict[str, Any] | None = None   # the last decision, its reward still coming in
        self.episode_start = 0                        # where this episode's steps begin in `storage`
        self.last_step: int | None = None
        # decisions taken (all episodes), updates done, episodes, decisions of cut episodes (not learnt from)
        self.decisions = self.updates = self.episodes = self.dropped = 0
        self.last_update: dict[str, float] = {}
        self._rewarded = False                        # a nonzero env reward came this episode

    def _reward_source(self, reward: str) -> str:
        if reward not in REWARD_SOURCES:
            raise HpcgymError(f"online: unknown reward source {reward!r}; use one of {', '.join(REWARD_SOURCES)}")
        end = self._end_reward_spec() is not None
        if reward == "auto":
            return "metrics" if end else "env"
        if reward == "metrics" and not end:
            raise HpcgymError(f"online: scoring episodes from their metrics needs a checkpoint trained with an end "
                              f"reward (bsld, wait, utilization); this one was trained with "
                              f"{self.trained_reward or 'no recorded reward'}, which only the env computes: serve "
                              f"it with `hpcgym agent --model CHECKPOINT --online` against `hpcgym env --reward "
                              f"{self.trained_reward or 'SPEC'}`")
        return reward

    def _end_reward_spec(self):
        """The checkpoint's reward spec when it is a function of the episode's metrics only."""
        from ...environment.rewards import REWARDS, EndReward

        spec = REWARDS.get(str(self.trained_reward))
        return spec if spec is not None and isinstance(spec.make(), EndReward) else None

    # ---------------------------------------------------------------- the Agent hooks
    def act(self, decision: Decision) -> Action:
        obs, mask, ids = self.observe(decision)
        obs = np.array(obs, dtype=np.float32)       # copies: the steps are kept until the update
        mask = np.array(mask)
        if self.last_step is not None and decision.step <= self.last_step:
            self._drop_episode()                    # a new episode began with no on_episode_end
        self.last_step = decision.step
        if self.pending is not None:
            self._close(done=False)
        if len(self.storage) >= self.every:
            self.storage.set_last_value(0, float(self.algorithm.values(obs[None])[0]))
            self._update()
        actions, extras = self.algorithm.sample(obs[None], mask[None])
        slot = int(actions[0])
        self.pending = {"obs": obs, "mask": mask, "action": slot, "logp": float(extras["logp"][0]),
                        "value": float(extras["value"][0]), "reward": 0.0}
        self.decisions += 1
        return slot_action(decision.kind, slot, ids, self.window)

    def on_reward(self, reward: float) -> None:
        """The env's reward since this agent's previous decision: that decision's (in `env`
        mode; a reward before the episode's first decision belongs to no decision of ours)."""
        if reward:
            self._rewarded = True
        if self.reward_source == "env" and self.pending is not None:
            self.pending["reward"] += float(reward)

    def on_episode_end(self, metrics: dict[str, Any]) -> None:
        self.episodes += 1
        if not metrics:                              # cut short: nothing to learn from it
            self._drop_episode()
        elif self.pending is not None:
            if self.reward_source == "metrics":
                self.pending["reward"] += float(self._end_reward_spec().make().end(None, metrics))
            elif not self._rewarded:
                warnings.warn(f"online agent: the env reported no reward this episode; it learns from zero "
                              f"rewards. Start `hpcgym env --reward {self.trained_reward or 'SPEC'}` (the "
                              f"checkpoint's reward)", RuntimeWarning, stacklevel=2)
            self._close(done=True)
        self.last_step, self._rewarded = None, False
        if len(self.storage) >= self.final_min and self.storage.steps[0]["done"][-1]:
            self.storage.set_last_value(0, 0.0)      # ends terminal: nothing is bootstrapped
            self._update()                           # saves too
        else:
            self.save()

    # ---------------------------------------------------------------- segments and updates
    def _close(self, done: bool) -> None:
        p = self.pending
        self.storage.add(0, p["obs"], p["mask"], p["action"], p["logp"], p["value"], p["reward"], done)
        self.pending = None
        if done:
            self.episode_start = len(self.storage)

    def _drop_episode(self) -> None:
        """Forget this episode's decisions that are in no update yet."""
        steps = self.storage.steps[0]
        self.dropped += len(steps["action"]) - self.episode_start + (self.pending is not None)
        for name in steps:
            del steps[name][self.episode_start:]
        self.pending = None

    def _update(self) -> None:
        self.last_update = self.algorithm.update(self.storage)
        self.updates += 1
        self.storage = RolloutStorage(1)
        self.episode_start = 0
        self.save()

    def save(self) -> Path | None:
        """Write the adapted checkpoint to `save` (atomically), if one was asked for."""
        if self.save_path is None:
            return None
        c = self.checkpoint
        previous = dict(c.trainer.get("online", {}))
        online = {"updates": int(previous.get("updates", 0)) + self.updates,
                  "decisions": int(previous.get("decisions", 0)) + self.decisions,
                  "every": self.every, "lr": self.lr, "reward": self.reward_source, "seed": self.seed}
        ckpt = make_checkpoint(self.algorithm, kind=c.kind, encoder=c.encoder, window=c.window, epoch=c.epoch,
                               env=c.env, trainer={**c.trainer, "online": online})
        for state in ckpt.state["optimizers"].values():    # the training rate, for a later resume
            for group in state["param_groups"]:
                group["lr"] = self.train_lr
        return save_checkpoint(self.save_path, ckpt)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "online": {
            "every": self.every, "lr": self.lr, "reward": self.reward_source, "decisions": self.decisions,
            "updates": self.updates, "pending": len(self.storage) + (self.pending is not None),
            "episodes": self.episodes, "dropped": self.dropped, "save": str(self.save_path) if self.save_path else None,
            "last_update": dict(self.last_update)}}
