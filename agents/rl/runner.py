"""Steps several Gymnasium envs in lockstep, one batched forward pass per round.

Each env is a plain `gymnasium.Env` whose `info` holds `action_mask` (True or 1: valid). The
runner owns the episode bookkeeping every algorithm needs: episode j (counted over the whole
training run) is reset with `seed_of(j)` (and `options_of(j)`, e.g. a curriculum's phase), so which sequences are trained on depends only on the
seed, not on timing, and a resumed run goes on with the very next episodes.

An epoch asks for a number of episodes: envs start new episodes until that many have started,
and the epoch is over when they have all ended, so no episode spans two epochs. With
`max_steps`, an episode still running after that many steps is cut there (truncated, as
Gymnasium's TimeLimit does): a policy that kills jobs at random may never finish its sequence.
With `discard_after`, such an episode is instead thrown away: the caller drops its steps
(`on_discard(env)`), it does not count towards the epoch, and another episode takes its place
(SchedInspector's code discards trajectories past 10 inspections per job). With `teacher`, each
state's env `info` is shown to it and its answer (the action a teacher agent would take there,
-1: none) rides on the step's transition, for imitation (agents/rl/imitation.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: policy(obs batch, mask batch) -> (actions, {name: per-row array}) for the rows given
Policy = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, dict[str, np.ndarray]]]


@dataclass
class Transition:
    env: int
    obs: np.ndarray
    mask: np.ndarray
    action: int
    extras: dict[str, float]
    reward: float
    terminated: bool
    truncated: bool
    next_obs: np.ndarray
    next_mask: np.ndarray
    teacher: int = -1

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass
class Episode:
    index: int
    seed: int
    ret: float = 0.0
    length: int = 0
    info: dict[str, Any] = field(default_factory=dict)


def action_mask(info: dict[str, Any], n_actions: int) -> np.ndarray:
    mask = info.get("action_mask")
    if mask is None:
        return np.ones(n_actions, dtype=bool)
    return np.asarray(mask).astype(bool)


class Runner:
    """Envs stepped together; `round` advances every running episode by one step."""

    def __init__(self, envs: Sequence[Any], seed_of: Callable[[int], int], next_episode: int = 0,
                 max_steps: int | None = None,
                 options_of: Callable[[int], dict[str, Any] | None] | None = None,
                 discard_after: int | None = None,
                 teacher: Callable[[dict[str, Any]], int] | None = None) -> None:
        self.envs = list(envs)
        self.teacher = teacher
        self.options_of = options_of
        self.max_steps = max_steps
        self.discard_after = discard_after
        self.discarded = 0
        self.n_actions = int(self.envs[0].action_space.n)
        self.seed_of = seed_of
        self.next_episode = next_episode
        n = len(self.envs)
        self.obs: list[np.ndarray | None] = [None] * n
        self.mask: list[np.ndarray | None] = [None] * n
        self.current: list[Episode | None] = [None] * n
        self.label = [-1] * n   # the teacher's action in each env's current state
        self.to_start = 0
        self.steps = 0
        #: Called with each episode as it ends (a command's progress within an epoch).
        self.on_episode_end: Callable[[Episode], None] | None = None

    # -------------------------------------------------------------- epochs
    def start_epoch(self, episodes: int) -> None:
        self.to_start = episodes

    @property
    def epoch_done(self) -> bool:
        return self.to_start == 0 and all(e is None for e in self.current)

    def running(self) -> list[int]:
        return [i for i, e in enumerate(self.current) if e is not None]

    # -------------------------------------------------------------- stepping
    def _start(self, i: int) -> None:
        episode = Episode(self.next_episode, int(self.seed_of(self.next_episode)))
        self.next_episode += 1
        self.to_start -= 1
        options = self.options_of(episode.index) if self.options_of is not None else None
        obs, info = self.envs[i].reset(seed=episode.seed, **({"options": options} if options else {}))
        self.obs[i] = np.asarray(obs, dtype=np.float32)
        self.mask[i] = action_mask(info, self.n_actions)
        self.label[i] = self.teacher(info) if self.teacher is not None else -1
        self.current[i] = episode

    def round(self, policy: Policy, on_step: Callable[[Transition], None] | None = None,
              on_discard: Callable[[int], None] | None = None) -> list[Episode]:
        """Start episodes on idle envs (while the epoch wants more), take one step in each
        running episode, and return the episodes that ended."""
        if self.discard_after is not None and on_discard is None:
            raise ValueError("discarding long episodes needs a learner that can drop their steps "
                             "(an on-policy algorithm that updates per epoch: pg or ppo)")
        for i, e in enumerate(self.current):
            if e is None and self.to_start > 0:
                self._start(i)
        live = self.running()
        if not live:
            return []
        actions, extras = policy(np.stack([self.obs[i] for i in live]), np.stack([self.mask[i] for i in live]))
        ended = []
        for row, i in enumerate(live):
            action = int(actions[row])
            obs, reward, terminated, truncated, info = self.envs[i].step(action)
            obs = np.asarray(obs, dtype=np.float32)
            mask = action_mask(info, self.n_actions)
            episode = self.current[i]
            episode.ret += float(reward)
            episode.length += 1
            self.steps += 1
            if not terminated and self.max_steps is not None and episode.length >= self.max_steps:
                truncated = True
            if on_step is not None:
                on_step(Transition(i, self.obs[i], self.mask[i], action, {k: v[row] for k, v in extras.items()},
                                   float(reward), bool(terminated), bool(truncated), obs, mask, self.label[i]))
            self.obs[i], self.mask[i] = obs, mask
            if self.teacher is not None:
                self.label[i] = -1 if terminated else self.teacher(info)
            if not terminated and self.discard_after is not None and episode.length >= self.discard_after:
                on_discard(i)
                self.discarded += 1
                self.current[i] = None
                self.to_start += 1
                continue
            if terminated or truncated:
                episode.info = {**info, "truncated": bool(truncated and not terminated)}
                ended.append(episode)
                self.current[i] = None
                if self.on_episode_end is not None:
                    self.on_episode_end(episode)
        return ended

    def run_epoch(self, episodes: int, policy: Policy, on_step: Callable[[Transition], None] | None = None,
                  on_discard: Callable[[int], None] | None = None) -> list[Episode]:
        """Collect `episodes` whole episodes; return them in the order they ended."""
        self.start_epoch(episodes)
        done: list[Episode] = []
        while not self.epoch_done:
            done += self.round(policy, on_step, on_discard)
        return done
