"""Several `HpcEnv`s stepped together in worker processes over shared memory (two semaphore hand-offs a step),
with SyncVectorEnv's numbers for any worker count (docs/gymnasium.md, docs/performance.md "Vector envs")."""

from __future__ import annotations

import functools
import os
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ..environment.processes import Workers
from . import make

#: The parent's commands to a worker (a control byte); a reply through the pipe starts with a reply byte.
_STEP, _RESET, _CALL, _SET, _CLOSE = range(5)
_INFOS, _VALUES, _ERROR = b"i", b"v", b"e"
_CLOSE_WAIT_S = 5.0
#: A worker's control bytes: the command, whether its arguments wait in the pipe, whether its reply does.
_COMMAND, _HAS_ARGS, _HAS_REPLY = range(3)
#: Seconds a waiting side spins before it sleeps (waking costs tens of microseconds on a virtualised kernel).
DEFAULT_SPIN_S = 0.0005
#: While asleep on a semaphore: how often to look whether the other side is still alive.
_ALIVE_EVERY_S = 0.25


class VectorEnvError(RuntimeError):
    """A sub-env raised, or a worker process died; the vector env is closed."""


def env_fns(n: int, kind: str = "select", seed: int = 0, **kwargs: Any) -> list:
    """The n env factories `make_vector` uses (picklable): env i has seed `seed + i`, stride n."""
    if n < 1:
        raise ValueError(f"a vector env needs at least one env, got n={n}")
    kwargs.setdefault("decision_info", False)
    return [functools.partial(make, kind, seed=seed + i, seed_stride=n, **kwargs) for i in range(n)]


def make_vector(n: int, kind: str = "select", seed: int = 0, asynchronous: bool = True, *,
                workers: int | None = None, caller_share: bool = True, context: str | None = None,
                autoreset_mode: AutoresetMode | str | None = None, spin_s: float | None = None,
                **kwargs: Any) -> gym.vector.VectorEnv:
    """`n` HpcEnvs (`kwargs` as `HpcEnv` takes them) as one vector env stepped by `workers` processes (this one
    among them unless `caller_share=False`), or by Gymnasium's SyncVectorEnv here with `asynchronous=False`."""
    mode, fns = autoreset(autoreset_mode or AutoresetMode.NEXT_STEP), env_fns(n, kind, seed, **kwargs)
    if asynchronous:
        return WorkerVectorEnv(fns, workers=workers, caller_share=caller_share, context=context, autoreset_mode=mode,
                               spin_s=spin_s)
    if context is not None or workers is not None or not caller_share or spin_s is not None:
        raise ValueError("context, workers, caller_share and spin_s apply to asynchronous vector envs only")
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)


def autoreset(mode: AutoresetMode | str) -> AutoresetMode:
    """Gymnasium's autoreset mode from its name ("same_step") or value ("SameStep")."""
    if isinstance(mode, AutoresetMode):
        return mode
    for known in AutoresetMode:
        if mode in (known.value, known.name.lower()):
            return known
    raise ValueError(f"unknown autoreset_mode {mode!r}; use next_step, same_step or disabled")


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _layout(n: int, obs_space: gym.spaces.Box, n_actions: int) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """The fields of the shared block, one row per env."""
    return [("obs", (n, *obs_space.shape), np.dtype(obs_space.dtype)), ("mask", (n, n_actions), np.dtype(np.int8)),
            ("action", (n,), np.dtype(np.int64)), ("reward", (n,), np.dtype(np.float64)),
            ("terminated", (n,), np.dtype(np.bool_)), ("truncated", (n,), np.dtype(np.bool_)),
            ("kind", (n,), np.dtype(np.int8))]


