"""The env side of the protocol as a plain request handler, no sockets, so an episode gives the same schedule over any
transport; a session's simulation runs outside the service's lock, so a long reset holds up no other session."""

from __future__ import annotations

import ctypes
import hmac
import os
import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from .priorities import POLICIES
from ..protocol import messages as m
from ..protocol.codec import MAX_MESSAGE_BYTES, decode, encode
from ..protocol.tables import JOB_TABLES, columns_newer_than, names
from .decisions import KINDS, SELECT, Decision
from .episode import Episode
from .errors import HpcgymError, InvalidAction
from .rewards import FAMILIES, REWARDS
from .limits import Limits, check_reset_size
from .spec import EpisodeSpec, WorkloadCache, reset_workload
from .swf import TooManyJobs
from .processes import Calls
from .work import Cancelled, Work, running
from .workload import Workload

Reply = tuple[bytes, dict[str, Any]]
#: A request as the lock holder gets it: the message as far as it was read, and why it is refused (None: valid).
Request = tuple[dict[str, Any], "m.ProtocolError | None"]
AGENT_LOST_MODES = ("fallback", "end")
VERSION = re.compile(r"\d+\.\d+\Z")  #: What a hello's `protocol` must look like: MAJOR.MINOR, digits only.
MAX_NAME = 256  #: Longest agent or session name: names are kept while their session lives.
MAX_LOST = 10_000  #: Lost peers remembered (so that their late acts get `stale_decision`), the oldest forgotten first.
#: Per-job record columns x the most bytes msgpack spends on one value: records of more jobs than fit the message
#: limit by this bound are paged (`records` requests).
RECORD_BYTES_PER_JOB = 16 * 9
RECORDS_PAGE_JOBS = 50_000
RETRY_S = 5.0  #: How long an agent refused for a full cap on agents or sessions waits before it tries again (1.7).
RESET_WORK_NICE = 10  #: The priority of offloaded reset work: below the serving process's, whose decisions wait on it.


@dataclass(eq=False)
class Peer:
    id: bytes
    name: str
    kinds: frozenset[str]
    session: Session
    minor: int = 0                          # the minor protocol version its hello spoke
    waiting_since: float | None = None      # time of its unanswered request
    arrived: int = 0                        # its requests so far, counted as they arrive
    answered: int = 0                       # `arrived` when it was last sent a reply
    refused: bool = False                   # its last reset could not start (its kinds are up for grabs)
    columns: dict[str, frozenset[str]] | None = None  # the only job-table columns it is sent; None: all
    detached: bool = False                  # its connection closed mid-episode: a hello with the token resumes it
    last_seen: float = 0.0                  # time of its last request
    # replies it has no request waiting for (an episode end, a refused held reset): sent with its next join/poll
    undelivered: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.columns = sent_columns(self.minor, None)


@dataclass(eq=False)
class SessionEpisode:
    """An episode as a session plays it: the episode and what the protocol adds (owners, decision ids, orders)."""

    number: int
    core: Episode
    owners: dict[str, Peer]
    participants: list[Peer]
    records: bool
    first_id: int                 # the session's decision ids before this episode's
    decision_id: int = 0          # id of the pending decision as agents see it
    sim_step: int = -1            # the simulation's step that id belongs to
    ready_since: float = 0.0
    sent_at: float | None = None  # when the pending decision went to its owner
    sent: dict[str, Any] | None = None  # that decision message, resent as is if asked again
    orders: dict[bytes, dict[int, int]] = field(default_factory=dict)  # standing orders (1.4): job id -> rank
    ordered: dict[bytes, int] = field(default_factory=dict)  # decisions an order answered since the last sent


@dataclass(eq=False)
class Session:
    name: str
    token: str = ""  # what another agent's hello must present to join (unless sessions are open)
    peers: dict[bytes, Peer] = field(default_factory=dict)
    episode: SessionEpisode | None = None
    episodes: int = 0
    decisions: int = 0
    held_reset: tuple[Peer, dict[str, Any], float] | None = None
    records: tuple[int, dict[str, list], frozenset[bytes]] | None = None  # the last paged records, who may fetch
    busy: bool = False  # a task of this session is running (its episode may be mid-computation)
    work: tuple[Peer, Work] | None = None  # the reset being computed now, and the agent that asked for it
    worker: SessionWorker = field(default_factory=lambda: SessionWorker())


