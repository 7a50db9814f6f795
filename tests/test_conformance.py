"""Conformance material: the message vectors and the env/agent checkers (protocol/conformance.py)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import zmq

from hpcgym.protocol import messages as m
from hpcgym.protocol.codec import MAX_MESSAGE_BYTES, decode, encode
from hpcgym.gymbridge.protocol_commands import check_agent_against_reference as check_agent
from hpcgym.protocol.conformance import check_env, validate_reply

VECTORS = Path(__file__).resolve().parents[1] / "protocol" / "vectors"
INDEX = json.loads((VECTORS / "index.json").read_text(encoding="utf-8"))
# The `hpcgym` command of this interpreter (its console script, else the same entry point via -c).
_SCRIPT = Path(sys.executable).with_name("hpcgym")
HPCGYM = [str(_SCRIPT)] if _SCRIPT.is_file() else \
    [sys.executable, "-c", "from hpcgym.gymbridge.cli import main; main()"]

def _vector_params():
    return [pytest.param(v, id=v["name"]) for v in INDEX["vectors"]]


def read(data: bytes, direction: str):
    """Decode and validate as the reader of that direction does (replies: section 8 semantics)."""
    msg = decode(data)
    if direction == "request":
        return m.validate(msg, m.REQUESTS)
    validate_reply(msg, strict=False)
    return msg


def same(a, b) -> bool:
    """Equal with the same JSON-level types (an int is not a float, a bool is not an int)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


# --------------------------------------------------------------------------- vectors
@pytest.mark.parametrize("vector", _vector_params())
def test_vector(vector):
    data = (VECTORS / vector["file"]).read_bytes()
    assert len(data) == vector["bytes"] and hashlib.sha256(data).hexdigest() == vector["sha256"]
    if vector["valid"]:
        msg = read(data, vector["direction"])
        assert same(msg, vector["decoded"])
        if vector["canonical"]:
            assert encode(vector["decoded"]) == data
    else:
        with pytest.raises(m.ProtocolError) as err:
            read(data, vector["direction"])
        assert err.value.code == vector["error"], err.value.message


