"""The env's request handler (`EnvService`) without sockets, against PROTOCOL.md.

Requests go in as msgpack bytes through `EnvService.handle`, exactly as the socket server passes
them; time is a fake clock, so heartbeats and time-outs are exact and instant. The `Net` helper
checks the protocol's shape on every reply: each one validates against the reply table and
answers a request of its peer that was still waiting (one request, one reply).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcgym.agents.base import Agent, PriorityAgent
from hpcgym.environment.decisions import Decision
from hpcgym.environment.service import EnvService
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload, sim_config
from hpcgym.protocol import messages as m
from hpcgym.protocol.codec import MAX_MESSAGE_BYTES, decode, encode

from .agents_for_tests import HalfClusterInspector, write_trace

HEARTBEAT = 1.0
TIMEOUT = 30.0


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Net:
    """Peers talking to one EnvService; every reply is checked and filed in its peer's inbox."""

    def __init__(self, on_agent_lost: str = "fallback", **kwargs: Any) -> None:
        self.clock = Clock()
        self.svc = EnvService(clock=self.clock, heartbeat=HEARTBEAT, decision_timeout=TIMEOUT,
                              on_agent_lost=on_agent_lost, **kwargs)
        self.waiting: set[bytes] = set()
        self.inbox: dict[bytes, list[dict[str, Any]]] = defaultdict(list)

    def _take(self, out: list[tuple[bytes, bytes]]) -> None:
        for peer, body in out:
            reply = m.validate(decode(body), m.REPLIES)
            assert peer in self.waiting, f"reply to {peer!r}, which has no request waiting: {reply}"
            self.waiting.discard(peer)
            self.inbox[peer].append(reply)

    def send(self, peer: bytes, msg: dict[str, Any] | bytes) -> None:
        assert peer not in self.waiting, f"{peer!r} must not send before its previous reply came"
        self.waiting.add(peer)
        self._take(self.svc.handle(peer, msg if isinstance(msg, bytes) else encode(msg)))

    def pop(self, peer: bytes) -> dict[str, Any] | None:
        return self.inbox[peer].pop(0) if self.inbox[peer] else None

    def request(self, peer: bytes, msg: dict[str, Any] | bytes) -> dict[str, Any] | None:
        """Send; the reply that came at once, or None if the request is left waiting."""
        self.send(peer, msg)
        assert len(self.inbox[peer]) <= 1, self.inbox[peer]
        return self.pop(peer)

    def tick(self, dt: float = 0.0) -> None:
        self.clock.t += dt
        self._take(self.svc.tick())

    def shutdown(self, reason: str = "test over") -> None:
        self._take(self.svc.shutdown(reason))


def hello(name: str, kinds: list[str], protocol: str = "1.0", **extra: Any) -> dict[str, Any]:
    return {"type": "hello", "protocol": protocol, "agent": name, "kinds": kinds, **extra}


class Bot:
    """A well-behaved protocol agent driven by `run_bots`: reset or join, poll on `pending`,
    act on decisions (or fall silent at decision number `silent_at`)."""

    def __init__(self, peer: bytes, agent: Agent | None, name: str, reset: dict[str, Any] | None = None,
                 silent_at: int | None = None) -> None:
        self.peer, self.agent, self.name, self.reset, self.silent_at = peer, agent, name, reset, silent_at
        self.decisions: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []
        self.end: dict[str, Any] | None = None
        self.silent = False

    @property
    def kinds(self) -> list[str]:
        return list(self.agent.kinds) if self.agent is not None else []

    @property
    def finished(self) -> bool:
        return self.end is not None or self.silent

    def respond(self, reply: dict[str, Any]) -> dict[str, Any] | None:
        self.replies.append(reply)
        kind = reply["type"]
        if kind == "welcome":
            return {"type": "reset", **self.reset} if self.reset is not None else {"type": "join"}
        if kind == "pending":
            return {"type": "poll"}
        if kind == "decision":
            self.decisions.append(reply)
            if self.silent_at is not None and len(self.decisions) >= self.silent_at:
                self.silent = True
                return None
            return {"type": "act", "decision": reply["decision"],
                    "action": self.agent.act(Decision.from_message(reply))}
        if kind == "episode_end":
            self.end = reply
            return None
        raise AssertionError(f"{self.name} got {reply}")


def run_bots(net: Net, bots: list[Bot], max_ticks: int = 200) -> None:
    """All bots say hello (in order), then talk until every one is finished; the clock moves one
    heartbeat whenever nobody has anything to say."""
    for bot in bots:
        net.send(bot.peer, hello(bot.name, bot.kinds))
    for _ in range(max_ticks):
        progress = True
        while progress:
            progress = False
            for bot in bots:
                reply = net.pop(bot.peer)
                if reply is not None:
                    progress = True
                    nxt = bot.respond(reply)
                    if nxt is not None:
                        net.send(bot.peer, nxt)
        if all(b.finished for b in bots):
            return
        net.tick(HEARTBEAT)
    raise AssertionError(f"bots not finished after {max_ticks} heartbeats")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_trace(tmp_path_factory.mktemp("svc") / "t.swf", jobs=60, procs=32, seed=1)