class SessionWorker:
    """Runs one session's tasks one at a time, in order: in the calling thread when the session is idle, else on
    a thread of the session's (ending with the queue)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: deque[Callable[[], None]] = deque()
        self._running = False

    def run(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._running:
                self._tasks.append(task)
                return
            self._running = True
        self._run_then_drain(task, spawn=True)

    def _run_then_drain(self, task: Callable[[], None], spawn: bool) -> None:
        """Run `task`, then what was queued meanwhile: on a new thread if `spawn` (the caller serves others)."""
        while True:
            try:
                task()
            finally:
                with self._lock:
                    task = self._tasks.popleft() if self._tasks else None
                    self._running = task is not None
            if task is None:
                return
            if spawn:
                threading.Thread(target=self._run_then_drain, args=(task, False), name="hpcgym-session",
                                 daemon=True).start()
                return


class EnvService:
    """Sessions of agents sharing episodes; decisions routed to the agent that took the kind."""

    def __init__(self, defaults: dict[str, Any] | None = None, *, decision_timeout: float = 30.0,
                 heartbeat: float = 1.0, on_agent_lost: str = "fallback",
                 clock: Callable[[], float] = time.monotonic, record_latency: bool = False,
                 on_act: Callable[[Decision, Any], None] | None = None,
                 steer: Callable[[Decision, Any], Any] | None = None, limits: Limits = Limits(),
                 private: bool = False, start_timeout: float | None = None,
                 on_end: Callable[[Any], None] | None = None) -> None:
        if on_agent_lost not in AGENT_LOST_MODES:
            raise HpcgymError(f"on_agent_lost must be one of {', '.join(AGENT_LOST_MODES)}")
        self.defaults = {"workload": {}, "options": {}, "policy": "fcfs", "seed": 0, "reward": "none",
                         **(defaults or {})}
        self.decision_timeout, self.heartbeat, self.clock, self.limits = decision_timeout, heartbeat, clock, limits
        # how long a reset is held for agents to take its required kinds (a launcher may give longer)
        self.start_timeout = decision_timeout if start_timeout is None else start_timeout
        self.on_agent_lost = on_agent_lost
        self.private = private  # joining a session that has agents takes its token (`hpcgym env`)
        self._next_sweep = 0.0
        self.sessions: dict[str, Session] = {}
        self.peers: dict[bytes, Peer] = {}
        # lost peers, with why: a late `act` of one is a stale decision (section 7), not an unknown peer
        self.lost: OrderedDict[bytes, str] = OrderedDict()
        # with record_latency: per agent (kinds_key), each decision's seconds until its act, and the decisions its
        # standing orders answered (never asked)
        self.latency: dict[str, list[float]] | None = {} if record_latency else None
        self.answered_by_order: dict[str, int] = {}
        self.on_end = on_end  # called with each simulation run to its end (compare reads broken reservations)
        self.on_act = on_act  # called with each answered decision and its action once taken (agents/records.py)
        self.steer = steer  # called with each decision and its valid answer, which it may replace (distill)
        self._workloads = WorkloadCache()  # a trace is read once, not at every reset
        self._out: list[Reply] = []
        # guards all but a running episode (only its session's task touches it); released around simulation
        self._lock = threading.Lock()
        self._unlock = _Unlocked(self._lock)  # one, not a generator per use (two per act)
        self._wake: Callable[[], None] | None = None  # set: sessions run concurrently
        self._calls: Calls | None = None  # set with it: where reset work is offloaded
        self._deferred: list[tuple[Session, Callable[[], None]]] = []  # session tasks for after the lock
        self.closing: str | None = None  # the reason of a `shutdown`
        self.stop = False  # set: the socket server ends its loop (as on SIGTERM)
        self.workers = 1  # set by `hpcgym env --workers N`'s worker: its caps are a share (welcome says N)
        # the handler of each request type (protocol/messages.py's REQUESTS)
        self._handlers: dict[str, Callable[[bytes, Peer | None, dict[str, Any]], None]] = {
            "hello": self._on_hello, "reset": self._on_reset, "join": self._on_join, "poll": self._on_join,
            "act": self._on_act, "records": self._on_records, "bye": self._on_bye}

    def check_defaults(self) -> None:
        """Check the env's own trace, options and reward as a reset would: a bad one fails at start-up."""
        d = self.defaults
        if d["workload"].get("trace") is not None:
            self._load(self.limits.workload(d["workload"]), d["seed"])
        EpisodeSpec.from_reset(d["workload"], {**d["options"], "policy": d["policy"]}, d["reward"], d["seed"])

    def run_sessions_concurrently(self, wake: Callable[[], None]) -> None:
        """From now on sessions run concurrently (`SessionWorker`; a session thread calls `wake()` for `tick` to
        collect its replies), and an sjf_range reset's simulations run in processes of their own (work.py)."""
        self._wake = wake
        self._calls = Calls(max(1, (os.cpu_count() or 2) // 2), "hpcgym-reset-work", nice=RESET_WORK_NICE)

    # ---------------------------------------------------------------- entry points
    def handle(self, peer_id: bytes, body: bytes) -> list[tuple[bytes, bytes]]:
        """One request in, the encoded replies it causes out."""
        return [(p, encode(msg)) for p, msg in self.handle_message(peer_id, body)]

    def handle_message(self, peer_id: bytes, body: bytes | dict[str, Any]) -> list[Reply]:
        request = parse_request(body)  # before the lock: however large or odd, it holds up no other session
        with self._lock:
            if self.closing is not None:
                self._answer_closing(peer_id)
                return self._flush()
            self._handle_locked(peer_id, request)
        return self._run_deferred()

    def _answer_closing(self, peer_id: bytes) -> None:
        """After `shutdown`: an agent's episode end it has not fetched, else the error `shutdown`."""
        peer = self.peers.get(peer_id)
        if peer is not None and peer.undelivered:
            self._out.append((peer_id, peer.undelivered.pop(0)))
        else:
            self._out.append((peer_id, m.error(m.ProtocolError(m.SHUTDOWN, f"the env is shutting down "
                                                                           f"({self.closing})"), None)))

    def owes_replies(self) -> bool:
        """Whether an agent has not fetched its episode's end yet (the server waits a little for it)."""
        with self._lock:
            return any(p.undelivered for p in self.peers.values())

    def occupied_sessions(self) -> set[str]:
        """The names of the sessions that have agents."""
        with self._lock:
            return {name for name, session in self.sessions.items() if session.peers}

    def disconnected(self, peer_id: bytes) -> None:
        """The connection closed: outside an episode the agent is gone; in one, a hello with its token resumes it."""
        with self._lock:
            peer = self.peers.get(peer_id)
            if peer is None:
                return
            self._cancel_work(peer, "its agent's connection closed")
            ep = peer.session.episode
            if ep is not None and peer in ep.participants:
                peer.detached = True
            elif not peer.session.busy:
                self._forget(peer)

    def _handle_locked(self, peer_id: bytes, request: Request) -> None:
        now = self.clock()
        peer = self.peers.get(peer_id)
        if peer is not None and peer.detached:
            self._resume(peer, request)
        elif peer is not None:
            peer.last_seen = now
            if peer.waiting_since is None:
                peer.waiting_since = now  # heartbeats count from arrival, also while it waits its turn
            peer.arrived += 1
            peer.refused = False
            seq = peer.arrived
            if request[1] is None and request[0]["type"] == "bye":
                self._cancel_work(peer, "its agent said bye")
            self._in_session(peer.session, lambda: self._process(peer_id, request, seq))
        else:  # hello, or an error: quick, and no session's turn to wait for
            self._process(peer_id, request)

    def _process(self, peer_id: bytes, request: Request, seq: int = 0) -> None:
        """Handle request number `seq` of the peer (a join or poll answered while it queued is done)."""
        peer = self.peers.get(peer_id)
        msg, refusal = request
        try:
            if refusal is not None:
                raise refusal
            if msg["type"] in ("join", "poll") and peer is not None and peer.answered >= seq:
                return
            self._handlers[msg["type"]](peer_id, peer, msg)
        except Cancelled:  # its agent left while its reset was computed: nobody to answer
            if peer is not None:
                self._forget(peer)
        except m.ProtocolError as err:
            if peer is not None and msg.get("type") == "reset":
                peer.refused = True
            self._answer(peer_id, m.error(err, self._pending_for(peer)))
        except Exception as exc:  # a bug must not take the server down; say so and keep serving
            self._answer(peer_id, m.error(m.ProtocolError(m.INTERNAL, f"{type(exc).__name__}: {exc}"),
                                          self._pending_for(peer)))

    def _cancel_work(self, peer: Peer, why: str) -> None:
        """Stop the reset `peer` asked for, if its session is computing it (environment/work.py)."""
        work = peer.session.work
        if work is not None and work[0] is peer:
            work[1].cancel(why)

    def _in_session(self, session: Session, task: Callable[[], None]) -> None:
        """Run `task` (under the lock) now, or, with concurrent sessions, as the session's next task."""
        if self._wake is None:
            task()
            return
        if session.busy:
            # made by the session's running task: next on the session's thread (in `_deferred` it held up
            # another session's request behind the rest of a long episode)
            session.worker.run(lambda: self._run_task(session, task, None))
            return
        self._deferred.append((session, task))

    def _run_deferred(self) -> list[Reply]:
        """Run the session tasks the request or tick made, then return every reply so far. Without the lock."""
        if self._wake is not None:
            with self._lock:
                deferred, self._deferred = self._deferred, []
            caller = threading.current_thread()
            for session, task in deferred:
                session.worker.run(lambda session=session, task=task: self._run_task(session, task, caller))
        with self._lock:
            return self._flush()

    def _run_task(self, session: Session, task: Callable[[], None], caller: threading.Thread | None) -> None:
        with self._lock:
            session.busy = True
            try:
                task()
            finally:
                session.busy = False
                woken = bool(self._out) and threading.current_thread() is not caller
        if woken:  # it ran on the session's thread: the caller has moved on
            self._wake()

    def tick(self) -> list[tuple[bytes, bytes]]:
        """Heartbeats, agent timeouts and the replies session threads made."""
        with self._lock:
            self._tick_locked()
        return [(p, encode(msg)) for p, msg in self._run_deferred()]

    def _tick_locked(self) -> None:
        now = self.clock()
        for session in list(self.sessions.values()):
            held = session.held_reset
            if held is not None and now > held[2]:
                session.held_reset = None
                # the holder may be between a `pending` and its next poll: then the refusal waits for it
                self._reply_or_keep(held[0], m.error(m.ProtocolError(
                    m.BAD_REQUEST, f"required kinds not taken within {self.start_timeout:g} s: "
                                   f"{', '.join(sorted(self._missing_kinds(session, held[1])))}"), None))
            if not session.busy and self._overdue(session, now) is not None:
                self._in_session(session, lambda session=session: self._apply_timeout(session))
        if self.limits.idle_timeout is not None and now >= self._next_sweep:
            self._next_sweep = now + min(self.limits.idle_timeout, self.heartbeat)
            self._sweep(now)
        for peer in self.peers.values():
            if peer.waiting_since is not None and now - peer.waiting_since >= self.heartbeat:
                ep = peer.session.episode
                self._send(peer.id, {"type": "pending", "episode": ep.number if ep else peer.session.episodes})

    def _sweep(self, now: float) -> None:
        """Forget agents idle outside an episode, then empty sessions: an env must not keep every name sent."""
        for peer in list(self.peers.values()):
            ep = peer.session.episode
            if peer.waiting_since is None and now - peer.last_seen > self.limits.idle_timeout \
                    and not (ep is not None and peer in ep.participants):
                self._forget(peer)
        self._drop_empty_sessions()

    def _drop_empty_sessions(self) -> None:
        for name, session in list(self.sessions.items()):
            if not (session.peers or session.episode or session.held_reset or session.busy):
                del self.sessions[name]

    def _overdue(self, session: Session, now: float) -> Peer | None:
        """The agent whose decision has waited longer than the decision timeout, if any."""
        ep = session.episode
        if ep is None or ep.core.pending is None or ep.core.pending.kind in ep.core.fallback:
            return None
        owner = ep.owners.get(ep.core.pending.kind)
        started = ep.sent_at if ep.sent_at is not None else ep.ready_since
        return owner if owner is not None and now - started > self.decision_timeout else None

    def _apply_timeout(self, session: Session) -> None:
        owner = self._overdue(session, self.clock())
        if owner is not None:
            self._agent_lost(session, owner, f"no answer within {self.decision_timeout:g} s")

    def shutdown(self, reason: str = "shutdown") -> list[tuple[bytes, bytes]]:
        """End every episode and answer every waiting request; later requests get their episode end or `shutdown`."""
        with self._lock:
            self.closing = reason
            if self._calls is not None:
                self._calls.end()
            for session in self.sessions.values():
                if session.work is not None:
                    session.work[1].cancel("the env is shutting down")
                if session.episode is not None:  # one mid-computation ends without its metrics
                    self._end_episode(session, reason, summarize=not session.busy)
            for peer in self.peers.values():
                if peer.waiting_since is not None:
                    self._send(peer.id, m.error(m.ProtocolError(m.SHUTDOWN, f"the env is shutting down ({reason})"),
                                                None))
            out = self._flush()
        return [(p, encode(msg)) for p, msg in out]

    # ---------------------------------------------------------------- requests
    def _on_hello(self, peer_id: bytes, peer: Peer | None, msg: dict[str, Any]) -> None:
        if peer is not None:
            raise m.ProtocolError(m.NOT_ALLOWED, "this connection already said hello; send bye first")
        check_hello(msg)
        kinds = msg["kinds"]
        name = msg.get("session", "default")
        self._check_room(name)
        session = self.sessions.get(name) or Session(name)
        # the name (and its token) stays its agents' while one of them is known (until the idle timeout)
        presented = hmac.compare_digest(msg.get("token", "").encode(), session.token.encode())
        if self.private and session.peers and not presented:
            raise m.ProtocolError(m.NOT_ALLOWED, f"session {name!r} belongs to the agents in it: give its token "
                                                 "(hello's `token`; hpcgym agent --token or $HPCGYM_SESSION_TOKEN), "
                                                 "pick another session name, or ask the operator for --open-sessions")
        for other in list(session.peers.values()):
            taken = set(kinds) & other.kinds
            if taken and self._idle(other):
                self._forget(other)  # silent for a whole decision timeout and not in an episode: gone
            elif taken:
                raise m.ProtocolError(m.KIND_TAKEN, f"kind(s) {', '.join(sorted(taken))} already taken by agent "
                                                    f"{other.name!r} in session {session.name!r}")
        if not session.peers:
            # after the last agent left, this hello starts a new session (episodes and ids count from 1)
            session = self.sessions[name] = Session(name, msg.get("token") or secrets.token_hex(16))
            presented = True
        peer = Peer(peer_id, msg["agent"], frozenset(kinds), session, int(msg["protocol"].split(".")[1]),
                    last_seen=self.clock())
        self.lost.pop(peer_id, None)
        self.peers[peer_id] = peer
        session.peers[peer_id] = peer
        # its creator, or one that gave it: an open session's newcomer is not handed the token
        self._send(peer_id, self._welcome(session, with_token=presented))
        if session.held_reset is not None and not self._missing_kinds(session, session.held_reset[1]):
            self._in_session(session, lambda: self._start_held(session))

    def _resume(self, peer: Peer, request: Request) -> None:
        """A request from a detached agent's routing id: only a hello with its session's token takes its place."""
        msg, refusal = request
        session = peer.session
        if refusal is None and msg["type"] == "hello" \
                and hmac.compare_digest(msg.get("token", "").encode(), session.token.encode()):
            peer.detached, peer.last_seen, peer.waiting_since = False, self.clock(), None
            self._out.append((peer.id, self._welcome(session, with_token=True)))
            return
        self._out.append((peer.id, m.error(m.ProtocolError(
            m.NOT_ALLOWED, f"the connection of agent {peer.name!r} closed mid-episode; a new connection with its "
                           "routing id takes its place only by a hello with its session's token"), None)))

    def _welcome(self, session: Session, with_token: bool) -> dict[str, Any]:
        welcome = {"type": "welcome", "protocol": m.PROTOCOL_VERSION, "session": session.name, "env": self._describe()}
        if with_token:
            welcome["token"] = session.token
        return welcome

    def _check_room(self, name: str) -> None:
        """Refuse a hello that would pass the operator's caps on agents and sessions."""
        lim = self.limits
        # with workers, each holds its share of the operator's caps (PROTOCOL.md section 2)
        who = "this env" if self.workers == 1 else f"this env's worker process (one of {self.workers}, each with its share)"
        if lim.max_agents is not None and len(self.peers) >= lim.max_agents:
            raise m.ProtocolError(m.BAD_REQUEST, f"{who} serves at most {lim.max_agents:,} agents at once (the "
                                                 f"operator sets it with --max-agents); try again in {RETRY_S:g} s",
                                  retry_s=RETRY_S)
        if lim.max_sessions is None or name in self.sessions or len(self.sessions) < lim.max_sessions:
            return
        self._drop_empty_sessions()  # left by their agents, not yet swept
        if len(self.sessions) >= lim.max_sessions:
            raise m.ProtocolError(m.BAD_REQUEST, f"{who} serves at most {lim.max_sessions:,} sessions at once (the "
                                                 f"operator sets it with --max-sessions); join one or try again in "
                                                 f"{RETRY_S:g} s", retry_s=RETRY_S)

    def _start_held(self, session: Session) -> None:
        """Start the session's held reset, now that its required kinds are taken."""
        if session.held_reset is None or self._missing_kinds(session, session.held_reset[1]):
            return
        holder, reset, _ = session.held_reset
        session.held_reset = None
        try:
            self._start_episode(session, holder, reset)
        except m.ProtocolError as err:
            holder.refused = True
            self._reply_or_keep(holder, m.error(err, None))  # never a reply to no request

    def _on_reset(self, peer_id: bytes, peer: Peer | None, msg: dict[str, Any]) -> None:
        peer = self._registered(peer)
        peer.columns = sent_columns(peer.minor, msg.get("columns"))
        session = peer.session
        # checked now: tick() sorts the missing kinds of a held reset, and an unknown kind is never taken
        for kind in msg.get("require", []):
            if not isinstance(kind, str):
                raise m.ProtocolError(m.BAD_FIELD, "reset: field 'require' must hold kind names, "
                                                   f"got {m._describe(kind)}")
            if kind not in KINDS:
                raise m.ProtocolError(m.BAD_REQUEST, f"reset: unknown kind {kind!r} in 'require'; "
                                                     f"use {', '.join(KINDS)}")
        if self._missing_kinds(session, msg):
            session.held_reset = (peer, msg, self.clock() + self.start_timeout)
            return
        self._start_episode(session, peer, msg)

    def _on_join(self, peer_id: bytes, peer: Peer | None, msg: dict[str, Any]) -> None:
        peer = self._registered(peer)
        if msg["type"] == "join":
            peer.columns = sent_columns(peer.minor, msg.get("columns"))
        self._deliver_or_dispatch(peer)

    def _on_act(self, peer_id: bytes, peer: Peer | None, msg: dict[str, Any]) -> None:
        if peer is None and peer_id in self.lost:
            raise m.ProtocolError(m.STALE_DECISION, f"decision {msg['decision']} is not pending for this agent: it was "
                                                    f"lost ({self.lost[peer_id]}) and its kinds were freed; say hello "
                                                    "again to take part in later episodes")
        peer = self._registered(peer)
        session = peer.session
        ep = session.episode
        decision = ep.core.pending if ep is not None else None
        if decision is None or ep.owners.get(decision.kind) is not peer or ep.sent_at is None \
                or msg["decision"] != ep.decision_id:
            raise m.ProtocolError(m.STALE_DECISION, f"decision {msg['decision']} is not pending for this agent"
                                  + (f"; the pending one is {ep.decision_id}" if self._pending_for(peer) else ""))
        answered_after = self.clock() - ep.sent_at
        action, order = msg["action"], None
        try:
            if isinstance(action, dict):  # a standing order (1.4): its first candidate now, the rest later
                order = decision.parse_order(action)
                action = decision.by_order(order)
            with self._unlock:
                action = self._steered(decision, action)
                ep.core.act(action)
        except InvalidAction as exc:
            raise m.ProtocolError(m.INVALID_ACTION, str(exc)) from None
        if order is not None:
            ep.orders[peer.id] = order
        if self.latency is not None:
            self.latency.setdefault(kinds_key(peer.kinds), []).append(answered_after)
        if self.on_act is not None:
            self.on_act(decision, action)
        ep.sent_at = None
        self._dispatch(session)

    def _on_records(self, peer_id: bytes, peer: Peer | None, msg: dict[str, Any]) -> None:
        """One page of the per-job records of an episode whose end said `records_pages`."""
        peer = self._registered(peer)
        kept = peer.session.records
        if kept is None or kept[0] != msg["episode"] or peer_id not in kept[2]:
            raise m.ProtocolError(m.BAD_REQUEST, f"records: no paged records of episode {msg['episode']} for this "
                                                 "agent; only the last episode whose end said records_pages has them")
        number, jobs, _ = kept
        pages = -(-len(jobs["job_id"]) // RECORDS_PAGE_JOBS)
        if not 0 <= msg["page"] < pages:
            raise m.ProtocolError(m.BAD_FIELD, f"records: page must be within 0..{pages - 1}, got {msg['page']}")
        cut = slice(msg["page"] * RECORDS_PAGE_JOBS, (msg["page"] + 1) * RECORDS_PAGE_JOBS)
        self._answer(peer_id, {"type": "records", "episode": number, "page": msg["page"], "pages": pages,
                               "jobs": {k: v[cut] for k, v in jobs.items()}})

    def _on_bye(self, peer_id: bytes, peer: Peer | None, msg: dict[str, Any]) -> None:
        # Answered before the episode goes on without it (the rest may take seconds to simulate).
        self._out.append((peer_id, {"type": "bye"}))
        if peer is None:
            return
        session = peer.session
        self._forget(peer)  # its one reply is `bye`: the episode's end must not go to it too
        ep = session.episode
        if ep is not None and peer in ep.owners.values():
            peer.waiting_since = None
            self._in_session(session, lambda: session.episode is ep and self._agent_lost(session, peer, "it said bye"))

    def _idle(self, peer: Peer) -> bool:
        """Not in an episode nor waiting, and silent for a decision timeout or refused its reset: its kinds are free."""
        ep = peer.session.episode
        in_episode = ep is not None and peer in ep.participants
        return (not in_episode and peer.waiting_since is None
                and (peer.refused or self.clock() - peer.last_seen > self.decision_timeout))

    def _forget(self, peer: Peer) -> None:
        """Unregister a peer, freeing its kinds; a later request from it must say hello again."""
        for peers in (self.peers, peer.session.peers):
            if peers.get(peer.id) is peer:  # not a newer agent that said hello with the same routing id
                del peers[peer.id]
        if peer.session.held_reset is not None and peer.session.held_reset[0] is peer:
            peer.session.held_reset = None

    # ---------------------------------------------------------------- episodes
    def _start_episode(self, session: Session, controller: Peer, msg: dict[str, Any]) -> None:
        d = self.defaults
        seed = msg.get("seed", d["seed"])
        if seed < 0:  # every workload, trace or generated, takes the same seeds
            raise m.ProtocolError(m.BAD_FIELD, f"reset: seed must be a non-negative integer, got {seed}")
        options = {**d["options"], **msg.get("options", {})}
        policy = options.get("policy", d["policy"])
        participants = [p for p in session.peers.values() if p.kinds or p is controller]
        owners = {kind: p for p in participants for kind in p.kinds}
        # all but the bookkeeping runs without the lock, bounded in CPU time, cancelled if the controller leaves
        work = Work(self.limits.max_reset_cpu, "reset", "--max-reset-cpu", self._calls)
        session.work = (controller, work)
        try:
            with self._unlock, running(work):
                spec = EpisodeSpec.from_reset(self.limits.workload(reset_workload(d["workload"], msg.get("workload", {}))),
                                              self.limits.options({**options, "policy": policy}),
                                              msg.get("reward", d["reward"]), seed)
                workload = self._load(spec.workload.to_dict(), seed)
                core = Episode(workload, spec.config, spec.reward_spec(), policy=spec.policy, outside=owners,
                               accounts=[p.id for p in participants])
                core.start()
        except HpcgymError as exc:
            # without the bits of the file a trace error quotes (a malformed field's text)
            raise m.ProtocolError(m.BAD_REQUEST, re.sub(r"(non-numeric field \d+) ('[^']*'|\"[^\"]*\")", r"\1",
                                                        str(exc))) from None
        except MemoryError:
            raise m.ProtocolError(m.BAD_REQUEST, "the workload does not fit in the env's memory; ask for fewer "
                                                 "jobs") from None
        finally:
            session.work = None
        if session.episode is not None:
            self._end_episode(session, f"reset by {controller.name!r}", skip=controller)
        session.episodes += 1
        ep = session.episode = SessionEpisode(session.episodes, core, owners, participants, msg.get("records", False),
                                              first_id=session.decisions)
        # only the controller's unfetched end is dropped (it knows); the others get theirs with their next poll
        controller.undelivered.clear()
        if session.episode is ep:
            self._dispatch(session)

    def _load(self, workload: dict[str, Any], seed: int) -> Workload:
        """A reset's job sequence within the trace bounds; a refusal is raised anew once its memory is handed back."""
        try:
            return self._workloads.load(workload, seed, self.limits.max_trace_bytes, self.limits.max_trace_jobs)
        except TooManyJobs as exc:
            refusal: Exception = TooManyJobs(exc.path, exc.limit, "the operator sets it with --max-trace-jobs")
        except HpcgymError as exc:
            refusal = HpcgymError(str(exc))
        except MemoryError:
            refusal = MemoryError()
        with suppress(OSError, AttributeError):  # glibc keeps freed pages (a refused 24.9 M-job trace left 330 MB)
            ctypes.CDLL(None).malloc_trim(0)
        raise refusal

    def _dispatch(self, session: Session) -> None:
        """Advance the episode past every decision nobody is asked about; send the next to its owner if waiting."""
        ep = session.episode
        if ep is None:
            return
        with self._unlock:
            decision = self._advance(session, ep)
        if session.episode is not ep:
            return  # ended meanwhile (the env is shutting down)
        if decision is None:
            self._end_episode(session, "completed")
            return
        owner = ep.owners[decision.kind]
        if ep.sent_at is None and owner.waiting_since is not None:
            ep.sent = self._decision_message(ep, decision, owner)
            self._send(owner.id, ep.sent)
            ep.sent_at = self.clock()

    def _advance(self, session: Session, ep: SessionEpisode) -> Decision | None:
        """Step past the decisions taken without asking (defaults, standing orders): the next one an agent must
        answer, or None at the end. Touches only the episode (runs unlocked)."""
        core = ep.core
        while True:
            decision = core.next_decision()
            if decision is None:
                return None
            if decision.step != ep.sim_step:  # a new decision (after any the defaults took)
                ep.sim_step = decision.step
                ep.decision_id = ep.first_id + core.decisions
                ep.ready_since = self.clock()
                ep.sent_at = None
            job = self._by_order(ep, decision)
            if job is None:
                return decision
            core.act(job)

    def _by_order(self, ep: SessionEpisode, decision: Decision) -> int | None:
        """The job the owner's standing order picks (steered, recorded), or None: ask the owner."""
        owner = ep.owners[decision.kind]
        order = ep.orders.get(owner.id)
        if order is None:
            return None
        job = decision.by_order(order) if decision.kind == SELECT else None
        if job is None:
            del ep.orders[owner.id]
            return None
        ep.ordered[owner.id] = ep.ordered.get(owner.id, 0) + 1
        if self.latency is not None:
            key = kinds_key(owner.kinds)
            self.answered_by_order[key] = self.answered_by_order.get(key, 0) + 1
        job = self._steered(decision, job)
        if self.on_act is not None:
            self.on_act(decision, job)
        return job

    def _steered(self, decision: Decision, action: Any) -> Any:
        """The action to take for an agent's answer: the answer, or what `steer` makes of it."""
        if self.steer is None:
            return action
        decision.parse(action)  # an invalid answer is the agent's error, not the steer's
        return self.steer(decision, action)

    def _decision_message(self, ep: SessionEpisode, decision: Decision, owner: Peer) -> dict[str, Any]:
        reward = ep.core.collect(owner.id)
        columns = owner.columns
        observation = decision.observation if columns is None else ep.core.sim.observe(decision, columns)
        message = {"type": "decision", "episode": ep.number, "decision": ep.decision_id, "step": decision.step,
                   "time": decision.time, "kind": decision.kind, "observation": observation,
                   "candidates": decision.candidates, "can_wait": decision.can_wait, "reward": float(reward)}
        ordered = ep.ordered.pop(owner.id, 0)
        if ordered:
            message["ordered"] = ordered
        return message

    def _end_episode(self, session: Session, reason: str, skip: Peer | None = None, summarize: bool = True) -> None:
        """Tell every participant (but `skip`, whose reset ended it) how it ended; metrics only with `summarize`."""
        ep = session.episode
        session.episode = None
        core = ep.core
        core.stop()  # a simulation mid-computation on another thread stops at its next decision
        session.decisions = ep.first_id + core.decisions
        with self._unlock:
            metrics, final, jobs = {}, 0.0, None
            if summarize and core.sim.done:
                metrics, final = core.finish()
                if self.on_end is not None:
                    self.on_end(core.sim)
                if ep.records:
                    jobs = {k: v.tolist() for k, v in core.sim.result().jobs.items()}
        pages = 0
        if jobs is not None and len(jobs["job_id"]) * RECORD_BYTES_PER_JOB > MAX_MESSAGE_BYTES - 65536:
            # too many to send at once: kept for `records` requests, page by page
            pages = -(-len(jobs["job_id"]) // RECORDS_PAGE_JOBS)
            session.records = (ep.number, jobs, frozenset(p.id for p in ep.participants))
            jobs = None
        for p in ep.participants:
            end = {"type": "episode_end", "episode": ep.number, "reason": reason, "metrics": metrics,
                   "reward": float(core.collect(p.id) + final), "jobs": jobs}
            if pages:
                end["records_pages"] = pages
            if ep.ordered.get(p.id):
                end["ordered"] = ep.ordered[p.id]
            if p.id not in self.peers or p is skip:
                continue
            self._reply_or_keep(p, end)

    def _agent_lost(self, session: Session, peer: Peer, why: str) -> None:
        """An agent stopped answering or left mid-episode: fall back or end, then forget it."""
        self.lost[peer.id] = why
        while len(self.lost) > MAX_LOST:
            self.lost.popitem(last=False)
        if self.on_agent_lost == "end":
            self._end_episode(session, f"agent {peer.name!r} ({', '.join(sorted(peer.kinds))}) lost: {why}")
            self._forget(peer)
            return
        session.episode.core.fall_back(peer.kinds)
        session.episode.sent_at = None
        self._forget(peer)
        self._dispatch(session)
        if session.episode is not None and not any(session.episode.owners[k] in self.peers.values()
                                                   for k in session.episode.owners):
            # nobody is left to ask: let the simulation decide everything itself, at full speed
            with self._unlock:
                session.episode.core.decide_internally()
            self._dispatch(session)

    # ---------------------------------------------------------------- helpers
    def _deliver_or_dispatch(self, peer: Peer) -> None:
        if peer.undelivered:
            self._send(peer.id, peer.undelivered.pop(0))
            return
        session = peer.session
        ep = session.episode
        if ep is not None and ep.core.pending is not None and ep.owners.get(ep.core.pending.kind) is peer \
                and ep.sent_at is not None:
            # it asks again for a decision already sent (e.g. it lost the reply): send it again
            self._send(peer.id, ep.sent)
            return
        self._dispatch(session)

    def _reply_or_keep(self, peer: Peer, msg: dict[str, Any]) -> None:
        """Answer `peer` now if it has a request waiting, else on its next join/poll."""
        if peer.waiting_since is not None:
            self._send(peer.id, msg)
        else:
            peer.undelivered.append(msg)

    def _answer(self, peer_id: bytes, msg: dict[str, Any]) -> None:
        """The reply to a request; kept for the next poll if a heartbeat answered it while it queued."""
        peer = self.peers.get(peer_id)
        if peer is None:
            self._send(peer_id, msg)
        else:
            self._reply_or_keep(peer, msg)

    def _send(self, peer_id: bytes, msg: dict[str, Any]) -> None:
        peer = self.peers.get(peer_id)
        if peer is not None:
            peer.waiting_since = None
            peer.answered = peer.arrived
        self._out.append((peer_id, msg))

    def _flush(self) -> list[Reply]:
        out, self._out = self._out, []
        return out

    def _registered(self, peer: Peer | None) -> Peer:
        if peer is None:
            raise m.ProtocolError(m.NOT_ALLOWED, "say hello first (protocol version, agent name, kinds)")
        return peer

    def _pending_for(self, peer: Peer | None) -> dict[str, Any] | None:
        """The decision still standing for this peer, repeated in error replies."""
        if peer is None:
            return None
        ep = peer.session.episode
        pending = ep.core.pending if ep is not None else None
        if pending is None or ep.sent_at is None or ep.owners.get(pending.kind) is not peer:
            return None
        return {"decision": ep.decision_id, "kind": pending.kind, "time": pending.time,
                "candidates": pending.candidates, "can_wait": pending.can_wait}

    def _missing_kinds(self, session: Session, reset: dict[str, Any]) -> set[str]:
        taken = {k for p in session.peers.values() for k in p.kinds}
        return set(reset.get("require", [])) - taken

    def _describe(self) -> dict[str, Any]:
        return {"kinds": list(KINDS), "policies": list(POLICIES),
                "rewards": {**{name: r.description for name, r in REWARDS.items()}, **FAMILIES},
                # `policy` inside `options`, as a reset gives it (1.3); at the top level for older readers
                "defaults": _plain({**self.defaults, "options": {**self.defaults["options"],
                                                                 "policy": self.defaults["policy"]}}),
                "limits": {"max_message_bytes": MAX_MESSAGE_BYTES, "heartbeat_s": self.heartbeat,
                           "decision_timeout_s": self.decision_timeout,
                           **{key: value for key in ("max_jobs", "max_trace_bytes", "max_trace_jobs", "max_reset_cpu_s",
                                                     "idle_timeout_s", "max_sessions", "max_agents")
                              if (value := getattr(self.limits, key.removesuffix("_s"))) is not None}},
                "on_agent_lost": self.on_agent_lost, "sessions": "private" if self.private else "open",
                **({"workers": self.workers} if self.workers > 1 else {})}


class _Unlocked:
    """`with` it: the lock released inside, held again after."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        self.lock.release()

    def __exit__(self, *exc: object) -> None:
        self.lock.acquire()


def parse_request(body: bytes | dict[str, Any]) -> Request:
    """A request decoded, validated and bounded before the lock is taken (the front checks hellos with it too)."""
    msg: dict[str, Any] = {}
    try:
        msg = m.validate(decode(body) if isinstance(body, (bytes, bytearray)) else body)
        if msg["type"] == "reset":
            check_reset_size(msg)
    except m.ProtocolError as err:
        return msg, err
    return msg, None


def check_hello(msg: dict[str, Any]) -> None:
    """Refuse a hello (typed by `parse_request`) whose version, names or kinds no env takes."""
    if not VERSION.match(msg["protocol"]):
        raise m.ProtocolError(m.BAD_FIELD, f"hello: protocol must be MAJOR.MINOR, e.g. {m.PROTOCOL_VERSION}; "
                                           f"got {m._describe(msg['protocol'])}")
    major = msg["protocol"].split(".")[0]
    if major != m.MAJOR:
        raise m.ProtocolError(m.VERSION_MISMATCH, f"this env speaks protocol {m.PROTOCOL_VERSION}, "
                                                  f"the agent {msg['protocol']}; use a {m.MAJOR}.x agent")
    for key in ("agent", "session", "token"):
        if len(msg.get(key, "")) > MAX_NAME:
            raise m.ProtocolError(m.BAD_FIELD, f"hello: {key} names are at most {MAX_NAME} characters; "
                                               f"got {len(msg[key]):,}")
    kinds = msg["kinds"]
    if not all(isinstance(k, str) and k in KINDS for k in kinds) or len(set(kinds)) != len(kinds):
        raise m.ProtocolError(m.BAD_FIELD, f"hello: kinds must be distinct names among {', '.join(KINDS)}; "
                                           f"got {m._describe(kinds)}")


def kinds_key(kinds: Any) -> str:
    """An agent's kinds as one label, in protocol order: "select/inspect"."""
    return "/".join(k for k in KINDS if k in set(kinds))


def _plain(value: Any) -> Any:
    """Only msgpack-friendly values (paths become strings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def sent_columns(minor: int, asked: dict[str, list[str]] | None) -> dict[str, frozenset[str]] | None:
    """The job-table columns an agent is sent (None: all): those it asked for (1.8; `id` always), less those
    newer than its version (PROTOCOL.md section 6)."""
    newer = columns_newer_than(minor)
    if asked is None and not newer:
        return None
    return {table: frozenset(["id", *asked.get(table, ())] if asked is not None else names(columns))
            - set(newer.get(table, ())) for table, columns in JOB_TABLES.items()}
