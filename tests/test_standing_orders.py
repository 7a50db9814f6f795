"""Standing orders (protocol 1.4): a select agent ranks every candidate once and the env answers
its later select decisions by that ranking until a job it has not ranked joins the window.

The schedule below is worked by hand (4 processors, EASY, FCFS window order):

    job  submit  run  size  requested
     1      0    100    4      100
     2     10     50    2       50
     3     10     20    2       20
     4     20     10    4       10

t=0   asked: candidates [1]; order [1]: job 1 starts (the cluster is full until 100).
t=10  asked (2 and 3 are new): order [3, 2]: job 3 cannot start, it is reserved; nothing fits.
t=20  asked (4 is new): order [4, 3, 2]: job 4 is reserved; nothing fits.
t=100 job 1 ends; candidates [2, 3, 4], all ranked: the order picks 4, it starts (0 free);
      then [2, 3]: 3, reserved.
t=110 job 4 ends: [2, 3]: 3 starts; [2]: 2 starts.
Seven select decisions, the agent asked three times, four answered by its order: starts
1@0, 4@100, 3@110, 2@110, the schedule of SJF (requested 10 < 20 < 50).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcgym.environment.decisions import INSPECT, Decision
from hpcgym.environment.errors import InvalidAction
from hpcgym.environment.service import EnvService
from hpcgym.protocol.codec import decode, encode

JOBS = [(1, 0, 100, 4, 100), (2, 10, 50, 2, 50), (3, 10, 20, 2, 20), (4, 20, 10, 4, 10)]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    lines = ["; MaxProcs: 4"] + [f"{j} {s} -1 {r} {n} -1 -1 {n} {q} -1 1 1 1 1 1 1 -1 -1" for j, s, r, n, q in JOBS]
    path = tmp_path / "orders.swf"
    path.write_text("\n".join(lines) + "\n")
    return path


class Peer:
    def __init__(self, trace: Path) -> None:
        self.svc = EnvService()
        self.ask({"type": "hello", "protocol": "1.4", "agent": "ranker", "kinds": ["select"]})
        self.reply = self.ask({"type": "reset", "workload": {"trace": str(trace)}, "records": True})

    def ask(self, msg: dict) -> dict:
        (_, body), = self.svc.handle(b"ranker", encode(msg))
        return decode(body)

    def act(self, action) -> dict:
        self.reply = self.ask({"type": "act", "decision": self.reply["decision"], "action": action})
        return self.reply


def test_an_order_answers_until_an_unranked_job_arrives(trace):
    peer = Peer(trace)
    assert (peer.reply["time"], peer.reply["candidates"]) == (0, [1])
    assert "ordered" not in peer.act({"order": [1]})
    assert (peer.reply["time"], peer.reply["candidates"]) == (10, [2, 3])
    assert "ordered" not in peer.act({"order": [3, 2]})
    assert (peer.reply["time"], peer.reply["candidates"]) == (20, [2, 3, 4])
    end = peer.act({"order": [4, 3, 2]})
    assert end["type"] == "episode_end" and end["ordered"] == 4
    starts = dict(zip(end["jobs"]["job_id"], end["jobs"]["start"]))
    assert starts == {1: 0, 2: 110, 3: 110, 4: 100}


def test_a_new_job_in_the_window_ends_the_order(trace):
    peer = Peer(trace)
    peer.act({"order": [1]})
    peer.act({"order": [2, 3]})  # FCFS among 2 and 3; job 4 arrives at 20 unranked
    assert (peer.reply["type"], peer.reply["time"], peer.reply["candidates"]) == ("decision", 20, [2, 3, 4])
    assert "ordered" not in peer.reply


@pytest.mark.parametrize("order, code, words", [
    ({"order": [3]}, "invalid_action", "leaves out [2]"),
    ({"order": [3, 2, 3]}, "invalid_action", "twice"),
    ({"order": [3, 2, 9]}, "invalid_action", "job 9 is not a valid select choice"),
    ({"order": [3, "2"]}, "invalid_action", "integers"),
    ({"order": []}, "bad_field", "standing order"),
    ({"order": 3}, "bad_field", "standing order"),
    ({"rank": [3, 2]}, "bad_field", "standing order"),
    ({"order": [3, 2], "then": 1}, "bad_field", "standing order"),
])
def test_a_bad_order_is_refused_and_the_decision_stays(trace, order, code, words):
    peer = Peer(trace)
    peer.act({"order": [1]})
    pending = peer.reply
    error = peer.ask({"type": "act", "decision": pending["decision"], "action": order})
    assert error["type"] == "error" and error["code"] == code and words in error["message"], error
    assert error["pending"]["decision"] == pending["decision"]
    assert peer.act({"order": [3, 2]})["time"] == 20  # the decision was kept; a good order works


def test_an_order_answers_select_decisions_only():
    decision = Decision(None, INSPECT, 0, 1, [5], {"jobs": [5]})
    with pytest.raises(InvalidAction, match="select decisions only"):
        decision.parse_order({"order": [5]})


def test_an_order_never_answers_another_kind(tmp_path):
    """An agent taking select and backfill: its select order ranks job 3, but the backfill
    decision offering job 3 is still asked (4 processors; job 1 holds 2 until 100; job 2 needs 4
    and is reserved at 100; job 3 fits in the 2 free ones and ends at 30, before the reservation)."""
    jobs = [(1, 0, 100, 2, 100), (2, 10, 50, 4, 50), (3, 10, 20, 2, 20)]
    lines = ["; MaxProcs: 4"] + [f"{j} {s} -1 {r} {n} -1 -1 {n} {q} -1 1 1 1 1 1 1 -1 -1" for j, s, r, n, q in jobs]
    (tmp_path / "bf.swf").write_text("\n".join(lines) + "\n")
    svc = EnvService()
    ask = lambda msg: decode(svc.handle(b"a", encode(msg))[0][1])  # noqa: E731
    ask({"type": "hello", "protocol": "1.4", "agent": "both", "kinds": ["select", "backfill"]})
    d = ask({"type": "reset", "workload": {"trace": str(tmp_path / "bf.swf")}})
    d = ask({"type": "act", "decision": d["decision"], "action": {"order": [1]}})
    assert (d["kind"], d["time"], d["candidates"]) == ("select", 10, [2, 3])
    d = ask({"type": "act", "decision": d["decision"], "action": {"order": [2, 3]}})
    assert (d["kind"], d["time"], d["candidates"]) == ("backfill", 10, [3])