def in_process(trace, agents: dict[str, Agent], options: dict[str, Any] | None = None, seed: int = 0):
    workload = load_workload({"trace": str(trace)}, seed)
    return simulate(workload, sim_config(options or {}, seed), policy="fcfs", agents=agents)


def assert_same_records(jobs: dict[str, list], result) -> None:
    assert jobs is not None
    assert set(jobs) == set(result.jobs)
    for name, column in result.jobs.items():
        assert jobs[name] == column.tolist(), name


# ------------------------------------------------------------------------------------------ episode
@pytest.mark.parametrize("options", [{}, {"backfill": "none"}, {"window": 5}])
def test_episode_through_the_handler_equals_the_in_process_simulation(trace, options):
    net = Net()
    bot = Bot(b"sjf", PriorityAgent("sjf"), "sjf",
              reset={"workload": {"trace": str(trace)}, "seed": 0, "options": options, "records": True})
    run_bots(net, [bot], max_ticks=1)  # a lone agent is answered at once: no heartbeat needed
    expected = in_process(trace, {"select": PriorityAgent("sjf")}, options)
    assert bot.end["reason"] == "completed" and bot.end["episode"] == 1
    assert_same_records(bot.end["jobs"], expected)
    assert bot.end["metrics"] == expected.summary
    ids = [d["decision"] for d in bot.decisions]
    steps = [d["step"] for d in bot.decisions]
    assert ids == sorted(set(ids)) and steps == sorted(set(steps))
    assert all(d["kind"] == "select" and d["episode"] == 1 for d in bot.decisions)
    # the workload tells SJF from the env's default FCFS, so a routing slip would show
    assert expected.jobs["start"].tolist() != in_process(trace, {}).jobs["start"].tolist()


def test_an_agent_naming_its_columns_is_sent_only_those_and_plays_the_same_episode(trace):
    """1.8: a reset naming the queue columns SJF reads gets decisions with just them and `id`, and
    the schedule of an agent sent every column; a column no table has is a bad_field."""
    net = Net()
    columns = {"queue": ["submit", "requested", "size"]}
    bot = Bot(b"sjf", PriorityAgent("sjf"), "sjf", reset={"workload": {"trace": str(trace)}, "records": True,
                                                          "columns": columns})
    run_bots(net, [bot], max_ticks=1)
    assert bot.decisions and all(set(d["observation"]["queue"]) == {"id", "submit", "requested", "size"}
                                 and set(d["observation"]["running"]) == {"id"} for d in bot.decisions)
    assert_same_records(bot.end["jobs"], in_process(trace, {"select": PriorityAgent("sjf")}))
    err = net.request(b"sjf", {"type": "join", "columns": {"queue": ["size", "colour"]}})
    assert err["type"] == "error" and err["code"] == "bad_field" and "columns" in err["message"], err


def test_records_are_nil_unless_asked(trace):
    net = Net()
    bot = Bot(b"a", PriorityAgent("sjf"), "sjf", reset={"workload": {"trace": str(trace)}})
    run_bots(net, [bot], max_ticks=1)
    assert bot.end["reason"] == "completed" and bot.end["jobs"] is None and bot.end["metrics"]["jobs"] == 60


# ------------------------------------------------------------------------------------------ fuzzing
ME, STRANGER = b"main", b"stranger"


def _pending_of(decision: dict[str, Any] | None) -> dict[str, Any] | None:
    if decision is None:
        return None
    return {k: decision[k] for k in ("decision", "kind", "time", "candidates", "can_wait")}


