"""Serve an `Agent` to an env over one DEALER socket, every wait bounded so that an env that is gone raises
`EnvUnreachable` instead of hanging; and the agent specs every command reads."""

from __future__ import annotations

import importlib
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from ..environment.decisions import SELECT, Decision
from ..environment.errors import HpcgymError
from ..protocol.codec import MAX_MESSAGE_BYTES, decode, encode
from ..protocol.messages import PROTOCOL_VERSION, REPLIES, ProtocolError, redirect_target, validate
from .base import Agent, PriorityAgent
from ..environment.priorities import POLICIES
from .inspectors import AcceptAllInspector, RejectLargeInspector
from .knapsack import KnapsackAgent
from .packing import BinPackingAgent, RandomPackingAgent, TetrisAgent, TetrisStarAgent
from .rlschert import JointTeacher, RuleKill

#: Built-in agents other than the priority policies: name -> (factory, one line for `hpcgym agent --help`).
BUILTINS: dict[str, tuple[Callable[..., Agent], str]] = {
    "knapsack": (lambda **kw: KnapsackAgent("capability", **kw), "DRAS's optimum start set, capability (eq. 1)"),
    "knapsack-capacity": (lambda **kw: KnapsackAgent("capacity", **kw), "DRAS's optimum start set, capacity (eq. 2)"),
    "knapsack-capacity-runtime": (lambda **kw: KnapsackAgent("capacity", capacity_time="runtime", **kw),
                                  "eq. (2) with run times for waits"),
    "binpacking": (BinPackingAgent, "start the largest job that fits, repeatedly"),
    "random-packing": (RandomPackingAgent, "start a random job that fits, repeatedly"),
    "tetris": (TetrisAgent, "start the best-aligned job that fits, repeatedly"),
    "tetris-star": (TetrisStarAgent, "Tetris with a preference for short jobs"),
    "accept-all": (AcceptAllInspector, "accept every pick"),
    "reject-large": (RejectLargeInspector, "reject a pick that cannot start now if another job could"),
    "rlschert-rule": (RuleKill, "RLSchert's rule-based kill of a job mispredicted as short (needs predictions)"),
    "rlschert-joint": (JointTeacher,
                       "select_kill: the rule-based kill when it fires, else SJF's pick (a joint teacher)"),
}
BUILTIN_AGENTS: dict[str, Callable[..., Agent]] = {name: factory for name, (factory, _) in BUILTINS.items()}


def builtin_agents() -> list[tuple[str, tuple[str, ...], str]]:
    """Every built-in agent: (name, the decision kinds it takes, one line on what it does); the
    priority policies first, described by their score (the window's job of lowest score is picked)."""
    rows = [(name, (SELECT,), "a seeded random order" if name == "random" else p.formula)
            for name, p in POLICIES.items() if not p.env_only]
    return rows + [(name, builtin_kinds(name), about) for name, (_, about) in BUILTINS.items()]


def builtin_kinds(name: str) -> tuple[str, ...]:
    """The decision kinds the built-in agent `name` takes."""
    return (SELECT,) if name.lower() in POLICIES else tuple(BUILTIN_AGENTS[name.lower()]().kinds)


class EnvUnreachable(HpcgymError):
    """The env did not answer in time."""


class EnvRefused(HpcgymError):
    """The env answered with an error this agent cannot recover from."""


