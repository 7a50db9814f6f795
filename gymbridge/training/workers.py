"""Rollout workers (processes or Ray actors) play an epoch's episodes while the learner updates, handed over in
the in-process runner's order and slots: a run depends on its seed alone (docs/performance.md "Rollout workers")."""

from __future__ import annotations

import heapq
import operator
import pickle
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

from ...agents.rl.algorithm import Algorithm
from ...agents.rl.runner import Episode, EpisodeRecord, Policy, Runner, Transition
from ...environment.errors import HpcgymError
from ...environment.processes import Workers


#: Seconds a worker may take to start (spawn, import torch, build envs), whatever the per-answer timeout.
START_TIMEOUT_S = 300.0


class WorkerError(HpcgymError):
    """A rollout worker died, failed or hung; the run stops (its checkpoints stay)."""


@dataclass
class WorkerSpec:
    """What a worker needs to play training episodes (cloudpickled to it once)."""

    env_fn: Callable[[int], Any]
    envs: int
    seed_of: Callable[[int], int]
    options_of: Callable[[int], dict[str, Any] | None] | None
    max_steps: int | None
    discard_after: int | None
    teacher: Callable[[], Callable[[dict[str, Any]], int]] | None   # builds the labeller in the worker
    sampling_seed: int


class _AssignedRunner(Runner):
    """Starts only the episodes handed to it, in order (the learner replaces a discarded one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.assigned: list[int] = []
        super().__init__(*args, **kwargs)

    @property
    def to_start(self) -> int:
        return len(self.assigned)

    @to_start.setter
    def to_start(self, value: int) -> None:
        pass   # what is left to start is what was handed out

    def _claim(self) -> int:
        return self.assigned.pop(0)


class RolloutWorker:
    """Plays the episodes it is handed with its own envs and a CPU copy of the policy."""

    def __init__(self, spec: bytes) -> None:
        import torch

        torch.set_num_threads(1)
        s: WorkerSpec = cloudpickle.loads(spec)
        self.runner = _AssignedRunner([s.env_fn(i) for i in range(s.envs)], s.seed_of, max_steps=s.max_steps,
                                      options_of=s.options_of, discard_after=s.discard_after,
                                      teacher=s.teacher() if s.teacher else None, sampling_seed=s.sampling_seed)
        self.steps: dict[int, list[Transition]] = {}   # per episode held, its steps so far
        self.algorithm: Algorithm | None = None
        self.policy: Policy | None = None

    def sync(self, build: tuple | None, state: dict[str, Any], policy: str) -> None:
        """Act with the learner's `state` through method `policy`; `build` (class, shape, actions, config): a copy."""
        if build is not None:
            cls, obs_shape, n_actions, config = build
            self.algorithm = cls(obs_shape, n_actions, config, device="cpu")
        self.algorithm.load_acting_state(state)
        self.policy = getattr(self.algorithm, policy)

    def advance(self, episodes: list[int]) -> list[EpisodeRecord]:
        """Take `episodes` on; play until a held episode ended (or was cut to be discarded): those."""
        runner = self.runner
        runner.assigned += episodes
        finished: list[EpisodeRecord] = []

        def keep(t: Transition) -> None:
            self.steps.setdefault(runner.current[t.env].index, []).append(t)

        def discard(i: int) -> None:
            finished.append(self._record(runner.current[i].index, {}))

        while not runner.epoch_done and not finished:
            finished += [self._record(e.index, e.info) for e in runner.round(self.policy, keep, discard)]
        return finished

    def _record(self, index: int, info: dict[str, Any]) -> EpisodeRecord:
        steps = self.steps.pop(index)
        return EpisodeRecord(
            index, np.stack([t.obs for t in steps] + [steps[-1].next_obs]),
            np.stack([t.mask for t in steps] + [steps[-1].next_mask]),
            np.array([t.teacher for t in steps] + [-1]), np.array([t.action for t in steps]),
            {k: np.array([t.extras[k] for t in steps]) for k in steps[0].extras},
            np.array([t.reward for t in steps]), np.array([t.terminated for t in steps]),
            np.array([t.truncated for t in steps]),
            {k: v for k, v in info.items() if k not in ("decision", "truncated")})  # the runner sets truncated again