def _field_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """A field's size rounded up to 8 bytes, so that every field starts aligned."""
    return -(-int(np.prod(shape)) * dtype.itemsize // 8) * 8


def _views(block: Any, layout: list[tuple[str, tuple[int, ...], np.dtype]]) -> dict[str, np.ndarray]:
    """Numpy arrays over the shared block, by field name."""
    views, offset = {}, 0
    for name, shape, dtype in layout:
        views[name] = np.frombuffer(block, dtype, count=int(np.prod(shape)), offset=offset).reshape(shape)
        offset += _field_bytes(shape, dtype)
    return views


class _Share:
    """One process's consecutive envs from `first`, stepped over the shared block; other info as {env: info}."""

    def __init__(self, first: int, envs: list, shared: dict[str, np.ndarray], kinds: tuple[str, ...],
                 mode: AutoresetMode) -> None:
        self.first, self.envs, self.mode = first, envs, mode
        self.codes = {kind: code for code, kind in enumerate(kinds)}
        self.ended = [False] * len(envs)  # next_step: reset at the next step
        # A step runs in the caller's critical path: fields looked up once, not per env and step.
        self._obs, self._mask, self._kind = shared["obs"], shared["mask"], shared["kind"]
        self._action, self._reward = shared["action"], shared["reward"]
        self._terminated, self._truncated = shared["terminated"], shared["truncated"]

    def step(self) -> dict[int, dict]:
        extras: dict[int, dict] = {}
        for j, env in enumerate(self.envs):
            i = self.first + j
            try:
                if self.ended[j]:
                    obs, info = env.reset()
                    reward, terminated, truncated = 0.0, False, False
                    self.ended[j] = False
                else:
                    obs, reward, terminated, truncated, info = env.step(self._action[i])
                    if terminated or truncated:
                        if self.mode is AutoresetMode.SAME_STEP:
                            final = {"final_obs": obs, "final_info": info}
                            obs, info = env.reset()
                            info = {**final, **info}
                        elif self.mode is AutoresetMode.NEXT_STEP:
                            self.ended[j] = True
            except Exception as exc:
                raise _EnvFailed(i) from exc
            self._reward[i], self._terminated[i], self._truncated[i] = reward, terminated, truncated
            self._publish(i, obs, info, extras)
        return extras

    def reset(self, seeds: list, chosen: list[bool], options: dict | None) -> dict[int, dict]:
        extras: dict[int, dict] = {}
        for j, env in enumerate(self.envs):
            if chosen[j]:
                i = self.first + j
                try:
                    obs, info = env.reset(seed=seeds[j], options=options)
                except Exception as exc:
                    raise _EnvFailed(i) from exc
                self.ended[j] = False
                self._terminated[i] = self._truncated[i] = False
                self._publish(i, obs, info, extras)
        return extras

    def call(self, name: str, args: tuple, kwargs: dict) -> list:
        results = []
        for j, env in enumerate(self.envs):
            try:
                value = env.get_wrapper_attr(name)
                results.append(value(*args, **kwargs) if callable(value) else value)
            except Exception as exc:
                raise _EnvFailed(self.first + j) from exc
        return results

    def set_attr(self, name: str, values: list) -> list:
        for j, (env, value) in enumerate(zip(self.envs, values)):
            try:
                env.set_wrapper_attr(name, value)
            except Exception as exc:
                raise _EnvFailed(self.first + j) from exc
        return []

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _publish(self, i: int, obs: np.ndarray, info: dict[str, Any], extras: dict[int, dict]) -> None:
        """obs, mask and kind into the shared block; the rest of the info (if any) into extras."""
        self._obs[i] = obs
        self._mask[i] = info["action_mask"]
        kind = info["kind"]
        self._kind[i] = -1 if kind is None else self.codes[kind]
        if len(info) > 2:  # the env's dict is left as it is: it may be the env's own
            extras[i] = {key: value for key, value in info.items() if key not in _SHARED_INFO}


#: The info keys every step has, which travel in the shared block.
_SHARED_INFO = ("action_mask", "kind")
#: What each command runs on a share.
_OPERATIONS = {_STEP: _Share.step, _RESET: _Share.reset, _CALL: _Share.call, _SET: _Share.set_attr}


def _work(conn: Connection, first: int, fns_pickled: bytes, block: Any, layout: list, kinds: tuple[str, ...],
          mode: AutoresetMode, handoff: tuple) -> None:
    """A worker process: makes envs first, first + 1, ... and serves the parent's commands."""
    go, done, control, spin_s = handoff
    parent = os.getppid()
    envs: list = []
    try:
        try:
            for fn in cloudpickle.loads(fns_pickled):
                envs.append(fn())
        except Exception as exc:
            conn.send_bytes(_error_reply(first + len(envs), exc))
            return
        share = _Share(first, envs, _views(block, layout), kinds, mode)
        conn.send_bytes(_VALUES + pickle.dumps([(env.observation_space, env.action_space) for env in envs]))
        while _acquire(go, spin_s, lambda: os.getppid() == parent):
            command = control[_COMMAND]
            if command == _CLOSE:
                return
            arguments = pickle.loads(conn.recv_bytes()) if control[_HAS_ARGS] else ()
            try:
                result = _OPERATIONS[command](share, *arguments)
                reply = b"" if not result else (_VALUES if isinstance(result, list) else _INFOS) + pickle.dumps(result)
            except _EnvFailed as failed:
                reply = _error_reply(failed.index, failed.__cause__)
            control[_HAS_REPLY] = bool(reply)
            if reply:
                conn.send_bytes(reply)
            done.release()
    finally:
        for env in envs:
            env.close()


def _acquire(semaphore: Any, spin_s: float, alive: Callable[[], bool]) -> bool:
    """Take the semaphore, spinning for `spin_s`, then asleep; False once `alive()` says the other side is gone."""
    if semaphore.acquire(False):
        return True
    end = time.perf_counter() + spin_s
    while time.perf_counter() < end:
        if semaphore.acquire(False):
            return True
    while not semaphore.acquire(timeout=_ALIVE_EVERY_S):
        if not alive():
            return False
    return True


class _EnvFailed(Exception):
    """Which env of a worker raised (the exception is its __cause__)."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


def _error_reply(index: int, exc: BaseException) -> bytes:
    """An error reply: the env index, the exception (if it pickles) and its traceback as text."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        payload = pickle.dumps((index, exc, text))
        pickle.loads(payload)
    except Exception:
        payload = pickle.dumps((index, RuntimeError(f"{type(exc).__name__}: {exc}"), text))
    return _ERROR + payload


class WorkerVectorEnv(gym.vector.VectorEnv):
    """`HpcEnv`s in shares of consecutive envs, one per process, through shared memory: `SyncVectorEnv`'s numbers."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], *, workers: int | None = None,
                 caller_share: bool = True, context: str | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 spin_s: float | None = None) -> None:
        import multiprocessing as mp

        self._workers: Workers | None = None
        self._handoffs: list[tuple] = []  # per worker: (go, done, control bytes)
        self._local: _Share | None = None
        self.closed = True  # until the workers run
        if spin_s is not None and not 0 <= spin_s <= 1:
            raise ValueError(f"spin_s is the seconds a waiting side spins before it sleeps, from 0 to 1; got {spin_s!r}")
        n = len(env_fns)
        workers = min(n, usable_cores()) if workers is None else workers
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= n:
            raise ValueError(f"workers must be an integer from 1 to the number of envs ({n}), got {workers!r}")
        self.num_envs, self.autoreset_mode = n, autoreset(autoreset_mode)
        first_env = env_fns[0]()
        self.single_observation_space, self.single_action_space = first_env.observation_space, first_env.action_space
        kinds = tuple(first_env.kinds)
        self.metadata = {**first_env.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = first_env.render_mode
        if not isinstance(self.single_observation_space, gym.spaces.Box):
            first_env.close()
            raise TypeError(f"a WorkerVectorEnv shares Box observations only, not {self.single_observation_space}")
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self._kind_names = np.array([*kinds, None], dtype=object)  # kind code -1: None
        self._everyone = np.ones(n, np.bool_)
        layout = _layout(n, self.single_observation_space, int(self.single_action_space.n))
        ctx = mp.get_context(context)
        block = ctx.RawArray("b", sum(_field_bytes(shape, dtype) for _, shape, dtype in layout))
        self._shared = _views(block, layout)
        self._shares = [range(int(s[0]), int(s[-1]) + 1) for s in np.array_split(np.arange(n), workers)]
        self.closed = False
        if caller_share:  # env 0, made above, and the rest of share 0 are stepped here
            local = [first_env] + [fn() for fn in env_fns[1:self._shares[0].stop]]
            self._local = _Share(0, local, self._shared, kinds, self.autoreset_mode)
        else:
            first_env.close()
        self._remote = self._shares[1:] if caller_share else self._shares
        # Spinning pays only with a core per spinner, and not on an env server, whose core a spinner takes
        # (two remote envs on 2 cores: 0.72x one env spinning, 1.22x asleep).
        if spin_s is None:
            on_server = getattr(first_env.unwrapped, "remote", None) is not None
            spin_s = DEFAULT_SPIN_S if len(self._remote) + 1 <= usable_cores() and not on_server else 0.0
        self._spin_s = spin_s
        self._handoffs = [(ctx.Semaphore(0), ctx.Semaphore(0), ctx.RawArray("b", 3)) for _ in self._remote]
        self._workers = Workers(_work, [(share.start, cloudpickle.dumps(list(env_fns[share.start:share.stop])), block,
                                         layout, kinds, self.autoreset_mode, (*handoff, spin_s))
                                        for share, handoff in zip(self._remote, self._handoffs)],
                                "hpcgym-vector", context)
        spaces = [space for reply in self._started() for space in reply]
        for i, (obs_space, action_space) in enumerate(spaces, start=self._remote[0].start if self._remote else n):
            if obs_space != self.single_observation_space or action_space != self.single_action_space:
                self.close()
                raise VectorEnvError(f"env {i} has spaces {obs_space}, {action_space}; env 0 has "
                                     f"{self.single_observation_space}, {self.single_action_space}")

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        n = self.num_envs
        seeds = [None] * n if seed is None else [seed + i for i in range(n)] if isinstance(seed, int) else list(seed)
        if len(seeds) != n:
            raise ValueError(f"reset takes one seed per env ({n}), got {len(seeds)}")
        options = dict(options) if options else None
        chosen = np.ones(n, np.bool_)
        if options is not None and "reset_mask" in options:
            chosen = np.asarray(options.pop("reset_mask"))
            if chosen.shape != (n,) or chosen.dtype != np.bool_ or not chosen.any():
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({n},) with a True value")
            options = options or None
        extras = self._merged(self._exchange(_RESET, [(seeds[s.start:s.stop], chosen[s.start:s.stop].tolist(),
                                                       options) for s in self._shares]))
        return self._shared["obs"].copy(), self._infos(chosen.copy(), extras)

    def step(self, actions: Any):
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"step takes one action per env, shape ({self.num_envs},), got shape {actions.shape}")
        shared = self._shared
        shared["action"][:] = actions
        extras = self._merged(self._exchange(_STEP))
        return (shared["obs"].copy(), shared["reward"].copy(), shared["terminated"].copy(),
                shared["truncated"].copy(), self._infos(None, extras))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return tuple(value for values in self._exchange(_CALL, [(name, args, kwargs)] * len(self._shares))
                     for value in values)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr takes one value per env ({self.num_envs}), got {len(values)}")
        self._exchange(_SET, [(name, list(values[s.start:s.stop])) for s in self._shares])

    def close_extras(self, **kwargs: Any) -> None:
        """Closes this process's envs and every worker's; ends the workers that do not exit within 5 s."""
        if self._local is not None:
            self._local.close()
        for go, _, control in self._handoffs:
            control[_COMMAND] = _CLOSE
            go.release()
        if self._workers is not None:
            self._workers.end(_CLOSE_WAIT_S)

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            self.close()

    def _exchange(self, command: int, arguments: list[tuple] | None = None) -> list:
        """Runs `command` on every share (a tuple of arguments each), this process's own meanwhile; results in order."""
        if self.closed:
            raise VectorEnvError("the vector env is closed")
        local_arguments, remote_arguments = (), None  # a step takes none
        if arguments is not None:
            local_arguments, remote_arguments = (arguments[0], arguments[1:]) if self._local else ((), arguments)
        for w, (go, _, control) in enumerate(self._handoffs):
            args = remote_arguments[w] if remote_arguments else ()
            if args:
                try:
                    self._workers.conns[w].send_bytes(cloudpickle.dumps(args))
                except OSError:
                    self._died(w)
            control[_COMMAND], control[_HAS_ARGS] = command, bool(args)
            go.release()
        results = []
        if self._local is not None:
            try:
                results.append(_OPERATIONS[command](self._local, *local_arguments))
            except _EnvFailed as failed:
                exc = failed.__cause__
                self._failed(failed.index, exc, "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return results + self._collect()

    def _collect(self) -> list:
        """Every worker's reply to the command just handed out, decoded ({} for none: a step's usual answer)."""
        replies = []
        for w, (_, done, control) in enumerate(self._handoffs):
            if not _acquire(done, self._spin_s, self._workers.processes[w].is_alive):
                self._died(w)
            if control[_HAS_REPLY]:
                reply = self._workers.receive(w)
                if reply is None:
                    self._died(w)
                replies.append(self._decoded(reply))
            else:
                replies.append({})
        return replies

    def _started(self) -> list:
        """Every worker's first message (its envs' spaces), as it comes."""
        replies: dict[int, bytes] = {}
        while len(replies) < len(self._workers):
            for w, reply in self._workers.wait([w for w in range(len(self._workers)) if w not in replies], None):
                if reply is None:
                    self._died(w)
                replies[w] = reply
        return [self._decoded(replies[w]) for w in sorted(replies)]

    def _decoded(self, reply: bytes) -> Any:
        if reply[:1] == _ERROR:
            self._failed(*pickle.loads(reply[1:]))
        return pickle.loads(reply[1:])

    @staticmethod
    def _merged(replies: list[dict[int, dict]]) -> dict[int, dict]:
        return {i: extra for reply in replies if reply for i, extra in reply.items()}

    def _infos(self, present: np.ndarray | None, extras: dict[int, dict]) -> dict[str, Any]:
        """The vector info as SyncVectorEnv builds it (each key with its `_key` mask); `present`: None for all."""
        shared = self._shared
        if present is None:
            masks, kinds, present = shared["mask"].copy(), shared["kind"], self._everyone.copy()
        else:
            masks, kinds = shared["mask"] * present[:, None], np.where(present, shared["kind"], -1)
        infos: dict[str, Any] = {"action_mask": masks, "_action_mask": present, "kind": self._kind_names.take(kinds),
                                 "_kind": present.copy()}
        for i in sorted(extras):
            infos = self._add_info(infos, extras[i], i)
        return infos

    def _died(self, w: int) -> None:
        code, share = self._workers.exit_code(w, _CLOSE_WAIT_S), self._remote[w]
        self.close()
        raise VectorEnvError(f"worker process {w} (envs {share.start}..{share.stop - 1}) died "
                             f"(exit code {code}); the vector env is closed")

    def _failed(self, index: int, exc: BaseException, text: str) -> None:
        self.close()
        if hasattr(exc, "add_note"):
            exc.add_note(f"where it was raised:\n{text}")
        raise VectorEnvError(f"env {index} raised {type(exc).__name__}: {exc}; the vector env is closed") from exc