class Connection:
    """A DEALER socket with a timeout on every reply. A hello answered `redirect` (1.6) is said again at the worker's
    address; the first socket stays open, since the env's front tells there of a failed worker."""

    def __init__(self, address: str, timeout: float = 10.0, curve: tuple[bytes, bytes, bytes] | None = None) -> None:
        self.address, self.timeout, self.curve = address, timeout, curve
        self._ctx = zmq.Context.instance()
        self._sock = self._connect(address)
        self._front: zmq.Socket | None = None
        self._poller = zmq.Poller()  # kept: `Socket.poll` would build one per request
        self._poller.register(self._sock, zmq.POLLIN)

    def _connect(self, address: str) -> zmq.Socket:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES + 1024)
        if self.curve is not None:
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = self.curve
        try:
            sock.connect(address)
        except zmq.ZMQError as exc:
            sock.close(0)
            raise HpcgymError(f"cannot connect to {address!r} ({zmq.strerror(exc.errno)}); use tcp://HOST:PORT "
                              "(e.g. tcp://127.0.0.1:5555) or ipc://PATH") from None
        return sock

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """The reply to `message`; a refusal that passes by itself (1.7's `retry_s`: no worker
        ready, a cap full) is asked again after that wait while the agent's timeout allows."""
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._exchange(message)
            if reply["type"] == "redirect" and message["type"] == "hello" and self._front is None:  # to the worker
                self._front, self._sock = self._sock, self._connect(redirect_target(self.address, reply["address"]))
                self._poller.register(self._sock, zmq.POLLIN)
                reply = self._exchange(message)
            wait = reply.get("retry_s") if reply["type"] == "error" else None
            if not wait or time.monotonic() + wait > deadline:
                return reply
            time.sleep(wait)

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        self._sock.send(encode(message))  # one frame: the env replies in one (PROTOCOL.md section 2)
        ready = dict(self._poller.poll(int(self.timeout * 1000)))
        if not ready:
            raise EnvUnreachable(f"the env at {self.address} did not answer within {self.timeout:g} s; "
                                 "is `hpcgym env` running there (and are the CURVE keys right)?")
        # a word from the front while the worker is asked: the worker failed (its episode_end)
        frames = (self._front if self._front in ready else self._sock).recv_multipart()
        try:
            return validate(decode(frames[-1]), REPLIES, ignore_unknown=True)
        except ProtocolError as exc:  # an HpcgymError, so the CLI prints one line, not a traceback
            raise EnvRefused(f"the env at {self.address} sent a malformed reply: {exc.message}") from None

    def leave(self, wait_s: float = 1.0) -> None:
        """Say bye and wait a little for the env's `bye` (replies still due before it are
        dropped). Also after an error or Ctrl-C: an env that is gone costs at most `wait_s`."""
        try:
            self._sock.send(encode({"type": "bye"}), zmq.NOBLOCK)
            end = time.monotonic() + wait_s
            while (left := end - time.monotonic()) > 0 and self._sock.poll(int(left * 1000)):
                if decode(self._sock.recv_multipart()[-1]).get("type") == "bye":
                    return
        except (zmq.ZMQError, ProtocolError, AttributeError):
            pass  # nothing more to do on the way out

    def close(self) -> None:
        self._sock.close(0)
        if self._front is not None:
            self._front.close(0)


@dataclass
class AgentRun:
    """What an agent saw: one summary per finished episode."""

    episodes: list[dict[str, Any]] = field(default_factory=list)
    decisions: int = 0


def run_agent(agent: Agent, address: str, *, name: str = "agent", session: str = "default",
              reset: dict[str, Any] | None = None, episodes: int = 1, timeout: float = 10.0,
              curve: tuple[bytes, bytes, bytes] | None = None,
              progress: Callable[[AgentRun, Decision], None] | None = None, token: str | None = None,
              orders: bool = True) -> AgentRun:
    """Serve `agent` for `episodes` episodes, each started with `reset` (a reset message's fields) or joined;
    `progress(run, decision)` sees each decision first; `orders`: send standing orders to an env that takes them (1.4),
    so the agent is asked only when its ranking no longer covers the candidates."""
    conn = Connection(address, timeout, curve)
    run = AgentRun()
    try:
        welcome = conn.request({"type": "hello", "protocol": PROTOCOL_VERSION, "agent": name,
                                "kinds": list(agent.kinds), "session": session, **({"token": token} if token else {})})
        _expect(welcome, "welcome")
        _, _, minor_text = welcome["protocol"].partition(".")
        minor = int(minor_text) if minor_text.isdigit() else 0
        orders = orders and minor >= 4
        reads = getattr(agent, "reads", None) if minor >= 8 else None  # only what it reads is sent (1.8)
        start = {"type": "reset", **reset} if reset is not None else {"type": "join"}
        if reads is not None:
            start["columns"] = {table: list(columns) for table, columns in reads.items()}
        for _ in range(episodes):
            _serve_episode(conn, agent, run, start, address, timeout, progress, orders)
    finally:
        conn.leave()  # on every way out, so that its kinds are free for the next agent at once
        conn.close()
    return run