def test_vectors_match_their_generator():
    spec = importlib.util.spec_from_file_location("make_vectors", VECTORS / "make_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files, index = module.build()
    assert index == (VECTORS / "index.json").read_bytes(), "run protocol/vectors/make_vectors.py"
    on_disk = {p.name for p in VECTORS.glob("*.msgpack")}
    assert on_disk == set(files)
    for name, data in files.items():
        assert (VECTORS / name).read_bytes() == data, name


def test_vectors_cover_every_type_and_optional_field():
    valid = [v for v in INDEX["vectors"] if v["valid"]]
    for direction, table in (("request", m.REQUESTS), ("reply", m.REPLIES)):
        seen = [v["decoded"] for v in valid if v["direction"] == direction]
        assert {msg["type"] for msg in seen} == set(table), direction
        for kind, fields in table.items():
            for f in fields:
                if not f.required:
                    of_kind = [msg for msg in seen if msg["type"] == kind]
                    assert any(f.name in msg for msg in of_kind), f"{kind}.{f.name} present"
                    assert any(f.name not in msg for msg in of_kind), f"{kind}.{f.name} absent"
    actions = [v["decoded"]["action"] for v in valid if v["decoded"]["type"] == "act"]
    for kind in (type(None), int, list, bool):
        assert any(type(a) is kind for a in actions), kind
    errors = {v["error"] for v in INDEX["vectors"] if not v["valid"]}
    assert errors <= set(m.ERROR_CODES)
    assert {"bad_message", "unknown_type", "bad_field", "too_large"} <= errors


def test_the_protocol_documents_hex_matches_the_vectors():
    text = (VECTORS.parent / "PROTOCOL.md").read_text(encoding="utf-8")
    flat = " ".join(text.split())
    for name in ("act_int", "hello_1_4"):
        assert (VECTORS / f"{name}.msgpack").read_bytes().hex(" ") in flat


def test_a_body_over_16_mib_is_too_large():
    with pytest.raises(m.ProtocolError) as err:
        decode(b"\xc0" * (MAX_MESSAGE_BYTES + 1))
    assert err.value.code == m.TOO_LARGE


# --------------------------------------------------------------------------- check_agent
def test_check_agent_passes_the_reference_agent():
    results = check_agent(shlex.join([*HPCGYM, "agent", "sjf", "--connect"]) + " {addr}", timeout=20)
    failed = [r.line() for r in results if not r.passed]
    assert not failed, failed
    assert {r.name for r in results} >= {"hello", "echoes_decision_ids", "candidate_actions", "polls_after_pending",
                                         "finishes_episode", "says_bye", "exits_0"}


BROKEN_AGENT = textwrap.dedent('''
    import sys, msgpack, zmq
    mode, addr = sys.argv[1], sys.argv[2]
    sock = zmq.Context().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(addr)
    def ask(msg):
        sock.send_multipart([b"", msgpack.packb(msg)])
        if not sock.poll(5000):
            sys.exit(3)
        return msgpack.unpackb(sock.recv_multipart()[-1])
    ask({"type": "hello", "protocol": "1.0", "agent": "broken", "kinds": ["select"]})
    reply = ask({"type": "reset"})
    for _ in range(1000):
        if reply["type"] == "pending":
            reply = ask({"type": "reset"} if mode == "ignores-pending" else {"type": "poll"})
            mode = "" if mode == "ignores-pending" else mode
        elif reply["type"] == "decision":
            decision, action = reply["decision"], reply["candidates"][0]
            if mode == "wrong-id":
                decision += 1
            elif mode == "not-candidate":
                action = max(reply["candidates"]) + 1000
            reply = ask({"type": "act", "decision": decision, "action": action})
        else:
            break
    ask({"type": "bye"})
''')


@pytest.mark.parametrize("mode, fails", [
    ("wrong-id", {"echoes_decision_ids", "no_error_replies", "answers_decisions", "finishes_episode"}),
    ("not-candidate", {"candidate_actions", "no_error_replies", "finishes_episode"}),
    ("ignores-pending", {"polls_after_pending"}),
])
def test_check_agent_fails_a_broken_agent(tmp_path, mode, fails):
    script = tmp_path / "broken_agent.py"
    script.write_text(BROKEN_AGENT)
    results = check_agent([sys.executable, str(script), mode, "{addr}"], timeout=20)
    failed = {r.name for r in results if not r.passed}
    assert failed == fails, [r.line() for r in results]


def test_check_agent_fails_an_agent_that_cannot_connect():
    began = time.monotonic()
    results = check_agent([sys.executable, "-c", "import sys; sys.exit(4)"], timeout=30)
    took = time.monotonic() - began
    assert [(r.name, r.passed) for r in results] == [("connects", False), ("exits_0", False)]
    # the detail reports how long the agent ran (well under the 30 s time-out), not the time-out
    said = float(re.search(r"exited after ([0-9.]+) s", results[0].detail).group(1))
    assert said - 0.05 <= took < 30 and "30 s" not in results[0].detail   # said is rounded to 0.1 s
    assert results[1].detail == "exit status 4"


# --------------------------------------------------------------------------- check_env
@pytest.fixture
def env_address(tmp_path):
    sock = tmp_path / "env.sock"
    proc = subprocess.Popen([*HPCGYM, "env", "--bind", f"ipc://{sock}"], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 15
    while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sock.exists(), proc.stderr.read() if proc.poll() is not None else "the env did not bind in time"
    yield f"ipc://{sock}"
    proc.terminate()
    assert proc.wait(10) == 0


def test_check_env_passes_the_reference_env(env_address):
    results = check_env(env_address, timeout=10)
    failed = [r.line() for r in results if not r.passed]
    assert not failed, failed
    names = {r.name for r in results}
    assert names >= {"version_mismatch", "welcome", "stale_decision", "invalid_action_not_candidate",
                     "bad_field_action_type", "unknown_type", "bad_message_garbage", "episode_end",
                     "metrics_keys", "replies_valid", "bye", f"prediction_columns_{m.PROTOCOL_VERSION}", "prediction_columns_1.3",
                     "prediction_bad_request_unknown", "prediction_bad_request_model_path", "select_kill_decisions",
                     "select_kill_list_refused", f"job_columns_{m.PROTOCOL_VERSION}", "job_columns_1.4"}


def test_check_agent_judges_select_kill_actions():
    from hpcgym.protocol.conformance import _fits

    d = {"kind": "select_kill", "candidates": [3, 1], "can_wait": False}
    assert _fits(d, 3) is None and _fits(d, 1) is None
    assert "not among the candidates" in _fits(d, 7)
    assert "got a list" in _fits(d, [3])
    assert "can_wait is false" in _fits(d, None)
    assert _fits({**d, "can_wait": True}, None) is None


def test_check_env_fails_an_env_that_answers_nonsense(tmp_path):
    """A ROUTER that answers every request with `pending` episode "1" (a string)."""
    address = f"ipc://{tmp_path / 'bad.sock'}"
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(address)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            if router.poll(20):
                peer, *rest = router.recv_multipart()
                router.send_multipart([peer, b"", encode({"type": "pending", "episode": "1"})])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        results = check_env(address, timeout=2)
    finally:
        stop.set()
        thread.join()
        router.close(0)
        ctx.term()
    failed = {r.name for r in results if not r.passed}
    assert {"hello_required", "replies_valid"} <= failed


# --------------------------------------------------------------------------- the commands
def test_protocol_commands_print_one_line_per_check_and_exit_1_on_failure(tmp_path):
    from click.testing import CliRunner

    from hpcgym.gymbridge.cli import main

    quit_at_once = shlex.join([sys.executable, "-c", "import sys; sys.exit(4)"])
    r = CliRunner().invoke(main, ["protocol", "check-agent", quit_at_once, "--timeout", "5"])
    assert r.exit_code == 1, r.output
    assert "FAIL connects:" in r.output and "FAIL exits_0: exit status 4" in r.output
    r = CliRunner().invoke(main, ["protocol", "check-env", f"ipc://{tmp_path / 'nobody.sock'}", "--timeout", "0.3",
                                  "--json"])
    assert r.exit_code == 1
    results = json.loads(r.output.splitlines()[0])
    assert results[0] == {"name": "answers:poll before hello", "passed": False,
                          "detail": "no reply within 0.3 s; stopping"}
