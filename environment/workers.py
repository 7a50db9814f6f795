"""`hpcgym env --workers N`: one env's sessions spread over N worker processes, so that a worker that dies or hangs ends
only its own agents' episodes (docs/server.md: the front, forwarding and 1.6 redirects)."""

from __future__ import annotations

import glob
import hmac
import itertools
import os
import shutil
import signal
import socket
import tempfile
import time
from contextlib import nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from ..protocol import messages as m
from ..protocol.codec import encode
from .errors import HpcgymError
from .processes import end, spawn
from .server import CurveKeys, Inlet, _Connections, _send_all, listening, run_loop
from .service import EnvService, check_hello, parse_request

# Messages between the front and its workers, in the place of a routing id (a client's never starts with a
# zero byte unless ZeroMQ made it, and then it has 5 bytes).
#: Worker to front, first: it is ready for requests.
READY = b"\x00ready"
DISCONNECTED = b"\x00disconnected"  #: Front to worker, after an agent's routing id: that agent's connection closed.
#: Front to worker, after an agent's routing id, then a session name, a serial and the hello's token (empty
#: for none): hold this session for a hello with that token and redirect the agent to your own address.
CLAIM = b"\x00claim"
#: Worker to front, then a session name and the serial of its claim: its last agent has gone.
RELEASED = b"\x00released"
BEAT = b"\x00beat"  #: Worker to front, at each tick of its loop: it is alive and its loop turns.
#: The tags of a worker's two inlets (environment/server.py): the front's link and its own address.
FROM_FRONT, DIRECT = b"f", b"d"
CLAIM_WITHIN_S = 30.0  #: How long a claimed session waits for its first agent at the worker's address.
CHECK_EVERY_S = 0.2  #: How often the front looks for workers that died.
HUNG_AFTER_S = 5.0  #: A ready worker silent this long (stopped, or its loop hung) is killed and replaced.
STOP_WITHIN_S = 1.0  #: After a stop signal: how long the front goes on answering (a worker's own grace is a second).
#: After a stop signal: when a worker still alive is killed (its agents get `shutdown` from the front).
KILL_AFTER_S = 1.5
RETRY_S = 2.0  #: How long an agent told that no worker is ready should wait before it tries again (`retry_s`).
#: The prefix of the folder of the link between a front and its workers (then its pid and a dash).
LINK_FOLDER = "hpcgym-env-"


@dataclass
class _Worker:
    index: int
    process: Any
    identity: bytes
    ready: bool = False
    agents: set[bytes] = field(default_factory=set)  # forwarded and redirected
    address: str | None = None  # where it serves redirected agents
    beat: float = 0.0  # when it was last heard from (its ticks beat)
    answered_stop: bool = False  # stopping: its agents still waiting were answered when it ended


def serve_workers(service_options: dict[str, Any], workers: int, bind: str, *, curve: CurveKeys | None = None,
                  max_connections: int, per_peer: int | None = None, on_bound: Any = None,
                  redirect: bool = True) -> None:
    """Serve `bind` with `workers` processes, each an `EnvService(**service_options)`, until SIGINT/SIGTERM;
    `redirect`: 1.6 agents are sent to their worker's own address."""
    _remove_stale_ipc(bind)
    with tempfile.TemporaryDirectory(prefix=f"{LINK_FOLDER}{os.getpid()}-") as folder, \
            listening(bind, curve) as public:
        own = _worker_address(bind) if redirect else None
        worker = _WorkerSetup(service_options, f"ipc://{folder}/workers.ipc", own, curve, max_connections, workers,
                              per_peer)
        _Front(worker, workers, public).run(on_bound)