def _garbage(recipe: tuple, current: dict[str, Any] | None, previous: dict[str, Any] | None,
             reset: dict[str, Any]) -> tuple[bytes, bytes, set[str]] | None:
    """(sender, body, acceptable codes) for one garbage recipe in the current state, or None
    when the recipe does not apply (e.g. random bytes that happen to form a valid request)."""
    kind, arg = recipe
    cur_id = current["decision"] if current else 0
    cands = current["candidates"] if current else [1]
    if kind == "bytes":
        try:
            m.validate(decode(arg))
        except Exception:  # noqa: BLE001 - whatever it is, the env must refuse it with a proper code
            return ME, arg, {m.BAD_MESSAGE, m.TOO_LARGE, m.UNKNOWN_TYPE, m.BAD_FIELD}
        return None
    if kind == "nonmap":
        return ME, msgpack.packb(arg, use_bin_type=True), {m.BAD_MESSAGE}
    if kind == "trailing":
        return ME, encode({"type": "poll"}) + arg, {m.BAD_MESSAGE}
    if kind == "unknown_type":
        return ME, encode({"type": arg}), {m.UNKNOWN_TYPE}
    if kind == "type_not_str":
        return ME, encode({"type": arg, "decision": cur_id}), {m.BAD_MESSAGE}
    if kind == "no_type":
        return ME, encode({"decision": cur_id, "action": cands[0]}), {m.BAD_MESSAGE}
    if kind == "wrong_field":
        bad = [
            {"type": "act", "decision": str(cur_id), "action": cands[0]},
            {"type": "act", "decision": True, "action": cands[0]},
            {"type": "act", "decision": float(cur_id), "action": cands[0]},
            {"type": "act", "decision": cur_id, "action": float(cands[0])},
            {"type": "act", "decision": cur_id, "action": str(cands[0])},
            {"type": "act", "decision": cur_id, "action": {"id": cands[0]}},
            {"type": "act", "decision": cur_id},
            {"type": "act", "action": cands[0]},
            {"type": "hello", "protocol": "1.0", "agent": "x", "kinds": "select"},
            {"type": "hello", "protocol": 1, "agent": "x", "kinds": []},
            {"type": "reset", **reset, "seed": "1"},
            {"type": "reset", **reset, "records": 1},
            {"type": "reset", "workload": [1]},
            {"type": "reset", **reset, "require": "inspect"},
            {"type": "reset", **reset, "require": [1]},
        ][arg]
        return ME, encode(bad), {m.BAD_FIELD}
    if kind == "huge_id":
        if arg == cur_id:
            return None
        return ME, encode({"type": "act", "decision": arg, "action": cands[0]}), {m.STALE_DECISION}
    if kind == "unknown_field":
        name, template = arg
        base = [{"type": "poll"}, {"type": "join"}, {"type": "bye"},
                {"type": "act", "decision": cur_id, "action": cands[0]},  # a good act, bar one field
                {"type": "reset", **reset}, hello("x", ["select"])][template]
        return ME, encode({**base, name: 1}), {m.BAD_FIELD}
    if kind == "stale":
        if arg == "repeat" and previous is not None:
            return ME, encode({"type": "act", "decision": previous["decision"],
                               "action": previous["candidates"][0]}), {m.STALE_DECISION}
        return ME, encode({"type": "act", "decision": cur_id + 1, "action": cands[0]}), {m.STALE_DECISION}
    if kind == "not_candidate":
        if arg in cands:
            return None
        return ME, encode({"type": "act", "decision": cur_id, "action": arg}), \
            {m.INVALID_ACTION} if current else {m.STALE_DECISION}
    if kind == "shape":
        action = [True, False, [cands[0], cands[0]], [[cands[0]]], [True], [cands[0], -1]][arg]
        return ME, encode({"type": "act", "decision": cur_id, "action": action}), \
            {m.INVALID_ACTION} if current else {m.STALE_DECISION}
    if kind == "before_hello":
        msg = [{"type": "join"}, {"type": "poll"}, {"type": "act", "decision": cur_id, "action": cands[0]},
               {"type": "reset", **reset}][arg]
        return STRANGER, encode(msg), {m.NOT_ALLOWED}
    if kind == "hello_again":
        # a second hello is refused as such, whatever version it names (the session goes on)
        return ME, encode(hello("again", [], arg)), {m.NOT_ALLOWED}
    if kind == "kind_taken":
        return STRANGER, encode(hello("thief", arg)), {m.KIND_TAKEN}
    if kind == "bad_reset":
        change = [{"options": {"bogus": 1}}, {"reward": "nope"}, {"options": {"policy": "nope"}},
                  {"options": {"policy": ["sjf"]}}, {"options": {"backfill": "sometimes"}},
                  {"workload": {"trace": "/nonexistent/trace.swf"}}, {"workload": {"bogus": 1}},
                  {"require": ["bogus"]}][arg]
        return ME, encode({"type": "reset", **reset, **change}), {m.BAD_REQUEST}
    raise AssertionError(recipe)


GARBAGE = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=40)),
    st.tuples(st.just("nonmap"), st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                                           st.floats(), st.text(max_size=10), st.binary(max_size=10),
                                           st.lists(st.integers(-5, 5), max_size=4))),
    st.tuples(st.just("trailing"), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("unknown_type"), st.text(max_size=12).filter(lambda t: t not in m.REQUESTS)),
    st.tuples(st.just("type_not_str"), st.one_of(st.none(), st.integers(-3, 3), st.lists(st.just("act"), max_size=2))),
    st.tuples(st.just("no_type"), st.none()),
    st.tuples(st.just("wrong_field"), st.integers(0, 14)),
    st.tuples(st.just("huge_id"), st.one_of(st.integers(-2**63, 2**64 - 1), st.sampled_from([2**64 - 1, -2**63, 0]))),
    st.tuples(st.just("unknown_field"), st.tuples(
        st.text(min_size=1, max_size=8).filter(lambda t: t not in {
            "type", "decision", "action", "workload", "seed", "options", "reward", "require", "records",
            "protocol", "agent", "kinds", "session"}), st.integers(0, 5))),
    st.tuples(st.just("stale"), st.sampled_from(["repeat", "future"])),
    st.tuples(st.just("not_candidate"), st.one_of(st.integers(-2**63, 2**64 - 1), st.integers(1, 60))),
    st.tuples(st.just("shape"), st.integers(0, 5)),
    st.tuples(st.just("before_hello"), st.integers(0, 3)),
    st.tuples(st.just("hello_again"), st.sampled_from(["1.0", "1.9", "2.0", "0.9", "", "x"])),
    st.tuples(st.just("kind_taken"), st.sampled_from([["select"], ["select", "kill"]])),
    st.tuples(st.just("bad_reset"), st.integers(0, 7)),
)


