"""Steps several Gymnasium envs in lockstep, one batched forward pass per round; episode j is reset with `seed_of(j)`
and samples from its own generator, so the episodes depend on the seed, not on timing or the worker count; the env
count orders an update's batch (one storage row per env), so a curve is the seed's for a given --envs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: policy(obs batch, mask batch, one generator per row) -> (actions, {name: per-row array}) for the
#: rows given; row r's random choices come from generator r (its episode's)
Policy = Callable[[np.ndarray, np.ndarray, Sequence[np.random.Generator]],
                  tuple[np.ndarray, dict[str, np.ndarray]]]


def sampling_rng(seed: int, episode: int) -> np.random.Generator:
    """The generator of training episode `episode`'s action sampling: its own stream, from (seed, episode) alone."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(episode)]))


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
class EpisodeRecord:
    """One episode played by a rollout worker, whole: its states (reset state first), masks and teacher labels (-1:
    none), and per step the action, the policy's extras, the reward and the end flags."""

    index: int
    obs: np.ndarray
    mask: np.ndarray
    teacher: np.ndarray
    action: np.ndarray
    extras: dict[str, np.ndarray]
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    info: dict[str, Any]              # the env's info at the last step

    def discarded_by(self, discard_after: int | None) -> bool:
        """Whether a runner with `discard_after` throws this episode away (as `Runner.round` does)."""
        return discard_after is not None and not self.terminated[-1] and len(self.action) >= discard_after

    def info_after(self, t: int) -> dict[str, Any]:
        """The env's info after `t` steps, as the runner reads it (the last one with the env's own)."""
        info = {"action_mask": self.mask[t], "teacher": int(self.teacher[t])}
        if t == len(self.action):
            info.update(self.info)
        return info


@dataclass
class Episode:
    index: int
    seed: int
    ret: float = 0.0
    length: int = 0
    info: dict[str, Any] = field(default_factory=dict)


def action_mask(info: dict[str, Any], n_actions: int) -> np.ndarray:
    mask = info.get("action_mask")
    return np.ones(n_actions, dtype=bool) if mask is None else np.asarray(mask).astype(bool)


#: Forward batches are padded to a multiple of this many rows: then a row's scores are bit-identical
#: whatever else is in the batch (docs/performance.md), so an episode's actions do not depend on which
#: episodes run beside it or on which rollout worker plays it. Not across 8 and 16 rows: torch's linear
#: layer rounds an 8-row batch differently in the last bits (seen with 1,036 inputs), so with more than 8
#: envs a round with 8 or fewer live episodes can nudge their log-probabilities.
ROW_BLOCK = 8


class Runner:
    """Envs stepped together, one step of every running episode per `round`; `max_steps` truncates an episode,
    `discard_after` throws it away (SchedInspector's code), `teacher` labels each state (imitation)."""

    def __init__(self, envs: Sequence[Any], seed_of: Callable[[int], int], next_episode: int = 0,
                 max_steps: int | None = None,
                 options_of: Callable[[int], dict[str, Any] | None] | None = None,
                 discard_after: int | None = None,
                 teacher: Callable[[dict[str, Any]], int] | None = None, sampling_seed: int = 0) -> None:
        self.envs, self.seed_of, self.next_episode = list(envs), seed_of, next_episode
        self.options_of, self.sampling_seed, self.teacher = options_of, sampling_seed, teacher
        self.max_steps, self.discard_after, self.discarded = max_steps, discard_after, 0
        self.n_actions = int(self.envs[0].action_space.n)
        n = len(self.envs)
        self.obs: list[np.ndarray | None] = [None] * n
        self.mask: list[np.ndarray | None] = [None] * n
        self.current: list[Episode | None] = [None] * n
        self.rngs: list[np.random.Generator | None] = [None] * n
        self.padding_rng = np.random.default_rng(0)   # the padding rows' draws, never used
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
    def _claim(self) -> int:
        """The index of the next episode to start."""
        self.next_episode += 1
        self.to_start -= 1
        return self.next_episode - 1

    def _start(self, i: int) -> None:
        index = self._claim()
        episode = Episode(index, int(self.seed_of(index)))
        self.rngs[i] = sampling_rng(self.sampling_seed, index)
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
        self._check_discard(on_discard)
        for i, e in enumerate(self.current):
            if e is None and self.to_start > 0:
                self._start(i)
        live = self.running()
        if not live:
            return []
        actions, extras = self._act(policy, live)
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

    def _check_discard(self, on_discard: Callable[[int], None] | None) -> None:
        if self.discard_after is not None and on_discard is None:
            raise ValueError("discarding long episodes needs a learner that can drop their steps "
                             "(an on-policy algorithm that updates per epoch: pg or ppo)")

    def _act(self, policy: Policy, live: list[int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The actions (and extras) of the running episodes in envs `live`, from one forward pass
        over a batch padded to a multiple of ROW_BLOCK rows (see ROW_BLOCK)."""
        n = len(live)
        rows = -(-n // ROW_BLOCK) * ROW_BLOCK
        obs = np.zeros((rows, *self.obs[live[0]].shape), dtype=np.float32)
        mask = np.ones((rows, self.n_actions), dtype=bool)
        obs[:n] = [self.obs[i] for i in live]
        mask[:n] = [self.mask[i] for i in live]
        actions, extras = policy(obs, mask, [self.rngs[i] for i in live] + [self.padding_rng] * (rows - n))
        return actions[:n], {k: v[:n] for k, v in extras.items()}

    def run_epoch(self, episodes: int, policy: Policy, on_step: Callable[[Transition], None] | None = None,
                  on_discard: Callable[[int], None] | None = None,
                  on_episode: Callable[[int, EpisodeRecord], None] | None = None) -> list[Episode]:
        """Collect `episodes` whole episodes, in the order they ended. A runner that gets episodes whole
        (rollout workers) may hand each to `on_episode` instead of its steps to `on_step`; this one never does."""
        self.start_epoch(episodes)
        done: list[Episode] = []
        while not self.epoch_done:
            done += self.round(policy, on_step, on_discard)
        return done
