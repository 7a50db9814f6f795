"""Stopping `hpcgym env --workers N` (environment/workers.py): SIGTERM while agents step ends in
about a second, every agent hears why, also from a worker that does not answer (stopped), and the
ipc files of the env and its workers go with it (real front and worker processes, real sockets)."""

from __future__ import annotations

import os
import signal
import time

import msgpack
import pytest

from .test_redirect import connect, hello, redirected  # noqa: F401 - fixture
from .test_server_hardening import worker_pids
from .test_sockets import ask, children, start_env, trace  # noqa: F401 - fixtures

OLD = "1.4"  # forwarded through the front


def stopped_by_signal(reply: dict | None) -> bool:
    return reply is not None and ((reply["type"] == "episode_end" and reply["reason"] == "shutdown")
                                  or (reply["type"] == "error" and reply["code"] == "shutdown"))


@pytest.mark.parametrize("frozen", [False, True], ids=["workers-answer", "workers-stopped"])
@pytest.mark.parametrize("redirect", [False, True], ids=["forwarded", "redirected"])
def test_sigterm_with_workers_answers_every_agent_and_exits_within_seconds(children, ipc_dir, trace, connect,
                                                                           redirect, frozen):  # noqa: F811
    """An agent mid-decision gets its episode's end (or `shutdown`) for its act, a redirected one
    on its first socket if its worker cannot answer; a joiner just answered `pending` gets an
    answer to its next poll; the env exits well within 5 s. With its workers stopped (SIGSTOP)
    the front waited 3 s, then a second per worker, and answered no one. (With workers that
    answer it passed before too: issue 42's 8.2 s did not recur in probes of this tree.)"""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace), "--workers", "2")
    if redirect:  # the current version: redirected to its worker
        front, stepper, _ = redirected(connect, bind, hello("s", ["select"]))
        welcome = ask(stepper, hello("s", ["select"]))
    else:
        front = stepper = connect(bind)
        welcome = ask(stepper, hello("s", ["select"], OLD))
    assert welcome["type"] == "welcome", welcome
    joiner = connect(bind)
    assert ask(joiner, hello("s", ["kill"], OLD, token=welcome["token"]))["type"] == "welcome"
    decision = ask(stepper, {"type": "reset", "seed": 1})
    assert decision["type"] == "decision", decision
    held = ask(joiner, {"type": "join"})  # the episode waits on the stepper: held, then `pending`
    assert held["type"] == "pending", held
    if frozen:
        for pid in worker_pids(env.pid):
            os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    env.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # the workers have heard it
    joiner.send_multipart([b"", msgpack.packb({"type": "poll"})])
    stepper.send_multipart([b"", msgpack.packb({"type": "act", "decision": decision["decision"],
                                                "action": decision["candidates"][0]})])
    answered = {}
    while time.monotonic() < started + 8 and len(answered) < 2:
        for name, sock in (("joiner", joiner), ("stepper", stepper), ("stepper", front)):
            if sock.poll(10):
                answered[name] = msgpack.unpackb(sock.recv_multipart()[-1])
    assert env.wait(timeout=10) == 0
    took = time.monotonic() - started
    assert set(answered) == {"joiner", "stepper"}, f"unanswered after SIGTERM: {answered}"
    assert all(stopped_by_signal(reply) for reply in answered.values()), answered
    assert took < 5, f"the env took {took:.1f} s to exit after SIGTERM"
    assert [p.name for p in ipc_dir.iterdir() if p.name.startswith("env.ipc")] == [], "the env left ipc files"


def test_a_new_env_removes_the_ipc_files_killed_envs_left_and_a_dead_workers_own(children, ipc_dir, trace,
                                                                                  connect):  # noqa: F811
    """A killed front leaves its link folder and its workers' ipc files; a killed worker its ipc
    file. The next env at that address removes what no live process uses, and a front removes the
    file of a worker it replaces."""
    import socket
    import subprocess
    import tempfile
    from pathlib import Path

    stale = ipc_dir / "env.ipc.w0.9"
    with socket.socket(socket.AF_UNIX) as sock:  # bound once, listened on by no one now
        sock.bind(str(stale))
    dead = subprocess.Popen(["true"])
    dead.wait()
    link = Path(tempfile.mkdtemp(prefix=f"hpcgym-env-{dead.pid}-"))
    (link / "workers.ipc").touch()
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace), "--workers", "2")
    assert not stale.exists() and not link.exists()
    ours = list(Path(tempfile.gettempdir()).glob(f"hpcgym-env-{env.pid}-*"))
    assert len(ours) == 1, ours  # its own link folder stays while it runs
    _, _, address = redirected(connect, bind, hello("x", []))
    victim = next(pid for pid in worker_pids(env.pid))
    before = {p.name for p in ipc_dir.glob("env.ipc.w*")}
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while len(worker_pids(env.pid)) < 2 or victim in worker_pids(env.pid) or \
            len({p.name for p in ipc_dir.glob("env.ipc.w*")} - before) < 1:
        assert time.monotonic() < deadline, "no replacement worker"
        time.sleep(0.1)
    assert len(list(ipc_dir.glob("env.ipc.w*"))) == 2, sorted(p.name for p in ipc_dir.iterdir())
    env.send_signal(signal.SIGTERM)
    assert env.wait(timeout=10) == 0
    assert not ours[0].exists() and [p.name for p in ipc_dir.iterdir() if p.name.startswith("env.ipc")] == []