@pytest.fixture(scope="module")
def undisturbed(trace):
    net = Net()
    bot = Bot(ME, PriorityAgent("sjf"), "sjf", reset={"workload": {"trace": str(trace)}, "records": True})
    run_bots(net, [bot], max_ticks=1)
    assert bot.end["reason"] == "completed"
    return bot


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(plan=st.dictionaries(st.integers(0, 200), st.lists(GARBAGE, min_size=1, max_size=4), max_size=10),
       noise=st.sets(st.integers(0, 200), max_size=5))
def test_garbage_is_refused_one_error_each_and_changes_nothing(trace, undisturbed, plan, noise):
    n = len(undisturbed.decisions)
    at = defaultdict(list)   # decision index -> garbage sent while it stands (n: after the end)
    for key, recipes in plan.items():
        at[key % (n + 1)] += recipes
    reset = {"workload": {"trace": str(trace)}, "records": True}
    net = Net()
    agent = PriorityAgent("sjf")
    assert net.request(ME, hello("sjf", ["select"]))["type"] == "welcome"
    reply = net.request(ME, {"type": "reset", **reset})
    current, previous, k = None, None, 0
    while True:
        if reply["type"] == "decision":
            previous, current = current, reply
        else:
            assert reply["type"] == "episode_end"
            previous, current = current, None
        # garbage planned at this point (index n: after the episode ended)
        for recipe in at[k if current is not None else n]:
            made = _garbage(recipe, current, previous, reset)
            if made is None:
                continue
            sender, body, codes = made
            err = net.request(sender, body)
            assert err is not None and err["type"] == "error", (recipe, err)
            assert err["code"] in m.ERROR_CODES and err["code"] in codes, (recipe, err)
            assert isinstance(err["message"], str) and err["message"], (recipe, err)
            assert err["recoverable"] is (err["code"] not in m.UNRECOVERABLE)
            assert err["pending"] == (_pending_of(current) if sender == ME else None), (recipe, err)
            assert not net.inbox[ME] and not net.inbox[STRANGER], "one request, one reply"
        if current is None:
            break
        if k in noise:  # asking again for a pending decision repeats it (a lost reply is recovered)
            again = net.request(ME, {"type": "poll"})
            assert again["type"] == "decision" and _pending_of(again) == _pending_of(current)
        reply = net.request(ME, {"type": "act", "decision": current["decision"],
                                 "action": agent.act(Decision.from_message(current))})
        k += 1
    assert k == n
    assert reply["reason"] == "completed"
    assert reply["jobs"] == undisturbed.end["jobs"]


def test_an_oversized_message_is_refused_with_too_large(trace):
    net = Net()
    big = encode({"type": "poll", "pad": "x" * 100}) + b"\0" * (MAX_MESSAGE_BYTES - 50)
    err = net.request(b"p", big)
    assert err["code"] == m.TOO_LARGE and err["recoverable"] is True


# ------------------------------------------------------------------------------------------ sessions
def test_hello_with_another_major_version_is_refused_and_not_recoverable():
    net = Net()
    err = net.request(b"a", hello("future", ["select"], protocol="2.0"))
    assert err["type"] == "error" and err["code"] == m.VERSION_MISMATCH and err["recoverable"] is False
    assert m.PROTOCOL_VERSION in err["message"] and "2.0" in err["message"]
    # nothing was registered: the kind is free and the peer is still new
    assert net.request(b"a", {"type": "join"})["code"] == m.NOT_ALLOWED
    assert net.request(b"b", hello("b", ["select"]))["type"] == "welcome"
    # another minor version of the same major interoperates
    assert net.request(b"c", hello("c", ["inspect"], protocol="1.7"))["type"] == "welcome"


def test_a_kind_taken_by_another_agent_is_refused_until_it_leaves():
    net = Net()
    assert net.request(b"a", hello("first", ["select", "kill"]))["type"] == "welcome"
    err = net.request(b"b", hello("second", ["inspect", "kill"]))
    assert err["code"] == m.KIND_TAKEN and err["recoverable"] is True and "first" in err["message"]
    assert "kill" in err["message"]
    # another session has its own kinds
    assert net.request(b"c", hello("other", ["kill"], session="s2"))["type"] == "welcome"
    assert net.request(b"a", {"type": "bye"})["type"] == "bye"
    assert net.request(b"b", hello("second", ["inspect", "kill"]))["type"] == "welcome"


def test_bye_is_answered_bye_even_from_a_new_peer():
    net = Net()
    assert net.request(b"x", {"type": "bye"}) == {"type": "bye"}


@pytest.mark.parametrize("mode", ["fallback", "end"])
def test_bye_mid_episode_gets_exactly_one_reply(trace, mode):
    net = Net(on_agent_lost=mode)
    net.request(b"a", hello("a", ["select"]))
    net.request(b"d", hello("driver", []))
    assert net.request(b"d", {"type": "reset", "workload": {"trace": str(trace)}}) is None  # select is a's
    first = net.request(b"a", {"type": "join"})
    assert first["type"] == "decision"
    assert net.request(b"a", {"type": "bye"}) == {"type": "bye"}   # Net fails on a second reply
    end = net.pop(b"d")                                           # the driver's reset is answered
    assert end["type"] == "episode_end"
    if mode == "end":
        assert end["reason"] == "agent 'a' (select) lost: it said bye"
    else:
        assert end["reason"] == "completed" and end["metrics"]["jobs"] == 60


