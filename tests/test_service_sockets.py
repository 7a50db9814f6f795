"""The env server as a shared service: one session's long episode does not hold up another, and
an agent that fails frees its kinds at once. Real `hpcgym env` processes over real sockets, except
where the rule is the handler's alone (then `EnvService` directly, as in test_service.py)."""

from __future__ import annotations

import gzip
import os
import random
import signal
import threading
import time

import msgpack
import pytest
import zmq

from hpcgym.agents.base import PriorityAgent
from hpcgym.agents.runtime import EnvRefused, run_agent
from hpcgym.environment.decisions import Decision
from hpcgym.environment.service import EnvService, Limits
from hpcgym.protocol.codec import MAX_MESSAGE_BYTES

from .agents_for_tests import write_trace

from .test_service import Net
from .test_sockets import ask, children, dealer, start_env, trace, wait_for  # noqa: F401 - fixtures

HELLO = {"type": "hello", "protocol": "1.2", "agent": "probe", "kinds": []}


def test_a_long_reset_in_one_session_does_not_hold_up_another(children, ipc_dir):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind)
    long, quick = dealer(bind), dealer(bind)
    try:
        assert ask(long, {**HELLO, "session": "long"})["type"] == "welcome"
        # an agent with no kinds: the whole episode of a million generated jobs runs in this reset
        long.send_multipart([b"", msgpack.packb({"type": "reset", "workload": {"generate_jobs": 1_000_000}})])
        time.sleep(0.3)  # let it get going
        began = time.monotonic()
        welcome = ask(quick, {**HELLO, "session": "quick"}, timeout_s=5)
        hello_s = time.monotonic() - began
        end = ask(quick, {"type": "reset", "workload": {"generate_jobs": 50, "procs": 16}}, timeout_s=5)
        reset_s = time.monotonic() - began - hello_s
        assert welcome["type"] == "welcome" and end["type"] == "episode_end" and end["reason"] == "completed"
        assert end["metrics"]["jobs"] == 50
        # the long episode is still running: its agent gets heartbeats, not its end
        assert long.poll(2000)
        assert msgpack.unpackb(long.recv_multipart()[1])["type"] == "pending"
        assert hello_s < 1.0 and reset_s < 1.0, (hello_s, reset_s)  # generous: each took milliseconds here
    finally:
        long.close()
        quick.close()


class Crashes(PriorityAgent):
    """Fails at its third decision, as an agent with a bug would."""

    def __init__(self) -> None:
        super().__init__("fcfs")
        self.seen = 0

    def act(self, decision):
        self.seen += 1
        if self.seen == 3:
            raise RuntimeError("a bug in the agent")
        return super().act(decision)


def test_an_agent_that_fails_mid_episode_says_bye_and_frees_its_kinds_at_once(children, ipc_dir, trace):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    with pytest.raises(RuntimeError, match="a bug"):
        run_agent(Crashes(), bind, name="crashes", reset={}, timeout=10)
    sock = dealer(bind)
    try:  # not `kind_taken ... by agent 'crashes'` for the next decision timeout (30 s)
        assert ask(sock, {**HELLO, "kinds": ["select"]})["type"] == "welcome"
    finally:
        sock.close()


def test_an_agent_whose_reset_is_refused_does_not_block_its_kinds():
    net = Net()
    net.request(b"a", {**HELLO, "agent": "typo", "kinds": ["select"]})
    refused = net.request(b"a", {"type": "reset", "workload": {"trace": "/no/such/trace.swf"}})
    assert refused["code"] == "bad_request"
    # it exits on that error without a bye: the next agent takes the kind at once
    assert net.request(b"b", {**HELLO, "kinds": ["select"]})["type"] == "welcome"
    assert net.request(b"a", {"type": "poll"})["code"] == "not_allowed"  # the first one was forgotten


def test_the_agent_runtime_says_bye_when_its_reset_is_refused(children, ipc_dir):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind)
    with pytest.raises(EnvRefused, match="bad_request"):
        run_agent(PriorityAgent("sjf"), bind, name="typo", reset={"options": {"window": -1}}, timeout=10)
    sock = dealer(bind)
    try:
        assert ask(sock, {**HELLO, "kinds": ["select"]})["type"] == "welcome"
    finally:
        sock.close()


