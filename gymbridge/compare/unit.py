"""One unit: one policy on one job sequence, over the protocol (agents as processes, this process the env and
driver) or in process, with the same records (docs/compare.md); a failure comes back as {"status": "error"}."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...agents.runtime import CHECKPOINT_SOURCES
from ...environment.decisions import KINDS
from ...environment.errors import HpcgymError
from ...environment.metrics import JOB_COLUMNS, summarize
from ...environment.service import EnvService, kinds_key
from .policy import AgentSpec, PolicySpec

DRIVER_NAME = "hpcgym-compare-driver"
#: How often the env answers a waiting request with `pending`; the driver checks its agents then.
HEARTBEAT_S = 0.1
#: Seconds a unit's agent processes may take to start and say hello (`hpcgym compare --start-timeout`).
DEFAULT_START_TIMEOUT = 300.0


def run_unit(task: dict[str, Any], swf_text: str) -> dict[str, Any]:
    """`task`: policy (PolicySpec JSON), seed, options, mode (protocol or inproc), cwd, decision_timeout."""
    started = time.perf_counter()
    policy = PolicySpec.from_json(task["policy"])
    tmp = ipc_folder("hpcgym-cmp-")
    try:
        trace = tmp / "seq.swf"
        trace.write_text(swf_text)
        mode = "batsim" if policy.batsim else "protocol" if task["mode"] == "protocol" or policy.external else "inproc"
        if mode == "batsim":
            result = _run_batsim(policy.batsim, task, trace)
        elif mode == "protocol":
            result = run_protocol(policy, task, trace, tmp)
        else:
            result = _run_inproc(policy, task, trace)
        result.update(status="ok", mode=mode)
    except Exception as exc:  # also a bug, or an agent's exception outside act: report, never raise
        known = isinstance(exc, (UnitFailed, HpcgymError))
        result = {"status": "error", "error": str(exc) if known else _describe(exc), "mode": task["mode"]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["wall_s"] = time.perf_counter() - started
    return result


class UnitFailed(Exception):
    """The unit could not finish (an agent died, the env refused, the episode did not complete)."""


def ipc_folder(prefix: str) -> Path:
    """A new temporary folder under /tmp where it exists: an ipc:// path in it must fit ~107 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp" if os.path.isdir("/tmp") else None))


def _sim_options(policy: PolicySpec, task: dict[str, Any]) -> dict[str, Any]:
    return {**task.get("options", {}), **policy.options}