class ReplayEnv(gym.Env):
    """An env slot of the collector: it plays a recorded episode back, step by step."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space
        self.record: EpisodeRecord | None = None
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.t = 0
        return self.record.obs[0], self.record.info_after(0)

    def step(self, action):
        r, t = self.record, self.t
        if int(action) != int(r.action[t]):
            raise RuntimeError(f"replay of episode {r.index} out of step: action {action}, {r.action[t]} was played")
        self.t += 1
        return r.obs[self.t], float(r.reward[t]), bool(r.terminated[t]), bool(r.truncated[t]), r.info_after(self.t)

    def played(self) -> tuple[int, dict[str, float]]:
        """The action recorded for the current state, and the policy's extras with it."""
        return int(self.record.action[self.t]), {k: v[self.t] for k, v in self.record.extras.items()}


#: (worker, whether its call succeeded, its result or what went wrong)
Event = tuple[int, bool, Any]


class SharedArrays:
    """A worker's answers with their arrays (pickle 5's out-of-band buffers) in one shared block per worker, not
    the pipe (5-30 us per decision); a larger block replaces it, the learner unlinks the old one."""

    def __init__(self) -> None:
        self.block: shared_memory.SharedMemory | None = None

    def pack(self, message: Any) -> tuple[str | None, list[int], bytes]:
        """(worker) `message` as the block's name, its buffers' sizes there and the pickle."""
        buffers: list[pickle.PickleBuffer] = []
        data = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
        raws = [b.raw() for b in buffers]
        size = sum(r.nbytes for r in raws)
        if not size:
            return None, [], data
        if self.block is None or self.block.size < size:
            grown = 0
            if self.block is not None:
                grown = 2 * self.block.size
                self.block.close()   # the learner unlinks it once it sees the new one
            self.block = shared_memory.SharedMemory(create=True, size=max(size, grown))
        offset = 0
        for raw in raws:
            self.block.buf[offset:offset + raw.nbytes] = raw
            offset += raw.nbytes
        return self.block.name, [r.nbytes for r in raws], data

    def unpack(self, packed: tuple[str | None, list[int], bytes]) -> Any:
        """(learner) The message `pack` made, its arrays copied out of the block."""
        name, sizes, data = packed
        if name is not None and (self.block is None or self.block.name != name):
            self.close()
            self.block = shared_memory.SharedMemory(name)
        buffers, offset = [], 0
        for size in sizes:
            buffers.append(bytearray(self.block.buf[offset:offset + size]))
            offset += size
        return pickle.loads(data, buffers=buffers)

    def close(self) -> None:
        """(learner) Let go of the worker's block and remove it."""
        if self.block is not None:
            self.block.close()
            self.block.unlink()
            self.block = None


def _serve(conn: Connection, spec: bytes) -> None:
    """A worker process: answers the learner's calls on one RolloutWorker until told to stop."""
    answers = SharedArrays()
    try:
        worker = RolloutWorker(spec)
        conn.send(answers.pack((True, None)))
        while True:
            method, args = conn.recv()
            if method == "stop":
                return
            conn.send(answers.pack((True, getattr(worker, method)(*args))))
    except EOFError:     # the learner is gone
        return
    except Exception as exc:
        conn.send(answers.pack((False, f"failed: {type(exc).__name__}: {exc}")))


class ProcessWorkers:
    """Rollout workers as local processes (environment/processes.py), each serving a RolloutWorker."""

    def __init__(self, n: int, spec: bytes) -> None:
        self.pool = Workers(_serve, [(spec,)] * n, "rollout-worker")
        self.procs = self.pool.processes
        self.answers = [SharedArrays() for _ in range(n)]
        self.busy = set(range(n))   # the start counts as a call: it answers once its envs are made

    def __len__(self) -> int:
        return len(self.procs)

    def name(self, w: int) -> str:
        return f"rollout worker {w} (pid {self.procs[w].pid})"

    def submit(self, w: int, method: str, *args: Any) -> None:
        self.pool.conns[w].send((method, args))
        self.busy.add(w)

    def wait(self, timeout: float) -> list[Event]:
        """The answers that came within `timeout` seconds (none: nothing yet)."""
        events = []
        for w, data in self.pool.wait(self.busy, timeout):
            self.busy.discard(w)
            if data is None:
                events.append((w, False, f"died (exit status {self.pool.exit_code(w)})"))
            else:
                events.append((w, *self.answers[w].unpack(pickle.loads(data))))
        return events

    def close(self) -> None:
        for conn in self.pool.conns:
            with suppress(OSError):
                conn.send(("stop", ()))
        self.pool.end(2.0)
        for answers in self.answers:
            answers.close()