# ------------------------------------------------------------------------------------------ bounded
def reset_error(sock, workload: dict) -> dict:
    reply = ask(sock, {"type": "reset", "workload": workload}, timeout_s=5)
    assert reply is not None and reply["type"] == "error" and reply["recoverable"], reply
    return reply


def test_traces_come_only_from_allowed_folders_as_regular_files_within_the_size_limit(children, ipc_dir, tmp_path):  # noqa: F811
    served = tmp_path / "served"
    served.mkdir()
    trace = write_trace(served / "t.swf", jobs=30, procs=8)
    big = write_trace(served / "big.swf", jobs=400, procs=8)
    os.mkfifo(served / "fifo.swf")
    (served / "bomb.swf.gz").write_bytes(gzip.compress(b"\0" * (big.stat().st_size * 4)))  # a few kB
    (served / "notes.swf").write_text("1 0 5 the-secret-word 1 -1 -1 -1 -1 -1 1 7 3 -1 1 -1 -1 -1\n" * 5)
    outside = write_trace(tmp_path / "private.swf", jobs=30, procs=8)
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace), "--max-trace-bytes", str(big.stat().st_size - 1))
    sock = dealer(bind)
    try:
        assert ask(sock, HELLO)["type"] == "welcome"
        for name in (str(outside), "/dev/zero", "/etc/passwd", str(served / ".." / "private.swf"), "/no/such.swf"):
            err = reset_error(sock, {"trace": name})
            assert err["code"] == "bad_request" and "trace folders" in err["message"], err
        assert "not a regular file" in reset_error(sock, {"trace": str(served / "fifo.swf")})["message"]
        assert "size limit" in reset_error(sock, {"trace": "big.swf"})["message"]
        assert "unpacks to more than" in reset_error(sock, {"trace": "bomb.swf.gz"})["message"]
        err = reset_error(sock, {"trace": "notes.swf"})
        assert err["code"] == "bad_request" and "secret" not in err["message"], err
        # the allowed trace, by name and by path, still works (the FIFO did not block the env)
        for name in ("t.swf", str(trace)):
            end = ask(sock, {"type": "reset", "workload": {"trace": name}}, timeout_s=10)
            assert end["type"] == "episode_end" and end["metrics"]["jobs"] == 30, end
    finally:
        sock.close()


def test_workloads_are_bounded_by_max_jobs(children, ipc_dir):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--max-jobs", "1000")
    sock = dealer(bind)
    try:
        assert ask(sock, HELLO)["type"] == "welcome"
        for workload in ({"generate_jobs": 10_000_000}, {"generate_jobs": 5000, "jobs": 2000, "sample": 1,
                                                          "sampled_jobset": True}):
            err = reset_error(sock, workload)
            assert err["code"] == "bad_request" and "--max-jobs" in err["message"], err
        assert ask(sock, {"type": "reset", "workload": {"generate_jobs": 1000, "procs": 64}})["type"] == "episode_end"
    finally:
        sock.close()


def test_idle_agents_and_their_sessions_are_freed():
    net = Net(limits=Limits(idle_timeout=600))
    for k in range(50):
        net.request(b"p%d" % k, {**HELLO, "session": f"s{k}" * 100})
    net.request(b"busy", {**HELLO, "session": "kept"})
    net.tick(300)
    assert net.request(b"busy", {"type": "poll"}) is None  # still active (answered `pending` at the next tick)
    net.tick(301)
    assert set(net.svc.sessions) == {"kept"} and set(net.svc.peers) == {b"busy"}
    assert net.request(b"p1", {"type": "poll"})["code"] == "not_allowed"  # must say hello again
    assert net.pop(b"busy")["type"] == "pending"


