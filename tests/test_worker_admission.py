"""No message stops a worker of `hpcgym env --workers` (issue 42, E1): the front and a worker read
a hello's fields only once the service's own validation (`parse_request`) has passed it, so a
hello whose `session` is a list or a map is refused with `bad_field` wherever it is sent, as a
single env refuses it, and every worker goes on serving; a loop that raises anyway ends its
process (the front replaces a dead worker) instead of leaving it alive and deaf. Real env and
worker processes and real sockets, as test_redirect.py; the rules themselves directly."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import msgpack
import pytest
import zmq

from hpcgym.agents.base import PriorityAgent
from hpcgym.environment.decisions import Decision
from hpcgym.environment.errors import HpcgymError
from hpcgym.environment.server import Inlet, run_loop
from hpcgym.environment.service import EnvService, check_hello, parse_request
from hpcgym.environment.workers import _hello
from hpcgym.protocol import messages as m
from hpcgym.protocol.codec import encode

from .agents_for_tests import write_trace
from .test_redirect import connect, hello, workers_env  # noqa: F401 - fixture
from .test_server_hardening import worker_pids
from .test_sockets import ask, children, dealer, in_process_records  # noqa: F401 - fixture

JOBS = 256
NOT_STRINGS = ([1], {"a": 1}, 7, 1.5, True, None, b"s")


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "t.swf", jobs=JOBS, procs=32, seed=5)


def one_session_per_worker(connect, bind: str, prefix: str) -> dict[str, str]:  # noqa: F811
    """A session claimed at each of the two workers: its address -> the session's name (a new
    session goes to the worker with the fewest agents, so the hellos reach both soon)."""
    held: dict[str, str] = {}
    for k in range(20):
        reply = ask(connect(bind), hello(f"{prefix}-{k}", ["select"]))
        assert reply is not None and reply["type"] == "redirect", reply
        held.setdefault(reply["address"], f"{prefix}-{k}")
        if len(held) == 2:
            return held
    raise AssertionError(f"20 new sessions went to one worker: {held}")


def sjf_episode(sock: zmq.Socket, seed: int) -> dict:
    """One episode played as SJF by an agent that said hello on `sock`: its end."""
    agent = PriorityAgent("sjf")
    reply = ask(sock, {"type": "reset", "seed": seed, "records": True}, timeout_s=10)
    while reply is not None and reply["type"] != "episode_end":
        assert reply["type"] in ("decision", "pending"), reply
        request = {"type": "poll"} if reply["type"] == "pending" else \
            {"type": "act", "decision": reply["decision"], "action": agent.act(Decision.from_message(reply))}
        reply = ask(sock, request, timeout_s=10)
    assert reply is not None, "no reply within 10 s"
    return reply


def every_worker_plays_as_hpcgym_run(connect, bind: str, trace, prefix: str) -> None:  # noqa: F811
    """A fresh agent at each worker's address plays a whole episode, equal to the in-process one
    (which equals `hpcgym run`'s: test_sockets.py)."""
    for seed, (address, name) in enumerate(one_session_per_worker(connect, bind, prefix).items(), start=3):
        agent = connect(address)
        assert ask(agent, hello(name, ["select"]))["type"] == "welcome"
        end = sjf_episode(agent, seed)
        assert end["reason"] == "completed", end
        assert len(end["jobs"]["job_id"]) == JOBS and end["jobs"] == in_process_records(trace, seed), address


# ------------------------------------------------------------------------------------------ the probe's hello
def test_a_hello_naming_a_list_or_a_map_at_a_workers_address_is_refused_and_every_worker_serves(
        children, ipc_dir, trace, connect):  # noqa: F811
    """The probe's 40-byte hello killed the loop of the worker it was sent to; the process lived
    on, so it was never replaced, and the front kept sending it new sessions."""
    bind, env = workers_env(children, ipc_dir, trace)
    workers = sorted(worker_pids(env.pid))
    assert len(workers) == 2
    for address in one_session_per_worker(connect, bind, "claimed"):
        for session in ([1], {"a": 1}):
            refused = ask(connect(address), {**hello("probe", []), "session": session})
            assert refused is not None, f"no reply at {address} to a hello naming {session!r}"
            assert refused["type"] == "error" and refused["code"] == "bad_field", refused
            assert "session" in refused["message"], refused
    every_worker_plays_as_hpcgym_run(connect, bind, trace, "after")
    assert sorted(worker_pids(env.pid)) == workers  # neither died nor was replaced


# ------------------------------------------------------------------------------------------ fuzz
#: Values of the right and the wrong types for any field.
VALUES = (None, True, 0, 1, -1, 2**40, 1.5, "", "x", "select", "1.6", "9.0", "1.6.1", "a" * 300, b"\x00",
          [], [1], ["select"], ["select", "select"], ["nope"], [[1]], {}, {"a": 1}, {"order": [1]}, {"jobs": 20})
#: A valid request of each type, which the fuzzer breaks.
VALID = {"hello": {"protocol": m.PROTOCOL_VERSION, "agent": "fuzz", "kinds": [], "session": "fuzz"},
         "reset": {"seed": 1, "workload": {"jobs": 20}}, "join": {}, "poll": {},
         "act": {"decision": 1, "action": 0}, "records": {"episode": 1, "page": 0}, "bye": {}}


def fuzzed(rng: random.Random) -> bytes:
    """One request: one of some type with up to two of its fields dropped or given a value of any
    type (a hello's session among them), an unknown field or type now and then, or bytes that are
    no message."""
    roll = rng.random()
    if roll < 0.05:
        return rng.randbytes(rng.randrange(1, 40))
    if roll < 0.1:
        return msgpack.packb(rng.choice(VALUES))
    kind = rng.choice([*VALID, "hello", "hello"])
    message = {"type": kind, **VALID[kind]}
    fields = [*VALID[kind], *(["zzz"] if rng.random() < 0.1 else [])]
    for key in rng.sample(fields, min(len(fields), rng.randint(0, 2))):
        if rng.random() < 0.2:
            message.pop(key, None)
        else:
            message[key] = rng.choice(VALUES)
    if rng.random() < 0.1:
        message["type"] = rng.choice(VALUES)
    return msgpack.packb(message)


def checked_replies(sock: zmq.Socket, body: bytes) -> None:
    """Send one request and read its replies (and any that came late for earlier ones): each is a
    well-formed message the protocol lists, no error is `internal`."""
    sock.send_multipart([b"", body])
    assert sock.poll(10_000), f"no reply within 10 s to {body[:200]!r}"
    while sock.poll(0):
        frames = sock.recv_multipart()
        assert frames[0] == b"" and len(frames) == 2, frames
        reply = m.validate(msgpack.unpackb(frames[1]), m.REPLIES)
        if reply["type"] == "error":
            assert reply["code"] in m.ERROR_CODES and reply["code"] != m.INTERNAL, reply
            assert len(reply["message"]) <= m.MAX_ERROR_CHARS, reply


def conversation(rng: random.Random, bind: str, addresses: list[str], serial: int) -> list[zmq.Socket]:
    """The sockets of one fuzzing client, ready for its requests: at the front (its agent maybe
    forwarded as 1.4), at a worker's address without a redirect, or redirected there."""
    where = rng.choice(("front", "forwarded", "worker", "redirected"))
    if where in ("front", "worker"):
        return [dealer(bind if where == "front" else rng.choice(addresses))]
    front = dealer(bind)
    name = f"fuzz-{serial}"
    if where == "forwarded":
        checked_replies(front, msgpack.packb(hello(name, [], "1.4")))
        return [front]
    reply = ask(front, hello(name, []))
    assert reply["type"] == "redirect", reply
    worker = dealer(reply["address"])
    assert ask(worker, hello(name, []))["type"] == "welcome"
    return [worker, front]


def test_fuzzed_messages_at_the_front_and_the_workers_are_answered_and_leave_every_worker_serving(
        children, ipc_dir, trace, connect):  # noqa: F811
    """40 clients of 10 requests each, 8 at a time (a join or poll outside an episode waits a
    heartbeat for its `pending`)."""
    bind, env = workers_env(children, ipc_dir, trace)
    workers = sorted(worker_pids(env.pid))
    addresses = list(one_session_per_worker(connect, bind, "claimed"))

    def client(serial: int) -> None:
        rng = random.Random(serial)
        sockets = conversation(rng, bind, addresses, serial)
        try:
            for _ in range(10):
                checked_replies(sockets[0], fuzzed(rng))
        finally:
            for sock in sockets:
                sock.close()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(client, range(40)))  # a client's failed check fails the test
    every_worker_plays_as_hpcgym_run(connect, bind, trace, "after")
    assert sorted(worker_pids(env.pid)) == workers  # neither died nor was replaced