# ------------------------------------------------------------------------------------------ time
def test_a_waiting_request_gets_pending_after_one_heartbeat():
    net = Net()
    net.request(b"a", hello("a", []))
    assert net.request(b"a", {"type": "join"}) is None      # nothing to do: the request waits
    net.tick(HEARTBEAT * 0.5)
    assert net.pop(b"a") is None
    net.tick(HEARTBEAT * 0.5)
    assert net.pop(b"a") == {"type": "pending", "episode": 0}
    net.tick(HEARTBEAT * 3)
    assert net.pop(b"a") is None                            # no request waiting, no reply
    assert net.request(b"a", {"type": "poll"}) is None
    net.tick(HEARTBEAT)
    assert net.pop(b"a")["type"] == "pending"


def _select_and_silent_inspector(trace, mode: str, fetched: bool):
    net = Net(on_agent_lost=mode)
    select = Bot(b"s", PriorityAgent("sjf"), "sjf", reset={"workload": {"trace": str(trace)}, "records": True})
    inspector = Bot(b"i", HalfClusterInspector(), "quiet", silent_at=1 if fetched else None)
    if not fetched:  # says hello, then never asks for anything
        net.request(b"i", hello("quiet", ["inspect"]))
        run_bots(net, [select], max_ticks=int(TIMEOUT) + 5)
    else:
        run_bots(net, [select, inspector], max_ticks=int(TIMEOUT) + 5)
    return net, select, inspector


@pytest.mark.parametrize("fetched", [True, False], ids=["unanswered", "never-fetched"])
def test_a_silent_agent_is_replaced_by_the_defaults_after_the_decision_timeout(trace, fetched):
    t0 = Clock().t  # where every Net's clock starts
    net, select, inspector = _select_and_silent_inspector(trace, "fallback", fetched)
    assert select.end["reason"] == "completed" and select.end["metrics"]["jobs"] == 60
    # the inspector's only decision was never answered: the default accepted it, and every later
    # one, so the schedule is the select agent's alone
    assert_same_records(select.end["jobs"], in_process(trace, {"select": PriorityAgent("sjf")}))
    assert TIMEOUT <= net.clock.t - t0 <= TIMEOUT + 3 * HEARTBEAT
    # the select agent was kept alive by pendings meanwhile
    assert any(r["type"] == "pending" for r in select.replies)
    if fetched:
        assert len(inspector.decisions) == 1
        late = net.request(b"i", {"type": "act", "decision": inspector.decisions[0]["decision"], "action": True})
        assert late["code"] == m.STALE_DECISION and late["recoverable"] is True and late["pending"] is None
        assert "lost" in late["message"]
    # its kind is free again
    assert net.request(b"n", hello("new", ["inspect"]))["type"] == "welcome"


def test_a_silent_agent_ends_the_episode_with_on_agent_lost_end(trace):
    net, select, inspector = _select_and_silent_inspector(trace, "end", True)
    assert select.end["reason"].startswith("agent 'quiet' (inspect) lost: ")
    assert select.end["metrics"] == {} and select.end["jobs"] is None
    assert inspector.end is None and len(inspector.decisions) == 1
    late = net.request(b"i", {"type": "act", "decision": inspector.decisions[0]["decision"], "action": True})
    assert late["code"] == m.STALE_DECISION
    # the session goes on: the select agent may start another episode
    assert net.request(b"s", {"type": "reset", "workload": {"trace": str(trace)}})["type"] == "decision"


def _held_reset(trace) -> Net:
    net = Net()
    net.request(b"s", hello("sjf", ["select"]))
    reset = {"type": "reset", "workload": {"trace": str(trace)}, "require": ["inspect"]}
    assert net.request(b"s", reset) is None        # held: no episode without an inspector
    return net


def test_reset_requiring_a_kind_is_held_until_an_agent_takes_it(trace):
    net = _held_reset(trace)
    for _ in range(5):
        net.tick(HEARTBEAT)
        assert net.pop(b"s")["type"] == "pending"
        assert net.request(b"s", {"type": "poll"}) is None
    assert net.request(b"i", hello("insp", ["inspect"]))["type"] == "welcome"
    first = net.pop(b"s")                      # the held reset's answer, to the waiting poll
    assert first["type"] == "decision" and first["kind"] == "select" and first["episode"] == 1


def test_reset_requiring_a_kind_is_refused_after_the_timeout(trace):
    net = _held_reset(trace)
    t0 = net.clock.t
    while True:
        net.tick(HEARTBEAT)
        reply = net.pop(b"s")
        if reply["type"] != "pending":
            break
        assert net.clock.t - t0 <= TIMEOUT
        assert net.request(b"s", {"type": "poll"}) is None
    assert reply["code"] == m.BAD_REQUEST and "inspect" in reply["message"] and reply["recoverable"]
    assert net.clock.t - t0 > TIMEOUT
    # too late now: an inspector's hello starts nothing
    assert net.request(b"i", hello("insp", ["inspect"]))["type"] == "welcome"
    assert net.pop(b"s") is None


