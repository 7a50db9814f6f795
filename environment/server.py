"""The env server process: ZeroMQ ROUTER sockets in front of an `EnvService`, never blocked by one long request, since a
watchdog then takes over the loop (docs/server.md); a loop that raises ends the process."""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import zmq

from ..protocol import messages as m
from ..protocol.codec import MAX_MESSAGE_BYTES, encode
from .errors import ConfigError, HpcgymError
from .service import RETRY_S, EnvService

LOOPBACK_PREFIXES = ("tcp://127.", "tcp://localhost:", "tcp://[::1]:", "ipc://", "inproc://")
ADDRESS = re.compile(r"(tcp://(\[[0-9A-Fa-f:.]+\]|[^:/\s]+):(\d+|\*)|ipc://\S+|inproc://\S+)\Z")


def check_listening(bind: str, authenticated: bool, allow_remote: bool, insecure: bool) -> None:
    """Listening for other hosts is an explicit choice, and without CURVE an insecure one."""
    if not ADDRESS.match(bind):  # before any other rule about it
        raise ConfigError(f"{bind!r} is not a ZeroMQ address; use tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) "
                          "or ipc://PATH")
    if bind.startswith(LOOPBACK_PREFIXES):
        return
    if not allow_remote:
        raise ConfigError(f"{bind} is not a loopback address: listening for other hosts is an explicit choice "
                          "(--allow-remote), with CURVE keys (--curve-secret, --curve-allow)")
    if not authenticated and not insecure:
        raise ConfigError(f"--allow-remote without CURVE lets anyone who reaches {bind} use this env: give "
                          "--curve-secret and --curve-allow (hpcgym keys makes them), or say --insecure")


class CurveKeys:
    """CURVE authentication: the server's key pair and the agent public keys it accepts."""

    def __init__(self, server_public: bytes, server_secret: bytes, allowed: list[bytes]) -> None:
        self.server_public, self.server_secret, self.allowed = server_public, server_secret, allowed


#: Connections served at once unless the operator says otherwise (`hpcgym env --max-connections`).
DEFAULT_MAX_CONNECTIONS = 1000
SPARE_FILES = 128  #: Open files the env keeps for itself beyond its connections (traces, pipes, threads' sockets).
#: Connections that have sent nothing yet held at once, and from one host; the oldest beyond either is closed
#: (they count toward no cap of connections that speak, so they cannot keep those clients out).
MAX_SILENT = 256
MAX_SILENT_PER_PEER = 128
#: A connection that has not finished ZeroMQ's handshake within this many seconds is closed (default 30 s).
HANDSHAKE_S = 10.0


def raise_open_files() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard one where it may; (before, after): a full file table
    locks every new client out (1,100 idle connections did under the common 1,024)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft == hard:
        return soft, soft
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft, soft
    return soft, target


def _nr_open() -> int:
    """The most open files the kernel lets a process have (for a hard limit of 'unlimited')."""
    try:
        return int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return 1 << 20


def room_for_connections(wanted: int, open_files: int) -> int:
    """The connections a process allowed `open_files` serves at once: `wanted`, or fewer if files run out first."""
    import resource

    if open_files == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, open_files - SPARE_FILES - MAX_SILENT - _Loop.MAX_REFUSING))


def serve(service: EnvService, bind: str, *, curve: CurveKeys | None = None, allow_remote: bool = False,
          insecure: bool = False, ready: Any = None, max_connections: int = DEFAULT_MAX_CONNECTIONS,
          per_peer: int | None = None, on_bound: Any = None) -> None:
    """Serve until SIGINT/SIGTERM (or `service.stop`); `ready` (an Event) is set and `on_bound()` called once
    bound; at most `max_connections` at once, `per_peer` of them from one host."""
    check_listening(bind, curve is not None, allow_remote, insecure)
    with listening(bind, curve) as sock:
        run_loop(service, [Inlet(sock, _Connections(sock, service, max_connections, per_peer))], on_bound=on_bound,
                 ready=ready)