def test_records_too_large_for_one_message_are_paged(monkeypatch, ipc_dir):
    """A (shrunken) message limit: the records come page by page, the same as in one piece."""
    import threading

    from hpcgym.environment import service as service_module
    from hpcgym.environment.server import serve

    workload = {"generate_jobs": 23, "procs": 8}
    svc = EnvService({"workload": workload})
    reference = run_in_process(svc, workload)
    monkeypatch.setattr(service_module, "RECORD_BYTES_PER_JOB", MAX_MESSAGE_BYTES // 10)
    monkeypatch.setattr(service_module, "RECORDS_PAGE_JOBS", 5)
    svc = EnvService({"workload": workload})
    svc.handle_message(b"a", {**HELLO, "kinds": []})
    (_, end), = svc.handle_message(b"a", {"type": "reset", "records": True})
    assert end["jobs"] is None and end["records_pages"] == 5
    (_, page), = svc.handle_message(b"a", {"type": "records", "episode": 1, "page": 4})
    assert page["jobs"]["job_id"] == reference["job_id"][20:]
    (_, err), = svc.handle_message(b"a", {"type": "records", "episode": 1, "page": 5})
    assert err["code"] == "bad_field"
    (_, err), = svc.handle_message(b"b", {**HELLO, "kinds": []})
    (_, err), = svc.handle_message(b"b", {"type": "records", "episode": 1, "page": 0})
    assert err["code"] == "bad_request"  # not a participant of that episode
    # over real sockets, the agent runtime fetches the pages itself
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    ready = threading.Event()
    server = EnvService({"workload": workload})
    thread = threading.Thread(target=serve, args=(server, bind), kwargs={"ready": ready}, daemon=True)
    thread.start()
    try:
        assert ready.wait(10)
        run = run_agent(PriorityAgent("fcfs"), bind, reset={"records": True}, timeout=10)
        assert run.episodes[0]["records_pages"] == 5 and run.episodes[0]["jobs"] == reference
    finally:
        server.stop = True
        thread.join(10)


def run_in_process(svc: EnvService, workload: dict) -> dict:
    svc.handle_message(b"ref", {**HELLO, "kinds": []})
    (_, end), = svc.handle_message(b"ref", {"type": "reset", "records": True})
    assert end["type"] == "episode_end" and len(end["jobs"]["job_id"]) == 23
    return end["jobs"]


# ------------------------------------------------------------------------------------------ private sessions
def test_another_client_cannot_join_reset_or_take_over_a_session(children, ipc_dir, trace):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    owner = dealer_with_id(bind, b"owner-routing-id")
    intruder, twin = dealer(bind), dealer_with_id(bind, b"owner-routing-id")
    try:
        welcome = ask(owner, {**HELLO, "agent": "owner", "kinds": ["select"], "session": "lab"})
        assert welcome["env"]["sessions"] == "private" and len(welcome["token"]) >= 16
        first = ask(owner, {"type": "reset", "seed": 1})
        assert first["type"] == "decision"
        for token in ({}, {"token": "guess"}, {"token": ""}):
            err = ask(intruder, {**HELLO, "agent": "intruder", "kinds": ["inspect"], "session": "lab", **token})
            assert err["code"] == "not_allowed" and "token" in err["message"], err
        for request in ({"type": "reset"}, {"type": "join"}, {"type": "act", "decision": first["decision"],
                                                                "action": first["candidates"][0]}):
            assert ask(intruder, request)["code"] == "not_allowed"
        # the same routing id on a second connection does not take over the owner's pending decision
        assert ask(twin, {"type": "act", "decision": first["decision"], "action": first["candidates"][0]}, 1.0) is None
        after = ask(owner, {"type": "act", "decision": first["decision"], "action": first["candidates"][0]})
        assert after["type"] in ("decision", "episode_end") and after.get("decision") != first["decision"]
        # with the token, a second agent joins (and takes a kind) as before
        joined = ask(intruder, {**HELLO, "agent": "helper", "kinds": ["inspect"], "session": "lab",
                                "token": welcome["token"]})
        assert joined["type"] == "welcome" and joined["token"] == welcome["token"]
    finally:
        for sock in (owner, intruder, twin):
            sock.close()


def test_open_sessions_let_agents_join_without_a_token(children, ipc_dir):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--open-sessions")
    a, b = dealer(bind), dealer(bind)
    try:
        assert ask(a, {**HELLO, "kinds": ["select"]})["env"]["sessions"] == "open"
        assert ask(b, {**HELLO, "protocol": "1.0", "kinds": ["inspect"]})["type"] == "welcome"
    finally:
        a.close()
        b.close()


def dealer_with_id(address: str, routing_id: bytes):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, routing_id)
    sock.connect(address)
    return sock