def test_a_held_reset_refused_while_its_agent_is_not_waiting_comes_with_its_next_poll(trace):
    net = _held_reset(trace)
    net.tick(HEARTBEAT)
    assert net.pop(b"s")["type"] == "pending"
    net.tick(TIMEOUT)                           # Net fails on a reply with no request waiting
    reply = net.request(b"s", {"type": "poll"})
    assert reply["code"] == m.BAD_REQUEST


@pytest.mark.parametrize("require, code", [([1], m.BAD_FIELD), (["inspect", None], m.BAD_FIELD),
                                           ([["inspect"]], m.BAD_FIELD), (["bogus"], m.BAD_REQUEST)])
def test_a_reset_requiring_no_real_kind_is_refused_at_once(trace, require, code):
    # [1] used to be held, then crash tick() (and so the server) at the timeout
    net = Net()
    net.request(b"s", hello("sjf", ["select"]))
    err = net.request(b"s", {"type": "reset", "workload": {"trace": str(trace)}, "require": require})
    assert err["code"] == code
    net.tick(TIMEOUT + 1)


def test_an_episode_end_waits_for_a_participant_between_pending_and_poll_across_a_reset(trace):
    """The controller makes the last move and resets at once, while the other agent has just got
    `pending` and not polled yet: its next poll still brings it the first episode's end."""
    short = write_trace(trace.parent / "short.swf", jobs=6, procs=32, seed=1)
    reset = {"type": "reset", "workload": {"trace": str(short)}}
    net = Net()
    net.request(b"c", hello("ctl", ["select", "kill"]))
    net.request(b"i", hello("insp", ["inspect"]))
    assert net.request(b"i", {"type": "join"}) is None
    net.send(b"c", reset)
    for _ in range(500):
        if not net.inbox[b"c"] and not net.inbox[b"i"]:
            net.tick(HEARTBEAT)
        for peer in (b"c", b"i"):
            x = net.pop(peer)
            if x is None:
                continue
            if x["type"] == "pending":
                net.send(peer, {"type": "poll"})
                continue
            assert x["type"] == "decision", x
            obs = x["observation"]
            if x["kind"] == "kill" and obs["queue_length"] == 0 and len(obs["running"]["id"]) == 1 \
                    and b"i" in net.waiting:
                net.tick(HEARTBEAT)                          # the inspector gets `pending` ...
                assert net.pop(b"i") == {"type": "pending", "episode": 1}
                net.send(b"c", {"type": "act", "decision": x["decision"], "action": None})
                if net.inbox[b"c"] and net.inbox[b"c"][0]["type"] == "episode_end":
                    end = net.pop(b"c")                      # ... the controller's act ends the episode
                    assert end["episode"] == 1 and end["reason"] == "completed"
                    assert net.request(b"c", reset)["episode"] == 2     # and it resets at once
                    again = net.request(b"i", {"type": "poll"})
                    assert again is not None and again["type"] == "episode_end", again
                    assert again["episode"] == 1 and again["reason"] == "completed"
                    return
                net.send(b"i", {"type": "poll"})
                continue
            action = {"select": x["candidates"][0], "inspect": True, "kill": None}[x["kind"]]
            net.send(peer, {"type": "act", "decision": x["decision"], "action": action})
    raise AssertionError("the episode never reached its last kill decision")


# ------------------------------------------------------------------------------------------ composition
def test_select_and_inspect_by_two_agents_compose(trace):
    net = Net()
    inspector = HalfClusterInspector()
    select = Bot(b"s", PriorityAgent("sjf"), "sjf", reset={"workload": {"trace": str(trace)}, "records": True})
    insp = Bot(b"i", inspector, "half")
    run_bots(net, [insp, select])
    assert select.end["reason"] == insp.end["reason"] == "completed"
    assert select.end["jobs"] == insp.end["jobs"]
    jobs = select.end["jobs"]
    # the rejections column is what the inspector did
    rejected = np.bincount(inspector.rejected, minlength=max(jobs["job_id"]) + 1)
    assert jobs["rejections"] == [int(rejected[j]) for j in jobs["job_id"]]
    assert sum(jobs["rejections"]) >= 10
    assert all(r == 0 or 2 * s > 32 for r, s in zip(jobs["rejections"], jobs["size"]))
    # and the whole schedule is the in-process one with the same two agents
    expected = in_process(trace, {"select": PriorityAgent("sjf"), "inspect": HalfClusterInspector()})
    assert_same_records(jobs, expected)
    assert {d["kind"] for d in insp.decisions} == {"inspect"}
    assert {d["kind"] for d in select.decisions} == {"select"}
    ids = sorted(d["decision"] for d in insp.decisions + select.decisions)
    assert len(set(ids)) == len(ids)


