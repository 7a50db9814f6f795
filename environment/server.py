"""The env server process: one ZeroMQ ROUTER socket in front of an `EnvService`.

Agents connect with DEALER (sending an empty delimiter frame before the body) or REQ (which
adds it). Replies go back with the same envelope. This loop only routes messages: each session's
requests run on a thread of their own (`EnvService.run_sessions_concurrently`), which wakes the
loop through a pipe when it has replies, so a long episode never holds up another session. SIGINT and SIGTERM end the current episodes
with reason "shutdown", answer every waiting agent, close the socket and remove an ipc file.
"""

from __future__ import annotations

import os
import re
import signal
import sys
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
    stopping = []
    previous = {sig: signal.signal(sig, lambda *_: stopping.append(sig)) for sig in (signal.SIGINT, signal.SIGTERM)} \
        if _main_thread() else {}
    envelopes: dict[bytes, bool] = {}  # peer -> replies need the empty delimiter frame
    wake_in, wake_out = os.pipe()
    os.set_blocking(wake_in, False)
    os.set_blocking(wake_out, False)
    service.run_sessions_concurrently(lambda: _poke(wake_out))
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(wake_in, zmq.POLLIN)
    if ready is not None:
        ready.set()
    tick_every = max(0.01, service.heartbeat / 4)
    next_tick = 0.0
    try:
        while not stopping and not getattr(service, "stop", False):
            events = dict(poller.poll(int(tick_every * 1000)))
            if wake_in in events:  # a session thread has replies: collect them with the tick below
                _drain(wake_in)
                next_tick = 0.0
            if sock in events:
                while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    frames = sock.recv_multipart()
                    peer, rest = frames[0], frames[1:]
                    delimited = len(rest) >= 2 and rest[0] == b""
                    envelopes[peer] = delimited
                    body = rest[1] if delimited and len(rest) == 2 else (rest[0] if len(rest) == 1 else b"\xc1")
                    _send_all(sock, envelopes, service.handle(peer, body))
            if time.monotonic() >= next_tick:  # heartbeats and time-outs, a few times a heartbeat
                next_tick = time.monotonic() + tick_every
                try:
                    _send_all(sock, envelopes, service.tick())
                except Exception as exc:  # a bug in time-out handling must not take the server down
                    print(f"hpcgym env: internal error in tick: {type(exc).__name__}: {exc}", file=sys.stderr)
        _send_all(sock, envelopes, service.shutdown("the env received a stop signal"))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wake_in)
        os.close(wake_out)
        sock.close()
        if auth is not None:
            auth.stop()
        ctx.term()
        if bind.startswith("ipc://"):
            Path(bind[len("ipc://"):]).unlink(missing_ok=True)


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
