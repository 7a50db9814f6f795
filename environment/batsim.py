"""hpcgym as Batsim 4 for an external scheduler (pybatsim, batsched): Batsim's own event loop, since those schedulers
decide whole host allocations rather than answer hpcgym's decisions (docs/batsim.md)."""

from __future__ import annotations

import heapq
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import Any

import zmq

from ..protocol.codec import MAX_MESSAGE_BYTES
from .errors import ConfigError, HpcgymError
from .machine import REQUESTS, one_resource
from .metrics import RunResult
from .workload import Workload

WORKLOAD_ID = "w0"  #: The one workload's id: Batsim names jobs WORKLOAD!ID.
#: The profile every job names when run times are hidden, and what it says: no type (pybatsim
#: reads it as an unknown profile; one with an unknown type crashes its high-level API).
HIDDEN_PROFILE = "hidden"
HIDDEN = {"hidden": "hpcgym hides run times from the scheduler (hpcgym batsim run --reveal-run-times shows them)"}
#: Most messages the loop exchanges at one instant before it calls the scheduler stuck (a
#: scheduler that asks to be called now, over and over, would otherwise never let time move).
MAX_EXCHANGES_PER_INSTANT = 10_000
#: What SIMULATION_BEGINS tells about Batsim's set-up: no profiles forwarded with submissions,
#: no dynamic jobs, no unknown events (the keys pybatsim 3 reads; values as in Batsim 4's defaults).
BATSIM_CONFIG = {"redis-enabled": False, "redis-hostname": "127.0.0.1", "redis-port": 6379, "redis-prefix": "default",
                 "profiles-forwarded-on-submission": False, "dynamic-jobs-enabled": False,
                 "dynamic-jobs-acknowledged": False, "profile-reuse-enabled": False,
                 "forward-unknown-events": False}
#: Scheduler events outside this mapping (docs/batsim.md, "Out of scope"), with the reason.
OUT_OF_SCOPE = {"REGISTER_JOB": "dynamic job registration", "REGISTER_PROFILE": "dynamic job registration",
                "SET_RESOURCE_STATE": "energy and resource states", "QUERY": "queries (energy, waiting-time estimates)",
                "CHANGE_JOB_STATE": "changing a job's state by hand",
                "TO_JOB_MSG": "messages to jobs (SimGrid profiles other than delay)"}

QUEUED, RUNNING, DONE, REJECTED = 1, 2, 3, 4
# start_kind codes of environment/metrics.START_KINDS
READY, BACKFILLED = 0, 2


class SchedulerFailed(HpcgymError):
    """The scheduler broke the protocol, made an impossible decision, crashed or went silent."""


def job_name(job_id: int) -> str:
    """Batsim's name of a workload job."""
    return f"{WORKLOAD_ID}!{job_id}"


