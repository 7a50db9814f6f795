"""The env server's second hardening round (issue 26): what a hostile or careless client can ask
of a shared `hpcgym env` is bounded, refused with a clear `bad_request` or `not_allowed`, and
never stalls the other sessions. Real `hpcgym env` processes over ipc:// where the behaviour is
the server's (sockets, signals, connections); `EnvService` directly where the rule is the
handler's alone (as in test_service.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import msgpack
import pytest

from hpcgym.environment.service import Limits
from hpcgym.protocol.codec import encode

from .test_service import TIMEOUT, Net, hello
from .test_service_sockets import dealer_with_id
from .test_sockets import ask, children, dealer, free_tcp, start_env, trace  # noqa: F401 - fixtures


# ------------------------------------------------------------------------------------------ reward spec
def test_a_deeply_scaled_reward_spec_is_a_bad_request_not_internal():
    """The probe's spec: 1,000 nested `2*` (it raised RecursionError, replied as `internal`)."""
    net = Net()
    assert net.request(b"a", hello("a", []))["type"] == "welcome"
    for spec in ("2*" * 1000 + "bsld", "+".join(["bsld"] * 500), "x" * 100_000):
        err = net.request(b"a", {"type": "reset", "reward": spec, "workload": {"generate_jobs": 10}})
        assert err["type"] == "error" and err["code"] == "bad_request", err
        assert "at most" in err["message"] and err["recoverable"]


# ------------------------------------------------------------------------------------------ error size
def test_an_error_quotes_at_most_a_few_hundred_bytes_of_the_request(children, ipc_dir):  # noqa: F811
    """The probe's 700 KB `kinds` list came back as a 1.0 MB reply."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind)
    sock = dealer(bind)
    try:
        huge = ["inspect-" + "x" * 60] * 10_000  # about 700 KB of kinds
        for request in (hello("a", huge), hello("a", ["select"], protocol="9" * 500_000 + ".0")):
            sock.send_multipart([b"", encode(request)])
            assert sock.poll(5000)
            body = sock.recv_multipart()[1]
            reply = msgpack.unpackb(body)
            assert reply["type"] == "error" and reply["code"] in ("bad_field", "version_mismatch"), reply
            assert len(body) < 1000, len(body)
    finally:
        sock.close()


# ------------------------------------------------------------------------------------------ reset validation
HELLO = {"type": "hello", "protocol": "1.4", "agent": "probe", "kinds": []}


def test_a_reset_of_a_huge_path_or_map_is_refused_at_once_while_other_sessions_are_served(children, ipc_dir,
                                                                                          trace):  # noqa: F811
    """The probe's resets: an 800 KB trace path of 400,000 components (43 s of `realpath` under the
    service lock) and a `workload` of 500,000 keys (4.4 s). Both are now refused by their size,
    and another session's hello is answered meanwhile."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    attacker, other = dealer(bind), dealer(bind)
    try:
        assert ask(attacker, {**HELLO, "session": "attacker"})["type"] == "welcome"
        for workload, limit in (({"trace": f"{trace.parent}/" + "a/" * 400_000 + "t.swf"}, "4096 characters"),
                                ({f"k{i}": 1 for i in range(500_000)}, "at most 64 keys")):
            attacker.send_multipart([b"", msgpack.packb({"type": "reset", "workload": workload})])
            # generous bounds for a loaded machine: on main the path alone stalled the env for 43 s
            welcome = ask(other, {**HELLO, "session": f"other-{limit}"}, timeout_s=10)
            assert welcome is not None and welcome["type"] == "welcome"
            assert ask(other, {"type": "bye"}, timeout_s=10)["type"] == "bye"
            assert attacker.poll(30_000), "the reset was not refused within 30 s"
            err = msgpack.unpackb(attacker.recv_multipart()[1])
            assert err["code"] == "bad_request" and limit in err["message"], err
    finally:
        attacker.close()
        other.close()