@contextmanager
def listening(bind: str, curve: CurveKeys | None) -> Iterator[zmq.Socket]:
    """The env's ROUTER socket bound to `bind` (with CURVE if given), closed with all it holds at the end."""
    ctx = zmq.Context()
    auth = None
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 500)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES + 1024)
    # No handover: a second connection with a peer's routing id must not take over its state.
    sock.setsockopt(zmq.ROUTER_HANDOVER, 0)
    sock.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_S * 1000))
    if curve is not None:
        from zmq.auth.thread import ThreadAuthenticator

        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve_callback(domain="*", credentials_provider=SimpleNamespace(
            callback=lambda domain, key, allowed=frozenset(curve.allowed): key in allowed))
        sock.curve_server = True
        sock.curve_publickey = curve.server_public
        sock.curve_secretkey = curve.server_secret
    bound = False
    try:
        try:
            sock.bind(bind)
            bound = True
        except zmq.ZMQError as exc:
            raise ConfigError(f"cannot bind {bind}: {exc}") from None
        yield sock
    finally:
        sock.close(0 if not bound else None)
        if auth is not None:
            auth.stop()
        ctx.term()
        if bound and bind.startswith("ipc://"):
            Path(bind[len("ipc://"):]).unlink(missing_ok=True)


@dataclass
class Inlet:
    """A socket the loop reads requests from; their replies go back on it. With several inlets (a worker's link
    to the front and its own address) each `tag`s its peers' routing ids, so that they never clash."""

    sock: zmq.Socket
    #: The socket's connections (cap, routing-id owners); None for a worker's link to the front.
    connections: _Connections | None = None
    tag: bytes = b""  #: One byte, or empty for the only inlet.
    #: Sees each request (tagged peer, frames after the routing id) first: returns True when it took it
    #: (a message of the front's to its worker), or the encoded refusal to send instead.
    screen: Callable[[bytes, list[bytes]], bool | bytes | None] | None = None


def run_loop(service: EnvService, inlets: list[Inlet], *, on_bound: Any = None, ready: Any = None,
             on_tick: Callable[[], None] | None = None) -> None:
    """Serve the inlets until SIGINT/SIGTERM or `service.stop`, then end the episodes; `on_tick` is called with
    the service's ticks. Raises HpcgymError with the traceback if the loop raised: its process must end."""
    stopping: list[int] = []
    previous = {sig: signal.signal(sig, lambda *_: stopping.append(sig)) for sig in (signal.SIGINT, signal.SIGTERM)} \
        if threading.current_thread() is threading.main_thread() else {}
    # a thread computing a long reset holds the interpreter a switch interval each time the loop wants it:
    # at the default 5 ms six such resets cut another session's throughput 60x
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    loop = _Loop(service, inlets, on_tick)
    try:
        loop.start()
        if on_bound is not None:
            on_bound()
        if ready is not None:
            ready.set()
        while not stopping and not getattr(service, "stop", False) and not loop.done.is_set():
            time.sleep(0.02)  # signals are handled in this thread
        loop.stop("shutdown")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        loop.close()
    if loop.failure is not None:
        raise HpcgymError(f"the env's socket loop failed, so this process ends:\n{loop.failure}")


SWITCH_INTERVAL_S = 0.0005  #: The interpreter's switch interval while an env serves (see `run_loop`).


