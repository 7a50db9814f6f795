"""The env server as a shared service: one session's long episode does not hold up another, and
an agent that fails frees its kinds at once. Real `hpcgym env` processes over real sockets, except
where the rule is the handler's alone (then `EnvService` directly, as in test_service.py)."""

from __future__ import annotations

import time

import msgpack
import pytest

from hpcgym.agents.base import PriorityAgent
from hpcgym.agents.runtime import EnvRefused, run_agent

from .test_service import Net
from .test_sockets import ask, children, dealer, start_env, trace  # noqa: F401 - fixtures

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
