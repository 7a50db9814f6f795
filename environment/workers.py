"""`hpcgym env --workers N`: the sessions of one env spread over N worker processes.

One process, the front, owns the socket agents connect to (its CURVE keys, its cap on
connections, its check of routing ids: server.py). Each worker is an `EnvService` served by
server.py's loop over a DEALER socket linked to the front. A session lives in one worker: the
front sends a `hello` to the worker that holds the session's name (a new name goes to the worker
with the fewest agents), and every later request of that agent to the same worker; replies come
back the same way. The front reads only the first entries of a message (its `type`, and a reply's
`episode`); everything else is the worker's, so the protocol, its tokens and bounds are those of
a single env, and every episode is the one `hpcgym run` simulates.

A worker that dies ends only its own agents' episodes: each of them gets an `episode_end` whose
reason says so (at once if it waits for a reply, else as the reply to its next request) and must
say hello again; a new worker takes the dead one's place.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack
import zmq

from ..protocol.codec import encode
from .errors import HpcgymError
from .server import DISCONNECTED, CurveKeys, _Connections, _send_all, listening, run_loop
from .service import EnvService

#: What a worker sends the front first, as its routing id's only frame: it is ready for requests.
READY = b"\x00ready"
#: How often the front looks for workers that died.
CHECK_EVERY_S = 0.2
#: After a stop signal: how long the front keeps forwarding while its workers end their episodes.
STOP_WITHIN_S = 3.0


@dataclass
class _Worker:
    index: int
    process: Any
    identity: bytes
    ready: bool = False
    agents: set[bytes] = field(default_factory=set)


def serve_workers(service_options: dict[str, Any], workers: int, bind: str, *, curve: CurveKeys | None = None,
                  max_connections: int, on_bound: Any = None) -> None:
    """Serve `bind` with `workers` processes, each an `EnvService(**service_options)`, until
    SIGINT/SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="hpcgym-env-") as folder, listening(bind, curve) as public:
        _Front(service_options, workers, public, f"ipc://{folder}/workers.ipc", max_connections).run(on_bound)


