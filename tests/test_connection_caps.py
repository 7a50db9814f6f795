"""`hpcgym env`'s connection admission over real TCP sockets (issue 42, E4): the open-file limit
raised where the process may, the cap sized from it, caps per peer host, and connections that
never speak (idle raw TCP, or without CURVE keys) kept out of the caps that speaking clients need.

On loopback every peer is 127.0.0.1; Linux routes all of 127.0.0.0/8 on lo, so a client bound to
127.0.0.2 is a second host.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import time
from pathlib import Path

import pytest
import zmq
import zmq.auth

from .test_sockets import HPCGYM, ROOT, Children, ask, children, free_tcp, wait_until_serving  # noqa: F401

HELLO = {"type": "hello", "protocol": "1.7", "agent": "probe", "kinds": []}
SOFT, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)


def start_env_limited(children: Children, bind: str, *args: str, files: tuple[int, int],  # noqa: F811
                      curve=None) -> subprocess.Popen:
    """`hpcgym env` started with RLIMIT_NOFILE (soft, hard) = `files`."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, files)

    err = children.folder / "env.err"
    with open(children.folder / "env.out", "wb") as out, open(err, "wb") as e:
        proc = subprocess.Popen([HPCGYM, "env", "--bind", bind, *args], cwd=ROOT, stdout=out, stderr=e,
                                stdin=subprocess.DEVNULL, preexec_fn=limit)  # noqa: PLW1509
    children.procs.append(proc)
    children.logs[proc.pid] = children.folder / "env.out"
    wait_until_serving(bind, proc, curve)
    return proc


def client(bind: str, source: str | None = None, curve=None) -> zmq.Socket:
    """A DEALER connected to `bind` from the address `source` (ZeroMQ's `tcp://SOURCE:0;HOST:PORT`)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = curve
    sock.connect(bind if source is None else f"tcp://{source}:0;{bind[len('tcp://'):]}")
    return sock


def second_host() -> str:
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
    except OSError:
        pytest.skip("127.0.0.2 is not routed on this host's loopback")
    return "127.0.0.2"


def raw_connections(bind: str, n: int) -> list[socket.socket]:
    """`n` TCP connections that never say anything (not even ZeroMQ's greeting)."""
    host, port = bind[len("tcp://"):].rsplit(":", 1)
    return [socket.create_connection((host, int(port)), timeout=5) for _ in range(n)]


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(HARD != resource.RLIM_INFINITY and HARD < 512, reason=f"the hard limit ({HARD}) is too low to "
                    "lower the soft one under it")
def test_the_env_raises_its_open_file_limit_to_the_hard_limit(children):  # noqa: F811
    """It raised the soft limit only to --max-connections plus 128 (1,128 of 20,000 here)."""
    hard = HARD if HARD != resource.RLIM_INFINITY else 1 << 20
    env = start_env_limited(children, free_tcp(), files=(256, HARD))
    limits = Path(f"/proc/{env.pid}/limits").read_text()
    soft_now = next(line.split()[3] for line in limits.splitlines() if line.startswith("Max open files"))
    assert int(soft_now) == hard or soft_now == "unlimited", limits
    assert f"open-file limit raised from 256 to {int(soft_now):,}" in children.stderr(env)


@pytest.mark.skipif(HARD != resource.RLIM_INFINITY and HARD < 1024, reason=f"the hard limit ({HARD}) is under "
                    "the 1,024 of the probe")
def test_idle_raw_connections_beyond_the_file_limit_lock_no_client_out(children):  # noqa: F811
    """The issue's probe: with 1,024 open files at most, 1,100 idle TCP connections from one host
    used up the env's files (or, capped, its connections): every new client, from any host, was
    refused or got no reply."""
    other = second_host()
    bind = free_tcp()
    env = start_env_limited(children, bind, files=(1024, 1024))
    raws = raw_connections(bind, 1100)
    try:
        time.sleep(0.5)
        assert open_files(env.pid) < 1024 - 128, "the silent connections were not closed"
        for source in (other, None):  # another host, and the flooding host itself
            sock = client(bind, source)
            try:
                reply = ask(sock, {**HELLO, "session": f"from-{source}"}, timeout_s=10)
                assert reply is not None and reply["type"] == "welcome", reply
            finally:
                sock.close()
    finally:
        for raw in raws:
            raw.close()
    # the cap leaves room for the env's own files, the silent connections and the refused ones
    assert "serving at most 576 connections, not 1,000" in children.stderr(env)


def test_connections_are_capped_per_peer_host(children):  # noqa: F811
    other = second_host()
    bind = free_tcp()
    start_env_limited(children, bind, "--max-connections", "6", "--max-connections-per-peer", "2",
                      files=(SOFT, HARD))
    time.sleep(0.3)  # the probe of start_env has closed its connection
    raws = raw_connections(bind, 50)  # silent ones count toward no cap
    mine = [client(bind) for _ in range(3)]
    theirs = None
    try:
        for k, sock in enumerate(mine[:2]):
            assert ask(sock, {**HELLO, "session": f"s{k}"})["type"] == "welcome"
        refused = ask(mine[2], {**HELLO, "session": "s2"})
        assert refused["code"] == "not_allowed" and "--max-connections-per-peer" in refused["message"], refused
        assert "127.0.0.1" in refused["message"] and refused["retry_s"] > 0, refused
        theirs = client(bind, other)
        assert ask(theirs, {**HELLO, "session": "other-host"})["type"] == "welcome"
        mine.pop(0).close()  # room for one again from 127.0.0.1
        mine.pop().close()
        time.sleep(0.5)
        mine.append(client(bind))
        assert ask(mine[-1], {**HELLO, "session": "again"})["type"] == "welcome"
    finally:
        for sock in [*mine, *([theirs] if theirs is not None else [])]:
            sock.close()
        for raw in raws:
            raw.close()


def test_with_curve_connections_without_keys_keep_no_keyed_client_out(children, tmp_path):  # noqa: F811
    """Connections without keys counted toward --max-connections, so a host without keys could
    lock out every client that had them."""
    keys = tmp_path / "keys"
    for name in ("env", "a", "stranger"):
        proc = children.start("keys", name, "--dir", str(keys), name=f"keys-{name}")
        assert proc.wait(timeout=30) == 0, children.stderr(proc)
    server_public, _ = zmq.auth.load_certificate(str(keys / "env.key"))
    a_public, a_secret = zmq.auth.load_certificate(str(keys / "a.key_secret"))
    s_public, s_secret = zmq.auth.load_certificate(str(keys / "stranger.key_secret"))
    bind = free_tcp()
    keyed = (server_public, a_public, a_secret)
    start_env_limited(children, bind, "--max-connections", "4", "--curve-secret", str(keys / "env.key_secret"),
                      "--curve-allow", str(keys / "a.key"), files=(SOFT, HARD), curve=keyed)
    raws = raw_connections(bind, 300)
    strangers = [client(bind, curve=(server_public, s_public, s_secret)) for _ in range(20)]
    plain = [client(bind) for _ in range(20)]
    agents = []
    try:
        for sock in [*strangers, *plain]:
            sock.send_multipart([b"", b"\x80"])
        time.sleep(0.5)
        for k in range(2):  # from the same host as the connections without keys
            agents.append(client(bind, curve=keyed))
            reply = ask(agents[-1], {**HELLO, "session": f"keyed-{k}"}, timeout_s=10)
            assert reply is not None and reply["type"] == "welcome", reply
    finally:
        for sock in [*strangers, *plain, *agents]:
            sock.close()
        for raw in raws:
            raw.close()