def _remove_stale_ipc(bind: str) -> None:
    """Remove what killed envs left: link folders of fronts that are gone, ipc files nothing listens on."""
    for folder in Path(tempfile.gettempdir()).glob(f"{LINK_FOLDER}*-*"):
        pid = folder.name[len(LINK_FOLDER):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
    if bind.startswith("ipc://"):
        front = Path(bind[len("ipc://"):])
        for path in front.parent.glob(glob.escape(front.name) + ".w*.*"):
            if not _listened_on(path):
                path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _listened_on(path: Path) -> bool:
    """Whether a process accepts connections at the ipc (Unix socket) file `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            return False
        except OSError:
            return True  # not a socket we may judge: leave it
    return True


def _worker_address(bind: str) -> str | None:
    """Where a worker listens for redirected agents (`{}`: its name): a free port, or beside the ipc file."""
    if bind.startswith("tcp://"):
        return bind[:bind.rindex(":")] + ":*"
    return bind + ".{}" if bind.startswith("ipc://") else None


@dataclass
class _WorkerSetup:
    """What a worker process is started with."""

    service_options: dict[str, Any]
    inner_address: str
    own_address: str | None
    curve: CurveKeys | None
    max_connections: int
    workers: int = 1  #: How many workers share the env's caps (each enforces its share and says so).
    #: Connections from one host at once, at the worker's own address (None: max_connections).
    per_peer: int | None = None


class _Front:
    def __init__(self, setup: _WorkerSetup, n: int, public: zmq.Socket) -> None:
        self.setup, self.public, inner_address = setup, public, setup.inner_address
        self.inner = public.context.socket(zmq.ROUTER)
        self.inner.setsockopt(zmq.LINGER, 500)
        self.inner.bind(inner_address)
        self.connections = _Connections(public, self, setup.max_connections, setup.per_peer)
        self.envelopes: dict[bytes, bool] = {}
        self.route: dict[bytes, _Worker] = {}      # agent routing id -> its worker
        self.session_of: dict[bytes, str] = {}     # agent routing id -> the session its hello named
        self.sessions: dict[str, _Worker] = {}     # session name -> the worker that holds it
        self.members: dict[str, set[bytes]] = {}   # session name -> its agents (as the front knows them)
        self.episode: dict[bytes, int] = {}        # agent -> the episode number of its last reply
        self.waiting: dict[bytes, _Worker] = {}    # agent -> the worker its request went to, not yet answered
        self.owed: dict[bytes, bytes] = {}         # agent -> the episode end of a dead worker, not yet sent
        self.greeting: dict[bytes, tuple[_Worker | None, str | None]] = {}  # hello sent: where the agent was
        self.redirected: dict[bytes, tuple[_Worker, str]] = {}  # agent sent to a worker's address -> where
        self.claims: dict[str, int] = {}           # session name -> the serial of its latest claim
        self.serials = itertools.count(1)
        self.generation = 0
        self.workers = [self._start(k) for k in range(n)]

    # ---------------------------------------------------------------- workers
    def _start(self, index: int) -> _Worker:
        self.generation += 1
        identity = f"w{index}.{self.generation}".encode()
        process = spawn(_worker_main, (self.setup, identity, os.getpid()), f"hpcgym-env-worker-{index}", daemon=False)
        return _Worker(index, process, identity)

    def _replace_dead(self) -> None:
        """Replace the workers that died, and those silent for HUNG_AFTER_S (killed first)."""
        for k, worker in enumerate(self.workers):
            hung = worker.ready and worker.process.is_alive() and time.monotonic() - worker.beat > HUNG_AFTER_S
            if hung:
                worker.process.kill()
                worker.process.join(1)
            if worker.process.is_alive():
                continue
            failed = f"was silent for {HUNG_AFTER_S:g} s (stopped or hung), was killed" if hung else \
                f"failed (exit code {worker.process.exitcode})"
            why = f"the env's worker process {worker.index} {failed} and took its sessions with it: say hello again"
            self._end_agents_of(worker, why)
            _unlink_ipc(worker.address)
            self.workers[k] = self._start(worker.index)

    def _end_agents_of(self, worker: _Worker, why: str) -> None:
        """A worker is gone: its agents get an `episode_end` with `why` (now, or at their next request)."""
        for agent in list(worker.agents):
            end = encode({"type": "episode_end", "episode": self.episode.get(agent, 0), "reason": why,
                          "metrics": {}, "reward": 0.0})
            told_now = agent in self.waiting or agent in self.redirected
            self._leave(agent)
            if told_now:
                self._reply(agent, end)
            else:
                self.owed[agent] = end
        for name in [name for name, holder in self.sessions.items() if holder is worker]:
            del self.sessions[name]
            self.members.pop(name, None)
            self.claims.pop(name, None)

    # ---------------------------------------------------------------- routing
    def _frames_for(self, agent: bytes, body: bytes) -> list[bytes] | None:
        """The frames for a request's worker (its identity first; None while none is ready); a hello goes by its
        session, a 1.6 agent's as a claim (the worker redirects it)."""
        hello = _hello(body)
        if hello is not None:
            name = hello.get("session", "default")
            worker = self.sessions.get(name)
            if worker is None:
                ready = [w for w in self.workers if w.ready]
                if not ready:
                    return None
                worker = min(ready, key=lambda w: len(w.agents))
            if worker.address is not None and int(hello["protocol"].split(".")[1]) >= 6:  # 1.6+ follows redirects
                self._leave(agent)
                serial = next(self.serials)
                self.sessions[name], self.claims[name] = worker, serial
                self.redirected[agent] = (worker, name)
                worker.agents.add(agent)
                return [worker.identity, agent, CLAIM, name.encode(), str(serial).encode(),
                        hello.get("token", "").encode()]
            self.greeting[agent] = (self.route.get(agent), self.session_of.get(agent))
            self._join(agent, worker, name)
            return [worker.identity, agent, body]
        worker = self.route.get(agent)
        worker = worker if worker is not None else next((w for w in self.workers if w.ready), None)
        return None if worker is None else [worker.identity, agent, body]

    def _join(self, agent: bytes, worker: _Worker, name: str) -> None:
        self._leave(agent)
        self.sessions[name] = worker
        self.members.setdefault(name, set()).add(agent)
        self.session_of[agent] = name
        self.route[agent] = worker
        worker.agents.add(agent)

    def _leave(self, agent: bytes) -> None:
        """Forget where an agent was (bye, refused, closed, its worker died, a new hello)."""
        worker = self.route.pop(agent, None)
        if worker is not None:
            worker.agents.discard(agent)
        redirected = self.redirected.pop(agent, None)
        if redirected is not None:
            redirected[0].agents.discard(agent)
        name = self.session_of.pop(agent, None)
        if name is not None:
            members = self.members.get(name, set())
            members.discard(agent)
            if not members:
                self.members.pop(name, None)
                if name not in self.claims:  # a claimed session stays with its worker until it is released
                    self.sessions.pop(name, None)
        self.episode.pop(agent, None)

    def _released(self, worker: _Worker, name: str, serial: int) -> None:
        """A claimed session lost its last agent: unless claimed again since, the name and its agents are free."""
        if self.claims.get(name) != serial or self.sessions.get(name) is not worker:
            return
        del self.claims[name]
        if not self.members.get(name):
            self.sessions.pop(name, None)
        for agent, (holder, held) in list(self.redirected.items()):
            if holder is worker and held == name:
                del self.redirected[agent]
                worker.agents.discard(agent)

    def disconnected(self, agent: bytes) -> None:
        """Called by `_Connections` when an agent's connection closed: its worker is told."""
        worker = self.route.get(agent)
        if worker is not None:
            self.inner.send_multipart([worker.identity, agent, DISCONNECTED])
        self._leave(agent)
        self.owed.pop(agent, None)
        self.waiting.pop(agent, None)

    def _reply(self, agent: bytes, body: bytes) -> None:
        self.waiting.pop(agent, None)
        _send_all(self.public, self.envelopes, [(agent, body)])

    # ---------------------------------------------------------------- the loop
    def run(self, on_bound: Any) -> None:
        stopping: list[int] = []
        wake_in, wake_out = os.pipe()  # a signal wakes the poll at once (pyzmq resumes it after a handler)
        os.set_blocking(wake_out, False)

        def stop(sig: int, _frame: Any) -> None:
            stopping.append(sig)
            os.write(wake_out, b"!")

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        poller = zmq.Poller()
        for sock in (self.public, self.inner, self.connections.monitor, wake_in):
            poller.register(sock, zmq.POLLIN)
        try:
            while not all(w.ready for w in self.workers):  # requests wait in the socket meanwhile
                if dict(poller.poll(100)).get(self.inner):
                    self._from_workers()
                failed = [w for w in self.workers if not w.process.is_alive()]
                if failed:
                    raise HpcgymError(f"an env worker process could not start (exit code {failed[0].process.exitcode})")
            if on_bound is not None:
                on_bound()
            next_check, stopped_at = 0.0, None
            while stopped_at is None or not self._stopped(stopped_at):
                if stopping and stopped_at is None:
                    stopped_at = time.monotonic()
                    for worker in self.workers:  # each ends its episodes and answers its agents
                        if worker.process.is_alive():
                            os.kill(worker.process.pid, signal.SIGTERM)
                events = dict(poller.poll(int(CHECK_EVERY_S * 1000 / (4 if stopped_at else 1))))
                self.connections.update(self.envelopes)
                if events.get(self.inner):
                    self._from_workers()
                if events.get(self.public):
                    self._from_agents()
                self.connections.settle()
                if stopped_at is None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + CHECK_EVERY_S
                    self._replace_dead()
                    self.connections.close_refused()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            end([worker.process for worker in self.workers], 0.0)
            for worker in self.workers:
                _unlink_ipc(worker.address)
            self.connections.close()
            self.inner.close(0)
            os.close(wake_in)
            os.close(wake_out)

    def _stopped(self, since: float) -> bool:
        """Stopping since `since`: answer the agents of ended workers, kill laggards after KILL_AFTER_S; True once
        every worker has ended and the front has answered for STOP_WITHIN_S."""
        now = time.monotonic()
        for worker in self.workers:
            killed = worker.process.is_alive() and now - since >= KILL_AFTER_S
            if killed:
                worker.process.kill()
                worker.process.join(1)
            if not worker.process.is_alive() and not worker.answered_stop:
                worker.answered_stop = True
                self._stop_agents_of(worker, killed)
        return now - since >= STOP_WITHIN_S and all(w.answered_stop for w in self.workers)

    def _stop_agents_of(self, worker: _Worker, killed: bool) -> None:
        """A worker ended while stopping: its unanswered requests get `shutdown`; if it was killed, its redirected
        agents get an `episode_end` (one that ended by itself told them)."""
        for agent in [a for a, w in self.waiting.items() if w is worker]:
            self._reply(agent, SHUTDOWN)
        if killed:
            for agent in [a for a, (w, _) in self.redirected.items() if w is worker]:
                self._reply(agent, encode({"type": "episode_end", "episode": 0, "reason": "shutdown", "metrics": {},
                                           "reward": 0.0}))

    def _from_agents(self) -> None:
        while self.public.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            first = self.public.recv(copy=False)
            rest = self.public.recv_multipart() if first.more else []
            agent = first.bytes
            delimited = len(rest) >= 2 and rest[0] == b""
            self.envelopes[agent] = delimited
            body = rest[1] if delimited and len(rest) == 2 else (rest[0] if len(rest) == 1 else b"\xc1")
            refusal = self.connections.admit(agent, first.get(zmq.SRCFD), self.envelopes)
            if refusal is not None:
                _send_all(self.public, self.envelopes, [(agent, refusal)])
                continue
            if agent in self.owed:
                self._reply(agent, self.owed.pop(agent))
                continue
            if any(w.answered_stop for w in self.workers):  # stopping, and a worker has ended
                _send_all(self.public, self.envelopes, [(agent, SHUTDOWN)])
                continue
            frames = self._frames_for(agent, body)
            if frames is None:
                _send_all(self.public, self.envelopes, [(agent, NONE_READY)])
                continue
            self.waiting[agent] = next(w for w in self.workers if w.identity == frames[0])
            self.inner.send_multipart(frames)

    def _from_workers(self) -> None:
        while self.inner.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            frames = self.inner.recv_multipart()
            identity, agent, body = frames[0], frames[1], frames[-1]
            if agent in (READY, RELEASED, BEAT):
                self._from_worker(identity, agent, frames[2:])
                continue
            worker = self.route.get(agent)
            if worker is not None and worker.identity != identity:
                continue  # from a worker the agent has left (it said hello elsewhere since)
            kind, episode = _type_and_episode(body)
            before = self.greeting.pop(agent, None)
            if kind == "error" and before is not None:  # its hello was refused: it stays where it was
                self._leave(agent)
                if before[0] is not None and before[1] is not None:
                    self._join(agent, before[0], before[1])
            elif kind == "bye":
                self._leave(agent)
            elif isinstance(episode, int):
                self.episode[agent] = episode
            self._reply(agent, body)

    def _from_worker(self, identity: bytes, kind: bytes, frames: list[bytes]) -> None:
        """A worker's own message: READY (and its address), BEAT, or RELEASED (a name and a serial)."""
        sender = next((w for w in self.workers if w.identity == identity), None)
        if sender is None:
            return  # a replaced worker's last words
        sender.beat = time.monotonic()
        if kind == READY:
            sender.ready, sender.address = True, (frames[0].decode() if frames else None)
        elif len(frames) == 2 and frames[1].isdigit():
            self._released(sender, frames[0].decode(), int(frames[1]))


def _hello(body: bytes) -> dict[str, Any] | None:
    """A hello the service would take, by its own validation; None for any other request (the service answers)."""
    if b"\xa5hello" not in body[:96]:
        return None
    message, refusal = parse_request(body)
    if refusal is None and message["type"] == "hello":
        with suppress(m.ProtocolError):
            check_hello(message)
            return message
    return None


NONE_READY = encode(m.error(m.ProtocolError(
    m.NOT_ALLOWED, f"no worker process of this env is ready (one is starting in the place of one that failed): "
                   f"try again in {RETRY_S:g} s", retry_s=RETRY_S)))
SHUTDOWN = encode(m.error(m.ProtocolError(m.SHUTDOWN, "the env is shutting down (shutdown)")))


def _unlink_ipc(address: str | None) -> None:
    """Remove a worker's own ipc file (a worker that was killed could not)."""
    if address is not None and address.startswith("ipc://"):
        Path(address[len("ipc://"):]).unlink(missing_ok=True)

_TYPE_FIRST = b"\xa4type"  #: How a reply the env wrote starts: a map of up to 15 entries whose first key is `type`.
_EPISODE_NEXT = b"\xa7episode"
_UINT = {0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8}  #: msgpack's unsigned integer markers: the number of bytes that follow.


def _type_and_episode(body: bytes) -> tuple[str | None, int | None]:
    """A reply's `type` and `episode` (its first two entries) from its bytes, not decoding the rest."""
    if len(body) < 8 or not 0x80 <= body[0] <= 0x8f or body[1:6] != _TYPE_FIRST or not 0xa0 <= body[6] <= 0xbf:
        return None, None
    end = 7 + (body[6] & 0x1f)
    kind = body[7:end].decode("ascii", "replace")
    if body[end:end + 8] != _EPISODE_NEXT or end + 8 >= len(body):
        return kind, None
    marker, at = body[end + 8], end + 9
    if marker < 0x80:
        return kind, marker
    width = _UINT.get(marker)
    return kind, int.from_bytes(body[at:at + width], "big") if width else None


def _worker_main(setup: _WorkerSetup, identity: bytes, front_pid: int) -> None:
    """A worker process: an EnvService behind a DEALER linked to the front, and at its own address for
    redirected agents; it stops once its parent is no longer `front_pid` (the front was killed)."""
    ctx = zmq.Context()
    link = ctx.socket(zmq.DEALER)
    link.setsockopt(zmq.LINGER, 500)
    link.setsockopt(zmq.IDENTITY, identity)
    link.connect(setup.inner_address)
    service = EnvService(**setup.service_options)
    service.workers = setup.workers
    own_address = setup.own_address.format(identity.decode()) if setup.own_address else None
    try:
        with listening(own_address, setup.curve) if own_address else nullcontext() as own:
            address = own.getsockopt(zmq.LAST_ENDPOINT).decode() if own is not None else None
            if not _say_ready(link, [READY, *([address.encode()] if address else [])], front_pid):
                return
            front = _FrontMessages(service, link, address, front_pid)
            inlets = [Inlet(link, tag=FROM_FRONT, screen=front.screen)]
            if own is not None:
                inlets.append(Inlet(own, _Connections(own, service, setup.max_connections, setup.per_peer),
                                     DIRECT, front.admit))
            run_loop(service, inlets, on_tick=front.tick)
    finally:
        link.close()
        ctx.term()


def _say_ready(link: zmq.Socket, frames: list[bytes], front_pid: int) -> bool:
    """Tell the front this worker is ready; False if the front is gone first (a send would wait for ever)."""
    while not link.poll(250, zmq.POLLOUT):
        if os.getppid() != front_pid:
            return False
    link.send_multipart(frames)
    return True


class _FrontMessages:
    """A worker's side of the front's messages: closed connections, and the sessions claimed for redirected
    agents (the only ones it serves at its own address)."""

    def __init__(self, service: EnvService, link: zmq.Socket, address: str | None, front_pid: int) -> None:
        self.service, self.link, self.address = service, link, address
        # name -> [serial, deadline for a first agent (None once it came), the token its hello gave]
        self.claimed: dict[str, list] = {}
        self.front_pid = front_pid

    def tick(self) -> None:
        """Stop if the front is gone (killed); else beat and release the claims it can."""
        if os.getppid() != self.front_pid:
            self.service.stop = True
        else:
            with suppress(zmq.Again):  # the front is behind: it has our beats queued
                self.link.send(BEAT, zmq.NOBLOCK)
            self.release()

    def screen(self, peer: bytes, rest: list[bytes]) -> bool | None:
        """Take the front's own messages (True); let an agent's request through (None)."""
        agent = peer[len(FROM_FRONT):]
        if rest[:1] == [DISCONNECTED]:
            self.service.disconnected(peer)
            return True
        if rest[:1] == [CLAIM] and len(rest) == 4 and self.address is not None:
            name = rest[1].decode()
            self.claimed[name] = [int(rest[2]), time.monotonic() + CLAIM_WITHIN_S, rest[3].decode()]
            address = self.address if not self.address.startswith("tcp://") else \
                "tcp://*" + self.address[self.address.rindex(":"):]
            self.link.send_multipart([agent, encode({"type": "redirect", "address": address, "session": name})])
            return True
        return None

    def admit(self, peer: bytes, rest: list[bytes]) -> bytes | None:
        """At the worker's own address: a hello only into a session the front sent here, with the redirected
        hello's token if it gave one (else anyone reaching this address could take the name first)."""
        hello = _hello(rest[-1]) if rest else None
        if hello is None:
            return None
        claim = self.claimed.get(hello.get("session", "default"))
        if claim is not None and claim[2] and not hmac.compare_digest(hello.get("token", "").encode(),
                                                                      claim[2].encode()):
            return encode(m.error(m.ProtocolError(
                m.NOT_ALLOWED, "the session this hello names was sent here for a hello with another token: give the "
                               "token your hello at the env's own address gave, or say hello there")))
        if claim is not None:
            claim[1] = None
            return None
        return encode(m.error(m.ProtocolError(
            m.NOT_ALLOWED, "this address serves only the sessions the env's front sent here: say hello at the "
                           "env's own address, which sends each session to its worker")))

    def release(self) -> None:
        """Tell the front which claimed sessions have lost their last agent (or never got one)."""
        if not self.claimed:
            return
        occupied = self.service.occupied_sessions()
        now = time.monotonic()
        for name, claim in list(self.claimed.items()):
            if name in occupied:
                claim[1] = None
            elif claim[1] is None or now > claim[1]:
                del self.claimed[name]
                self.link.send_multipart([RELEASED, name.encode(), str(claim[0]).encode()])


def worker_limits(limits: Any, workers: int) -> Any:
    """Each worker's share of the env's caps on agents and sessions."""
    from dataclasses import replace

    share = {key: -(-getattr(limits, key) // workers) for key in ("max_agents", "max_sessions")
             if getattr(limits, key) is not None}
    return replace(limits, **share)