class _Front:
    def __init__(self, service_options: dict[str, Any], n: int, public: zmq.Socket, inner_address: str,
                 max_connections: int) -> None:
        self.options, self.public, self.inner_address = service_options, public, inner_address
        self.inner = public.context.socket(zmq.ROUTER)
        self.inner.setsockopt(zmq.LINGER, 500)
        self.inner.bind(inner_address)
        self.connections = _Connections(public, self, max_connections)
        self.envelopes: dict[bytes, bool] = {}
        self.route: dict[bytes, _Worker] = {}      # agent routing id -> its worker
        self.session_of: dict[bytes, str] = {}     # agent routing id -> the session its hello named
        self.sessions: dict[str, _Worker] = {}     # session name -> the worker that holds it
        self.members: dict[str, set[bytes]] = {}   # session name -> its agents (as the front knows them)
        self.episode: dict[bytes, int] = {}        # agent -> the episode number of its last reply
        self.waiting: set[bytes] = set()           # agents with a request forwarded and not yet answered
        self.owed: dict[bytes, bytes] = {}         # agent -> the episode end of a dead worker, not yet sent
        self.greeting: dict[bytes, tuple[_Worker | None, str | None]] = {}  # hello sent: where the agent was
        self.generation = 0
        self.workers = [self._start(k) for k in range(n)]

    # ---------------------------------------------------------------- workers
    def _start(self, index: int) -> _Worker:
        self.generation += 1
        identity = f"w{index}.{self.generation}".encode()
        process = multiprocessing.get_context("spawn").Process(
            target=_worker_main, args=(self.options, self.inner_address, identity), name=f"hpcgym-env-worker-{index}",
            daemon=True)
        process.start()
        return _Worker(index, process, identity)

    def _replace_dead(self) -> None:
        for k, worker in enumerate(self.workers):
            if worker.process.is_alive():
                continue
            why = (f"the env's worker process {worker.index} failed (exit code {worker.process.exitcode}) and took "
                   "its sessions with it: say hello again")
            for agent in list(worker.agents):
                end = encode({"type": "episode_end", "episode": self.episode.get(agent, 0), "reason": why,
                              "metrics": {}, "reward": 0.0})
                self._leave(agent)
                if agent in self.waiting:
                    self._reply(agent, end)
                else:
                    self.owed[agent] = end
            for name in [name for name, holder in self.sessions.items() if holder is worker]:
                del self.sessions[name]
                self.members.pop(name, None)
            self.workers[k] = self._start(worker.index)

    # ---------------------------------------------------------------- routing
    def _worker_for(self, agent: bytes, body: bytes) -> _Worker | None:
        """The worker a request goes to; a hello is routed by the session it names."""
        if _is_hello(body):
            name = msgpack.unpackb(body).get("session", "default")
            if isinstance(name, str):
                worker = self.sessions.get(name)
                if worker is None:
                    ready = [w for w in self.workers if w.ready]
                    if not ready:
                        return None
                    worker = min(ready, key=lambda w: len(w.agents))
                self.greeting[agent] = (self.route.get(agent), self.session_of.get(agent))
                self._join(agent, worker, name)
                return worker
        worker = self.route.get(agent)
        return worker if worker is not None else next((w for w in self.workers if w.ready), None)

    def _join(self, agent: bytes, worker: _Worker, name: str) -> None:
        self._leave(agent)
        self.sessions[name] = worker
        self.members.setdefault(name, set()).add(agent)
        self.session_of[agent] = name
        self.route[agent] = worker
        worker.agents.add(agent)

    def _leave(self, agent: bytes) -> None:
        """Forget where an agent was (it said bye, was refused, its connection closed, its worker died)."""
        worker = self.route.pop(agent, None)
        if worker is not None:
            worker.agents.discard(agent)
        name = self.session_of.pop(agent, None)
        if name is not None:
            members = self.members.get(name, set())
            members.discard(agent)
            if not members:
                self.members.pop(name, None)
                self.sessions.pop(name, None)
        self.episode.pop(agent, None)

    def disconnected(self, agent: bytes) -> None:
        """Called by `_Connections` when an agent's connection closed: its worker is told."""
        worker = self.route.get(agent)
        if worker is not None:
            self.inner.send_multipart([worker.identity, agent, DISCONNECTED])
        self._leave(agent)
        self.owed.pop(agent, None)
        self.waiting.discard(agent)

    def _reply(self, agent: bytes, body: bytes) -> None:
        self.waiting.discard(agent)
        _send_all(self.public, self.envelopes, [(agent, body)])

    # ---------------------------------------------------------------- the loop
    def run(self, on_bound: Any) -> None:
        stopping: list[int] = []
        previous = {sig: signal.signal(sig, lambda *_: stopping.append(sig)) for sig in (signal.SIGINT, signal.SIGTERM)}
        poller = zmq.Poller()
        for sock in (self.public, self.inner, self.connections.monitor):
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
            next_check, stop_by = 0.0, None
            while stop_by is None or (time.monotonic() < stop_by and any(w.process.is_alive() for w in self.workers)):
                if stopping and stop_by is None:
                    stop_by = time.monotonic() + STOP_WITHIN_S
                    for worker in self.workers:  # each ends its episodes and answers its agents
                        if worker.process.is_alive():
                            os.kill(worker.process.pid, signal.SIGTERM)
                events = dict(poller.poll(int(CHECK_EVERY_S * 1000)))
                self.connections.update(self.envelopes)
                if events.get(self.inner):
                    self._from_workers()
                if events.get(self.public):
                    self._from_agents()
                if stop_by is None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + CHECK_EVERY_S
                    self._replace_dead()
                    self.connections.close_refused()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for worker in self.workers:
                worker.process.join(1)
                if worker.process.is_alive():
                    worker.process.kill()
            self.connections.close()
            self.inner.close(0)

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
            worker = self._worker_for(agent, body)
            if worker is None:  # no worker is ready: the agent's time-out or a later try will tell
                continue
            self.waiting.add(agent)
            self.inner.send_multipart([worker.identity, agent, body])

    def _from_workers(self) -> None:
        while self.inner.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            frames = self.inner.recv_multipart()
            identity, agent, body = frames[0], frames[1], frames[-1]
            if agent == READY:
                for worker in self.workers:
                    worker.ready = worker.ready or worker.identity == identity
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


def _is_hello(body: bytes) -> bool:
    """Whether a request is a hello: looked for in its first bytes (where `type` and its value
    are, whatever the order of a hello's five short entries), then read to be sure."""
    if b"\xa5hello" not in body[:96]:
        return False
    try:
        message = msgpack.unpackb(body)
    except (ValueError, msgpack.UnpackException):
        return False
    return isinstance(message, dict) and message.get("type") == "hello"


#: How a reply the env wrote starts: a map of up to 15 entries whose first key is `type`.
_TYPE_FIRST = b"\xa4type"
_EPISODE_NEXT = b"\xa7episode"
#: msgpack's unsigned integer markers: the number of bytes that follow.
_UINT = {0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8}


def _type_and_episode(body: bytes) -> tuple[str | None, int | None]:
    """A reply's `type` and `episode`, its first two entries as the env writes every reply, read
    from its bytes without decoding the rest (the front does this for every reply)."""
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


def _worker_main(service_options: dict[str, Any], inner_address: str, identity: bytes) -> None:
    """A worker process: an EnvService behind a DEALER linked to the front."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the front, which stops the workers
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 500)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.connect(inner_address)
    try:
        sock.send_multipart([READY])
        run_loop(EnvService(**service_options), sock, None)
    finally:
        sock.close()
        ctx.term()


def worker_limits(limits: Any, workers: int) -> Any:
    """Each worker's share of the env's caps on agents and sessions."""
    from dataclasses import replace

    share = {key: -(-getattr(limits, key) // workers) for key in ("max_agents", "max_sessions")
             if getattr(limits, key) is not None}
    return replace(limits, **share)