# ------------------------------------------------------------------------------------------ the spec
def test_a_reset_naming_its_own_workload_takes_none_of_the_env_default_workload(tmp_path):
    trace = write_trace(tmp_path / "t.swf", jobs=40, procs=32)
    other = write_trace(tmp_path / "o.swf", jobs=30, procs=64)
    net = Net(defaults={"workload": {"trace": str(trace), "procs": 16}})
    net.request(b"a", {**HELLO, "kinds": ["select"]})
    first = net.request(b"a", {"type": "reset", "workload": {"trace": str(other)}})
    assert first["observation"]["procs"] == 64  # not the env's --procs 16, meant for its own trace
    first = net.request(b"a", {"type": "reset", "workload": {"jobs": 10}})
    assert first["observation"]["procs"] == 16  # window keys only: cut from the env's default workload
    net.request(b"b", {**HELLO, "session": "other"})
    end = net.request(b"b", {"type": "reset", "workload": {"generate_jobs": 25, "procs": 8}})
    assert end["metrics"]["jobs"] == 25  # not the env's trace, whose 40 jobs ignored generate_jobs


def test_an_unknown_option_lists_the_known_ones_policy_included():
    net = Net()
    net.request(b"a", HELLO)
    err = net.request(b"a", {"type": "reset", "options": {"polcy": "sjf"}})
    assert err["code"] == "bad_request" and "polcy" in err["message"] and "policy" in err["message"].split("known:")[1]
    ok = net.request(b"a", {"type": "reset", "options": {"policy": "sjf"}, "workload": {"generate_jobs": 20}})
    assert ok["type"] == "episode_end" and isinstance(ok["reward"], float)


def test_ctrl_c_on_an_agent_mid_episode_frees_its_kinds_at_once(children, ipc_dir, trace, tmp_path):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    marker = tmp_path / "started"
    agent = children.start("agent", "tests.agents_for_tests:SlowSJF", "--connect", bind, name="agent",
                           env={"HPCGYM_TEST_MARKER": str(marker)})
    wait_for(marker, agent)
    agent.send_signal(signal.SIGINT)
    assert agent.wait(timeout=10) != 0
    sock = dealer(bind)
    try:  # it said bye on its way out: the kind is free now, not after the decision timeout (30 s)
        assert ask(sock, {**HELLO, "kinds": ["select"]})["type"] == "welcome"
    finally:
        sock.close()