def parse_interval_set(text: Any) -> list[int]:
    """Hosts of a Batsim interval set such as "0-3 7" (ValueError naming what is wrong)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"allocation {text!r} is not an interval set such as \"0-3 7\"")
    hosts: list[int] = []
    for part in text.split():
        low, dash, high = part.partition("-")
        try:
            first, last = int(low), int(high) if dash else int(low)
        except ValueError:
            raise ValueError(f"allocation {text!r} is not an interval set such as \"0-3 7\"") from None
        if first < 0 or last < first:
            raise ValueError(f"allocation {text!r} has the interval {part!r}, which is empty or negative")
        hosts.extend(range(first, last + 1))
    return hosts


def format_interval_set(hosts: list[int]) -> str:
    """The interval set of sorted, distinct hosts: [0, 1, 2, 3, 7] -> "0-3 7"."""
    runs = [[host for _, host in run] for _, run in groupby(enumerate(hosts), lambda kh: kh[1] - kh[0])]
    return " ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def delay_profile(run: int) -> tuple[str, dict[str, Any]]:
    """The name and Batsim delay profile of a job that runs `run` seconds (one per run time)."""
    return f"delay_{run}", {"type": "delay", "delay": float(run)}


def on_hosts(workload: Workload) -> Workload:
    """The workload as Batsim sees a machine: identical hosts (nodes, or cores), a job a number of them; a
    machine where more than one resource decides is refused."""
    machine = workload.machine
    if machine is None:
        return workload
    found = one_resource(machine, *(getattr(workload, c) for c in REQUESTS))
    if found is None:
        raise ConfigError(f"Batsim's platform is identical hosts and a job a number of them, which cannot express "
                          f"this machine ({machine.describe()}): jobs there compete for several partitions, memory or "
                          "GPUs; use one partition of whole nodes (--machine nodes) or no --machine")
    sizes, unit = found
    hosts = machine.partitions[0].nodes if unit == "nodes" else machine.cores
    return replace(workload, procs=hosts, size=sizes, machine=None)


def workload_json(workload: Workload, reveal_run_times: bool = True, origin: int = 0) -> dict[str, Any]:
    """Batsim's workload description (jobs with delay profiles); submit times count from `origin` (export: the
    window's first submit, as a Batsim run's clock starts at 0)."""
    jobs, profiles = [], {}
    for job_id, submit, run, size, requested in zip(workload.job_id.tolist(), workload.submit.tolist(),
                                                     workload.run.tolist(), workload.size.tolist(),
                                                     workload.requested.tolist()):
        name, profile = delay_profile(run) if reveal_run_times else (HIDDEN_PROFILE, HIDDEN)
        profiles[name] = profile
        jobs.append({"id": str(job_id), "subtime": float(submit - origin), "walltime": float(requested), "res": size,
                     "profile": name})
    return {"nb_res": workload.procs, "jobs": jobs, "profiles": profiles}


def platform_xml(procs: int, speed: str = "1Gf") -> str:
    """A SimGrid platform for real Batsim: `procs` identical hosts (host0, ...) and Batsim's master host."""
    return "\n".join([
        "<?xml version='1.0'?>",
        '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
        '<platform version="4.1">',
        '  <zone id="main" routing="Full">',
        f'    <cluster id="compute" prefix="host" suffix="" radical="0-{procs - 1}" speed="{speed}" '
        'bw="10Gbps" lat="1us" bb_bw="40Gbps" bb_lat="1us"/>',
        f'    <cluster id="master" prefix="master_host" suffix="" radical="0-0" speed="{speed}" '
        'bw="10Gbps" lat="1us" bb_bw="40Gbps" bb_lat="1us">',
        '      <prop id="role" value="master"/>',
        '    </cluster>',
        '    <link id="backbone" bandwidth="40Gbps" latency="1us"/>',
        '    <zoneRoute src="compute" dst="master" gw_src="hostcompute_router" gw_dst="master_hostmaster_router">',
        '      <link_ctn id="backbone"/>',
        '    </zoneRoute>',
        '  </zone>',
        '</platform>',
        "",
    ])


@dataclass(frozen=True, eq=False)
class BatsimRun:
    """One Batsim run: hpcgym's records of the jobs that ran (none of a rejected one) and what else happened."""

    result: RunResult
    rejected: list[int] = field(default_factory=list)
    allocations: dict[int, str] = field(default_factory=dict)  # job id -> the hosts it ran on (interval set)
    exchanges: int = 0
    wall_s: float = 0.0

    @property
    def summary(self) -> dict[str, Any]:
        """hpcgym's metrics (the keys of `hpcgym run --json`) and the rejected jobs' count."""
        return {**self.result.summary, "rejected": len(self.rejected)}


