"""`HpcEnv`: one decision kind (or select + backfill) of an hpcgym episode as a Gymnasium environment.

The env owns one decision kind (`select`, `inspect`, `backfill` or `kill`); the others are
decided by the simulation's built-in defaults (priority policy, accept, EASY, no kill) or by
in-process agents given as `others={kind: Agent}`. It runs the simulation in this process, or,
with `remote="tcp://..."`/`"ipc://..."`, drives a running `hpcgym env` over the step/act
protocol; both give identical trajectories (observations, rewards, masks, metrics).

Actions (an int; `info["action_mask"]` is an int8 vector, 1 = allowed; W = the `window` option):

| kind     | space            | action k                                                          |
|----------|------------------|-------------------------------------------------------------------|
| select   | Discrete(W + 1)  | k < W: start (or reserve) the k-th job of the queue window, i.e.  |
|          |                  | the k-th candidate; k = W: wait (allowed only when `can_wait`)    |
| backfill | Discrete(W + 1)  | k < W: start the k-th job of the queue window now, allowed when it|
|          |                  | is a backfill candidate; k = W: stop backfilling (always allowed) |
| inspect  | Discrete(2)      | 0: accept the pick, 1: reject it                                  |
| kill     | Discrete(W + 1)  | 0: kill nothing; k >= 1: kill the (k-1)-th running job (running   |
|          |                  | jobs by estimated end, as `observation["running"]` lists them)    |
| select_kill | Discrete(2W + 1) | k < W: select the k-th queue-window job (as select); W <= k < 2W: |
|          |                  | kill the (k-W)-th running job (allowed when offered: one kill per |
|          |                  | instant); k = 2W: wait (allowed only when `can_wait`)             |

Slot k always names row k of the observation's job table (queue window, or running jobs for
kill; select_kill: row k of the queue window, slot W + k row k of the running jobs), so a per-row scoring network lines up with the actions. Backfill candidates are the
queue jobs that fit now without delaying the reservation; one beyond the visible window (only
when more than W jobs wait) has no row and cannot be chosen. A kill env sees at most W running
jobs. Multi-job select actions (a list that fits together) are not offered.

An action outside the mask raises `MaskedActionError` (an `InvalidAction` and a `ValueError`);
nothing changes. `action_space.sample()` without a mask returns an action allowed at every
decision (select: the first candidate, i.e. the priority policy's pick; backfill: stop; kill:
none; inspect: either; select_kill: wait, or the first job when it cannot wait); draw a uniformly random allowed action with
`action_space.sample(mask=info["action_mask"])`.

Reward (the `reward` spec of `environment/rewards.py`, computed as `hpcgym env` does): the
spec's step reward is taken at every decision that arises (any kind that has an agent), summed
between this env's decisions, and returned by the `step` that led to it; the spec's end reward
is added on the terminating step. Reward arising before the first decision belongs to no
action: it is in reset's `info["initial_reward"]`.

Two kinds in one env (DRAS: level 1 picks the job to start or reserve, level 2 picks backfill
jobs one at a time until none are left): `kind=("select", "backfill")` (in any order; the only
combination offered: others raise a `ConfigError`). Both kinds keep their Discrete(W + 1) action
and mask as above (slot W: wait at a select decision, stop at a backfill one), so the env's action
space is Discrete(W + 1). The pending decision's kind is `info["kind"]` and is in the
observation: the encoder's vector followed by a one-hot kind flag, [1, 0] for select and
[0, 1] for backfill (the final observation: [0, 0]), so the observation space is the encoder's
size + 2 (a network that reshapes the encoder's part, like DRAS's, splits the last 2 off). The
mask-free `action_space.sample()` gives the current kind's safe action (first candidate / stop);
in a vector env, whose action space copy does not follow the decisions, sample with the mask.
Reward accumulates between this env's decisions whatever their kind. A single kind string keeps
the observation without a flag; `info["kind"]` is given by every env (None once terminated).

Episodes: `terminated` is True when the job sequence has been run to the end; the final
observation is all zeros, `info["metrics"]` holds the summary metrics, and the mask then allows
the no-mask sample actions (so a vector env's masked sampling never sees an empty mask). If
an episode needs no decision of this kind at all, `reset` returns a zero observation and the one
`step` after it (any action in the mask) terminates with the whole episode's reward.

Seeds: every episode has an episode seed: `reset(seed=s)` uses s; `reset()` uses the previous
one plus `seed_stride` (the constructor's `seed` for the first). The episode seed is the
protocol's `seed` (generated Lublin workload, noisy estimates, random policy), and when the
workload spec has a `sample` key (any value, e.g. `True`) the sample seed too, so each episode
draws another window (`{"jobs": 256, "sample": True}`) or sampled jobset. A trace without
`sample` gives the same job sequence every episode.

Info: `action_mask`, `kind` (the pending decision's kind), `decision` (a `DecisionSnapshot`: the `Decision` with its `kind`, `time`,
`step`, `candidates`, `context`, `can_wait`, raw `observation`; None once terminated), at the
end `metrics`, at reset `initial_reward` and `episode_seed`.

Rendering (`render_mode`, `gymbridge/render.py`): "ansi" gives the pending decision as text (time,
free processors, the queue window with sizes, requested times and waits, the running jobs by
estimated end, the decision's kind and context; the metrics once ended); "rgb_array" gives the
Gantt chart of the jobs started so far (processors over hours, colour: kind of start) as an
H x W x 3 uint8 array, in process only (a remote env renders "ansi"). `render()` reads the state
after the last reset or step; before the first reset it returns None.

Remote (`gymbridge/remote.py`): the connection says hello with this env's kind(s) (and the `others`'
kinds, answered here) in a session of its own, and sends reset with the same workload spec, seed,
reward and the complete simulation options (defaults filled in, so the server's
`--backfill`/`--policy` defaults do not apply). Workload keys left out do take the server's defaults
(`hpcgym env --trace/--procs`). The server gives up on a decision after its `--decision-timeout`
(30 s by default): start it with a timeout longer than the slowest pause between two steps (e.g. a
training update).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np

from ..agents.encoders import DEFAULT_ENCODERS, Encoder, get_encoder
from ..agents.slots import slot_action, slot_mask, slot_observation
from ..environment.decisions import BACKFILL, INSPECT, KILL, KINDS, SELECT, SELECT_KILL, Action, Decision
from ..environment.episode import Episode
from ..environment.errors import ConfigError, InvalidAction
from ..environment.spec import EpisodeSpec, WorkloadCache
from .remote import RemoteEpisodeEnded, RemoteEpisodes
from .render import RENDER_FPS, RENDER_MODES, check_render_mode, decision_text, ended_text, gantt_frame


class MaskedActionError(InvalidAction, ValueError):
    """An action outside `info["action_mask"]`; the episode is unchanged."""


class DecisionSnapshot(Decision):
    """A pending decision as `info["decision"]` holds it: detached from the simulation (so it
    pickles, e.g. through a vector env's pipes) and comparable by value."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Decision):
            return NotImplemented
        return (self.kind == other.kind and self.time == other.time and self.step == other.step
                and self.candidates == other.candidates and self.context == other.context
                and self.can_wait == other.can_wait)

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
        self.safe = tuple(safe)
        self._safe_mask = np.zeros(n, np.int8)
        self._safe_mask[list(self.safe)] = 1

    def sample(self, mask: np.ndarray | None = None, probability: np.ndarray | None = None) -> np.int64:
        if mask is None and probability is None:
            mask = self._safe_mask
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"MaskableDiscrete({self.n})"


class InProcessEpisodes:
    """The env's episodes played here, with `RemoteEpisodes`' interface, so `HpcEnv` holds "its
    episodes" whichever side runs them: the next decision of the env's kinds and the reward since
    the last one; at the end, the end reward added and the metrics kept."""

    def __init__(self, workloads: WorkloadCache, kinds: tuple[str, ...], others: Mapping[str, Any],
                 observed: Mapping[str, tuple[str, ...]] | None = None) -> None:
        """observed: the only observation columns read here (the encoder's), or None: all."""
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
        decision = self.episode.next_decision()
        earned = self.episode.collect()
        if decision is None:
            self.metrics, final = self.episode.finish()
            earned += final
        return decision, earned


class HpcEnv(gym.Env):
    """One decision kind of an hpcgym episode (see the module docstring for every rule)."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}

    def __init__(self, kind: str | tuple[str, ...] = SELECT, workload: Mapping[str, Any] | None = None,
                 options: Mapping[str, Any] | None = None, reward: str = "bsld", encoder: str | Encoder | None = None,
                 seed: int = 0, remote: str | None = None, *, others: Mapping[str, Any] | None = None,
                 seed_stride: int = 1, remote_timeout: float = 10.0, decision_info: bool = True,
                 encoder_options: Mapping[str, Any] | None = None, render_mode: str | None = None) -> None:
        """
        kind: the decision kind this env takes, or ("select", "backfill") for both. workload: a workload spec (`load_workload` keys;
        default `{}`, the generated Lublin workload). options: `SimConfig` keys (`backfill`,
        `estimate`, `overrun`, `window`, `max_interval`, `max_rejections`) plus `policy` (the
        queue's priority policy, default fcfs). reward: reward spec name. encoder: encoder name
        (`agents.encoders.get_encoder`) or instance; default jobs+nodes (running+nodes for kill).
        seed: the first episode's seed; seed_stride: added per seedless reset. remote: address of
        an `hpcgym env` to run the episodes on. others: {kind: Agent} deciding other kinds here.
        decision_info: put `info["decision"]` in infos (a vector env pickles it every step).
        encoder_options: options of a named encoder (`agents.encoders.ENCODER_OPTIONS`, e.g.
        `{"priority_size": 26}` for dras). render_mode: "ansi", "rgb_array" (in process) or None.
        """
        super().__init__()
        self.render_mode = check_render_mode(render_mode, remote)
        #: The kinds this env decides; `kind` is the one kind, or this tuple for a two-kind env.
        self.kinds = kinds = _env_kinds(kind, others or {})
        self.kind = kinds[0] if len(kinds) == 1 else kinds
        self._multi, self._current = len(kinds) > 1, kinds[0]  # two kinds?; the pending decision's kind
        self.others = dict(others or {})
        spec = self.episode_spec = EpisodeSpec.from_reset(workload or {}, options or {}, reward, seed)
        self.workload_spec, self.config, self.policy = spec.workload.to_dict(), spec.config, spec.policy
        self.options = {k: v for k, v in (options or {}).items() if k != "policy"}
        placed = {SELECT, INSPECT, BACKFILL, SELECT_KILL}  # what conservative backfilling decides itself
        if self.config.backfill == "conservative" and ({*kinds, *self.others} & placed):
            raise ConfigError("conservative backfilling places every queued job by the built-in priority policy; "
                              f"a {'+'.join(kinds)} env needs backfill easy or none")
        self.reward_spec, self.reward_name = spec.reward_spec(), reward
        self.window = self.config.window
        self.remote, self.remote_timeout, self.decision_info = remote, remote_timeout, decision_info
        self._base_seed, self._seed_stride = int(seed), int(seed_stride)
        self._episode_seed: int | None = None
        self._workloads = WorkloadCache()
        procs = None if remote is not None else self._load_workload(self._base_seed).procs  # reads the trace now
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

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options:
            raise ValueError(f"HpcEnv.reset takes no options (got {sorted(options)}); "
                             "set the workload and simulation options when making the env")
        if seed is not None:
            self._episode_seed = _check_seed(seed)
        elif self._episode_seed is None:
            self._episode_seed = self._base_seed
        else:
            self._episode_seed += self._seed_stride
        ep_seed = self._episode_seed
        self._metrics = None
        self._done = False
        decision, earned = self._start(ep_seed)
        info: dict[str, Any] = {"episode_seed": ep_seed}
        self._empty_episode = decision is None
        if decision is None:  # no decision of this kind in the whole episode: one step ends it
            self._decision = None
            info["initial_reward"] = 0.0
            self._pending_reward = earned
            self._mask = self._safe_mask.copy()
            self.action_space._safe_mask = self._safe_mask
            info["action_mask"] = self._mask.copy()
            info["kind"] = None
            if self.decision_info:
                info["decision"] = None
            return self._zeros(), info
        info["initial_reward"] = earned
        obs = self._present(decision, info)
        return obs, info

    def step(self, action: Any):
        if self._done:
            raise InvalidAction("the episode has ended (or was never started): call reset()")
        a = self._check_action(action)
        if self._empty_episode:
            return self._terminate(self._pending_reward)
        decision, earned = self._act(self._to_sim_action(a))
        if decision is None:
            return self._terminate(earned)
        info: dict[str, Any] = {}
        obs = self._present(decision, info)
        return obs, earned, False, False, info

    def render(self) -> str | np.ndarray | None:
        """The frame of `render_mode` for the state after the last reset or step (module docstring,
        Rendering); None without a render mode or before the first reset."""
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
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ episodes
    def _start(self, ep_seed: int) -> tuple[Decision | None, float]:
        """Start an episode (in process, or on the remote env); its first decision of this env's
        kinds (None: none arises) and the reward earned before it."""
        if self._episodes is None:
            # only the encoder reads the observations, unless infos or frames show them or agents here decide
            # other kinds
            observed = None if self.decision_info or self.others or self.render_mode else self.encoder.reads
            self._episodes = InProcessEpisodes(self._workloads, self.kinds, self.others, observed) \
                if self.remote is None else RemoteEpisodes(self.remote, self.remote_timeout, self.kinds, self.others)
        return self._played(self._episodes.reset, self._episode(ep_seed))

    def _act(self, action: Any) -> tuple[Decision | None, float]:
        """Answer the pending decision; the next one (None: the end) and the reward since."""
        return self._played(self._episodes.act, action)

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
        """Episode `ep_seed`: the seed of its rules and, where the workload has a `sample` key (any
        value), of its window, so each episode draws another."""
        workload = self.episode_spec.workload
        if workload.sample is not None:
            workload = replace(workload, sample=ep_seed)
        return replace(self.episode_spec, workload=workload, config=replace(self.config, seed=ep_seed))

    def _load_workload(self, ep_seed: int):
        """`load_workload(this episode's spec, ep_seed)`; the trace is read once, not every episode."""
        return self._workloads.load(self._episode_spec(ep_seed), ep_seed)

    def _episode_spec(self, ep_seed: int) -> dict[str, Any]:
        return self._episode(ep_seed).workload.to_dict()

    # ------------------------------------------------------------------ actions and observations
    def _present(self, decision: Decision, info: dict[str, Any]) -> np.ndarray:
        """Encode the decision, build its mask, fill `info`."""
        obs_raw = decision.observation
        kind = decision.kind
        self._current = kind
        mask, ids = slot_mask(decision, self.window)
        if kind != INSPECT:
            self._ids = ids
        self._decision = decision
        self._mask = mask
        if self._multi:
            self.action_space._safe_mask = self._kind_safe[kind]
        elif kind == SELECT_KILL:  # wait, or the first job when nothing may wait
            safe = np.zeros(len(mask), np.int8)
            safe[-1 if decision.can_wait else 0] = 1
            self.action_space._safe_mask = safe
        info["action_mask"] = mask.copy()
        info["kind"] = kind
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

    def _to_sim_action(self, a: int) -> Any:
        return slot_action(self._current, a, self._ids, self.window)

    def _terminate(self, earned: float):
        self._done = True
        self._decision = None
        self._mask = self._safe_mask.copy()
        self.action_space._safe_mask = self._safe_mask
        info: dict[str, Any] = {"action_mask": self._mask.copy(), "kind": None, "metrics": dict(self._metrics)}
        if self.decision_info:
            info["decision"] = None
        return self._zeros(), earned, True, False, info


def _env_kinds(kind: str | tuple[str, ...], others: Mapping[str, Any]) -> tuple[str, ...]:
    """The kinds an env takes: one kind, or select and backfill together (DRAS's two levels); the
    kinds `others` decide in process must be other kinds."""
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
    """One discrete space over the window's slots for every kind taken, and each kind's safe
    actions (those always valid: accept, wait, stop), which a mask-free sample draws from."""
    safe = {INSPECT: (0, 1), SELECT: (0,), BACKFILL: (w,), KILL: (0,), SELECT_KILL: (2 * w,)}
    n = {INSPECT: 2, SELECT_KILL: 2 * w + 1}.get(kinds[0], w + 1)
    space = MaskableDiscrete(n, tuple(sorted({a for k in kinds for a in safe[k]})))
    return space, {k: MaskableDiscrete(n, safe[k])._safe_mask for k in kinds}


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)