# ------------------------------------------------------------------------------------------ load
def test_fifty_sessions_and_a_hostile_client_get_the_undisturbed_results(children, ipc_dir, tmp_path):  # noqa: F811
    served = tmp_path / "traces"
    served.mkdir()
    trace = write_trace(served / "t.swf", jobs=300, procs=32, seed=3)
    os.mkfifo(served / "fifo.swf")
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace), "--max-jobs", "5000")
    resets = [{"seed": k, "workload": {"jobs": 30, "sample": k}, "records": True} for k in range(50)]
    undisturbed = [run_in_process_records(trace, reset) for reset in resets]
    results: dict[int, dict] = {}
    failures: list[BaseException] = []
    stop = threading.Event()
    started = [threading.Event() for _ in range(50)]  # the session exists (an intruder must not create it)

    def honest(k: int) -> None:
        try:
            run = run_agent(PriorityAgent("sjf"), bind, name=f"honest-{k}", session=f"s{k}", reset=resets[k],
                            timeout=30, progress=lambda run, decision: started[k].set())
            results[k] = run.episodes[0]["jobs"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    def hostile() -> None:
        sock = dealer(bind)
        attacks = [{"type": "reset", "workload": {"generate_jobs": 10_000_000}},
                   {"type": "reset", "workload": {"trace": str(served / "fifo.swf")}},
                   {"type": "reset", "workload": {"trace": "/dev/zero"}},
                   {"type": "act", "decision": 1, "action": 1}, b"\xc1garbage"]
        try:
            assert ask(sock, {**HELLO, "agent": "hostile", "session": "mine"})["type"] == "welcome"
            k = 0
            while k < 2 * len(attacks) or not stop.is_set():  # every attack at least twice
                reply = ask(sock, attacks[k % len(attacks)])
                assert reply["type"] == "error" and reply["recoverable"] and reply["code"] != "internal", reply
                target = next((j for j in range(k, k + 50) if started[j % 50].is_set()), None)
                if target is not None:  # and a hijack attempt on a running honest session
                    intruder = dealer(bind)
                    reply = ask(intruder, {**HELLO, "agent": "intruder", "kinds": ["select"],
                                           "session": f"s{target % 50}"})
                    intruder.close()
                    # refused, or welcome into a new session once the honest agent has finished and left
                    assert reply["type"] == "welcome" or reply["code"] == "not_allowed", reply
                k += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            sock.close()

    threads = [threading.Thread(target=honest, args=(k,)) for k in range(50)]
    attacker = threading.Thread(target=hostile)
    attacker.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    attacker.join(30)
    assert not failures, failures[:3]
    assert [results.get(k) for k in range(50)] == undisturbed


def run_in_process_records(trace, reset: dict) -> dict:
    svc = EnvService({"workload": {"trace": str(trace)}})
    agent = PriorityAgent("sjf")
    svc.handle_message(b"me", {**HELLO, "kinds": ["select"]})
    (_, reply), = svc.handle_message(b"me", {"type": "reset", **reset})
    while reply["type"] == "decision":
        (_, reply), = svc.handle_message(b"me", {"type": "act", "decision": reply["decision"],
                                                  "action": agent.act(Decision.from_message(reply))})
    return reply["jobs"]


def garbage(rng: random.Random) -> bytes:
    """One malformed or refused request of a client that never said hello."""
    kind = rng.randrange(6)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
    if kind == 1:
        return msgpack.packb([rng.randrange(100), "act"])
    if kind == 2:
        return msgpack.packb({"type": rng.choice(["act", "reset", "poll", "join", "records", "nope", 7]),
                              "decision": rng.choice([1, -1, "x", None, 2**64 - 1]), "action": rng.randrange(9)})
    if kind == 3:
        return msgpack.packb({"type": "hello", "protocol": rng.choice(["1", "1.0.0", "x.y", "99.0"]),
                              "agent": "fuzz", "kinds": []})
    if kind == 4:
        return msgpack.packb({"type": "hello", "protocol": "1.3", "agent": "fuzz",
                              "kinds": rng.choice([["nope"], ["select", "select"], "select", [1]])})
    return msgpack.packb({"type": "reset", "workload": {"trace": rng.choice(["/dev/zero", "/etc/passwd", "\x00"])}})


def test_ten_thousand_malformed_messages_beside_a_valid_episode(children, ipc_dir, trace):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    reset = {"seed": 4, "records": True}
    reference = run_in_process_records(trace, reset)
    honest: list = []
    thread = threading.Thread(target=lambda: honest.append(
        run_agent(PriorityAgent("sjf"), bind, name="honest", session="honest", reset=reset, timeout=30)))
    rng = random.Random(14)
    sock = dealer(bind)
    codes: dict[str, int] = {}
    began = time.monotonic()
    try:
        thread.start()
        for _ in range(100):  # 100 batches of 100, sent at once, then their 100 replies
            for _ in range(100):
                sock.send_multipart([b"", garbage(rng)])
            for _ in range(100):
                assert sock.poll(10_000), "an error reply is missing"
                reply = msgpack.unpackb(sock.recv_multipart()[1])
                assert reply["type"] == "error" and reply["code"] != "internal", reply
                codes[reply["code"]] = codes.get(reply["code"], 0) + 1
        thread.join(60)
    finally:
        sock.close()
    assert sum(codes.values()) == 10_000 and time.monotonic() - began < 60
    assert {"bad_message", "bad_field", "not_allowed", "version_mismatch"} <= set(codes), codes
    assert honest and honest[0].episodes[0]["jobs"] == reference  # the episode beside them unchanged
