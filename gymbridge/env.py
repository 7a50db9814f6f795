"""`HpcEnv`: one decision kind (or select + backfill) of an hpcgym episode as a Gymnasium environment, played
in process or on a running `hpcgym env` (docs/gymnasium.md: actions, masks, rewards, seeds, infos)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np

from ..agents.encoders import DEFAULT_ENCODERS, Encoder, get_encoder
from ..agents.slots import slot_action, slot_mask, slot_observation
from ..environment.config import check_int
from ..environment.decisions import BACKFILL, INSPECT, KILL, KINDS, SELECT, SELECT_KILL, Action, Decision
from ..environment.episode import Episode
from ..environment.errors import ConfigError, InvalidAction
from ..environment.spec import EpisodeSpec, WorkloadCache
from .remote import RemoteEpisodeEnded, RemoteEpisodes
from .render import RENDER_FPS, RENDER_MODES, check_render_mode, decision_text, ended_text, gantt_frame


class MaskedActionError(InvalidAction, ValueError):
    """An action outside `info["action_mask"]`; the episode is unchanged."""


class DecisionSnapshot(Decision):
    """A pending decision detached from the simulation, so it pickles (a vector env's pipes)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Decision):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in ("kind", "time", "step", "candidates", "context",
                                                                    "can_wait"))

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def of(cls, d: Decision, observation: dict[str, Any]) -> DecisionSnapshot:
        snap = cls.__new__(cls)
        snap.kind, snap.time, snap.step, snap.candidates = d.kind, d.time, d.step, d.candidates
        snap.context, snap.can_wait, snap._sim, snap._observation = d.context, d.can_wait, None, observation
        return snap


class MaskableDiscrete(gym.spaces.Discrete):
    """`Discrete` whose mask-free `sample()` draws from the actions allowed at every decision."""

    def __init__(self, n: int, safe: tuple[int, ...], seed: int | None = None) -> None:
        super().__init__(n, seed=seed)
        self.safe, self._safe_mask = tuple(safe), np.zeros(n, np.int8)
        self._safe_mask[list(self.safe)] = 1

    def sample(self, mask: np.ndarray | None = None, probability: np.ndarray | None = None) -> np.int64:
        if mask is None and probability is None:
            mask = self._safe_mask
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"MaskableDiscrete({self.n})"


class InProcessEpisodes:
    """The env's episodes played here, with `RemoteEpisodes`' interface: `HpcEnv` holds "its episodes"."""

    def __init__(self, workloads: WorkloadCache, kinds: tuple[str, ...], others: Mapping[str, Any],
                 observed: Mapping[str, tuple[str, ...]] | None = None) -> None:  # observed: columns read (None: all)
        self.workloads, self.kinds, self.observed = workloads, kinds, observed
        self.deciders = {kind: agent.act for kind, agent in others.items()}
        self.episode: Episode | None = None
        self.metrics: dict[str, Any] | None = None  # the last episode's, once it ended

    def reset(self, spec: EpisodeSpec) -> tuple[Decision | None, float]:
        self.metrics = None
        self.episode = Episode(self.workloads.load(spec.workload.for_episode(spec.seed), spec.seed), spec.config,
                               spec.reward_spec(), policy=spec.policy, outside=self.kinds, deciders=self.deciders,
                               observed=self.observed)
        self.episode.start()
        return self._advance()

    def act(self, action: Action) -> tuple[Decision | None, float]:
        self.episode.act(action)
        return self._advance()

    def close(self) -> None:
        self.episode = None

    def _advance(self) -> tuple[Decision | None, float]:
        decision, earned = self.episode.next_decision(), self.episode.collect()
        if decision is None:
            self.metrics, final = self.episode.finish()
            earned += final
        return decision, earned


