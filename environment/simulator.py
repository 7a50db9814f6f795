"""The event-driven simulation (docs/semantics.md gives the rules): the episode is one generator, so an external
decision suspends the loop where it stands, and the built-in defaults never build an observation."""

from __future__ import annotations

import heapq
import math
import sys
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Collection, Iterable, Mapping
from operator import itemgetter
from typing import Any

import numpy as np

from .priorities import USAGE_HALF_LIFE, PriorityPolicy, get_policy
from .conservative import ConservativePlan
from .config import SimConfig
from .decisions import BACKFILL, INSPECT, KILL, SELECT, SELECT_KILL, Action, Decision, check_kinds
from .errors import ConfigError, InvalidAction
from .machine import NodeState
from .node_plan import node_plan
from .metrics import ReservationBreak, RunResult
from .predictions import RunningModel, UserHistory, check_users, load_prerun_model, revised_jobs
from .work import check as check_work
from .workload import Workload

NEVER = sys.maxsize
LONG_QUEUE = 64  #: From this queue length on, EASY finds its candidates with one vectorised pass over the queue.
PENDING, QUEUED, RUNNING, DONE = 0, 1, 2, 3
# How a job started (the `start_kind` column; names in metrics.START_KINDS; docs/semantics.md 11)
READY, RESERVED, BACKFILLED = 0, 1, 2


def _gather(index: list[int]) -> Callable[[list], list]:
    """Picks the entries at `index` from per-job lists, at C speed (observations read a dozen columns)."""
    if len(index) > 1:
        get = itemgetter(*index)
        return lambda column: list(get(column))
    return lambda column: [column[i] for i in index]