# ------------------------------------------------------------------------------------------ shutdown
def test_shutdown_answers_every_waiting_request(trace):
    net = Net()
    net.request(b"s", hello("sjf", ["select"]))
    net.request(b"i", hello("insp", ["inspect"]))
    net.request(b"j", hello("idle", [], session="elsewhere"))
    net.request(b"h", hello("holder", [], session="held"))
    assert net.request(b"j", {"type": "join"}) is None
    assert net.request(b"h", {"type": "reset", "require": ["kill"]}) is None
    assert net.request(b"i", {"type": "join"}) is None
    d = net.request(b"s", {"type": "reset", "workload": {"trace": str(trace)}})
    assert d["type"] == "decision"
    decision = net.request(b"s", {"type": "act", "decision": d["decision"], "action": d["candidates"][0]})
    assert decision is None                     # the inspector has the decision, the select agent waits
    assert net.pop(b"i")["type"] == "decision"
    net.shutdown("the env received a stop signal")
    end = net.pop(b"s")
    assert end["type"] == "episode_end" and end["reason"] == "the env received a stop signal"
    for peer in (b"j", b"h"):
        err = net.pop(peer)
        assert err["type"] == "error" and err["code"] == m.SHUTDOWN and err["recoverable"] is False
    assert net.pop(b"i") is None                # it has no request waiting: nothing is sent to it
    assert not net.waiting


def _hello(svc, peer, kinds):
    (_, reply), = svc.handle_message(peer, {"type": "hello", "protocol": "1.0", "agent": peer.decode(), "kinds": kinds})
    assert reply["type"] == "welcome"


def test_reset_mid_episode_answers_the_controller_with_the_new_episode():
    """The controller asked for a new episode, so its reply is that episode's first decision;
    the old episode's end goes to the other participants."""
    svc = EnvService({"workload": {"generate_jobs": 50, "procs": 16}})
    _hello(svc, b"ctl", ["select"])
    _hello(svc, b"ins", ["inspect"])
    svc.handle_message(b"ins", {"type": "join"})
    first = svc.handle_message(b"ctl", {"type": "reset", "seed": 1})
    assert [r["type"] for _, r in first] == ["decision"]
    replies = dict(svc.handle_message(b"ctl", {"type": "reset", "seed": 2}))
    assert replies[b"ctl"]["type"] == "decision" and replies[b"ctl"]["episode"] == 2
    end = replies[b"ins"]  # its join was still waiting, so the end answers it at once
    assert end["type"] == "episode_end" and end["episode"] == 1 and "reset by" in end["reason"]


def test_last_agent_leaving_lets_the_episode_finish_on_its_own():
    """With every agent gone, the rest of the episode is decided by the built-in defaults inside
    the simulation: the bye is answered and the episode is over when the call returns."""
    svc = EnvService({"workload": {"generate_jobs": 20_000, "procs": 8}}, on_agent_lost="fallback")
    _hello(svc, b"a", ["select"])
    (_, decision), = svc.handle_message(b"a", {"type": "reset", "seed": 0})
    assert decision["type"] == "decision"
    (_, bye), = svc.handle_message(b"a", {"type": "bye"})
    assert bye["type"] == "bye"
    assert svc.sessions["default"].episode is None


def test_a_kind_held_by_a_silent_agent_is_handed_to_a_new_one():
    """An agent that vanished without bye (not in an episode) keeps its kind only until it has been
    silent for a decision timeout; then a new agent asking for the kind takes it over."""
    now = [0.0]
    svc = EnvService(decision_timeout=5.0, clock=lambda: now[0])
    _hello(svc, b"old", ["select"])
    (_, refused), = svc.handle_message(b"new", {"type": "hello", "protocol": "1.0", "agent": "new", "kinds": ["select"]})
    assert refused["code"] == "kind_taken"
    now[0] = 6.0
    _hello(svc, b"new", ["select"])
    (_, late), = svc.handle_message(b"old", {"type": "join"})
    assert late["type"] == "error"


def test_dense_rewards_are_accumulated_per_agent_between_its_own_turns():
    """Reward `queue_wait` pays minus the job-hours waited since the previous decision. Each of two
    agents receives, with each of its decisions and its episode end, what accrued since its own
    previous turn; so each agent's total is minus the sum of all waits (no kills), in hours,
    which the per-job records give independently."""
    svc = EnvService({"workload": {"generate_jobs": 150, "procs": 16}})
    _hello(svc, b"sel", ["select"])
    _hello(svc, b"ins", ["inspect"])
    totals = {b"sel": 0.0, b"ins": 0.0}
    turns = {b"sel": 0, b"ins": 0}
    inbox = dict(svc.handle_message(b"ins", {"type": "join"}))
    inbox.update(svc.handle_message(b"sel", {"type": "reset", "seed": 3, "reward": "queue_wait", "records": True}))
    ends = {}
    for _ in range(100_000):  # bounded: a stuck exchange fails instead of hanging
        if len(ends) == 2:
            break
        if not inbox:
            for peer in totals:
                if peer not in ends:
                    inbox.update(svc.handle_message(peer, {"type": "poll"}))
            continue
        peer, msg = inbox.popitem()
        if msg["type"] == "pending":
            inbox.update(svc.handle_message(peer, {"type": "poll"}))
            continue
        totals[peer] += msg["reward"]
        if msg["type"] == "episode_end":
            ends[peer] = msg
            continue
        assert msg["type"] == "decision" and msg["reward"] <= 0
        turns[peer] += 1
        action = msg["candidates"][0] if msg["kind"] == "select" else True
        inbox.update(svc.handle_message(peer, {"type": "act", "decision": msg["decision"], "action": action}))
    assert len(ends) == 2
    expected = -sum(ends[b"sel"]["jobs"]["wait"]) / 3600.0
    assert expected < 0 and turns[b"sel"] > 0 and turns[b"ins"] > 0
    assert totals[b"sel"] == pytest.approx(expected, rel=1e-9)
    assert totals[b"ins"] == pytest.approx(expected, rel=1e-9)