class HpcEnv(gym.Env):
    """One decision kind of an hpcgym episode (docs/gymnasium.md gives every rule)."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}

    def __init__(self, kind: str | tuple[str, ...] = SELECT, workload: Mapping[str, Any] | None = None,
                 options: Mapping[str, Any] | None = None, reward: str = "bsld", encoder: str | Encoder | None = None,
                 seed: int = 0, remote: str | None = None, *, others: Mapping[str, Any] | None = None,
                 seed_stride: int = 1, remote_timeout: float = 10.0, decision_info: bool = True,
                 encoder_options: Mapping[str, Any] | None = None, render_mode: str | None = None) -> None:
        """workload: `WorkloadSpec` keys; options: `SimConfig` keys plus `policy`; encoder: a name (with
        `encoder_options`) or an instance; remote: an `hpcgym env`'s address; others: {kind: Agent} deciding other
        kinds here; decision_info: whether infos carry the decision (a vector env pickles it every step)."""
        super().__init__()
        self.render_mode = check_render_mode(render_mode, remote)
        #: The kinds this env decides; `kind` is the one kind, or this tuple for a two-kind env.
        self.kinds = kinds = _env_kinds(kind, others or {})
        self.kind = kinds[0] if len(kinds) == 1 else kinds
        self._multi, self._current = len(kinds) > 1, kinds[0]  # two kinds?; the pending decision's kind
        self.others = dict(others or {})
        spec = self.episode_spec = EpisodeSpec.from_reset(workload or {}, options or {}, reward, seed)
        self.workload_spec, self.config, self.policy = spec.workload.to_dict(), spec.config, spec.policy
        placed = {SELECT, INSPECT, BACKFILL, SELECT_KILL}  # what conservative backfilling decides itself
        if self.config.backfill == "conservative" and ({*kinds, *self.others} & placed):
            raise ConfigError("conservative backfilling places every queued job by the built-in priority policy; "
                              f"a {'+'.join(kinds)} env needs backfill easy or none")
        self.window = self.config.window
        self.remote, self.remote_timeout, self.decision_info = remote, remote_timeout, decision_info
        self._base_seed, self._seed_stride = int(seed), int(seed_stride)
        self._episode_seed: int | None = None
        self._workloads = WorkloadCache()
        first = self._episode(self._base_seed).workload.to_dict()  # in process, the trace is read once, here
        procs = None if remote is not None else self._workloads.load(first, self._base_seed).procs
        self.encoder = _env_encoder(encoder, kinds, self.window, procs, self.config.max_rejections, encoder_options)
        self.observation_space = self.encoder.observation_space()
        if self._multi:
            self.observation_space = gym.spaces.Box(0.0, 1.0, (self.encoder.size + len(kinds),), np.float32)
        self.action_space, self._kind_safe = _action_space(kinds, self.window)
        self._safe_mask = self.action_space._safe_mask  # every kind's safe actions (terminal mask)
        self._episodes: InProcessEpisodes | RemoteEpisodes | None = None  # made at the first reset
        self._metrics: dict[str, Any] | None = None  # the ended episode's
        self._decision: Decision | None = None
        self._ids: list[int] = []
        self._mask: np.ndarray | None = None
        self._done, self._empty_episode = True, False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options:
            raise ValueError(f"HpcEnv.reset takes no options (got {sorted(options)}); "
                             "set the workload and simulation options when making the env")
        if seed is not None:
            self._episode_seed = check_int(seed, "seed", 0)
        elif self._episode_seed is None:
            self._episode_seed = self._base_seed
        else:
            self._episode_seed += self._seed_stride
        self._metrics, self._done = None, False
        decision, earned = self._start(self._episode_seed)
        info: dict[str, Any] = {"episode_seed": self._episode_seed}
        self._empty_episode = decision is None
        if decision is None:  # no decision of this kind in the whole episode: one step ends it
            self._pending_reward = earned
            return self._zeros(), self._nothing_pending({**info, "initial_reward": 0.0})
        info["initial_reward"] = earned
        return self._present(decision, info), info

    def step(self, action: Any):
        if self._done:
            raise InvalidAction("the episode has ended (or was never started): call reset()")
        a = self._check_action(action)
        if self._empty_episode:
            return self._terminate(self._pending_reward)
        decision, earned = self._played(self._episodes.act, slot_action(self._current, a, self._ids, self.window))
        if decision is None:
            return self._terminate(earned)
        info: dict[str, Any] = {}
        return self._present(decision, info), earned, False, False, info

    def render(self) -> str | np.ndarray | None:
        """The `render_mode` frame after the last reset or step; None before the first reset."""
        if self.render_mode is None or self._episodes is None:
            return None
        if self.render_mode == "rgb_array":
            sim = self._episodes.episode.sim
            t0 = int(sim.workload.submit[0]) if len(sim.workload) else sim.now
            return gantt_frame(sim.schedule_so_far(), sim.procs, sim.now, t0)
        if self._decision is not None:
            return decision_text(self._decision)
        if self._empty_episode and not self._done:
            return f"no {'+'.join(self.kinds)} decision arises in this episode: the next step ends it\n"
        return ended_text(self._metrics or {})

    def action_masks(self) -> np.ndarray:
        """The current action mask (a copy), for libraries that ask the env for it."""
        return (self._mask if self._mask is not None else self._safe_mask).copy()

    def close(self) -> None:
        episodes, self._episodes = self._episodes, None
        if episodes is not None:
            episodes.close()
        super().close()

    def __del__(self) -> None:
        with suppress(Exception):
            self.close()

    def _start(self, ep_seed: int) -> tuple[Decision | None, float]:
        """The first decision of this env's kinds (None: none arises) and the reward earned before it."""
        if self._episodes is None:
            # only the encoder reads observations, unless infos, frames or agents here read them
            observed = None if self.decision_info or self.others or self.render_mode else self.encoder.reads
            self._episodes = InProcessEpisodes(self._workloads, self.kinds, self.others, observed) \
                if self.remote is None else RemoteEpisodes(self.remote, self.remote_timeout, self.kinds, self.others)
        return self._played(self._episodes.reset, self._episode(ep_seed))

    def _played(self, call: Callable[..., tuple[Decision | None, float]], *args: Any) -> tuple[Decision | None, float]:
        """`call` of the episodes; one the remote env ended early is over here too."""
        try:
            decision, earned = call(*args)
        except RemoteEpisodeEnded:
            self._done = True
            raise
        self._metrics = self._episodes.metrics
        return decision, earned

    def _episode(self, ep_seed: int) -> EpisodeSpec:
        """Episode `ep_seed`: the seed of its rules and, where the workload has `sample`, of its window."""
        workload = self.episode_spec.workload
        if workload.sample is not None:
            workload = replace(workload, sample=ep_seed)
        return replace(self.episode_spec, workload=workload, config=replace(self.config, seed=ep_seed))

    def _present(self, decision: Decision, info: dict[str, Any]) -> np.ndarray:
        """Encode the decision, build its mask, fill `info`."""
        obs_raw, kind = decision.observation, decision.kind
        mask, ids = slot_mask(decision, self.window)
        self._current, self._decision, self._mask = kind, decision, mask
        if kind != INSPECT:
            self._ids = ids
        if self._multi:
            self.action_space._safe_mask = self._kind_safe[kind]
        elif kind == SELECT_KILL:  # wait, or the first job when nothing may wait
            safe = np.zeros(len(mask), np.int8)
            safe[-1 if decision.can_wait else 0] = 1
            self.action_space._safe_mask = safe
        info["action_mask"], info["kind"] = mask.copy(), kind
        if self.decision_info:
            info["decision"] = DecisionSnapshot.of(decision, obs_raw)
        return slot_observation(self.encoder, obs_raw, kind, self.kinds)

    def _zeros(self) -> np.ndarray:
        return np.zeros(self.observation_space.shape[0], np.float32) if self._multi else self.encoder.zeros()

    def _check_action(self, action: Any) -> int:
        try:
            a = operator.index(action.item() if isinstance(action, np.ndarray) and action.ndim == 0 else action)
        except TypeError:
            raise MaskedActionError(f"{self._current} actions are integers in 0..{self.action_space.n - 1}, "
                                    f"got {action!r}") from None
        mask = self._mask
        if not 0 <= a < len(mask) or not mask[a]:
            allowed = np.flatnonzero(mask).tolist()
            shown = ", ".join(map(str, allowed[:16])) + (" ..." if len(allowed) > 16 else "")
            where = f" at t={self._decision.time}" if self._decision is not None else ""
            raise MaskedActionError(f"action {a} is not allowed for this {self._current} decision{where}"
                                    f"{self._meaning(a)}; allowed: {shown} (see info['action_mask'])")
        return a

    def _meaning(self, a: int) -> str:
        w = self.window
        if self._decision is None or not 0 <= a < self.action_space.n:
            return ""
        if self._current == SELECT:
            return (" (wait: something must start now)" if a == w
                    else f" (slot {a} is empty: {len(self._ids)} candidates)")
        if self._current == BACKFILL and a < w:
            return (f" (slot {a} is empty)" if a >= len(self._ids)
                    else f" (job {self._ids[a]} is not a backfill candidate)")
        if self._current == KILL and a >= 1:
            return f" (slot {a} is empty: {len(self._ids)} running jobs)"
        if self._current == SELECT_KILL:
            if a == 2 * w:
                return " (wait: something must start now)"
            if a >= w:
                return (f" (slot {a} is empty)" if self._ids[a] is None
                        else f" (job {self._ids[a]} may not be killed now: one kill per instant)")
            return f" (slot {a} is empty: {self._decision.context['queued']} queued jobs in the window)"
        return ""

    def _terminate(self, earned: float):
        self._done = True
        return self._zeros(), earned, True, False, self._nothing_pending({}, metrics=dict(self._metrics))

    def _nothing_pending(self, info: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """`info` where no decision is pending: the mask then allows the always-valid actions."""
        self._decision, self._mask = None, self._safe_mask.copy()
        self.action_space._safe_mask = self._safe_mask
        info.update(action_mask=self._mask.copy(), kind=None, **extra)
        if self.decision_info:
            info["decision"] = None
        return info


def _env_kinds(kind: str | tuple[str, ...], others: Mapping[str, Any]) -> tuple[str, ...]:
    """One kind, or select and backfill together (DRAS); `others` must decide other kinds."""
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    for k in kinds:
        if not isinstance(k, str) or k not in KINDS:
            raise ConfigError(f"unknown decision kind {k!r}; use one of {', '.join(KINDS)}")
    if not kinds:
        raise ConfigError("an env needs a decision kind")
    if len(kinds) > 1:
        if len(set(kinds)) != len(kinds) or set(kinds) != {SELECT, BACKFILL}:
            raise ConfigError(f"an env takes one decision kind or both select and backfill, not {list(kinds)}")
        kinds = (SELECT, BACKFILL)
    bad = [k for k in others if k not in KINDS or k in kinds]
    if bad:
        raise ConfigError(f"others: kinds {bad} are unknown or the env's own kind {kind!r}")
    return kinds


def _env_encoder(encoder: str | Encoder | None, kinds: tuple[str, ...], window: int, procs: int | None,
                 max_rejections: int, options: Mapping[str, Any] | None) -> Encoder:
    """The encoder given, or the one named (default: the first kind's), if it reads these kinds."""
    if not isinstance(encoder, Encoder):
        try:
            encoder = get_encoder(encoder or DEFAULT_ENCODERS[kinds[0]], window, procs, max_rejections=max_rejections,
                                  **dict(options or {}))
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if encoder.kinds is not None and not set(kinds) <= set(encoder.kinds):
        raise ConfigError(f"encoder {encoder.name or type(encoder).__name__!r} reads "
                          f"{'/'.join(encoder.kinds)} decisions only, not {'+'.join(kinds)}")
    return encoder


def _action_space(kinds: tuple[str, ...], w: int) -> tuple[MaskableDiscrete, dict[str, np.ndarray]]:
    """One discrete space for every kind taken, and each kind's always-valid actions (a mask-free sample's)."""
    safe = {INSPECT: (0, 1), SELECT: (0,), BACKFILL: (w,), KILL: (0,), SELECT_KILL: (2 * w,)}
    n = {INSPECT: 2, SELECT_KILL: 2 * w + 1}.get(kinds[0], w + 1)
    space = MaskableDiscrete(n, tuple(sorted({a for k in kinds for a in safe[k]})))
    return space, {k: MaskableDiscrete(n, safe[k])._safe_mask for k in kinds}