def _serve_episode(conn: Connection, agent: Agent, run: AgentRun, start: dict[str, Any], address: str,
                   timeout: float, progress: Callable[[AgentRun, Decision], None] | None, orders: bool) -> None:
    reply = conn.request(start)
    asked = time.monotonic()
    while True:
        kind = _expect(reply, "decision", "pending", "episode_end")
        if kind == "pending":
            if not reply.get("episode") and time.monotonic() - asked > timeout:
                raise EnvUnreachable(f"no episode started at {address} within {timeout:g} s; start the "
                                     "agent that resets (without --join) too, or give a longer --timeout")
            reply = conn.request({"type": "poll"})
        elif kind == "decision":
            if reply["reward"]:
                agent.on_reward(float(reply["reward"]))
            run.decisions += 1 + reply.get("ordered", 0)
            decision = Decision.from_message(reply)
            if progress is not None:
                progress(run, decision)
            ranking = agent.order(decision) if orders and decision.kind == SELECT else None
            action = {"order": ranking} if ranking else agent.act(decision)
            reply = conn.request({"type": "act", "decision": reply["decision"], "action": action})
        else:
            run.decisions += reply.get("ordered", 0)
            if reply.get("records_pages"):
                reply["jobs"] = _fetch_records(conn, reply["episode"], reply["records_pages"])
            agent.on_reward(float(reply["reward"]))
            agent.on_episode_end(reply["metrics"])
            run.episodes.append(reply)
            return


def _fetch_records(conn: Connection, episode: int, pages: int) -> dict[str, list]:
    """The per-job records of an episode too large for one message, page by page (1.3)."""
    jobs: dict[str, list] = {}
    for page in range(pages):
        reply = conn.request({"type": "records", "episode": episode, "page": page})
        while _expect(reply, "records", "pending") == "pending":
            reply = conn.request({"type": "poll"})
        for column, values in reply["jobs"].items():
            jobs.setdefault(column, []).extend(values)
    return jobs


def _expect(reply: dict[str, Any], *types: str) -> str:
    if reply["type"] == "error":
        raise EnvRefused(f"the env refused: {reply['code']}: {reply['message']}")
    if reply["type"] not in types:
        raise EnvRefused(f"unexpected reply {reply['type']!r}; expected {' or '.join(types)}")
    return reply["type"]


#: Agent spec prefixes naming a file the agent is loaded from: a checkpoint, or a tree (`tree:`).
CHECKPOINT_SOURCES = ("model", "sampled", "online", "tree")
NETWORK_SOURCES = ("model", "sampled", "online")  #: Those of them served by a torch network.
MODULE_CLASS = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  #: An agent's class by `module:Class`.
_PROGRAM_EXAMPLE = "cmd:./my_agent {addr} --join"


@dataclass(frozen=True)
class AgentRef:
    """What an agent spec names: its `source` (builtin, python, model, sampled, online, tree or cmd; `hpcgym compare`
    also has batsim) and `target` (the name, module:Class, path or command line)."""

    source: str
    target: str

    @property
    def spec(self) -> str:
        """The spec again, in its plain spelling."""
        return self.target if self.source in ("builtin", "python") else f"{self.source}:{self.target}"


def resolve_agent(spec: str, *, programs: bool = False) -> AgentRef:
    """Read an agent spec the one way every command does (docs/compare.md lists them); `programs`: the caller can run a
    `cmd:COMMAND` over the protocol. A bad spec: one line saying so."""
    text = spec.strip()
    lowered = text.lower()
    if lowered in POLICIES or lowered in BUILTIN_AGENTS:
        return AgentRef("builtin", lowered)
    prefix, colon, rest = text.partition(":")
    source, rest = prefix.lower(), rest.strip()
    if colon and source in CHECKPOINT_SOURCES:
        if not rest:
            example = ("a tree file path, e.g. tree:runs/irl/irl-d10.npz" if source == "tree"
                       else f"a checkpoint path, e.g. {source}:runs/ppo/model.pt")
            raise HpcgymError(f"{source}: needs {example}")
        return AgentRef(source, rest)
    if colon and source == "cmd":
        if not programs:
            raise _program_here(text)
        if not rest:
            raise HpcgymError(f"cmd: needs a command line, e.g. {_PROGRAM_EXAMPLE}")
        if "{addr}" not in rest:
            raise HpcgymError(f"the command {rest!r} has no {{addr}} placeholder; the env's address is passed there, "
                              f"e.g. {_PROGRAM_EXAMPLE}")
        return AgentRef("cmd", rest)
    if MODULE_CLASS.match(text):
        return AgentRef("python", text)
    spellings = ["module:Class", "model:PATH", "sampled:PATH", "online:PATH", "tree:PATH",
                 *(["cmd:COMMAND"] if programs else [])]
    raise HpcgymError(f"unknown agent {text!r}: use a built-in name ({', '.join([*POLICIES, *BUILTIN_AGENTS])}), "
                      f"{', '.join(spellings[:-1])} or {spellings[-1]}")