# ------------------------------------------------------------------------------------------ the rules
@pytest.mark.parametrize("session", NOT_STRINGS)
def test_the_one_validation_refuses_a_session_that_is_not_a_string(session):
    """The service, the front and the workers read a hello through `parse_request` (and
    `check_hello`)."""
    body = encode({**hello("x", []), "session": session})
    _, refusal = parse_request(body)
    assert refusal is not None and refusal.code == m.BAD_FIELD and "'session'" in refusal.message, refusal
    assert _hello(body) is None  # the front and the workers leave it to the service, which refuses it
    (_, reply), = EnvService().handle_message(b"a", body)
    assert reply["code"] == m.BAD_FIELD, reply


@pytest.mark.parametrize("broken", [{"kinds": ["select", "select"]}, {"kinds": [[1]]}, {"protocol": "1"},
                                    {"protocol": "2.0"}, {"session": "s" * 300}])
def test_a_hello_the_service_would_refuse_is_not_read_by_the_front_or_a_worker(broken):
    """Their hellos pass `check_hello` too, which the service makes once it knows the sender."""
    message = {**hello("x", ["select"]), **broken}
    with pytest.raises(m.ProtocolError):
        check_hello(message)
    assert _hello(encode(message)) is None
    assert _hello(encode(hello("x", ["select"]))) == hello("x", ["select"])


