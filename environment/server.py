"""The env server process: one ZeroMQ ROUTER socket in front of an `EnvService`.

Agents connect with DEALER (sending an empty delimiter frame before the body) or REQ (which
adds it). Replies go back with the same envelope.

Never blocked, and no thread hand-off per request: the loop thread handles a request itself
(`EnvService.run_sessions_concurrently`: the session's task runs in the calling thread when the
session is idle). A watchdog thread checks every few milliseconds; when the loop thread has been
inside one request longer than `TAKEOVER_S`, the watchdog becomes the loop thread (one thread at
a time uses the socket) and a new watchdog starts; the old one finishes its long task (its
session's later requests queue behind it) and ends. The main thread only waits for a stop. SIGINT and SIGTERM end the current episodes
with reason "shutdown", answer every waiting agent, close the socket and remove an ipc file.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import zmq

from ..protocol.codec import MAX_MESSAGE_BYTES
from .errors import ConfigError
from .service import EnvService

LOOPBACK_PREFIXES = ("tcp://127.", "tcp://localhost:", "tcp://[::1]:", "ipc://", "inproc://")


ADDRESS = re.compile(r"(tcp://(\[[0-9A-Fa-f:.]+\]|[^:/\s]+):(\d+|\*)|ipc://\S+|inproc://\S+)\Z")


def check_address(bind: str) -> None:
    """Refuse what is not a ZeroMQ address at all, before any other rule about it."""
    if not ADDRESS.match(bind):
        raise ConfigError(f"{bind!r} is not a ZeroMQ address; use tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) "
                          "or ipc://PATH")


def check_listening(bind: str, authenticated: bool, allow_remote: bool, insecure: bool) -> None:
    """Listening for other hosts is an explicit choice, and without CURVE an insecure one: anyone
    who reaches the port could use the env and its traces."""
    check_address(bind)
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


def serve(service: EnvService, bind: str, *, curve: CurveKeys | None = None, allow_remote: bool = False,
          insecure: bool = False, ready: Any = None) -> None:
    """Serve until SIGINT/SIGTERM (or `service.stop` is set). `ready` (an Event) is set once bound."""
    check_listening(bind, curve is not None, allow_remote, insecure)
    ctx = zmq.Context()
    auth = None
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 500)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES + 1024)
    # No handover: a second connection with a peer's routing id must not take over its state.
    sock.setsockopt(zmq.ROUTER_HANDOVER, 0)
    if curve is not None:
        from zmq.auth.thread import ThreadAuthenticator

        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve_callback(domain="*", credentials_provider=_AllowList(curve.allowed))
        sock.curve_server = True
        sock.curve_publickey = curve.server_public
        sock.curve_secretkey = curve.server_secret
    try:
        sock.bind(bind)
    except zmq.ZMQError as exc:
        sock.close(0)
        if auth is not None:
            auth.stop()
        ctx.term()
        raise ConfigError(f"cannot bind {bind}: {exc}") from None
    stopping: list[int] = []
    previous = {sig: signal.signal(sig, lambda *_: stopping.append(sig)) for sig in (signal.SIGINT, signal.SIGTERM)} \
        if _main_thread() else {}
    loop = _Loop(service, sock)
    try:
        loop.start()
        if ready is not None:
            ready.set()
        while not stopping and not getattr(service, "stop", False) and not loop.done.is_set():
            time.sleep(0.02)  # signals are handled in this thread
        loop.stop("the env received a stop signal")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        loop.close()
        sock.close()
        if auth is not None:
            auth.stop()
        ctx.term()
        if bind.startswith("ipc://"):
            Path(bind[len("ipc://"):]).unlink(missing_ok=True)


class _Loop:
    """The socket loop, run by one thread at a time, and the watchdog that takes it over from a
    thread caught in a long request (see the module docstring)."""

    TAKEOVER_S = 0.005

    def __init__(self, service: EnvService, sock: zmq.Socket) -> None:
        self.service, self.sock = service, sock
        self.envelopes: dict[bytes, bool] = {}  # peer -> replies need the empty delimiter frame
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
        with self.roles:
            self.closed = True
            os.close(self.wake_in)
            os.close(self.wake_out)

    def poke(self) -> None:
        """Wake the loop's holder (replies are waiting, or it must stop)."""
        with self.roles:
            if not self.closed:
                _poke(self.wake_out)

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
        """The loop, while this thread holds it."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.wake_in, zmq.POLLIN)
        while not self.done.is_set():
            with self.roles:
                reason, out, self.outgoing = self.stopping, self.outgoing, []
            _send_all(self.sock, self.envelopes, out)
            if reason is not None:
                _send_all(self.sock, self.envelopes, self.service.shutdown(reason))
                self.done.set()
                return
            events = dict(poller.poll(int(self.tick_every * 1000)))
            if self.wake_in in events:  # a session thread has replies: the tick collects them
                _drain(self.wake_in)
                self.next_tick = 0.0
            if self.sock in events:
                while self.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    frames = self.sock.recv_multipart()
                    peer, rest = frames[0], frames[1:]
                    delimited = len(rest) >= 2 and rest[0] == b""
                    self.envelopes[peer] = delimited
                    body = rest[1] if delimited and len(rest) == 2 else (rest[0] if len(rest) == 1 else b"\xc1")
                    if not self._serve(lambda: self.service.handle(peer, body)):
                        return
            if time.monotonic() >= self.next_tick:  # heartbeats and time-outs, a few times a heartbeat
                self.next_tick = time.monotonic() + self.tick_every
                if not self._serve(self.service.tick):
                    return

    def _serve(self, call) -> bool:
        """Make the call as the loop's holder and send its replies; False if the loop was taken
        over meanwhile (the replies then go to the new holder)."""
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
            _send_all(self.sock, self.envelopes, replies)
        else:
            self.poke()
        return mine


def _send_all(sock: zmq.Socket, envelopes: dict[bytes, bool], replies: list[tuple[bytes, bytes]]) -> None:
    for peer, data in replies:
        frames = [peer, b"", data] if envelopes.get(peer, True) else [peer, data]
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the peer is gone or its queue is full: its timeout will tell it


def _poke(fd: int) -> None:
    try:
        os.write(fd, b"!")
    except (BlockingIOError, OSError):
        pass  # the pipe is full (the loop will wake anyway) or closed (the server stopped)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


class _AllowList:
    def __init__(self, allowed: list[bytes]) -> None:
        self.allowed = set(allowed)

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.allowed


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