def test_a_redirected_session_is_taken_at_the_workers_address_only_with_its_hellos_token(children, ipc_dir, trace,
                                                                                         connect):  # noqa: F811
    """Anyone who reaches a worker's address could say hello there first and take the session the
    front sent there; with a token in the first hello, only that token takes it."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace), "--workers", "2")
    _, agent, address = redirected(connect, bind, hello("mine", ["select"], token="t" * 32))
    intruder = ask(connect(address), hello("mine", ["inspect"]))
    assert intruder["type"] == "error" and intruder["code"] == "not_allowed" and "token" in intruder["message"], \
        intruder
    welcome = ask(agent, hello("mine", ["select"], token="t" * 32))
    assert welcome["type"] == "welcome" and welcome["token"] == "t" * 32, welcome


def test_an_env_of_workers_says_its_caps_are_each_workers_share_and_when_to_try_again(children, ipc_dir, trace,
                                                                                      connect):  # noqa: F811
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace), "--workers", "2", "--max-agents", "3")
    first = connect(bind)
    welcome = ask(first, hello("full", ["select"], OLD))
    assert welcome["env"]["workers"] == 2 and welcome["env"]["limits"]["max_agents"] == 2, welcome["env"]
    assert ask(connect(bind), hello("full", ["inspect"], OLD, token=welcome["token"]))["type"] == "welcome"
    refused = ask(connect(bind), hello("full", ["kill"], OLD, token=welcome["token"]))
    assert refused["type"] == "error" and refused["retry_s"] > 0, refused
    assert "worker process" in refused["message"] and "2 agents" in refused["message"], refused


def test_stopped_workers_are_replaced_and_their_agents_hear_why(children, ipc_dir, trace, connect):  # noqa: F811
    """A worker stopped with SIGSTOP was never noticed: its agents waited for ever and new sessions
    went on being placed on it. Silent for HUNG_AFTER_S, a worker is now killed and replaced: its
    redirected agent (on its first socket) and its forwarded one waiting for a reply get an
    `episode_end` saying so, and a new agent's episode completes."""
    from hpcgym.environment.workers import HUNG_AFTER_S

    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace), "--workers", "2")
    front, stepper, _ = redirected(connect, bind, hello("s", ["select"]))
    welcome = ask(stepper, hello("s", ["select"]))
    joiner = connect(bind)
    assert ask(joiner, hello("s", ["kill"], OLD, token=welcome["token"]))["type"] == "welcome"
    assert ask(stepper, {"type": "reset", "seed": 1})["type"] == "decision"
    assert ask(joiner, {"type": "join"})["type"] == "pending"
    stopped = worker_pids(env.pid)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    joiner.send_multipart([b"", msgpack.packb({"type": "poll"})])
    ends = {}
    while time.monotonic() < started + HUNG_AFTER_S + 10 and len(ends) < 2:
        for name, sock in (("joiner", joiner), ("stepper", front)):
            if sock.poll(10):
                ends[name] = msgpack.unpackb(sock.recv_multipart()[-1])
    assert {name: reply["type"] for name, reply in ends.items()} == {"joiner": "episode_end", "stepper": "episode_end"}, ends
    assert all("silent" in reply["reason"] for reply in ends.values()), ends
    assert not set(stopped) & set(worker_pids(env.pid))
    fresh = connect(bind)
    welcome = ask(fresh, hello("t", ["select"], OLD), timeout_s=30)
    while welcome["type"] == "error" and welcome.get("retry_s"):  # a new worker is still starting
        time.sleep(welcome["retry_s"])
        welcome = ask(fresh, hello("t", ["select"], OLD), timeout_s=30)
    assert welcome["type"] == "welcome", welcome
    reply = ask(fresh, {"type": "reset", "seed": 1, "workload": {"jobs": 30}})
    while reply["type"] == "decision":
        reply = ask(fresh, {"type": "act", "decision": reply["decision"], "action": reply["candidates"][0]})
    assert reply["type"] == "episode_end" and reply["metrics"]["jobs"] == 30, reply