def _records(jobs: dict[str, Any], procs: int, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """The unit's per-job records and summary, with each resource's utilization from `metrics` (on nodes)."""
    import numpy as np

    columns = {name: list(jobs[name]) for name in JOB_COLUMNS}
    arrays = {name: np.asarray(values, dtype=np.float64 if name in ("slowdown", "bsld") else np.int64)
              for name, values in columns.items()}
    per_resource = {k: v for k, v in (metrics or {}).items() if k.startswith("utilization_")}
    return {"jobs": columns, "procs": procs, "summary": {**summarize(arrays, procs), **per_resource}}


#: Kills per job after which a unit fails: a policy killing at every decision never ends its episode.
MAX_KILLS_PER_JOB = 100


class _TimedAgent:
    def __init__(self, agent: Any, label: str, samples: list[float], log: Any, max_kills: int) -> None:
        self.agent, self.label, self.samples, self.log = agent, label, samples, log
        self.max_kills, self.kills = max_kills, 0

    def act(self, decision: Any) -> Any:
        t0 = time.perf_counter()
        try:
            action = self.agent.act(decision)
        except Exception as exc:
            raise UnitFailed(f"agent {self.label} raised {_describe(exc)}") from exc
        self.samples.append(time.perf_counter() - t0)
        killed = action is not None and (decision.kind == "kill" or (
            decision.kind == "select_kill" and action in decision.candidates[decision.context["queued"]:]))
        if killed:
            self.kills += 1
            if self.kills > self.max_kills:
                raise UnitFailed(f"agent {self.label} killed {self.kills} times in one episode (over "
                                 f"{MAX_KILLS_PER_JOB} per job): a policy that kills at every decision never ends it")
        if self.log is not None:
            self.log.add(decision, action)
        return action


def _decision_log(task: dict[str, Any], procs: int) -> Any:
    """The unit's DecisionLog when the task asks for records, else None."""
    record = task.get("record")
    if not record:
        return None
    from ...agents.records import DecisionLog

    return DecisionLog(record["kind"], record["encoder"], record["window"], procs)


def _save_log(log: Any, task: dict[str, Any], policy: PolicySpec) -> dict[str, Any]:
    if log is None:
        return {}
    log.end_episode()
    path = Path(task["record"]["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    log.save(path, policy=policy.name, spec=policy.text, seed=task["seed"], sequence=task.get("sequence"))
    return {"records": str(path), "recorded": len(log)}


def _describe(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" (at {Path(last.filename).name}:{last.lineno})" if last else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _run_inproc(policy: PolicySpec, task: dict[str, Any], trace: Path) -> dict[str, Any]:
    from ...environment.config import SimConfig, expand_preset
    from ...environment.simulator import simulate
    from ...environment.swf import read_swf

    _with_cwd_on_path(task.get("cwd"))
    workload = read_swf(trace)
    log = _decision_log(task, workload.procs)
    latency: dict[str, list[float]] = {}
    agents: dict[str, Any] = {}
    instances = []
    for spec in policy.agents:
        try:
            agent = _make_agent(spec, task.get("cwd"))
        except (UnitFailed, HpcgymError):
            raise
        except Exception as exc:
            raise UnitFailed(f"agent {spec.label} could not start: {_describe(exc)}") from exc
        instances.append(agent)
        samples = latency.setdefault(kinds_key(agent.kinds), [])
        for kind in agent.kinds:
            agents[kind] = _TimedAgent(agent, spec.label, samples, log, MAX_KILLS_PER_JOB * len(workload))
    config = SimConfig(seed=task["seed"], **expand_preset(_sim_options(policy, task)))
    result = simulate(workload, config, policy=policy.priority, agents=agents)
    for agent in instances:
        agent.on_episode_end(dict(result.summary))
    out = _records({k: v.tolist() for k, v in result.jobs.items()}, result.procs, result.summary)
    latency = {key: [round(v, 7) for v in values] for key, values in latency.items()}
    out.update(latency=latency, decisions=sum(len(v) for v in latency.values()), **_save_log(log, task, policy),
               reservation_breaks=[list(b) for b in result.reservation_breaks])  # for report.html's marks
    return out


def _make_agent(spec: AgentSpec, cwd: str | None) -> Any:
    from ...agents.runtime import load_agent, serve_on_one_thread

    agent = load_agent(f"{spec.source}:{os.path.join(cwd, spec.target)}"  # relative to the comparison's folder
                       if spec.source in CHECKPOINT_SOURCES and cwd and os.path.isdir(cwd) else spec.agent)
    serve_on_one_thread()
    return taking(agent, spec.kinds, spec.agent)


def taking(agent: Any, kinds: tuple[str, ...], name: str) -> Any:
    """`agent` restricted to `kinds` (empty: the kinds it declares), or UnitFailed saying what it takes."""
    declared = tuple(getattr(agent, "kinds", ()))
    if kinds and not set(kinds) <= set(declared):
        raise UnitFailed(f"agent {name} takes {', '.join(declared) or 'no kinds'}, not {', '.join(kinds)}")
    if not kinds and not declared:
        raise UnitFailed(f"agent {name} declares no decision kinds (its class's `kinds`)")
    agent.kinds = tuple(kinds or declared)
    return agent


def _with_cwd_on_path(cwd: str | None) -> None:
    if cwd and os.path.isdir(cwd) and cwd not in sys.path:
        sys.path.insert(0, cwd)


def _run_batsim(spec: AgentSpec, task: dict[str, Any], trace: Path) -> dict[str, Any]:
    """The policy's Batsim scheduler program, with hpcgym playing Batsim for it (docs/batsim.md)."""
    from ...environment.swf import read_swf
    from ..scheduler_program import run_scheduler

    cwd = task.get("cwd")
    run, latency = run_scheduler(read_swf(trace), shlex.split(spec.target), folder=trace.parent,
                                 cwd=cwd if cwd and os.path.isdir(cwd) else None,
                                 timeout=float(task.get("decision_timeout", 30.0)))
    out = _records({name: column.tolist() for name, column in run.result.jobs.items()}, run.result.procs)
    out.update(latency={"batsim": [round(v, 7) for v in latency]}, decisions=len(latency), rejected=len(run.rejected))
    return out


def _agent_kinds(spec: AgentSpec, cwd: str | None) -> tuple[str, ...]:
    """The kinds an agent takes: given, else its class's `kinds` or its checkpoint's kind."""
    if spec.kinds:
        return spec.kinds
    if spec.source in CHECKPOINT_SOURCES:
        return tuple(_make_agent(spec, cwd).kinds)
    from ...agents.runtime import agent_class

    _with_cwd_on_path(cwd)
    try:
        kinds = tuple(getattr(agent_class(spec.target), "kinds", ()))
    except HpcgymError as exc:
        raise UnitFailed(str(exc)) from None
    if not kinds:
        raise UnitFailed(f"agent {spec.target} declares no decision kinds (its class's `kinds`)")
    return kinds


def _agent_command(spec: AgentSpec, kinds: tuple[str, ...], address: str, timeout: float) -> list[str]:
    if spec.source == "cmd":
        return shlex.split(spec.target.replace("{addr}", address))
    return [sys.executable, "-m", "hpcgym.gymbridge.compare.agent_process", spec.agent, "--connect", address,
            "--kinds", ",".join(kinds), "--timeout", f"{timeout:g}"]


def _start_agents(agents: list[tuple[AgentSpec, Any]], policy: PolicySpec, address: str, timeout: float,
                  cwd: str | None, tmp: Path) -> list[str]:
    """Start the policy's agent processes (each added to `agents` as it starts); the kinds they take."""
    from ..scheduler_program import Program

    env = dict(os.environ)
    if cwd:
        env["PYTHONPATH"] = os.pathsep.join([cwd] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    kinds: list[str] = []
    for k, spec in enumerate(policy.agents):
        taken = _agent_kinds(spec, cwd)
        kinds.extend(taken)
        agents.append((spec, Program(_agent_command(spec, taken, address, timeout + 10), tmp / f"agent-{k}.log",
                                     cwd if cwd and os.path.isdir(cwd) else None, env, f"agent {spec.label}")))
    return kinds


def _failed(agents: list[tuple[AgentSpec, Any]], within: float, when: str) -> str | None:
    """After up to `within` seconds for the agents to exit, how the first that failed ended (None: none)."""
    deadline = time.monotonic() + within
    for _, program in agents:
        with contextlib.suppress(subprocess.TimeoutExpired):
            program.proc.wait(max(0.0, deadline - time.monotonic()))
    return next((f"agent {spec.label} {p.gone()} {when}" for spec, p in agents if p.proc.returncode not in (None, 0)),
                None)


def run_protocol(policy: PolicySpec, task: dict[str, Any], trace: Path, tmp: Path,
                 steer: Callable[[Any, Any], Any] | None = None) -> dict[str, Any]:
    """The policy's agents as processes over ipc:// in `tmp`, this process the env and driver (`steer`:
    `EnvService`'s, taken instead of an agent's answer). Raises UnitFailed."""
    from ...agents.runtime import Connection
    from ...environment.server import serve
    from ...protocol.messages import PROTOCOL_VERSION

    cwd = task.get("cwd")
    timeout = float(task.get("decision_timeout", 30.0))
    start_timeout = float(task.get("start_timeout", DEFAULT_START_TIMEOUT))
    address = f"ipc://{tmp}/env.ipc"
    log = _decision_log(task, int(task.get("procs") or _read_procs(trace)))
    breaks: list[list[int]] = []
    service = EnvService({"workload": {}, "options": {}}, decision_timeout=timeout, start_timeout=start_timeout,
                         heartbeat=HEARTBEAT_S,
                         on_agent_lost="end", record_latency=True, on_act=log.add if log is not None else None,
                         steer=steer, on_end=lambda sim: breaks.extend(map(list, sim.result().reservation_breaks)))
    ready = threading.Event()
    failure: list[BaseException] = []

    def server() -> None:
        try:
            serve(service, address, ready=ready)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=server, name="hpcgym-compare-env", daemon=True)
    thread.start()
    agents: list[tuple[AgentSpec, Any]] = []
    conn = None
    try:
        if not ready.wait(30) or failure:
            raise UnitFailed(f"the env could not start on {address}: {failure[0] if failure else 'timeout'}")
        kinds = _start_agents(agents, policy, address, timeout, cwd, tmp)
        conn = Connection(address, timeout=max(timeout, start_timeout) + 10)
        reply = conn.request({"type": "hello", "protocol": PROTOCOL_VERSION, "agent": DRIVER_NAME, "kinds": []})
        _expect(reply, "welcome")
        reset: dict[str, Any] = {"type": "reset", "seed": task["seed"], "workload": {"trace": str(trace)},
                                 "options": {**_sim_options(policy, task), "policy": policy.priority}, "records": True}
        if kinds:
            reset["require"] = sorted(set(kinds), key=KINDS.index)
        reply, checked_dead = conn.request(reset), False
        while reply["type"] == "pending":
            dead = [f"agent {spec.label} {gone} before the episode ended" for spec, p in agents if (gone := p.gone())]
            if dead and checked_dead:
                raise UnitFailed(dead[0])
            checked_dead = bool(dead)  # one more poll: the episode may have ended just before it exited
            reply = conn.request({"type": "poll"})
        _expect(reply, "episode_end")
        if reply["reason"] != "completed":  # an agent that failed says bye first and exits just after: its error
            raise UnitFailed(_failed(agents, 5, "before the episode ended") or f"the episode ended: {reply['reason']}")
        if not reply.get("jobs"):
            raise UnitFailed("the env sent no per-job records")
        procs = int(task.get("procs") or _read_procs(trace))
        out = _records(reply["jobs"], procs, reply.get("metrics"))
        with contextlib.suppress(HpcgymError):
            conn.request({"type": "bye"})
        failed = _failed(agents, 10, "after the episode")
        if failed:
            raise UnitFailed(failed)
        latency = {key: [round(v, 7) for v in values] for key, values in service.latency.items()}
        out.update(latency=latency, ordered=dict(service.answered_by_order),
                   decisions=sum(len(v) for v in latency.values()) + sum(service.answered_by_order.values()),
                   reservation_breaks=breaks, **_save_log(log, task, policy))
        return out
    finally:
        if conn is not None:
            conn.close()
        for _, program in agents:
            program.stop()
        service.stop = True
        thread.join(10)


def _expect(reply: dict[str, Any], kind: str) -> None:
    if reply["type"] == "error":
        raise UnitFailed(f"the env refused: {reply['code']}: {reply['message']}")
    if reply["type"] != kind:
        raise UnitFailed(f"unexpected reply {reply['type']!r} from the env; expected {kind}")


def _read_procs(trace: Path) -> int:
    from ...environment.swf import read_swf

    return read_swf(trace).procs