# ------------------------------------------------------------------------------------------ session names
def test_a_silent_session_is_held_by_its_token_until_the_idle_timeout():
    """The probe took a session name and its token with a tokenless hello after 30 s (one decision
    timeout) of silence outside an episode."""
    net = Net(private=True, limits=Limits(idle_timeout=3600.0))
    first = net.request(b"owner", hello("owner", ["select"], session="lab"))
    net.tick(TIMEOUT + 1)  # silent for more than a decision timeout
    refused = net.request(b"squatter", hello("squatter", ["select"], session="lab"))
    assert refused["code"] == "not_allowed" and "token" in refused["message"], refused
    joined = net.request(b"helper", hello("helper", ["select"], session="lab", token=first["token"]))
    assert joined["type"] == "welcome" and joined["token"] == first["token"]  # the silent owner's kind is taken
    assert net.request(b"helper", {"type": "bye"})["type"] == "bye"
    net.tick(3600.0 + 1)  # the idle timeout forgets the owner, and the session with it
    fresh = net.request(b"newcomer", hello("newcomer", ["select"], session="lab"))
    assert fresh["type"] == "welcome" and fresh["token"] != first["token"]


def test_an_open_session_does_not_hand_its_token_to_a_newcomer():
    net = Net(private=False)
    first = net.request(b"a", hello("a", ["select"], protocol="1.4", session="lab"))
    assert len(first["token"]) >= 16  # its creator gets it
    second = net.request(b"b", hello("b", ["inspect"], protocol="1.4", session="lab"))
    assert second["type"] == "welcome" and "token" not in second, second
    third = net.request(b"c", hello("c", [], protocol="1.4", session="lab", token=first["token"]))
    assert third["token"] == first["token"]  # one that gave it may see it


# ------------------------------------------------------------------------------------------ caps
def test_sessions_and_agents_are_capped_with_a_clear_refusal():
    """Abandoned sessions cost 2.9 KB each at ~1,150 per second: without caps ~12 GB an hour."""
    net = Net(private=True, limits=Limits(max_sessions=2, max_agents=3))
    one = net.request(b"a", hello("a", [], session="one"))
    assert net.request(b"b", hello("b", [], session="two"))["type"] == "welcome"
    refused = net.request(b"c", hello("c", [], session="three"))
    assert refused["code"] == "bad_request" and "--max-sessions" in refused["message"], refused
    assert net.request(b"c", hello("c", [], session="one", token=one["token"]))["type"] == "welcome"
    refused = net.request(b"d", hello("d", [], session="one", token=one["token"]))
    assert refused["code"] == "bad_request" and "--max-agents" in refused["message"], refused
    assert net.request(b"b", {"type": "bye"})["type"] == "bye"  # session two is left: room for one more
    assert net.request(b"d", hello("d", [], session="three"))["type"] == "welcome"
    assert one["env"]["limits"]["max_sessions"] == 2 and one["env"]["limits"]["max_agents"] == 3


# ------------------------------------------------------------------------------------------ bye
def test_bye_mid_episode_is_answered_before_the_episode_goes_on_without_the_agent(children, ipc_dir):  # noqa: F811
    """The probe's `bye` was answered only after the rest of a 300,000-job episode was simulated
    (4.7 s). The controller here waits for the episode's end: it must come after the `bye`. The
    episode has 200,000 jobs, so that simulating its rest takes seconds on an idle machine too
    (with 30,000 it sometimes ended before the controller's first poll)."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind)
    controller, agent = dealer(bind), dealer(bind)
    try:
        welcome = ask(controller, {**HELLO, "session": "s"})
        assert ask(agent, {**HELLO, "agent": "sjf", "kinds": ["select"], "session": "s",
                           "token": welcome["token"]})["type"] == "welcome"
        agent.send_multipart([b"", msgpack.packb({"type": "join"})])
        controller.send_multipart([b"", msgpack.packb({"type": "reset", "workload": {"generate_jobs": 200_000}})])
        decision = msgpack.unpackb(agent.recv_multipart()[1]) if agent.poll(30_000) else None
        while decision is not None and decision["type"] == "pending":
            decision = ask(agent, {"type": "poll"}, timeout_s=30)
        assert decision is not None and decision["type"] == "decision", decision
        assert ask(agent, {"type": "bye"}, timeout_s=60)["type"] == "bye"
        while controller.poll(0):  # its reset was answered `pending` meanwhile
            assert msgpack.unpackb(controller.recv_multipart()[1])["type"] == "pending"
        replies = [ask(controller, {"type": "poll"}, timeout_s=60)]
        while replies[-1]["type"] == "pending":
            replies.append(ask(controller, {"type": "poll"}, timeout_s=60))
        # the `bye` came while the env still simulated the rest of the episode on the defaults
        assert replies[0]["type"] == "pending", replies
        assert replies[-1]["type"] == "episode_end" and replies[-1]["metrics"]["jobs"] == 200_000, replies[-1]
    finally:
        controller.close()
        agent.close()


# ------------------------------------------------------------------------------------------ connections
def test_connections_over_the_cap_are_refused_and_closed_and_room_comes_back(children, ipc_dir):  # noqa: F811
    """With the common limit of 1,024 open files, 1,100 idle connections locked every new client out."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--max-connections", "3")
    time.sleep(0.3)  # the probe of start_env has closed its connection
    held = [dealer(bind) for _ in range(3)]
    extra = None
    try:
        for k, sock in enumerate(held):
            assert ask(sock, {**HELLO, "session": f"s{k}"})["type"] == "welcome"
        extra = dealer(bind)
        refused = ask(extra, {**HELLO, "session": "extra"})
        assert refused["code"] == "not_allowed" and "--max-connections" in refused["message"], refused
        held.pop().close()  # room for one again
        extra.close()
        time.sleep(0.5)
        extra = dealer(bind)
        assert ask(extra, {**HELLO, "session": "extra"})["type"] == "welcome"
    finally:
        for sock in [*held, *([extra] if extra is not None else [])]:
            sock.close()


