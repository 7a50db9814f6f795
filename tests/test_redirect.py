"""`hpcgym env --workers N` redirects agents of protocol 1.6 to their worker's own address
(environment/workers.py, PROTOCOL.md sections 2 and 5): real env and worker processes, real
sockets. Episodes played through a redirect equal `hpcgym run`'s: test_server_hardening.py's
test of concurrent sessions on workers (its agents speak 1.6)."""

from __future__ import annotations

import os
import signal
import time

import msgpack
import pytest

from hpcgym.protocol.messages import PROTOCOL_VERSION, redirect_target

from .test_server_hardening import worker_pids
from .test_sockets import ask, children, dealer, free_tcp, start_env, trace  # noqa: F401 - fixtures

OLD = "1.4"  # a version before redirects: forwarded through the front


@pytest.fixture
def connect():
    """Opens DEALER sockets that are closed when the test ends."""
    opened = []

    def open_one(address: str):
        opened.append(dealer(address))
        return opened[-1]

    yield open_one
    for sock in opened:
        sock.close()


def hello(session: str, kinds: list[str], protocol: str = PROTOCOL_VERSION, **extra) -> dict:
    return {"type": "hello", "protocol": protocol, "agent": f"{session}-{'-'.join(kinds) or 'driver'}",
            "kinds": kinds, "session": session, **extra}


def workers_env(children, ipc_dir, trace, *flags: str):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    return bind, start_env(children, bind, "--trace", str(trace), "--workers", "2", *flags)


def redirected(connect, bind: str, message: dict) -> tuple[object, object, str]:
    """Say hello at the front, follow the redirect: (front socket, worker socket, worker address)."""
    front = connect(bind)
    reply = ask(front, message)
    assert reply["type"] == "redirect" and reply["session"] == message["session"], reply
    assert reply["address"].startswith(bind + "."), reply  # beside the front's ipc file
    return front, connect(reply["address"]), reply["address"]


def test_a_16_agent_is_redirected_and_shares_its_session_with_a_forwarded_agent(children, ipc_dir, trace,
                                                                                 connect):  # noqa: F811
    """The select agent speaks 1.6 and plays at its worker's address; the inspect agent speaks 1.4
    and is forwarded by the front; both are in one session, so the inspector is asked about the
    selector's picks."""
    bind, _ = workers_env(children, ipc_dir, trace)
    _, selector, _ = redirected(connect, bind, hello("mix", ["select"]))
    inspector = connect(bind)
    welcome = ask(selector, hello("mix", ["select"]))
    assert welcome["type"] == "welcome" and welcome["protocol"] == PROTOCOL_VERSION, welcome
    joined = ask(inspector, hello("mix", ["inspect"], OLD, token=welcome["token"]))
    assert joined["type"] == "welcome", joined
    decision = ask(selector, {"type": "reset", "seed": 1, "require": ["inspect"]})
    assert decision["type"] == "decision" and decision["kind"] == "select", decision
    asked = ask(inspector, {"type": "join"})
    ask(selector, {"type": "act", "decision": decision["decision"], "action": decision["candidates"][0]},
        timeout_s=0.5)  # its reply comes once the inspector answers
    while asked["type"] == "pending":
        asked = ask(inspector, {"type": "poll"})
    assert asked["type"] == "decision" and asked["kind"] == "inspect", asked
    assert asked["candidates"] == [decision["candidates"][0]], (asked, decision)


def test_a_worker_serves_at_its_own_address_only_the_sessions_the_front_sent_there(children, ipc_dir, trace,
                                                                                   connect):  # noqa: F811
    bind, _ = workers_env(children, ipc_dir, trace)
    _, agent, address = redirected(connect, bind, hello("mine", []))
    refused = ask(connect(address), hello("not-sent-here", []))
    assert refused["type"] == "error" and refused["code"] == "not_allowed", refused
    assert "front" in refused["message"], refused
    assert ask(agent, hello("mine", []))["type"] == "welcome"
    assert ask(agent, {"type": "bye"})["type"] == "bye"
    # once its last agent has gone the worker releases the name at its next tick (4 a heartbeat),
    # though no tick saw an agent in it (they came and went in between), not only when the claim's
    # 30 s for a first agent run out; then it is again the front's to place. A probe that gets in
    # rejoins the session, so the pauses between probes grow until one spans a tick on a loaded
    # machine too.
    deadline, pause = time.monotonic() + 10, 0.3
    time.sleep(pause)
    while (reply := ask(probe := connect(address), hello("mine", [])))["type"] == "welcome":
        assert ask(probe, {"type": "bye"})["type"] == "bye"  # so that the session is empty again
        assert time.monotonic() < deadline, "the worker kept serving a session the front no longer sent there"
        pause = min(2 * pause, 2.4)
        time.sleep(pause)
    assert reply["code"] == "not_allowed", reply
    assert ask(connect(bind), hello("mine", []))["type"] == "redirect"