def test_every_request_type_has_its_handler():
    assert set(EnvService()._handlers) == set(m.REQUESTS)


@pytest.mark.parametrize("length", [570, 600, 601, 9_999, 10_000, 99_999, 100_000, 999_999, 1_000_000, 10**7])
def test_an_error_message_is_at_most_the_protocols_600_characters(length):
    """E7: a text of 100,000 to 999,999 characters was cut to 601."""
    message = m.error(m.ProtocolError(m.BAD_FIELD, "x" * length))["message"]
    assert len(message) == min(length, m.MAX_ERROR_CHARS) and m.MAX_ERROR_CHARS == 600
    if length > 600:
        assert message.endswith(f"({length:,} characters in all)"), message


def test_a_loop_that_raises_ends_the_server_with_the_reason():
    """A loop thread that died left its process alive and deaf (a husk the front never replaced)."""
    ctx = zmq.Context.instance()
    server = ctx.socket(zmq.ROUTER)
    server.bind("inproc://a-loop-that-raises")
    service = EnvService()
    failed: list[BaseException] = []

    def broken(peer: bytes, rest: list[bytes]) -> None:
        raise TypeError("unhashable type: 'list'")

    def serve() -> None:
        try:
            run_loop(service, [Inlet(server, screen=broken)])
        except HpcgymError as exc:
            failed.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = dealer("inproc://a-loop-that-raises")
    try:
        client.send_multipart([b"", encode(hello("x", []))])
        thread.join(10)
        service.stop = True  # without the fix it would serve on
        assert failed and "TypeError: unhashable type: 'list'" in str(failed[0]), failed
    finally:
        thread.join(10)
        client.close()
        server.close()