class Simulation:
    """One episode over a workload. Drive it with `reset()` and `step(action)`, or `run()`."""

    def __init__(self, workload: Workload, config: SimConfig | None = None, *,
                 policy: str | PriorityPolicy = "fcfs", external: Iterable[str] = (),
                 observed: Mapping[str, Collection[str]] | None = None) -> None:
        """observed: the only queue and running columns observations need (`id` always comes; None: all), so an
        agent that reads a few columns does not pay for gathering all of them at every decision."""
        config = config or SimConfig()
        self._observed = None if observed is None else {table: {"id", *observed.get(table, ())}
                                                        for table in ("queue", "running")}
        if config.exact_requests:
            workload = workload.with_columns(requested=workload.run)
        elif config.raise_requests:
            workload = workload.with_columns(requested=np.maximum(workload.requested, workload.run))
        self.workload, self.config = workload, config
        self.policy = get_policy(policy, config.seed) if isinstance(policy, str) else policy
        self.external = check_kinds(external)
        if config.backfill == "conservative" and self.external & {SELECT, INSPECT, BACKFILL, SELECT_KILL}:
            raise ConfigError("conservative backfilling places every queued job by the built-in priority "
                              "policy; external select, inspect, backfill or select_kill agents need --backfill "
                              "easy or none")
        if SELECT_KILL in self.external and self.external & {SELECT, KILL}:
            raise ConfigError("select_kill decides select and kill in one: take it instead of select and kill, "
                              "not beside them")
        self._prefill = workload.prefill if workload.prefill is not None and len(workload.prefill) else None
        if self._prefill is not None and (config.backfill == "conservative" or self.external & {KILL, SELECT_KILL}
                                          or config.prediction.on):
            raise ConfigError("a pre-filled cluster (workload key prefill) runs with backfill easy or none, without "
                              "kill agents and without a predictor: drop prefill or those")
        if SELECT_KILL in self.external and config.commit_pick:
            raise ConfigError("select_kill asks at every pass, which commit_pick skips while its pick waits: "
                              "turn commit_pick off")
        self._easy_variant = (config.backfill_order != "queue" or config.strict_shadow or not config.easy_extra
                              or bool(config.backfill_relax) or config.backfill_skip_next)
        self._nodes = NodeState(workload) if workload.machine is not None else None
        if self._nodes is not None and (self._easy_variant or config.keep_shadow or self._prefill is not None
                                        or self.external & {BACKFILL, SELECT_KILL}):  # docs/semantics.md section 13
            raise ConfigError("on a machine of nodes (--machine) backfill easy (textbook rules), conservative or none "
                              "runs, with select (one job at a time), inspect and kill agents; the EASY variants, "
                              "pre-filled clusters and backfill or select_kill agents are not built on nodes yet")
        self.procs = workload.procs
        self._conservative = config.backfill == "conservative"
        self._release_by_start = config.release_order == "start"
        self._max_run = workload.max_run
        self._rejection_cap = NEVER if config.max_rejections is None else config.max_rejections
        self._prepare_jobs()
        if len(self._index) != len(workload):
            raise ConfigError(f"workload {workload.name!r} has duplicate job ids; renumber its jobs")
        self._gen, self.done = None, False
        self._pending: Decision | None = None
        self._progress: Callable[[int], None] | None = None

    # ----------------------------------------------------------------- set-up
    def _prepare_jobs(self) -> None:
        w, cfg = self.workload, self.config
        run = w.run
        if cfg.overrun == "kill":
            run = np.minimum(run, w.requested)
        self._walltime_killed = (run < w.run)
        if cfg.estimate.kind == "requested":
            est = w.requested
        elif cfg.estimate.kind == "actual":
            est = run
        elif cfg.estimate.kind == "noisy":
            noise = np.random.default_rng(cfg.seed).uniform(-1.0, 1.0, len(w))
            est = np.maximum(1, np.rint(run * (1.0 + cfg.estimate.error * noise))).astype(np.int64)
        self._req, self._run = w.requested.tolist(), run.tolist()
        self._prepare_predictions(run)
        if cfg.estimate.kind == "predicted":
            est = np.asarray(self._prerun, np.int64)
        self._ids = w.job_id.tolist()
        self._index = dict(zip(self._ids, range(len(self._ids))))
        self._submit, self._size = w.submit.tolist(), w.size.tolist()
        # the same list where the column is the same: none is written to (estimate `predicted`,
        # whose estimates change, gets a list of its own at reset)
        self._est = self._req if est is w.requested else self._run if est is run else est.tolist()
        self._user = w.user.tolist()
        self._group, self._executable, self._memory = w.group.tolist(), w.executable.tolist(), w.memory.tolist()
        whole = w.machine is not None and w.machine.exclusive  # every job gets whole nodes: observed so
        self._gpus, self._exclusive, self._partition = w.gpus.tolist(), (w.exclusive | whole).tolist(), w.partition.tolist()
        self._predicted = cfg.estimate.kind == "predicted"
        if self._prefill is not None:
            self._add_prefill_jobs()
        self._columns = {"id": w.job_id, "submit": w.submit, "requested": w.requested, "size": w.size}
        if self.policy.prepare is not None:
            self._columns.update(self.policy.prepare(w))
        if not self.policy.dynamic:
            order = self.policy.order(self._columns)
            rank = np.empty(len(w), dtype=np.int64)
            rank[order] = np.arange(len(w))
            self._rank = rank.tolist()

    def _add_prefill_jobs(self) -> None:
        """The pre-filled jobs as running-only jobs after the episode's (ids -1, -2, ...): they
        hold processors and end, but never queue, and metrics leave them out."""
        sizes, runs = self._prefill[:, 0].tolist(), self._prefill[:, 1].tolist()
        if self._est is not self._req and self._est is not self._run:
            self._est += runs  # its own list (noisy estimates): a pre-filled job ends by its request
        self._req += runs
        self._run += runs
        if self._prerun is not self._req:
            self._prerun += runs
        self._size += sizes
        self._user += [-1] * len(sizes)
        self._ids += [-1 - k for k in range(len(sizes))]

    def _prepare_predictions(self, run: np.ndarray) -> None:
        """The pre-run predictions known before the episode (user_history's are made at submit)."""
        spec, w = self.config.prediction, self.workload
        check_users(w, spec)
        self._model: RunningModel | None = None
        if spec.kind == "running":
            self._model = RunningModel(spec, run, self.config.seed)
            self._revised = revised_jobs(len(w), spec.share, self.config.seed)
            prerun = self._model.prerun
        elif spec.kind == "learned":
            prerun = load_prerun_model(spec.model).predict(w)
        else:
            prerun = w.requested
        self._prerun = self._req if prerun is w.requested else prerun.tolist()

    # ----------------------------------------------------------------- driving
    def reset(self) -> Decision | None:
        """Start the episode; return the first external decision, or None if it ran to the end."""
        n = len(self._size)  # the episode's jobs, then any pre-filled ones
        self._state = [PENDING] * n
        self._start, self._end = [-1] * n, [-1] * n
        self._kills, self._rejections, self._lost = [0] * n, [0] * n, [0] * n
        # predictions: the pre-run one (made again at a kill) and the current one
        self._pred0, self._pred = list(self._prerun), list(self._prerun)
        self._history = UserHistory() if self.config.prediction.kind == "user_history" else None
        self._revisions: list[tuple[int, int, int]] = []  # heap of (time, index, start) of running jobs
        if self._predicted:
            self._est = list(self._prerun)
        self._start_kind = [-1] * n  # how the job's latest start came about: READY, RESERVED, BACKFILLED
        self._held = [READY] * n     # EASY/none: RESERVED once the job was the reserved job of a pass
        self._queue: list[int] = []
        # sizes and estimates of the queued jobs, in queue order: a long queue is searched at once
        self._queue_size, self._queue_est = array("q"), array("q")
        self._running: list[tuple[int, int]] = []   # (estimated end, index), sorted
        self._finishes: list[tuple[int, int]] = []  # heap of (end, index)
        if self._nodes is not None:
            self._nodes.reset()
        if self._conservative:
            first = int(self.workload.submit[0]) if n else 0
            self._plan = ConservativePlan(first, self.procs, self._size, self._est) if self._nodes is None \
                else node_plan(first, self._nodes, self.workload, self._est)
        self.free = self.procs
        self.now = int(self.workload.submit[0]) if len(self.workload) else 0
        self._next_submit = 0
        self._wakeup = NEVER
        self.queue_area = 0  # job-seconds spent waiting in the queue so far
        # (index, start time, busy after) of every start, flat: tuples kept alive by the million
        # would make the garbage collector rescan them over and over
        self._start_log: list[int] = []
        self._steps, self._completed = 0, 0
        # usage-reading policies: per user (and in all, key None) [decayed usage, busy processors, as of]
        self._usage: dict[int | None, list[float]] = {}
        self._committed = -1  # commit_pick: the index of the pick that waits to fit, else -1
        self._kept_shadow: tuple[int, int] | None = None  # keep_shadow: the committed pick's (shadow, extra)
        self.reservation_breaks: list[ReservationBreak] = []  # unguarded backfills that moved the reserved job's shadow later
        self.reservation_delay_s = 0     # by how many seconds in all (kept: the delay penalty reads it every decision)
        self.done, self._result = False, None
        if self._prefill is not None:
            self._start_prefill()
        self._gen = self._episode()
        return self._advance(None)

    def _start_prefill(self) -> None:
        """Put the pre-filled jobs on the cluster, each started `elapsed` s before the first submit (no start log)."""
        first = len(self.workload)
        for k, (size, run, elapsed) in enumerate(self._prefill.tolist()):
            i = first + k
            self._state[i] = RUNNING
            start = self._start[i] = self.now - elapsed
            self._end[i] = start + run
            self.free -= size
            insort(self._running, (start + self._est[i], i))
            heapq.heappush(self._finishes, (start + run, i))

    def step(self, action: Action) -> Decision | None:
        """Apply `action` to the pending decision; the next one, or None at the end. An invalid action changes
        nothing (InvalidAction): the decision stays pending."""
        if self._pending is None:
            raise InvalidAction("no decision is pending: call reset() first" if not self.done
                                else "the episode has ended: call reset() to start another")
        return self._advance(self._pending.parse(action))

    def decide_internally(self, kinds) -> None:
        """From now on the built-in defaults decide `kinds` (e.g. their agent is gone), pending ones at once."""
        self.external = self.external - check_kinds(kinds)
        while self._pending is not None and self._pending.kind not in self.external:
            self.step(self._pending.default())

    @property
    def pending(self) -> Decision | None:
        return self._pending

    def _advance(self, parsed: Any) -> Decision | None:
        try:
            self._pending = self._gen.send(parsed)
        except StopIteration:
            self._pending = None
            self.done = True
        return self._pending

    def run(self, agents: Mapping[str, Any] | None = None,
            progress: Callable[[int], None] | None = None) -> RunResult:
        """Run the whole episode, asking `agents[kind].act(decision)` for external kinds."""
        agents = dict(agents or {})
        missing = self.external - agents.keys()
        if missing:
            raise ConfigError(f"no agent given for external kind(s) {sorted(missing)}")
        self._progress = progress
        decision = self.reset()
        while decision is not None:
            decision = self.step(agents[decision.kind].act(decision))
        return self.result()

    def result(self) -> RunResult:
        """Per-job records and summary metrics of the finished episode."""
        if not self.done:
            raise InvalidAction("the episode is still running: drive it to the end first")
        if self._result is None:
            n = len(self.workload)  # pre-filled jobs, after the episode's, are left out
            self._result = RunResult.from_arrays(
                procs=self.procs, job_id=self.workload.job_id, submit=self.workload.submit,
                start=self._start[:n], end=self._end[:n], run=self._run[:n], size=self.workload.size,
                requested=self.workload.requested,
                kills=self._kills[:n], rejections=self._rejections[:n], lost_work=self._lost[:n],
                walltime_killed=self._walltime_killed, start_kind=self._start_kind[:n],
                reservation_breaks=tuple(self.reservation_breaks))
            if self._nodes is not None:
                self._result.summary.update(self._nodes.utilization(self._result.summary["makespan"]))
        return self._result

    @property
    def reservation_delays(self) -> int:
        """How many unguarded backfills moved the reserved job's shadow time later."""
        return len(self.reservation_breaks)

    def schedule_so_far(self) -> dict[str, list[int]]:
        """Start (-1 unless running or done), end, size and start_kind per job now, for `HpcEnv.render`."""
        n, state = len(self.workload), self._state
        return {"start": [s if state[i] in (RUNNING, DONE) else -1 for i, s in enumerate(self._start[:n])],
                "end": list(self._end[:n]), "size": list(self._size[:n]), "start_kind": list(self._start_kind[:n])}

    # ----------------------------------------------------------------- the loop
    def _episode(self):
        """The event loop as one generator: it yields external decisions, receives actions."""
        submit, state, queue, end = self._submit, self._state, self._queue, self._end
        finishes, revisions = self._finishes, self._revisions
        n = len(submit)
        kill_external = KILL in self.external
        cfg = self.config
        one_event = cfg.one_event
        builtin = not (self._conservative or self.external & {SELECT, INSPECT, SELECT_KILL, BACKFILL}
                       or cfg.commit_pick or cfg.keep_shadow)
        while True:
            t = submit[self._next_submit] if self._next_submit < n else NEVER
            if finishes and finishes[0][0] < t:
                t = finishes[0][0]
            if self._wakeup < t:
                t = self._wakeup
            if revisions and revisions[0][0] < t:
                t = revisions[0][0]
            if t == NEVER:
                return
            self.queue_area += len(queue) * (t - self.now)
            self.now = t
            happened = self._wakeup == t
            if one_event and not happened:
                happened = self._one_event(t)
            else:
                while finishes and finishes[0][0] == t:
                    _, i = heapq.heappop(finishes)
                    if state[i] == RUNNING and end[i] == t:
                        self._complete(i)
                        happened = True
                while self._next_submit < n and submit[self._next_submit] == t:
                    self._enqueue(self._next_submit)
                    self._next_submit += 1
                    happened = True
            if revisions and revisions[0][0] == t:
                happened = self._revise(t) or happened
            if not happened:
                continue  # only the finish of a run that was killed: not a scheduling instance
            self._wakeup = NEVER
            if builtin:
                if queue:
                    self._schedule_builtin(t)
            elif queue or (self._running and SELECT_KILL in self.external):
                yield from self._schedule(t)
            if kill_external and self._running:
                victim = yield self._decision(KILL, [self._ids[i] for _, i in self._running], {})
                if victim is not None:
                    self._kill(self._index[victim])
                    yield from self._schedule(t)

    def _one_event(self, t: int) -> bool:
        """Apply one event at `t` (`one_event`): an arrival first, else one finish (by `release_order`); False
        if it was only the finish of a killed run."""
        if self._next_submit < len(self._submit) and self._submit[self._next_submit] == t:
            self._enqueue(self._next_submit)
            self._next_submit += 1
            return True
        finishes = self._finishes
        if not finishes or finishes[0][0] != t:
            return False  # only prediction revisions are due
        if self._release_by_start:
            return self._release_first_started(t)
        _, i = heapq.heappop(finishes)
        if self._state[i] == RUNNING and self._end[i] == t:
            self._complete(i)
            return True
        return False

    def _release_first_started(self, t: int) -> bool:
        """Complete the job ending at `t` whose run started first (the others stay due); False if none is live."""
        finishes, state, end = self._finishes, self._state, self._end
        due = []
        while finishes and finishes[0][0] == t:
            _, i = heapq.heappop(finishes)
            if state[i] == RUNNING and end[i] == t:
                due.append(i)
        if not due:
            return False
        first = due[0] if len(due) == 1 else min(due, key=self._start_position)
        for i in due:
            if i != first:
                heapq.heappush(finishes, (t, i))
        self._complete(first)
        return True

    def _start_position(self, i: int) -> int:
        """Where running job i's current start is in the (time-ordered) start log."""
        log, start = self._start_log, self._start[i]
        k = bisect_left(range(len(log) // 3), start, key=lambda k: log[3 * k + 1])
        position = -1
        while k < len(log) // 3 and log[3 * k + 1] == start:
            if log[3 * k] == i:
                position = k  # the last start of i in that second is its current one
            k += 1
        return position

    def _schedule_builtin(self, now: int) -> None:
        """`_schedule` when every decision is built in: a plain call, not a generator, as most replays run."""
        queue, size, held, nodes = self._queue, self._size, self._held, self._nodes
        if self.policy.dynamic and len(queue) > 1:
            self._resort(now)
        while queue:
            i = queue[0]
            if size[i] <= self.free and (nodes is None or self._place(i)):
                self._start_job(i, now, held[i], 0)
                continue
            held[i] = RESERVED
            if self.free and self.config.backfill == "easy":
                if nodes is not None:
                    self._backfill_nodes(i, now)
                else:
                    shadow, extra = self._shadow(i, now)
                    self._backfill_easy(i, now, shadow, extra)
            return

    def _schedule(self, now: int):
        if self._conservative:
            self._conservative_pass(now)
            return
        queue, size = self._queue, self._size
        if self.policy.dynamic and len(queue) > 1:
            self._resort(now)
        select_external = SELECT in self.external
        inspect_external = INSPECT in self.external
        # select_kill: asked while jobs wait or run; after a kill, running jobs are offered no more
        # this instant (one kill per instant, as the kill kind), and the pass goes on
        may_kill = SELECT_KILL in self.external
        joint = may_kill
        while queue or (may_kill and self._running):
            if self._committed >= 0:
                picks = [self._committed]  # commit_pick: neither selected nor inspected again
            elif joint:
                window = queue[:self.config.window]
                queued = [self._ids[i] for i in window]
                running = [self._ids[i] for _, i in self._running] if may_kill else []
                can_wait = bool(self._running) or self._next_submit < len(self._submit)
                job = yield self._decision(SELECT_KILL, queued + running, {"queued": len(queued)}, can_wait)
                if job is None:
                    return
                i = self._index[job]
                if self._state[i] == RUNNING:
                    self._kill(i)
                    may_kill = False
                    if self.policy.dynamic and len(queue) > 1:
                        self._resort(now)
                    continue
                picks = [i]
            elif select_external:
                window = queue[:self.config.window]
                can_wait = bool(self._running) or self._next_submit < len(self._submit)
                ids = yield self._decision(SELECT, [self._ids[i] for i in window], {}, can_wait)
                if not ids:
                    return
                picks = [self._index[j] for j in ids]
            else:
                picks = [queue[0]]
            if self._committed < 0 and inspect_external \
                    and any(self._rejections[i] < self._rejection_cap for i in picks):
                context = {"jobs": [self._ids[i] for i in picks],
                           "rejections": max(self._rejections[i] for i in picks),
                           "max_rejections": self.config.max_rejections}
                accepted = yield self._decision(INSPECT, context["jobs"], context)
                if not accepted:
                    for i in picks:
                        self._rejections[i] += 1
                    self._wakeup = now + self.config.max_interval
                    return
            if len(picks) > 1 or size[picks[0]] <= self.free and (self._nodes is None or self._place(picks[0])):
                held = self._held
                for i in picks:
                    self._start_job(i, now, held[i])
                self._committed = -1
                self._kept_shadow = None
                continue
            self._held[picks[0]] = RESERVED  # the reserved job: when select starts it later, it is RESERVED
            if self.config.commit_pick:
                self._committed = picks[0]
            if self.config.backfill == "easy":
                if BACKFILL in self.external:
                    yield from self._backfill_by_agent(picks[0], now)
                elif self._nodes is not None:
                    self._backfill_nodes(picks[0], now)
                else:
                    shadow, extra = self._shadow_for(picks[0], now)
                    extra = self._backfill_easy(picks[0], now, shadow, extra)
                    if self.config.keep_shadow:
                        self._kept_shadow = (shadow, extra)  # extra processors taken stay taken
            return

    # ----------------------------------------------------------------- job transitions
    def _enqueue(self, i: int) -> None:
        if self._history is not None and self._kills[i] == 0:  # predicted when submitted
            self._pred0[i] = self._pred[i] = self._history.predict(self._user[i], self._req[i])
            if self._predicted:
                self._est[i] = self._pred0[i]
        self._state[i] = QUEUED
        if self._conservative:
            self._plan.queued(i)
        queue = self._queue
        if self.policy.dynamic or not queue or self._rank[queue[-1]] < self._rank[i]:
            queue.append(i)
            self._queue_size.append(self._size[i])
            self._queue_est.append(self._est[i])
        else:
            rank = self._rank
            k = bisect_right(queue, rank[i], key=rank.__getitem__)
            queue.insert(k, i)
            self._queue_size.insert(k, self._size[i])
            self._queue_est.insert(k, self._est[i])

    def _start_job(self, i: int, now: int, kind: int, position: int | None = None) -> None:
        """Start queued job `i` (at `position` in the queue, when the caller knows it)."""
        queue = self._queue
        k = position if position is not None else 0 if queue[0] == i else queue.index(i)
        del queue[k], self._queue_size[k], self._queue_est[k]
        self._state[i] = RUNNING
        self._start[i] = now
        self._start_kind[i] = kind
        end = self._end[i] = now + self._run[i]
        free = self.free = self.free - (self._size[i] if self._nodes is None else self._nodes.cores_of(i))
        if self.policy.usage:
            self._charge(i, self._size[i], now)
        self._start_log += (i, now, self.procs - free)
        self._pred[i] = self._pred0[i]  # a queued job's estimate is already its pre-run prediction
        insort(self._running, (now + self._est[i], i))
        heapq.heappush(self._finishes, (end, i))
        if self._model is not None and self._revised[i] and now + self._model.spec.period < end:
            heapq.heappush(self._revisions, (now + self._model.spec.period, i, now))

    def _revise(self, now: int) -> bool:
        """Revise the predictions of the running jobs due at `now`; True if one changed (reservations may move)."""
        revisions, model, period = self._revisions, self._model, self._model.spec.period
        changed = False
        while revisions and revisions[0][0] == now:
            _, i, start = heapq.heappop(revisions)
            if self._state[i] != RUNNING or self._start[i] != start:
                continue  # killed since
            if now + period < self._end[i]:
                heapq.heappush(revisions, (now + period, i, start))
            new = model.at(i, self._run[i], now - start)
            if new == self._pred[i]:
                continue
            changed = True
            self._pred[i] = new
            if self._predicted:
                running = self._running
                del running[bisect_left(running, (start + self._est[i], i))]
                self._est[i] = new
                insort(running, (start + new, i))
        return changed

    def _release(self, i: int) -> None:
        running = self._running
        est_end = self._start[i] + self._est[i]
        del running[bisect_left(running, (est_end, i))]
        self.free += self._size[i] if self._nodes is None else self._nodes.give_back(i, self.now - self._start[i])
        if self.policy.usage and i < len(self._submit):  # a pre-filled job was never charged
            self._charge(i, -self._size[i], self.now)
        if self._conservative:  # an end before its estimate gives the plan processors (nodes) back
            self._plan.released(self.now, i, est_end)

    def _complete(self, i: int) -> None:
        self._release(i)
        if self._history is not None:
            self._history.completed(self._user[i], self._run[i])
        self._state[i] = DONE
        self._completed += 1
        if self._completed % 1024 == 0:
            check_work()  # a shared env's request: over its CPU time, or its agent gone (environment/work.py)
            if self._progress is not None:
                self._progress(self._completed)

    def _kill(self, i: int) -> None:
        """Kill a running job and requeue it, its work lost; its current prediction becomes its pre-run one."""
        self._release(i)
        self._pred0[i] = self._pred[i]
        if self._predicted:
            self._est[i] = self._pred[i]
        self._lost[i] += (self.now - self._start[i]) * self._size[i]
        self._kills[i] += 1
        self._start[i] = self._end[i] = -1
        self._held[i] = READY  # a new wait: only a reservation made after the requeue counts
        self._enqueue(i)

    def _decayed(self, key: int | None, now: int) -> float:
        """The usage (processor-seconds, halved every USAGE_HALF_LIFE) of one user (None: all) at `now`."""
        entry = self._usage.get(key)
        if entry is None:
            return 0.0
        used, busy, since = entry
        decay = 2.0 ** (-(now - since) / USAGE_HALF_LIFE)
        return used * decay + busy * USAGE_HALF_LIFE / math.log(2) * (1.0 - decay)

    def _charge(self, i: int, procs: int, now: int) -> None:
        """Job i's user (and all users) start (procs > 0) or stop using `procs` processors at `now`."""
        for key in (self._user[i], None):
            used = self._decayed(key, now)
            busy = self._usage[key][1] if key in self._usage else 0
            self._usage[key] = [used, busy + procs, now]

    def _resort(self, now: int) -> None:
        queue = self._queue
        idx = np.fromiter(queue, dtype=np.int64, count=len(queue))
        jobs = {name: col[idx] for name, col in self._columns.items()}
        if self.policy.usage:
            total = self._decayed(None, now)
            share = {u: self._decayed(u, now) / total if total > 0 else 0.0 for u in {self._user[i] for i in queue}}
            jobs["usage"] = np.array([share[self._user[i]] for i in queue])
        queue[:] = idx[self.policy.order(jobs, now)].tolist()
        self._queue_size = array("q", [self._size[i] for i in queue])
        self._queue_est = array("q", [self._est[i] for i in queue])

    # ----------------------------------------------------------------- backfilling
    def _shadow(self, head: int, now: int) -> tuple[int, int]:
        """When the head job can start by estimate (overdue jobs end now), and the processors left over then."""
        need = self._size[head]
        avail = self.free
        size = self._size
        shadow = NEVER
        ends = iter(self._running)
        for est_end, i in ends:
            avail += size[i]
            if avail >= need:
                shadow = now if est_end < now and not self.config.strict_shadow else est_end
                break
        for est_end, i in ends:  # jobs ending with the last one needed free processors too
            if est_end > shadow:
                break
            avail += size[i]
        return shadow, avail - need

    def _shadow_for(self, head: int, now: int) -> tuple[int, int]:
        """The reserved job's shadow time and extra processors: afresh, or under `keep_shadow` as first computed."""
        if not self.config.keep_shadow:
            return self._shadow(head, now)
        if self._kept_shadow is None:
            self._kept_shadow = self._shadow(head, now)
        return self._kept_shadow

    def _scan_order(self, jobs: list[int] | None = None) -> list[int]:
        """The waiting jobs (or `jobs`) in `backfill_order` (ties keep queue order)."""
        jobs = self._queue if jobs is None else jobs
        order = self.config.backfill_order
        if order == "queue":
            return jobs
        return sorted(jobs, key=(self._submit if order == "submit" else self._req).__getitem__)

    def _backfill_easy(self, head: int, now: int, shadow: int, extra: int) -> int:
        """EASY: start every job that fits now and ends by the shadow time or uses only the extra processors;
        returns the extra left. Past LONG_QUEUE, each next fit is found by one vectorised search."""
        if self._easy_variant:
            return self._backfill_variant(head, now, shadow, extra)
        free = self.free
        if free == 0:
            return extra
        size, est, queue = self._size, self._est, self._queue
        chosen = []
        for k, i in enumerate(queue[:LONG_QUEUE]):
            if free == 0:
                break
            s = size[i]
            if s > free or i == head:
                continue
            if now + est[i] <= shadow:
                chosen.append(k)
                free -= s
            elif s <= extra:
                chosen.append(k)
                free -= s
                extra -= s
        k = LONG_QUEUE
        while free and k < len(queue):
            k = self._next_fit(k, free, shadow - now, extra)
            if k < 0:
                break
            i = queue[k]
            if i != head:
                chosen.append(k)
                free -= size[i]
                if now + est[i] > shadow:
                    extra -= size[i]
            k += 1
        for started, k in enumerate(chosen):  # each start moves the later positions up by one
            self._start_job(queue[k - started], now, BACKFILLED, k - started)
        return extra

    def _backfill_variant(self, head: int, now: int, shadow: int, extra: int) -> int:
        """`_backfill_easy` under the EASY variants (config.py's switches), job by job."""
        free = self.free
        size, est = self._size, self._est
        strict, use_extra = self.config.strict_shadow, self.config.easy_extra
        bound = self._relaxed(head, shadow)
        skip_next = self.config.backfill_skip_next
        chosen = []
        skipping = False
        for i in self._scan_order():
            if free == 0:
                break
            if skipping:
                skipping = False
                continue
            s = size[i]
            if s > free or i == head:
                continue
            end = now + est[i]
            if end < shadow or (end == shadow and not strict):
                chosen.append(i)
                free -= s
            elif use_extra and s <= extra:
                chosen.append(i)
                free -= s
                extra -= s
            elif end < bound or (end == bound and not strict):
                chosen.append(i)
                free -= s
            else:
                continue
            skipping = skip_next
        for i in chosen:
            self._start_job(i, now, BACKFILLED)
        return extra

    def _place(self, i: int) -> bool:
        """On nodes: put job i where the placement rule finds room now, if it fits (it then starts)."""
        allocation = self._nodes.find(i)
        if allocation is None:
            return False
        self._nodes.take(i, allocation)
        return True

    def _backfill_nodes(self, head: int, now: int) -> None:
        """EASY on nodes: start, in queue order, every job that fits now and ends by the shadow time or fits in what the
        head's reservation leaves on each node of its partition (`NodeState.reserve`)."""
        nodes, size, est, queue = self._nodes, self._size, self._est, self._queue
        reservation = nodes.reserve(head, now, self._running)
        shadow = reservation.shadow
        # fitting the free cores is necessary (the view goes at once: starts resize the array)
        positions = np.flatnonzero(np.frombuffer(self._queue_size, dtype=np.int64) <= self.free).tolist()
        started = 0
        for k in positions:
            if self.free == 0:
                break
            i = queue[k - started]  # each start moves the later positions up by one
            if i == head or size[i] > self.free:
                continue
            late = now + est[i] > shadow
            allocation = nodes.find(i, reservation, late)
            if allocation is None:
                continue
            if late and allocation.partition == reservation.partition:
                reservation.extra[allocation.nodes] -= allocation.used
            nodes.take(i, allocation)
            self._start_job(i, now, BACKFILLED, k - started)
            started += 1

    def _relaxed(self, head: int, shadow: int) -> float:
        """The latest end under `backfill_relax` R: the shadow plus R times the reserved job's wait (RL backfilling)."""
        relax = self.config.backfill_relax
        return shadow + relax * (shadow - self._submit[head]) if relax else shadow

    def _next_fit(self, first: int, free: int, window: int, extra: int) -> int:
        """The first queue position from `first` on of a job that fits; -1 if none does."""
        fits = self._fits(first, free, window, extra)
        k = int(fits.argmax())
        return first + k if fits[k] else -1

    def _fits(self, first: int, free: int, window: int, extra: int) -> np.ndarray:
        """Which queued jobs from `first` on fit `free` and end within `window` or fit `extra`, at once."""
        sizes = np.frombuffer(self._queue_size, dtype=np.int64)[first:]
        ests = np.frombuffer(self._queue_est, dtype=np.int64)[first:]
        return (sizes <= free) & ((ests <= window) | (sizes <= extra))

    def _backfill_candidates(self, head: int, now: int, bound: float, extra: int) -> list[int]:
        """An agent's candidates in the queue window, in scan order; guarded ones end by `bound` or fit `extra`."""
        free, size, est = self.free, self._size, self._est
        jobs = self._scan_order(self._queue[:self.config.window])
        if self.config.backfill_candidates == "unguarded":
            return [i for i in jobs if i != head and size[i] <= free]
        strict, use_extra = self.config.strict_shadow, self.config.easy_extra
        return [i for i in jobs
                if i != head and size[i] <= free
                and (now + est[i] < bound or (now + est[i] == bound and not strict)
                     or (use_extra and size[i] <= extra))]

    def _backfill_by_agent(self, head: int, now: int):
        shadow, extra = self._shadow_for(head, now)
        bound = self._relaxed(head, shadow)  # fixed for the pass, as the built-in scan's
        can_stop = self.config.backfill_stop
        while True:
            candidates = self._backfill_candidates(head, now, max(bound, shadow), extra)
            if not candidates:
                return
            if len(candidates) == 1 and not can_stop:  # the code leaves one candidate to its scan
                extra = self._backfill_easy(head, now, shadow, extra)
                if self.config.keep_shadow:
                    self._kept_shadow = (shadow, extra)
                return
            context = {"reserved": self._ids[head], "shadow_time": shadow, "extra": extra}
            job = yield self._decision(BACKFILL, [self._ids[i] for i in candidates], context, can_stop)
            if job is None:
                return
            i = self._index[job]
            if now + self._est[i] > shadow:
                if self._size[i] <= extra:
                    extra -= self._size[i]
                    if self.config.keep_shadow:
                        self._kept_shadow = (shadow, extra)
                else:  # unguarded or relaxed: the reserved job now starts later, by estimates
                    self._start_job(i, now, BACKFILLED)
                    later, extra = self._shadow(head, now)
                    if later > shadow:
                        self.reservation_delay_s += later - shadow
                        self.reservation_breaks.append(
                            ReservationBreak(now, self._ids[head], self._ids[i], shadow, later - shadow))
                        shadow = later
                    if self.config.keep_shadow:
                        self._kept_shadow = (shadow, extra)
                    continue
            self._start_job(i, now, BACKFILLED)

    def _conservative_pass(self, now: int) -> None:
        """Conservative: start the jobs whose reservation is now (`ConservativePlan.due`), in
        placement order, as if each started when it was placed."""
        queue = self._queue
        reranked = self.policy.dynamic
        if reranked:
            if len(queue) > 1:
                self._resort(now)
            rank = {i: r for r, i in enumerate(queue)}.__getitem__
        else:
            rank = self._rank.__getitem__
        due, new = self._plan.due(now, self.free, self._running, rank, reranked)
        size = self._size
        started = []
        for i in due:
            if size[i] <= self.free and self._plan.start(i, now):
                self._start_job(i, now, READY)
                started.append(i)
        if started:
            self._plan.started(now, started)
            # a start behind a job that still waits (in queue order) is BACKFILLED; otherwise one
            # that held a reservation from an earlier pass is RESERVED; the rest stay READY
            first_waiting = rank(queue[0]) if queue else NEVER
            kinds = self._start_kind
            fresh = set(new)
            for i in started:
                if rank(i) > first_waiting:
                    kinds[i] = BACKFILLED
                elif i not in fresh:
                    kinds[i] = RESERVED

    # ----------------------------------------------------------------- observations
    def _decision(self, kind: str, candidates: list[int], context: dict[str, Any],
                  can_wait: bool = True) -> Decision:
        self._steps += 1
        return Decision(self, kind, self.now, self._steps, candidates, context, can_wait)

    def observe(self, decision: Decision, observed: Mapping[str, Collection[str]] | None = None) -> dict[str, Any]:
        """The raw state an external agent sees; of the job tables only the columns `observed` names."""
        keep = self._observed if observed is None else observed
        now = self.now
        queued, run = _gather(self._queue[:self.config.window]), _gather([i for _, i in self._running])
        submit, est, predicted = self._submit, self._est, self.config.prediction.on
        waiting_since = queued(submit)
        queue = {"id": list(decision.candidates) if decision.kind == SELECT else queued(self._ids)}
        for name, column in (("submit", None), ("size", self._size), ("requested", self._req), ("estimate", est),
                             ("wait", None), ("rejections", self._rejections), ("user", self._user),
                             ("group", self._group), ("executable", self._executable), ("memory", self._memory),
                             ("gpus", self._gpus), ("exclusive", self._exclusive), ("partition", self._partition),
                             ("prediction", self._pred0 if predicted else None)):
            if keep is None or name in keep["queue"]:
                if column is not None:
                    queue[name] = queued(column)
                elif name != "prediction":
                    queue[name] = waiting_since if name == "submit" else [now - t for t in waiting_since]
        running = {"id": run(self._ids)}
        for name, column in (("start", self._start), ("size", self._size), ("requested", self._req),
                             ("estimated_end", None), ("submit", submit if predicted else None),
                             ("prediction0", self._pred0 if predicted else None),
                             ("prediction", self._pred if predicted else None)):
            if keep is None or name in keep["running"]:
                if column is not None:
                    running[name] = run(column)
                elif name == "estimated_end":
                    running[name] = [s + e for s, e in zip(run(self._start), run(est))]
        obs = {"time": now, "procs": self.procs, "free": self.free, "queue_length": len(self._queue),
               "max_run": self._max_run, "queue": queue, "running": running, "context": dict(decision.context)}
        if self._nodes is not None:  # PROTOCOL.md section 6 (1.7)
            obs["machine"] = self._nodes.table()
        return obs

    def prerun_predictions(self) -> list[int]:
        """Each job's pre-run prediction so far (remade at a kill; user_history's at submit)."""
        return list(self._pred0)

    # ----------------------------------------------------------------- job starts (per-decision rewards)
    @property
    def started_count(self) -> int:
        """Job starts so far (a restart counts again): a mark for `started_since`."""
        return len(self._start_log) // 3

    def started_since(self, mark: int) -> list[tuple[int, int, int, int, int]]:
        """The starts after the first `mark`, as (job index, start time, wait, size, processors busy after it)."""
        submit, size, log = self._submit, self._size, self._start_log
        return [(log[k], log[k + 1], log[k + 1] - submit[log[k]], size[log[k]], log[k + 2])
                for k in range(3 * mark, len(log), 3)]

    def queue_waits(self, at: int) -> list[int]:
        """The waits at `at` of the jobs queued now that were submitted by `at`, in queue order."""
        submit = self._submit
        return [at - submit[i] for i in self._queue if submit[i] <= at]

    def queue_estimates(self, at: int) -> list[int]:
        """The estimated run times of the jobs `queue_waits(at)` covers, in the same order."""
        submit, est = self._submit, self._est
        return [est[i] for i in self._queue if submit[i] <= at]

    @property
    def submitted_count(self) -> int:
        """How many jobs (by index, in submit order) have been submitted so far."""
        return self._next_submit

    def job_times(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Per job index: submit, start, end (-1 while queued), run, estimate, prediction and done, as arrays."""
        cols = {name: np.array([col[i] for i in indices], np.int64) for name, col in
                (("submit", self._submit), ("start", self._start), ("end", self._end), ("run", self._run),
                 ("estimate", self._est), ("prediction", self._pred))}
        return {**cols, "done": np.array([self._state[i] == DONE for i in indices], bool)}

    def total_size(self, job_ids: Iterable[int]) -> int:
        return sum(self._size[self._index[j]] for j in job_ids)


def simulate(workload: Workload, config: SimConfig | None = None, *, policy: str | PriorityPolicy = "fcfs",
             agents: Mapping[str, Any] | None = None,
             progress: Callable[[int], None] | None = None) -> RunResult:
    """Run one episode to the end; kinds with an agent in `agents` are decided by it."""
    agents = dict(agents or {})
    return Simulation(workload, config, policy=policy, external=agents).run(agents, progress)