def test_a_redirected_agent_hears_of_its_workers_failure_on_its_connection_to_the_front(children, ipc_dir, trace,
                                                                                        connect):  # noqa: F811
    bind, env = workers_env(children, ipc_dir, trace)
    front, agent, _ = redirected(connect, bind, hello("doomed", ["select"]))
    assert ask(agent, hello("doomed", ["select"]))["type"] == "welcome"
    decision = ask(agent, {"type": "reset", "seed": 1})
    assert decision["type"] == "decision", decision
    for pid in worker_pids(env.pid):  # its worker among them
        os.kill(pid, signal.SIGKILL)
    assert front.poll(10_000), "the front did not tell the redirected agent that its worker failed"
    end = msgpack.unpackb(front.recv_multipart()[-1])  # unasked: the agent waits on its worker
    assert end["type"] == "episode_end" and "worker process" in end["reason"], end
    # say hello again: until new workers took the dead ones' places, the front says none is ready
    deadline = time.monotonic() + 60
    while (again := ask(connect(bind), hello("doomed", ["select"])))["type"] == "error":
        assert again["code"] == "not_allowed" and "ready" in again["message"], again
        assert time.monotonic() < deadline, again
        time.sleep(0.2)
    assert again["type"] == "redirect", again


@pytest.mark.parametrize("flags", [[], ["--no-redirect"]])
def test_check_env_passes_an_env_of_workers(children, ipc_dir, trace, flags):  # noqa: F811
    from hpcgym.protocol.conformance import check_env

    bind, _ = workers_env(children, ipc_dir, trace, *flags)
    checks = check_env(bind, timeout=20)
    failed = [(c.name, c.detail) for c in checks if not c.passed]
    assert not failed, failed
    # redirected, the checker also tries the worker's address with a session not sent there
    # 1.7: never a second redirect, and a redirected session taken there only with its hello's token
    for name in ("redirect_serves_only_its_sessions", "redirect_once", "redirect_needs_the_hellos_token",
                 "redirect_takes_the_hellos_token"):
        assert (name in {c.name for c in checks}) == (not flags), name


def test_no_redirect_forwards_a_16_agent(children, ipc_dir, trace, connect):  # noqa: F811
    bind, _ = workers_env(children, ipc_dir, trace, "--no-redirect")
    assert ask(connect(bind), hello("fwd", []))["type"] == "welcome"


def test_the_agent_runtime_ends_its_episode_when_its_workers_process_fails(children, ipc_dir, trace):  # noqa: F811
    """`hpcgym agent` (agents/runtime.py) waits on its worker and on the front at once: the
    failure comes as the episode's end, not as a time-out."""
    from hpcgym.agents.base import PriorityAgent
    from hpcgym.agents.runtime import run_agent

    bind, env = workers_env(children, ipc_dir, trace)

    def kill_the_workers(run, decision) -> None:
        if run.decisions == 1:
            for pid in worker_pids(env.pid):
                os.kill(pid, signal.SIGKILL)

    # waiting on the worker alone, it would raise EnvUnreachable after its time-out instead
    run = run_agent(PriorityAgent("sjf"), bind, name="doomed", session="doomed", reset={"seed": 1}, timeout=8,
                    progress=kill_the_workers, orders=False)
    (end,) = run.episodes
    assert "worker process" in end["reason"] and not end["metrics"], end


def test_a_tcp_redirect_names_a_port_on_the_host_the_agent_reached(children, trace, connect):  # noqa: F811
    assert redirect_target("tcp://10.0.0.5:5555", "tcp://*:40123") == "tcp://10.0.0.5:40123"
    assert redirect_target("tcp://[::1]:5555", "tcp://*:40123") == "tcp://[::1]:40123"
    assert redirect_target("ipc:///tmp/env.ipc", "ipc:///tmp/env.ipc.w0.1") == "ipc:///tmp/env.ipc.w0.1"
    bind = free_tcp()
    start_env(children, bind, "--trace", str(trace), "--workers", "2")
    reply = ask(connect(bind), hello("over-tcp", []))
    assert reply["type"] == "redirect" and reply["address"].startswith("tcp://*:"), reply
    assert reply["address"].rsplit(":", 1)[1] != bind.rsplit(":", 1)[1], reply
    assert ask(connect(redirect_target(bind, reply["address"])), hello("over-tcp", []))["type"] == "welcome"


def test_the_agent_runtime_says_hello_again_after_a_refusals_retry_s(ipc_dir):
    """PROTOCOL 1.7: a refusal with `retry_s` (no worker ready) passes by itself; the runtime
    gave up at the first one. A stand-in env refuses the first hello so, then welcomes."""
    import threading

    import zmq

    from hpcgym.agents.runtime import Connection

    address = f"ipc://{ipc_dir / 'fake.ipc'}"
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.bind(address)
    heard: list[float] = []

    def env() -> None:
        for reply in ({"type": "error", "code": "not_allowed", "message": "no worker ready", "recoverable": True,
                       "pending": None, "retry_s": 0.3},
                      {"type": "welcome", "protocol": PROTOCOL_VERSION, "session": "s", "env": {}}):
            peer, body = router.recv_multipart()
            heard.append(time.monotonic())
            assert msgpack.unpackb(body)["type"] == "hello"
            router.send_multipart([peer, msgpack.packb(reply)])

    thread = threading.Thread(target=env, daemon=True)
    thread.start()
    conn = Connection(address, timeout=5)
    try:
        reply = conn.request(hello("s", []))
    finally:
        conn.close()
        thread.join(5)
        router.close(0)
    assert reply["type"] == "welcome", reply
    assert len(heard) == 2 and heard[1] - heard[0] >= 0.3, heard