class BatsimReplay:
    """Batsim's side of one simulation over `workload`; `run(exchange)` plays it to the end."""

    def __init__(self, workload: Workload, *, reveal_run_times: bool = False) -> None:
        self.workload = workload = on_hosts(workload)
        self.reveal_run_times = reveal_run_times
        self.procs = workload.procs
        self._ids, self._submit, self._size = workload.job_id.tolist(), workload.submit.tolist(), workload.size.tolist()
        self._index = {name: i for i, name in enumerate(job_name(j) for j in self._ids)}
        self._requested, self._recorded = workload.requested.tolist(), workload.run.tolist()
        # a job runs to its end or to its walltime, whichever comes first
        self._run = [min(run, req) for run, req in zip(self._recorded, self._requested)]
        self._past_walltime = [run > req for run, req in zip(self._recorded, self._requested)]

    # ----------------------------------------------------------------- the loop
    def run(self, exchange: Callable[[dict[str, Any]], Any]) -> BatsimRun:
        """Play the simulation, each message through `exchange` (message -> the scheduler's decoded reply)."""
        began = time.perf_counter()
        n = len(self._ids)
        self._exchange, self._exchanges = exchange, 0
        self._state, self._kills, self._start_kind = [0] * n, [0] * n, [READY] * n
        self._start, self._end = [-1] * n, [-1] * n
        self._hosts: list[list[int]] = [[] for _ in range(n)]
        self._owner = [-1] * self.procs
        self._finishes: list[tuple[int, int, int]] = []  # (end, start order, index)
        self._calls: list[int] = []                      # times of requested calls
        self._waiting: list[int] = []                    # heap of submitted, unstarted job indices
        self._later: list[dict[str, Any]] = []           # events due at `now` after this exchange
        self._starts, self.now = 0, 0
        self._open = 0                                   # jobs submitted and not yet done or rejected
        profiles = dict(workload_json(self.workload, self.reveal_run_times)["profiles"])
        begins = {"nb_resources": self.procs, "nb_compute_resources": self.procs, "nb_storage_resources": 0,
                  "allow_compute_sharing": False, "allow_storage_sharing": False, "config": BATSIM_CONFIG,
                  "compute_resources": [{"id": h, "name": f"host{h}", "state": "idle", "properties": {}}
                                        for h in range(self.procs)],
                  "storage_resources": [], "workloads": {WORKLOAD_ID: f"{self.workload.name}.json"},
                  "profiles": {WORKLOAD_ID: profiles}}
        self._send([self._event("SIMULATION_BEGINS", begins)])
        submitted, at_instant = 0, 0
        while True:
            if self._later:
                at_instant += 1
                if at_instant > MAX_EXCHANGES_PER_INSTANT:
                    raise SchedulerFailed(f"the scheduler kept asking to be called at {self.now} "
                                          f"({MAX_EXCHANGES_PER_INSTANT:,} exchanges without time moving on)")
                events, self._later = self._later, []
                self._send(events)
                continue
            if submitted == n and self._open == 0:
                break
            t = min(self._submit[submitted] if submitted < n else math.inf,
                    self._finishes[0][0] if self._finishes else math.inf,
                    self._calls[0] if self._calls else math.inf)
            if t == math.inf:
                waiting = self._ids[self._first_waiting()]
                raise SchedulerFailed(f"the scheduler left {self._open} job(s) waiting (first {job_name(waiting)}) "
                                      f"with nothing running and no call requested at time {self.now}: "
                                      "Batsim would wait forever")
            self.now, at_instant = int(t), 0
            events = []
            while self._finishes and self._finishes[0][0] == t:
                _, _, i = heapq.heappop(self._finishes)
                if self._state[i] == RUNNING:  # not killed before its end
                    events.append(self._complete(i))
            while submitted < n and self._submit[submitted] == t:
                events.append(self._submission(submitted))
                submitted += 1
            while self._calls and self._calls[0] == t:
                heapq.heappop(self._calls)
                events.append(self._event("REQUESTED_CALL", {}))
            if submitted == n and any(e["type"] == "JOB_SUBMITTED" for e in events):
                events.append(self._event("NOTIFY", {"type": "no_more_static_job_to_submit"}))
            if events:  # else only the planned end of a killed job: nothing to tell
                self._send(events)
        self._send([self._event("SIMULATION_ENDS", {})], apply=False)
        return BatsimRun(self._result(), [self._ids[i] for i in range(n) if self._state[i] == REJECTED],
                         {self._ids[i]: format_interval_set(self._hosts[i]) for i in range(n) if self._state[i] == DONE},
                         self._exchanges, time.perf_counter() - began)

    def _event(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": float(self.now), "type": kind, "data": data}

    def _submission(self, i: int) -> dict[str, Any]:
        self._state[i] = QUEUED
        self._open += 1
        heapq.heappush(self._waiting, i)
        name = job_name(self._ids[i])
        profile = delay_profile(self._recorded[i])[0] if self.reveal_run_times else HIDDEN_PROFILE
        return self._event("JOB_SUBMITTED", {"job_id": name, "job": {
            "id": name, "subtime": float(self._submit[i]), "walltime": float(self._requested[i]),
            "res": self._size[i], "profile": profile}})

    def _complete(self, i: int) -> dict[str, Any]:
        alloc = self._release(i)
        state = "COMPLETED_WALLTIME_REACHED" if self._past_walltime[i] else "COMPLETED_SUCCESSFULLY"
        return self._event("JOB_COMPLETED", {"job_id": job_name(self._ids[i]), "job_state": state,
                                             "return_code": 0 if state == "COMPLETED_SUCCESSFULLY" else -1,
                                             "kill_reason": "", "alloc": alloc})

    def _release(self, i: int) -> str:
        hosts = self._hosts[i]
        for h in hosts:
            self._owner[h] = -1
        self._state[i] = DONE
        self._open -= 1
        return format_interval_set(hosts)

    def _send(self, events: list[dict[str, Any]], apply: bool = True) -> None:
        self._exchanges += 1
        reply = self._exchange({"now": float(self.now), "events": events})
        decisions = self._check_message(reply)
        if apply:
            for event in decisions:
                self._apply(event)

    # ----------------------------------------------------------------- the scheduler's decisions
    def _check_message(self, reply: Any) -> list[dict[str, Any]]:
        if not (isinstance(reply, dict) and _is_number(reply.get("now")) and isinstance(reply.get("events"), list)):
            raise SchedulerFailed(f"the scheduler's reply at time {self.now} is not a Batsim message "
                                  f"({{\"now\": number, \"events\": [...]}}): {json.dumps(reply)[:120]}")
        for event in reply["events"]:
            if not (isinstance(event, dict) and isinstance(event.get("type"), str)
                    and _is_number(event.get("timestamp")) and isinstance(event.get("data", {}), dict)):
                raise SchedulerFailed(f"the scheduler's reply at time {self.now} has an event that is not "
                                      f"{{\"timestamp\": number, \"type\": text, \"data\": {{...}}}}: "
                                      f"{json.dumps(event)[:120]}")
            if event["timestamp"] < self.now:
                raise SchedulerFailed(f"the scheduler's {event['type']} at time {self.now} is dated "
                                      f"{event['timestamp']}, in the past")
        return reply["events"]

    def _apply(self, event: dict[str, Any]) -> None:
        kind, data = event["type"], event.get("data", {})
        if kind == "EXECUTE_JOB":
            self._execute(self._job(data, "EXECUTE_JOB"), data.get("alloc"))
        elif kind == "REJECT_JOB":
            i = self._job(data, "REJECT_JOB")
            if self._state[i] != QUEUED:
                raise SchedulerFailed(f"REJECT_JOB of {data['job_id']} at time {self.now}: the job "
                                      f"{self._describe(i)}; only a submitted job that has not started can be rejected")
            self._state[i] = REJECTED
            self._open -= 1
        elif kind == "KILL_JOB":
            self._kill(data.get("job_ids"))
        elif kind == "CALL_ME_LATER":
            when = data.get("timestamp")
            if not _is_number(when) or when < self.now:
                raise SchedulerFailed(f"CALL_ME_LATER at time {self.now} asks for {when!r}: give a time no "
                                      "earlier than now")
            when = math.ceil(when)  # hpcgym's clock counts whole seconds
            if when == self.now:
                self._later.append(self._event("REQUESTED_CALL", {}))
            else:
                heapq.heappush(self._calls, when)
        elif kind in ("NOTIFY", "SET_JOB_METADATA"):
            pass  # the end of dynamic registrations, metadata for Batsim's output: nothing to do here
        elif kind in OUT_OF_SCOPE:
            raise SchedulerFailed(f"the scheduler sent {kind} at time {self.now}: {OUT_OF_SCOPE[kind]} is out of "
                                  "scope of hpcgym's Batsim (docs/batsim.md)")
        else:
            raise SchedulerFailed(f"the scheduler sent an event of unknown type {kind!r} at time {self.now}")

    def _job(self, data: dict[str, Any], kind: str) -> int:
        name = data.get("job_id")
        if name not in self._index:
            raise SchedulerFailed(f"{kind} at time {self.now} names job {name!r}, which is not in the workload "
                                  f"(jobs are named {WORKLOAD_ID}!ID)")
        return self._index[name]

    def _describe(self, i: int) -> str:
        state = self._state[i]
        if state == 0:
            return f"is not submitted yet (it arrives at {self._submit[i]})"
        if state == RUNNING:
            return f"already started at {self._start[i]}"
        if state == DONE:
            return f"already ended at {self._end[i]}"
        return "was rejected" if state == REJECTED else "is waiting"

    def _execute(self, i: int, alloc: Any) -> None:
        name = job_name(self._ids[i])
        where = f"EXECUTE_JOB of {name} on {alloc!r} at time {self.now}"
        if self._state[i] != QUEUED:
            raise SchedulerFailed(f"{where}: the job {self._describe(i)}")
        try:
            hosts = parse_interval_set(alloc)
        except ValueError as exc:
            raise SchedulerFailed(f"{where}: {exc}") from None
        outside = [h for h in hosts if h >= self.procs]
        if outside:
            raise SchedulerFailed(f"{where}: host {outside[0]} is outside the cluster (hosts 0-{self.procs - 1})")
        if len(set(hosts)) != len(hosts):
            raise SchedulerFailed(f"{where}: the allocation names a host twice")
        if len(hosts) != self._size[i]:
            raise SchedulerFailed(f"{where}: {len(hosts)} host(s) for a job of {self._size[i]}")
        for h in hosts:
            if self._owner[h] != -1:
                raise SchedulerFailed(f"{where}: host {h} runs {job_name(self._ids[self._owner[h]])}")
        for h in hosts:
            self._owner[h] = i
        self._hosts[i] = sorted(hosts)
        self._state[i] = RUNNING
        self._start[i] = self.now
        self._end[i] = self.now + self._run[i]
        if self._first_waiting() < i:
            self._start_kind[i] = BACKFILLED  # started ahead of a job submitted before it
        self._starts += 1
        heapq.heappush(self._finishes, (self._end[i], self._starts, i))

    def _first_waiting(self) -> int | float:
        """The first submitted job (index) still waiting, or infinity."""
        while self._waiting and self._state[self._waiting[0]] != QUEUED:
            heapq.heappop(self._waiting)
        return self._waiting[0] if self._waiting else math.inf

    def _kill(self, names: Any) -> None:
        if not isinstance(names, list) or not names:
            raise SchedulerFailed(f"KILL_JOB at time {self.now} has no list of job_ids: {names!r}")
        progress = {}
        for name in names:
            i = self._job({"job_id": name}, "KILL_JOB")
            if self._state[i] == DONE:
                continue  # it ended before the kill: acknowledged without progress (Batsim 4)
            if self._state[i] != RUNNING:
                raise SchedulerFailed(f"KILL_JOB of {name} at time {self.now}: the job {self._describe(i)}; "
                                      "only a running job can be killed")
            ran = self.now - self._start[i]
            progress[name] = {"profile": delay_profile(self._recorded[i])[0] if self.reveal_run_times else HIDDEN_PROFILE,
                              "progress": ran / self._run[i] if self._run[i] else 1.0}
            self._end[i] = self.now
            self._kills[i] = 1
            self._release(i)
        self._later.append(self._event("JOB_KILLED", {"job_ids": list(names), "job_progress": progress}))

    def _result(self) -> RunResult:
        ran = [i for i in range(len(self._ids)) if self._state[i] == DONE]
        w = self.workload
        return RunResult.from_arrays(
            procs=self.procs, job_id=w.job_id[ran], submit=w.submit[ran],
            start=[self._start[i] for i in ran], end=[self._end[i] for i in ran],
            run=[self._end[i] - self._start[i] for i in ran], size=w.size[ran], requested=w.requested[ran],
            kills=[self._kills[i] for i in ran], rejections=[0] * len(ran), lost_work=[0] * len(ran),
            walltime_killed=[self._past_walltime[i] and not self._kills[i] for i in ran],
            start_kind=[self._start_kind[i] for i in ran])


class SchedulerSocket:
    """Batsim's REQ socket to a scheduler's REP socket: `socket(message)` returns the decoded reply, or fails
    when none comes within `timeout` s, `gone()` says the scheduler ended, or the reply is not JSON."""

    CHECK_S = 0.05  #: How often a wait for a reply checks `gone` (seconds).

    def __init__(self, address: str, timeout: float = 30.0, gone: Callable[[], str | None] | None = None) -> None:
        self.address, self.timeout, self.gone = address, timeout, gone
        self.latency: list[float] = []  # seconds from each send to its reply
        self._context = zmq.Context.instance()
        self._socket = self._context.socket(zmq.REQ)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self._socket.connect(address)

    def __call__(self, message: dict[str, Any]) -> Any:
        sent = time.perf_counter()
        self._socket.send(json.dumps(message).encode())
        deadline = sent + self.timeout
        while not self._socket.poll(int(1000 * self.CHECK_S)):
            why = self.gone() if self.gone is not None else None
            if why is not None:
                raise SchedulerFailed(f"the scheduler {why} before answering the message of time {message['now']:.0f}")
            if time.perf_counter() > deadline:
                raise SchedulerFailed(f"the scheduler did not answer the message of time {message['now']:.0f} within "
                                      f"{self.timeout:g} s (is it listening on {self.address}? pybatsim needs -t 0 "
                                      "to wait longer than 2 s for Batsim)")
        data = self._socket.recv()
        self.latency.append(time.perf_counter() - sent)
        try:
            return json.loads(data)
        except ValueError:
            raise SchedulerFailed(f"the scheduler answered the message of time {message['now']:.0f} with something "
                                  f"that is not JSON: {data[:80]!r}") from None

    def close(self) -> None:
        self._socket.close()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