def _program_here(spec: str) -> HpcgymError:
    return HpcgymError(f"{spec!r} is a program asked over the protocol, which only hpcgym compare and hpcgym distill "
                       "run for you: give a Python agent here, or start the program against an env")


def load_agent(spec: str | AgentRef, **kwargs: Any) -> Agent:
    """An agent by spec. `sampled:` seeds its sampling with 0, so a window's schedule repeats; `online:` scores its
    episodes by their end metrics, since in process no env reward reaches it."""
    ref = spec if isinstance(spec, AgentRef) else resolve_agent(spec)
    check_agent_file(ref)
    if ref.source == "builtin":
        return PriorityAgent(ref.target, **kwargs) if ref.target in POLICIES else BUILTIN_AGENTS[ref.target](**kwargs)
    if ref.source in NETWORK_SOURCES:
        defaults = {"sampled": {"greedy": False}, "online": {"online": True, "reward": "metrics"}}.get(ref.source, {})
        return load_model(ref.target, **{**defaults, **kwargs})
    if ref.source == "tree":
        from .tree import TreeAgent

        return TreeAgent(ref.target, **kwargs)
    if ref.source == "cmd":
        raise _program_here(ref.spec)
    return agent_class(ref.target)(**kwargs)


def check_agent_file(ref: AgentRef) -> None:
    """Refuse a `model:`, `online:` or `tree:` spec whose file is not there, in one line."""
    if ref.source in CHECKPOINT_SOURCES and not os.path.isfile(ref.target):
        what, writer = ("tree file", "hpcgym distill") if ref.source == "tree" else ("checkpoint", "hpcgym train")
        raise HpcgymError(f"no {what} at {ref.target} ({ref.source}:PATH takes a file written by `{writer}`)")


def agent_class(target: str) -> type:
    """The class `module:Class` names, its module found from the working directory too."""
    module_name, _, class_name = target.partition(":")
    # `hpcgym agent mymodule:MyAgent` runs from a console script, whose sys.path holds the
    # script's folder, not the working directory: look there too, as `python -m` would.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise HpcgymError(f"cannot load agent {target!r}: {exc}") from None


def load_model(path: str | os.PathLike, online: bool = False, **kwargs: Any) -> Agent:
    """A checkpoint's policy as an agent (`RLAgent`; with `online`, `OnlineRLAgent`, which keeps updating it while it
    serves). torch is imported only here, so agents without a model need neither torch nor the rl extra."""
    try:
        from .rl.online import OnlineRLAgent
        from .rl.serve import RLAgent
    except ImportError as exc:
        raise HpcgymError(f"serving the model {path} needs the rl extra (in the clone: pip install -e '.[rl]'): {exc}") from None
    return OnlineRLAgent(path, **kwargs) if online else RLAgent(path, **kwargs)


def serve_on_one_thread() -> None:
    """torch on one thread where a checkpoint is served: a network scoring one decision at a time is only slowed by more
    (a DRAS comparison took 108 s with two threads, 52 s with one)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def episode_policy(agent: str | None, policy: str | None = None) -> str | None:
    """The env priority policy an agent's resets ask for: `policy`, else the agent's own name when it is a priority
    policy (the episode is then that policy's job for job), else None (the env's)."""
    if policy is not None:
        return policy.lower()
    name = (agent or "").lower()
    return name if name in POLICIES and not POLICIES[name].env_only else None


def agent_name(spec: str) -> str:
    return f"{spec}@{os.getpid()}"