def _one_episode(svc: EnvService, peer: bytes, session: str = "default") -> tuple[list[int], int]:
    """hello, reset, answer every decision with its first candidate, bye: (decision ids, episode)."""
    (_, welcome), = svc.handle_message(peer, {"type": "hello", "protocol": "1.0", "agent": peer.decode(),
                                              "kinds": ["select"], "session": session})
    assert welcome["type"] == "welcome"
    (_, reply), = svc.handle_message(peer, {"type": "reset", "seed": 1})
    ids = []
    while reply["type"] == "decision":
        ids.append(reply["decision"])
        (_, reply), = svc.handle_message(peer, {"type": "act", "decision": reply["decision"],
                                                "action": reply["candidates"][0]})
    assert reply["type"] == "episode_end" and reply["reason"] == "completed"
    (_, bye), = svc.handle_message(peer, {"type": "bye"})
    assert bye["type"] == "bye"
    return ids, reply["episode"]


def test_agents_run_one_after_another_each_count_episodes_from_1():
    """PROTOCOL.md section 7: a session lasts while one of its agents is there, so an agent started
    after the previous one left sees episode 1 and decision ids from 1 again, while an agent that
    stays in the session (here a kind-less watcher) keeps the count going for the next ones."""
    svc = EnvService({"workload": {"generate_jobs": 30, "procs": 16}})
    first_ids, first = _one_episode(svc, b"first")
    second_ids, second = _one_episode(svc, b"second")
    assert first == second == 1
    assert first_ids[0] == second_ids[0] == 1 and len(first_ids) > 1
    _hello(svc, b"watcher", [])
    third_ids, third = _one_episode(svc, b"third")
    fourth_ids, fourth = _one_episode(svc, b"fourth")
    assert (third, fourth) == (1, 2)
    assert fourth_ids[0] == third_ids[-1] + 1  # decision ids stay unique within the session


@pytest.mark.parametrize("version", ["1", "1.", "1.abc", "1.0.0", "v1.2", " 1.2"])
def test_a_version_that_is_not_major_dot_minor_is_a_bad_field(version):
    net = Net()
    err = net.request(b"a", hello("odd", ["select"], protocol=version))
    assert err["code"] == m.BAD_FIELD and err["recoverable"] is True and "MAJOR.MINOR" in err["message"]
    assert net.request(b"a", hello("odd", ["select"], protocol="1.2"))["type"] == "welcome"


def test_a_nul_byte_in_a_trace_path_is_a_bad_request_not_internal(trace):
    net = Net()
    assert net.request(b"a", hello("a", ["select"]))["type"] == "welcome"
    err = net.request(b"a", {"type": "reset", "workload": {"trace": str(trace) + "\x00x", "jobs": 10}})
    assert err["code"] == m.BAD_REQUEST and "NUL byte" in err["message"]


def test_a_negative_seed_is_a_bad_field_for_traces_and_generated_workloads_alike(trace):
    net = Net()
    assert net.request(b"a", hello("a", []))["type"] == "welcome"
    for workload in ({"trace": str(trace), "jobs": 10}, {"generate_jobs": 50}):
        err = net.request(b"a", {"type": "reset", "seed": -1, "workload": workload})
        assert err["code"] == m.BAD_FIELD and "non-negative" in err["message"]


@pytest.mark.parametrize("bad", [{"options": {"policy": "nope"}}, {"reward": "nope"}, {"options": {"bogus": 1}},
                                 {"workload": {"jobs": 0}}, {"options": {"window": 0}}])
def test_the_service_and_the_gymnasium_env_refuse_a_bad_episode_in_the_same_words(bad):
    """Both faces build the episode as one `EpisodeSpec`, so a bad reset gets one message."""
    pytest.importorskip("gymnasium")
    from hpcgym.environment.errors import ConfigError
    from hpcgym.gymbridge.env import HpcEnv

    net = Net()
    net.request(b"a", hello("a", ["select"]))
    err = net.request(b"a", {"type": "reset", "workload": {"jobs": 64, "sample": 1}, **bad})
    with pytest.raises(ConfigError) as refused:
        HpcEnv("select", workload={"jobs": 64, "sample": 1, **bad.get("workload", {})},
               options=bad.get("options"), reward=bad.get("reward", "bsld"))
    assert err["type"] == "error" and err["message"].endswith(str(refused.value)), (err, refused.value)