class _Loop:
    """The socket loop, run by one thread at a time, and the watchdog that takes it over (module docstring)."""

    TAKEOVER_S = 0.005
    REFUSE_FOR_S = 1.0  #: A connection over the cap is answered (its requests refused) this long, then closed.
    MAX_REFUSING = 64  #: The most such connections kept at once; beyond them a connection is closed at once.
    #: After a stop signal, how long agents that were not waiting may still fetch their episode's end.
    SHUTDOWN_GRACE_S = 1.0

    def __init__(self, service: EnvService, inlets: list[Inlet], on_tick: Callable[[], None] | None) -> None:
        self.service, self.inlets, self.on_tick = service, inlets, on_tick
        self.envelopes: dict[bytes, bool] = {}  # tagged peer -> replies need the empty delimiter frame
        self.by_tag = {inlet.tag: inlet for inlet in inlets}
        self.wake_in, self.wake_out = os.pipe()
        os.set_blocking(self.wake_in, False)
        os.set_blocking(self.wake_out, False)
        service.run_sessions_concurrently(self.poke)
        self.roles = threading.Lock()             # guards the five below
        self.holder: threading.Thread | None = None  # the thread that may use the socket
        self.busy: tuple[threading.Thread, float] | None = None  # the holder, inside a request since
        self.outgoing: list[tuple[bytes, bytes]] = []  # replies of a request whose thread lost the loop
        self.stopping: str | None = None
        self.closed = False  # the pipe is closed: its descriptors may name other files by now
        self.done = threading.Event()
        self.failure: str | None = None  # the traceback of a loop that raised (then `done` is set)
        self.tick_every = max(0.01, service.heartbeat / 4)
        self.next_tick = 0.0

    def start(self) -> None:
        self._spawn(self._run, holder=True)
        self._spawn(self._watch)

    def stop(self, reason: str) -> None:
        """Have the loop thread end the episodes, answer everyone waiting and stop (bounded)."""
        with self.roles:
            self.stopping = reason
        self.poke()
        self.done.wait(5)

    def close(self) -> None:
        self.done.set()
        for inlet in self.inlets:
            if inlet.connections is not None:
                inlet.connections.close()
        with self.roles:
            self.closed = True
            os.close(self.wake_in)
            os.close(self.wake_out)

    def poke(self) -> None:
        """Wake the loop's holder (replies are waiting, or it must stop)."""
        with self.roles:
            if not self.closed:
                with suppress(OSError):  # the pipe is full (the loop will wake anyway) or closed (the server stopped)
                    os.write(self.wake_out, b"!")

    def _spawn(self, target, holder: bool = False) -> None:
        thread = threading.Thread(target=target, name="hpcgym-env-loop", daemon=True)
        if holder:
            self.holder = thread
        thread.start()

    def _watch(self) -> None:
        """Every TAKEOVER_S: take the loop over from a holder caught in one request that long."""
        me = threading.current_thread()
        while not self.done.wait(self.TAKEOVER_S):
            with self.roles:
                if self.busy is None or time.monotonic() - self.busy[1] < self.TAKEOVER_S:
                    continue
                self.holder, self.busy = me, None
            self._spawn(self._watch)
            self._run()
            return

    def _run(self) -> None:
        """The loop, while this thread holds it; a raise (a bug) ends it for good (`failure`; `run_loop` raises)."""
        try:
            self._hold()
        except Exception:
            self.failure = traceback.format_exc()
            self.done.set()

    def _hold(self) -> None:
        poller = zmq.Poller()
        poller.register(self.wake_in, zmq.POLLIN)
        for inlet in self.inlets:
            poller.register(inlet.sock, zmq.POLLIN)
            if inlet.connections is not None:
                poller.register(inlet.connections.monitor, zmq.POLLIN)
        grace_ends = None  # once stopping: when the last agents' chance to fetch their episode's end is over
        while not self.done.is_set():
            with self.roles:
                reason, out, self.outgoing = self.stopping, self.outgoing, []
            self._send(out)
            if reason is not None and grace_ends is None:
                self._send(self.service.shutdown(reason))
                grace_ends = time.monotonic() + self.SHUTDOWN_GRACE_S
            if grace_ends is not None and (time.monotonic() >= grace_ends or not self.service.owes_replies()):
                self.done.set()
                return
            events = dict(poller.poll(int(self.tick_every * 1000)))
            if self.wake_in in events:  # a session thread has replies: the tick collects them
                with suppress(BlockingIOError):
                    while os.read(self.wake_in, 4096):
                        pass
                self.next_tick = 0.0
            for inlet in self.inlets:
                if inlet.connections is not None and inlet.connections.monitor in events:
                    inlet.connections.update(self.envelopes)
                if inlet.sock in events and not self._read(inlet):
                    return
                if inlet.connections is not None:
                    inlet.connections.settle()
            if time.monotonic() >= self.next_tick:  # heartbeats and time-outs, a few times a heartbeat
                self.next_tick = time.monotonic() + self.tick_every
                for inlet in self.inlets:
                    if inlet.connections is not None:
                        inlet.connections.close_refused()
                if self.on_tick is not None:
                    self.on_tick()
                if not self._serve(self.service.tick):
                    return

    def _read(self, inlet: Inlet) -> bool:
        """Serve one request waiting on an inlet (one per pass: a stream on one socket holds off no tick or inlet);
        False if the loop was taken over meanwhile."""
        sock = inlet.sock
        first = sock.recv(copy=False)
        rest = sock.recv_multipart() if first.more else []
        peer = inlet.tag + first.bytes
        screened = inlet.screen(peer, rest) if inlet.screen is not None else None
        if screened is True:
            return True
        delimited = len(rest) >= 2 and rest[0] == b""
        self.envelopes[peer] = delimited
        body = rest[1] if delimited and len(rest) == 2 else (rest[0] if len(rest) == 1 else b"\xc1")
        refusal = screened or (None if inlet.connections is None else
                               inlet.connections.admit(peer, first.get(zmq.SRCFD), self.envelopes))
        if refusal is not None:
            self._send([(peer, refusal)])
            return True
        return self._serve(lambda: self.service.handle(peer, body))

    def _send(self, replies: list[tuple[bytes, bytes]]) -> None:
        """Each reply on the socket its peer came from, without the inlet's tag."""
        if len(self.inlets) == 1 and not self.inlets[0].tag:
            _send_all(self.inlets[0].sock, self.envelopes, replies)
            return
        for peer, data in replies:
            inlet = self.by_tag.get(peer[:1])
            if inlet is not None:
                _send_one(inlet.sock, peer[1:], self.envelopes.get(peer, True), data)

    def _serve(self, call) -> bool:
        """Make the call as the loop's holder and send its replies; False if the loop was taken over meanwhile."""
        me = threading.current_thread()
        with self.roles:
            self.busy = (me, time.monotonic())
        try:
            replies = call()
        except Exception as exc:  # a bug must not take the server down
            print(f"hpcgym env: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
            replies = []
        with self.roles:
            if self.busy is not None and self.busy[0] is me:
                self.busy = None
            mine = self.holder is me
            if not mine:
                self.outgoing.extend(replies)
        if mine:
            self._send(replies)
        else:
            self.poke()
        return mine


class _Connections:
    """The socket's connections, as its monitor reports them and as they speak: one counts toward the caps from its
    first request, and a routing id belongs to the connection that first used it."""

    def __init__(self, sock: zmq.Socket, service: Any, cap: int, per_peer: int | None = None) -> None:
        self.service, self.cap, self.per_peer = service, cap, min(per_peer or cap, cap)
        self.monitor = sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.sock = sock
        self.open: dict[int, int] = {}                 # fd -> the serial of the connection on it
        self.host: dict[int, str | None] = {}          # fd -> its peer's IP address (None: not IP, as ipc)
        self.serials = itertools.count(1)
        self.silent: dict[int, None] = {}              # fds that have not spoken, oldest first
        self.silent_from: Counter[str | None] = Counter()
        self.served: set[int] = set()                  # fds that spoke and were let in
        self.served_from: Counter[str | None] = Counter()
        # fd of a refused connection -> (when to close it, None once closed; the refusal to answer meanwhile)
        self.refusing: dict[int, tuple[float | None, bytes]] = {}
        self.owner: dict[bytes, tuple[int, int]] = {}  # routing id -> (fd, serial) of its connection
        self.ids: dict[int, set[bytes]] = {}           # fd -> the routing ids used on it

    def update(self, envelopes: dict[bytes, bool]) -> None:
        """Take in what the monitor reported: accepted and closed connections."""
        from zmq.utils.monitor import parse_monitor_message

        while self.monitor.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            event = parse_monitor_message(self.monitor.recv_multipart())
            fd = int(event["value"])
            if event["event"] == zmq.EVENT_ACCEPTED:
                self.open[fd] = next(self.serials)
                self.host[fd] = host = _peer_host(fd)
                self.silent[fd] = None
                self.silent_from[host] += 1
            elif fd in self.open:
                self._forget(fd)
                del self.open[fd]
                for peer in self.ids.pop(fd, ()):
                    self.owner.pop(peer, None)
                    envelopes.pop(peer, None)
                    self.service.disconnected(peer)

    def admit(self, peer: bytes, fd: int, envelopes: dict[bytes, bool]) -> bytes | None:
        """None if the request may be served; else the encoded refusal to send instead."""
        self.update(envelopes)  # a closed connection is known before a request on its successor
        if fd in self.silent:  # its first request: now it counts
            self._forget(fd)
            self._let_in(fd)
        if fd in self.refusing:
            return self.refusing[fd][1]
        connection = (fd, self.open.get(fd, 0))
        known = self.owner.get(peer)
        if known != connection:
            if known is not None:  # its connection closed (the monitor has not said so yet): a new one
                self.ids.get(known[0], set()).discard(peer)
                self.service.disconnected(peer)
            self.owner[peer] = connection
            self.ids.setdefault(fd, set()).add(peer)
        return None

    def _let_in(self, fd: int) -> None:
        """A connection that spoke: served if the caps have room, else refused for a while."""
        host = self.host.get(fd)
        if len(self.served) >= self.cap:
            why = (f"this env serves at most {self.cap:,} connections at once (the operator sets it with "
                   f"--max-connections); close this connection and try again in {RETRY_S:g} s")
        elif host is not None and self.served_from[host] >= self.per_peer:
            why = (f"this env serves at most {self.per_peer:,} connections from one host at once, and {host} has "
                   f"that many (the operator sets it with --max-connections-per-peer); close one of them and try "
                   f"again in {RETRY_S:g} s")
        else:
            self.served.add(fd)
            self.served_from[host] += 1
            return
        now = time.monotonic()  # a refused connection hears why for a while, unless too many already do
        until = now + _Loop.REFUSE_FOR_S if len(self.refusing) < _Loop.MAX_REFUSING else now
        self.refusing[fd] = (until, encode(m.error(m.ProtocolError(m.NOT_ALLOWED, why, retry_s=RETRY_S))))

    def settle(self) -> None:
        """Close the oldest silent connections beyond MAX_SILENT (a host's: MAX_SILENT_PER_PEER), requests read."""
        if len(self.silent) <= MAX_SILENT and max(self.silent_from.values(), default=0) <= MAX_SILENT_PER_PEER:
            return
        if self.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            return  # the loop reads them first
        for fd in list(self.silent):
            host = self.host.get(fd)
            if len(self.silent) > MAX_SILENT or self.silent_from[host] > MAX_SILENT_PER_PEER:
                self._forget(fd)
                _close_fd(fd)
                self.refusing[fd] = (None, encode(m.error(m.ProtocolError(
                    m.NOT_ALLOWED, f"this connection sent nothing while {MAX_SILENT_PER_PEER:,} newer ones from its "
                                   "host (or too many in all) waited to, so the env closed it; connect again and "
                                   "send your request at once", retry_s=RETRY_S))))

    def _forget(self, fd: int) -> None:
        """Count the connection on `fd` no more (it spoke, or closed)."""
        host = self.host.get(fd)
        if fd in self.silent:
            del self.silent[fd]
            self.silent_from -= Counter((host,))  # a host counted no more is dropped
        if fd in self.served:
            self.served.discard(fd)
            self.served_from -= Counter((host,))
        self.refusing.pop(fd, None)

    def close_refused(self) -> None:
        """Close the refused connections whose time to hear why is over."""
        now = time.monotonic()
        for fd, (until, refusal) in list(self.refusing.items()):
            if until is not None and now >= until:
                self.refusing[fd] = (None, refusal)
                _close_fd(fd)

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(0)


def _peer_host(fd: int) -> str | None:
    """The IP address of the peer of the TCP connection on `fd` (None: ipc), opening no file."""
    try:
        connection = socket.socket(fileno=fd)
    except OSError:
        return None  # closed meanwhile
    try:
        address = connection.getpeername() if connection.family in (socket.AF_INET, socket.AF_INET6) else None
    except OSError:
        address = None
    finally:
        connection.detach()
    return address[0] if address else None


def _close_fd(fd: int) -> None:
    """End the connection on `fd` (ZeroMQ then closes its end), opening no file: there may be none to spare."""
    try:
        connection = socket.socket(fileno=fd)
    except OSError:
        return  # closed meanwhile
    with suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)
    connection.detach()


def _send_all(sock: zmq.Socket, envelopes: dict[bytes, bool], replies: list[tuple[bytes, bytes]]) -> None:
    for peer, data in replies:
        _send_one(sock, peer, envelopes.get(peer, True), data)


def _send_one(sock: zmq.Socket, peer: bytes, delimited: bool, data: bytes) -> None:
    try:  # frame by frame with plain int flags: send_multipart's flag enums cost more than the sends
        sock.send(peer, _MORE)
        if delimited:
            sock.send(b"", _MORE)
        sock.send(data, _NOBLOCK)
    except zmq.ZMQError:
        pass  # the peer is gone or its queue is full: its timeout will tell it


_NOBLOCK = int(zmq.NOBLOCK)
_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