def test_a_new_connection_with_a_dropped_agents_routing_id_needs_the_token(children, ipc_dir, trace):  # noqa: F811
    """The probe's twin connected after the owner dropped without bye and got its pending decision."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    owner = dealer_with_id(bind, b"owner-routing-id")
    welcome = ask(owner, {**HELLO, "agent": "owner", "kinds": ["select"], "session": "lab"})
    first = ask(owner, {"type": "reset", "seed": 1})
    assert first["type"] == "decision"
    owner.close()  # dropped without bye
    time.sleep(0.3)
    twin = dealer_with_id(bind, b"owner-routing-id")
    try:
        act = {"type": "act", "decision": first["decision"], "action": first["candidates"][0]}
        for request in (act, {"type": "poll"}, {**HELLO, "agent": "twin", "kinds": ["select"], "session": "lab"}):
            refused = ask(twin, request)
            assert refused["type"] == "error" and refused["code"] == "not_allowed", refused
            assert "token" in refused["message"]
        resumed = ask(twin, {**HELLO, "agent": "owner", "kinds": ["select"], "session": "lab",
                             "token": welcome["token"]})
        assert resumed["type"] == "welcome"
        again = ask(twin, {"type": "poll"})  # the pending decision, sent again
        assert again["type"] == "decision" and again["decision"] == first["decision"], again
        after = ask(twin, act)
        assert after["type"] in ("decision", "episode_end") and after.get("decision") != first["decision"]
    finally:
        twin.close()


# ------------------------------------------------------------------------------------------ stopping
def test_sigterm_answers_an_agent_that_was_stepping_with_its_episode_end_and_exits_promptly(children, ipc_dir,
                                                                                            trace):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace))
    agent = dealer(bind)
    try:
        assert ask(agent, {**HELLO, "kinds": ["select"], "session": "s"})["type"] == "welcome"
        decision = ask(agent, {"type": "reset"})
        assert decision["type"] == "decision"
        env.send_signal(signal.SIGTERM)  # while the agent "thinks" about its decision
        time.sleep(0.2)
        end = ask(agent, {"type": "act", "decision": decision["decision"], "action": decision["candidates"][0]})
        assert end is not None and end["type"] == "episode_end" and end["reason"] == "shutdown", end
        assert env.wait(timeout=10) == 0
    finally:
        agent.close()


def test_env_says_listening_only_once_bound(children):  # noqa: F811
    """It said "listening on ..." and then "cannot bind ... Address already in use"."""
    bind = free_tcp()
    first = start_env(children, bind)
    second = children.start("env", "--bind", bind, name="second")
    assert second.wait(timeout=60) == 2
    assert "cannot bind" in children.stderr(second) and "listening" not in children.stderr(second)
    assert first.poll() is None


# ------------------------------------------------------------------------------------------ trace memory
def test_a_trace_of_one_endless_line_is_refused_without_holding_it(tmp_path):
    """The probe's 4.7 MB .gz unpacked to one 1.07 GB line and took the env to 7.2 GB. Here 64 MB
    in one line: refused after reading one piece (the peak is measured by tracemalloc, which sees
    numpy's and gzip's buffers too)."""
    import gzip
    import tracemalloc

    from hpcgym.environment.errors import WorkloadError
    from hpcgym.environment.swf import read_swf

    bomb = tmp_path / "bomb.swf.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as out:
        for _ in range(64):
            out.write(b"1" * (1 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(WorkloadError, match="longer than"):
            read_swf(bomb, max_bytes=1 << 30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak:,} bytes at the peak"  # before: the whole 64 MB line, unpacked


@pytest.mark.parametrize("piece_bytes", [1000, 4096])
def test_a_trace_read_in_small_pieces_equals_the_trace_read_whole(traces_dir, monkeypatch, tmp_path,
                                                                   piece_bytes):
    """Pieces cut lines anywhere: the jobs, their line numbers in errors and the header come out
    the same as from one piece (the whole file, as before the pieces)."""
    from hpcgym.environment import swf

    monkeypatch.setenv("HPCGYM_CACHE", "")
    trace = traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"
    monkeypatch.setattr(swf, "PIECE_BYTES", 1 << 30)
    whole = swf.read_swf(trace)
    monkeypatch.setattr(swf, "PIECE_BYTES", piece_bytes)
    cut = swf.read_swf(trace)
    assert cut.header == whole.header and cut.dropped == whole.dropped and cut.procs == whole.procs
    for column in ("job_id", "submit", "run", "size", "requested", "user", "queue", "group"):
        assert (getattr(cut, column) == getattr(whole, column)).all(), column
    # a line only the exact reader takes (an exponent), and a malformed one named by its number
    lines = ["; MaxProcs: 8"] + [f"{i} {10 * i} 0 5 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1" for i in range(1, 60)]
    lines[20] = lines[20].replace(" 5 1 ", " 5e0 1 ", 1)
    odd = tmp_path / "odd.swf"
    odd.write_text("\n".join(lines) + "\n")
    assert len(swf.read_swf(odd)) == 59
    lines[36] += " 7"
    odd.write_text("\n".join(lines) + "\n")
    with pytest.raises(swf.WorkloadError, match=r"odd.swf:37: expected 18 numeric fields, got 19"):
        swf.read_swf(odd)


# ------------------------------------------------------------------------------------------ compare
def test_compare_gives_agent_processes_their_own_start_up_time(tmp_path):
    """An agent that imports PyTorch on a loaded machine may take longer to say hello than one
    decision may take (a test at load 15 and a DRAS evaluation failed so): the reset that waits
    for its kinds waits the start-up timeout, the decisions the decision timeout."""
    from hpcgym.gymbridge.compare.policy import parse_policy
    from hpcgym.gymbridge.compare.unit import run_protocol

    from .agents_for_tests import write_trace
    from .test_sockets import HPCGYM

    trace = write_trace(tmp_path / "t.swf", jobs=30, procs=32, seed=3)
    slow = parse_policy(f"slow=cmd:sh -c 'sleep 3; exec {HPCGYM} agent sjf --connect {{addr}} --join --no-orders'")
    task = {"seed": 0, "procs": 32, "decision_timeout": 1.0, "start_timeout": 60.0}
    out = run_protocol(slow, task, trace, tmp_path)
    assert out["summary"]["jobs"] == 30, out["summary"]


# ------------------------------------------------------------------------------------------ check-env
@pytest.mark.parametrize("flags", [["--commit-pick"], ["--backfill", "conservative"]])
def test_check_env_passes_an_env_started_with_options_that_exclude_some_kinds(children, ipc_dir, flags):  # noqa: F811
    """`hpcgym protocol check-env` failed hpcgym's own env started with --commit-pick (as
    docs/schedinspector.md starts it), with the reason `error ''`."""
    from hpcgym.protocol.conformance import check_env

    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, *flags)
    checks = check_env(bind, timeout=20)
    failed = [(c.name, c.detail) for c in checks if not c.passed]
    assert not failed, failed
    assert all(c.detail and "''" not in c.detail for c in checks)


# ------------------------------------------------------------------------------------------ workers
def worker_pids(env_pid: int) -> list[int]:
    """The env's worker processes (multiprocessing's spawned children; not its resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if ppid == env_pid and b"spawn_main" in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def test_workers_serve_concurrent_sessions_each_as_one_env_would(children, ipc_dir, trace):  # noqa: F811
    """Two agents at once on `--workers 2`: each episode equals the one the handler plays in
    process (which equals `hpcgym run`: test_sockets.py)."""
    from hpcgym.agents.base import PriorityAgent
    from hpcgym.agents.runtime import run_agent

    from .test_sockets import in_process_records

    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace), "--workers", "2")
    assert len(worker_pids(env.pid)) == 2
    runs: dict[int, object] = {}

    def play(seed: int) -> None:
        runs[seed] = run_agent(PriorityAgent("sjf"), bind, name=f"sjf-{seed}", session=f"s{seed}",
                               reset={"seed": seed, "records": True}, timeout=30, orders=seed == 4)

    threads = [threading.Thread(target=play, args=(seed,)) for seed in (3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for seed in (3, 4):
        assert runs[seed].episodes[0]["jobs"] == in_process_records(trace, seed), seed


def test_a_worker_that_dies_ends_only_its_own_sessions_and_is_replaced(children, ipc_dir, trace):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    # not start_env: its probes, if answered late, would stay as agents and skew where sessions go
    env = children.start("env", "--bind", bind, "--trace", str(trace), "--workers", "2", name="env")
    deadline = time.monotonic() + 60
    while "listening" not in children.stderr(env):  # said once every worker is ready
        assert env.poll() is None and time.monotonic() < deadline, children.stderr(env)
        time.sleep(0.1)
    agents = {name: dealer(bind) for name in ("a", "b")}
    try:
        decisions = {}
        for name, sock in agents.items():  # a new session goes to the worker with fewer agents: one each
            assert ask(sock, {**HELLO, "agent": name, "kinds": ["select"], "session": name})["type"] == "welcome"
            decisions[name] = ask(sock, {"type": "reset", "seed": 1})
            assert decisions[name]["type"] == "decision"
        victim = worker_pids(env.pid)[0]
        os.kill(victim, signal.SIGKILL)
        replies = {name: ask(sock, {"type": "act", "decision": decisions[name]["decision"],
                                    "action": decisions[name]["candidates"][0]}, timeout_s=10)
                   for name, sock in agents.items()}
        ended = [name for name, reply in replies.items() if reply["type"] == "episode_end"]
        assert len(ended) == 1, replies  # only the dead worker's agent
        end = replies[ended[0]]
        assert "worker process" in end["reason"] and end["episode"] == 1, end
        (survivor,) = set(agents) - set(ended)
        assert replies[survivor]["type"] == "decision"
        # the agent of the dead worker starts over; a new worker took the dead one's place
        sock = agents[ended[0]]
        assert ask(sock, {"type": "poll"})["code"] == "not_allowed"
        assert ask(sock, {**HELLO, "agent": "again", "kinds": ["select"], "session": ended[0]})["type"] == "welcome"
        assert ask(sock, {"type": "reset", "seed": 1})["type"] == "decision"
        pids = worker_pids(env.pid)
        assert len(pids) == 2 and victim not in pids
    finally:
        for sock in agents.values():
            sock.close()


def test_workers_stop_when_their_front_is_killed(children, ipc_dir, trace):  # noqa: F811
    """A front killed with SIGKILL cannot stop its workers: they notice and exit (they were left
    running, one per worker per killed env)."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace), "--workers", "2")
    workers = worker_pids(env.pid)
    assert len(workers) == 2
    kill_and_see_workers_exit(env, workers)


def kill_and_see_workers_exit(env, workers: list[int]) -> None:
    """SIGKILL the env's front, then wait until every one of `workers` has exited (or is a zombie)."""
    env.kill()
    env.wait(10)
    deadline = time.monotonic() + 30
    while any(_state(pid) != "Z" for pid in workers):
        assert time.monotonic() < deadline, f"env workers {workers} outlived their front"
        time.sleep(0.2)


def _state(pid: int) -> str:
    """A process's state letter; "Z" once it is gone too."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_replacement_worker_stops_when_its_front_is_killed_before_it_is_ready(children, ipc_dir,
                                                                                trace):  # noqa: F811
    """A worker still starting when its front dies never links up with it: its "ready" would wait
    for ever (orphans of the tests that kill workers, then their env, did)."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace), "--workers", "2")
    first = worker_pids(env.pid)
    os.kill(first[0], signal.SIGKILL)
    deadline = time.monotonic() + 20
    while not (set(worker_pids(env.pid)) - set(first)):  # the replacement is spawned
        assert time.monotonic() < deadline, "no replacement worker was started"
        time.sleep(0.05)
    kill_and_see_workers_exit(env, worker_pids(env.pid))