class RayWorkers:
    """Rollout workers as Ray actors (on the instance `ray_session` gives, as `compare --executor ray`)."""

    def __init__(self, n: int, spec: bytes, address: str | None) -> None:
        from ..compare.executors import ray_session

        self.session = ray_session(n, address)
        self.ray = self.session.__enter__()
        actor = self.ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(RolloutWorker)
        self.actors = [actor.remote(spec) for _ in range(n)]
        self.calls: dict[Any, int] = {}
        self.busy: set[int] = set()

    def __len__(self) -> int:
        return len(self.actors)

    def name(self, w: int) -> str:
        return f"rollout worker {w} (Ray actor)"

    def submit(self, w: int, method: str, *args: Any) -> None:
        self.calls[getattr(self.actors[w], method).remote(*args)] = w
        self.busy.add(w)

    def wait(self, timeout: float) -> list[Event]:
        if not self.calls:
            return []
        done, _ = self.ray.wait(list(self.calls), num_returns=1, timeout=timeout)
        events = []
        for ref in done:
            w = self.calls.pop(ref)
            self.busy.discard(w)
            try:
                events.append((w, True, self.ray.get(ref)))
            except Exception as exc:  # the actor died (RayActorError) or its call raised (RayTaskError)
                events.append((w, False, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"))
        return events

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.session.__exit__(None, None, None)


def start_workers(n: int, spec: WorkerSpec, executor: str = "local", address: str | None = None
                  ) -> ProcessWorkers | RayWorkers:
    """`n` rollout workers, local processes or Ray actors."""
    data = cloudpickle.dumps(spec)
    if executor == "ray":
        return RayWorkers(n, data, address)
    if address is not None:
        raise HpcgymError("--address is for --executor ray")
    return ProcessWorkers(n, data)


class ParallelCollector(Runner):
    """A Runner whose episodes rollout workers play, replayed on `spec.envs` slots as the in-process runner's."""

    def __init__(self, workers: ProcessWorkers | RayWorkers, spec: WorkerSpec, spaces: gym.Env,
                 next_episode: int = 0, timeout: float = 600.0) -> None:
        super().__init__([ReplayEnv(spaces.observation_space, spaces.action_space) for _ in range(spec.envs)],
                         spec.seed_of, next_episode, spec.max_steps, spec.options_of, spec.discard_after,
                         operator.itemgetter("teacher") if spec.teacher else None,  # the label a worker recorded
                         spec.sampling_seed)
        self.workers, self.capacity, self.timeout = workers, spec.envs, timeout   # capacity: episodes a worker holds
        self.recorded: dict[int, EpisodeRecord] = {}
        self.collected, self.built = True, False
        self.held: list[list[int]] = [[] for _ in range(len(workers))]
        self.sent: dict[int, float] = {w: time.monotonic() for w in range(len(workers))}
        self._wait_all("starting", max(timeout, START_TIMEOUT_S))

    def start_epoch(self, episodes: int) -> None:
        super().start_epoch(episodes)
        self.collected = False

    def round(self, policy: Policy, on_step: Callable[[Transition], None] | None = None,
              on_discard: Callable[[int], None] | None = None):
        if not self.collected:
            self._collect(policy)
        return super().round(policy, on_step, on_discard)

    def run_epoch(self, episodes: int, policy: Policy, on_step: Callable[[Transition], None] | None = None,
                  on_discard: Callable[[int], None] | None = None,
                  on_episode: Callable[[int, EpisodeRecord], None] | None = None) -> list[Episode]:
        """With `on_episode`, the epoch's episodes handed over whole (`_hand_over`); else replayed by `round`."""
        if on_episode is None:
            return super().run_epoch(episodes, policy, on_step, on_discard)
        self._check_discard(on_discard)
        self.start_epoch(episodes)
        self._collect(policy)
        return self._hand_over(on_episode, on_discard)

    def _collect(self, policy: Policy) -> None:
        """The epoch's episodes played by the workers with the policy's current weights."""
        self._sync(policy)
        self._play(self.to_start)
        self.collected = True

    def _hand_over(self, on_episode: Callable[[int, EpisodeRecord], None],
                   on_discard: Callable[[int], None] | None) -> list[Episode]:
        """The recorded episodes handed to `on_episode` whole, on the slots and in the order `round` would end
        them: an idle slot starts the next episode, one of n steps started at round r ends at round r + n - 1."""
        ended: list[Episode] = []
        idle = list(range(len(self.envs)))
        running: list[tuple[int, int, EpisodeRecord]] = []    # (the round it ends in, slot, episode)
        now = 0
        while True:
            for slot in sorted(idle):
                if self.to_start == 0:
                    break
                record = self.recorded.pop(self._claim())
                heapq.heappush(running, (now + len(record.action) - 1, slot, record))
                idle.remove(slot)
            if not running:
                return ended
            now = running[0][0]
            while running and running[0][0] == now:
                _, slot, record = heapq.heappop(running)
                idle.append(slot)
                self._finish(slot, record, on_episode, on_discard, ended)
            now += 1

    def _finish(self, slot: int, record: EpisodeRecord, on_episode: Callable[[int, EpisodeRecord], None],
                on_discard: Callable[[int], None] | None, ended: list[Episode]) -> None:
        """An episode handed over whole; its end (or discard) counted as `round` counts it."""
        on_episode(slot, record)
        self.steps += len(record.action)
        if record.discarded_by(self.discard_after):
            on_discard(slot)
            self.discarded += 1
            self.to_start += 1
            return
        episode = Episode(record.index, int(self.seed_of(record.index)), length=len(record.action))
        for reward in record.reward.tolist():   # summed one by one, as `round` sums them
            episode.ret += reward
        truncated = bool(record.truncated[-1] and not record.terminated[-1])
        episode.info = {**record.info_after(len(record.action)), "truncated": truncated}
        ended.append(episode)
        if self.on_episode_end is not None:
            self.on_episode_end(episode)

    def _start(self, i: int) -> None:
        self.envs[i].record = self.recorded.pop(self.next_episode)
        super()._start(i)

    def _act(self, policy: Policy, live: list[int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        played = [self.envs[i].played() for i in live]
        return (np.array([a for a, _ in played]),
                {k: np.array([extras[k] for _, extras in played]) for k in played[0][1]})

    def close(self) -> None:
        self.workers.close()

    def _sync(self, policy: Policy) -> None:
        algorithm = getattr(policy, "__self__", None)
        if not isinstance(algorithm, Algorithm):
            raise TypeError("rollout workers act with an algorithm's own policy method (e.g. algorithm.sample)")
        build = None if self.built else (type(algorithm), algorithm.obs_shape, algorithm.n_actions, algorithm.config)
        state = algorithm.acting_state()
        for w in range(len(self.workers)):
            self._submit(w, "sync", build, state, policy.__name__)
        # the first sync builds each worker's copy of the algorithm: still its start-up
        self._wait_all("taking the new weights", None if self.built else max(self.timeout, START_TIMEOUT_S))
        self.built = True

    def _play(self, wanted: int) -> None:
        """Episodes from next_episode played until `wanted` are kept (a discarded one is replaced by the next)."""
        next_index, end = self.next_episode, self.next_episode + wanted
        while True:
            idle = [w for w in range(len(self.workers)) if w not in self.workers.busy]
            new: dict[int, list[int]] = {w: [] for w in idle}
            for _ in range(self.capacity):   # one at a time to each idle worker with room: an even share
                for w in idle:
                    if next_index < end and len(self.held[w]) + len(new[w]) < self.capacity:
                        new[w].append(next_index)
                        next_index += 1
            for w in idle:
                if self.held[w] or new[w]:
                    self.held[w] += new[w]
                    self._submit(w, "advance", new[w])
            if not self.workers.busy:
                return
            for w, records in self._events():
                for record in records:
                    self.held[w].remove(record.index)
                    self.recorded[record.index] = record
                    end += record.discarded_by(self.discard_after)

    def _submit(self, w: int, method: str, *args: Any) -> None:
        self.workers.submit(w, method, *args)
        self.sent[w] = time.monotonic()

    def _wait_all(self, doing: str, timeout: float | None = None) -> None:
        while self.workers.busy:
            self._events(doing, timeout)

    def _events(self, doing: str = "", timeout: float | None = None) -> list[tuple[int, Any]]:
        """The busy workers' answers; a failed, dead or silent one (`timeout` s, default the collector's) stops it."""
        timeout = self.timeout if timeout is None else timeout
        deadline = min(self.sent[w] for w in self.workers.busy) + timeout
        events = self.workers.wait(max(0.0, deadline - time.monotonic()))
        if not events and time.monotonic() >= deadline:
            w = min(self.workers.busy, key=lambda k: self.sent[k])
            events = [(w, False, f"sent nothing for {timeout:g} s (hung?)")]
        for w, ok, value in events:
            if not ok:
                self.close()
                raise WorkerError(f"{self.workers.name(w)} {value} while {self._doing(w, doing)}: the run stops "
                                  "here; the checkpoints of the finished epochs are intact (--resume goes on from "
                                  "the last one)")
        return [(w, value) for w, _, value in events]

    def _doing(self, w: int, doing: str) -> str:
        held = sorted(self.held[w])
        if doing or not held:
            return doing or "idle"
        if len(held) == 1:
            return f"playing episode {held[0]}"
        return f"playing episodes {', '.join(map(str, held[:-1]))} and {held[-1]}"   # in lockstep: one of them
