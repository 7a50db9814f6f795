"""The protocol over real sockets and real processes: `hpcgym env` and `hpcgym agent` as
subprocesses on ipc:// and tcp://127.0.0.1, against the in-process handler as reference.

Every child process is killed at the end of its test, whatever happens; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq
import zmq.auth

from hpcgym.agents.base import PriorityAgent
from hpcgym.agents.runtime import run_agent
from hpcgym.environment.decisions import Decision
from hpcgym.environment.service import EnvService
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload, sim_config
from hpcgym.protocol.codec import MAX_MESSAGE_BYTES

from .agents_for_tests import HalfClusterInspector, write_trace

ROOT = Path(__file__).resolve().parents[1]
_local = Path(sys.executable).parent / "hpcgym"
HPCGYM = str(_local) if _local.exists() else (shutil.which("hpcgym") or "hpcgym")
JOBS = 120
#: The session token the agents of one test share (`hpcgym env` sessions are private).
TOKEN = {"HPCGYM_SESSION_TOKEN": "test-session-token"}


# ------------------------------------------------------------------------------------------ helpers
def _default_sigint() -> None:
    """Children take Ctrl-C as a terminal user's programs do, even when the tests run in the
    background (a shell starts background jobs with SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Children:
    """Child processes of one test; all killed (SIGKILL) and reaped at its end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[subprocess.Popen] = []
        self.logs: dict[int, Path] = {}

    def start(self, *args: str, name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        out = self.folder / f"{name}.out"
        err = self.folder / f"{name}.err"
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen([HPCGYM, *args], cwd=ROOT, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                    env={**os.environ, **(env or {})}, preexec_fn=_default_sigint)
        self.procs.append(proc)
        self.logs[proc.pid] = out
        return proc

    def stdout(self, proc: subprocess.Popen) -> str:
        return self.logs[proc.pid].read_text()

    def stderr(self, proc: subprocess.Popen) -> str:
        return self.logs[proc.pid].with_suffix(".err").read_text()

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - nothing more we can do
                pass


@pytest.fixture
def children(tmp_path):
    kids = Children(tmp_path)
    try:
        yield kids
    finally:
        kids.kill_all()


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "t.swf", jobs=JOBS, procs=32, seed=2)


def free_tcp() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def dealer(address: str, curve: tuple[bytes, bytes, bytes] | None = None) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = curve
    sock.connect(address)
    return sock


def ask(sock: zmq.Socket, message: dict | bytes, timeout_s: float = 5.0) -> dict | None:
    body = message if isinstance(message, bytes) else msgpack.packb(message)
    sock.send_multipart([b"", body])
    if not sock.poll(int(timeout_s * 1000)):
        return None
    frames = sock.recv_multipart()
    assert frames[0] == b"" and len(frames) == 2, frames
    return msgpack.unpackb(frames[1])


def wait_until_serving(address: str, proc: subprocess.Popen, curve=None, deadline_s: float = 30.0) -> None:
    """Hello (no kinds) then bye until the env answers. Each probe in a session of its own, kept
    open until its reply comes: a probe answered late says bye too, so none stays registered and
    takes an agent's place (a worker's share of --max-agents is small in some tests)."""
    end = time.monotonic() + deadline_s
    probes: list[zmq.Socket] = []
    try:
        while time.monotonic() < end:
            assert proc.poll() is None, f"hpcgym env exited early with {proc.returncode}"
            sock = dealer(address, curve)
            probes.append(sock)
            sock.send_multipart([b"", msgpack.packb({"type": "hello", "protocol": "1.0", "agent": "probe",
                                                     "kinds": [], "session": f"probe-{len(probes)}"})])
            time.sleep(0.05)
            answered = [p for p in probes if p.poll(450 if p is sock else 0)]
            for probe in answered:  # a refusal (a worker's small share of a cap, full of probes) says it serves too
                frames = probe.recv_multipart()
                reply = msgpack.unpackb(frames[-1])
                assert reply["type"] == "welcome" or reply.get("retry_s"), frames
                if reply["type"] == "welcome":
                    assert ask(probe, {"type": "bye"}) == {"type": "bye"}
                probes.remove(probe)
                probe.close()
            if answered and not probes:
                return
            if answered:  # the others were sent before the env served: they are answered next
                for probe in list(probes):
                    if probe.poll(2000):
                        probe.recv_multipart()
                        ask(probe, {"type": "bye"})
                    probes.remove(probe)
                    probe.close()
                return
    finally:
        for probe in probes:
            probe.close()
    raise AssertionError(f"hpcgym env did not answer at {address} within {deadline_s} s")


def start_env(children: Children, bind: str, *args: str, curve=None, name: str = "env") -> subprocess.Popen:
    proc = children.start("env", "--bind", bind, *args, name=name)
    wait_until_serving(bind, proc, curve)
    return proc


def wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    end = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, f"process exited with {proc.returncode} before {path.name} appeared"
        assert time.monotonic() < end, f"{path} did not appear within {timeout_s} s"
        time.sleep(0.02)


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> tuple[int, float]:
    t0 = time.monotonic()
    rc = proc.wait(timeout=timeout_s)
    return rc, time.monotonic() - t0


def in_process_records(trace: Path, seed: int = 3) -> dict[str, list]:
    """The reference: the same reset handed to EnvService.handle_message directly (no codec, no socket)."""
    svc = EnvService({"workload": {"trace": str(trace)}})
    agent = PriorityAgent("sjf")
    (_, welcome), = svc.handle_message(b"me", {"type": "hello", "protocol": "1.0", "agent": "sjf",
                                                "kinds": ["select"]})
    assert welcome["type"] == "welcome"
    (_, reply), = svc.handle_message(b"me", {"type": "reset", "seed": seed, "records": True})
    while reply["type"] == "decision":
        (_, reply), = svc.handle_message(b"me", {"type": "act", "decision": reply["decision"],
                                                  "action": agent.act(Decision.from_message(reply))})
    assert reply["type"] == "episode_end" and reply["reason"] == "completed"
    return reply["jobs"]


# ------------------------------------------------------------------------------------------ transports
def test_the_same_episode_in_process_over_ipc_and_over_tcp(children, ipc_dir, trace):
    reference = in_process_records(trace)
    # the reference itself equals the plain simulation, and SJF made a difference
    w = load_workload({"trace": str(trace)}, 3)
    sim = simulate(w, sim_config({}, 3), agents={"select": PriorityAgent("sjf")})
    assert reference == {k: v.tolist() for k, v in sim.jobs.items()}
    assert reference["start"] != simulate(w, sim_config({}, 3)).jobs["start"].tolist()
    for bind in (f"ipc://{ipc_dir / 'env.ipc'}", free_tcp()):
        env = start_env(children, bind, "--trace", str(trace), name=f"env-{bind[:3]}")
        run = run_agent(PriorityAgent("sjf"), bind, name="sjf", reset={"seed": 3, "records": True}, timeout=10)
        assert [e["reason"] for e in run.episodes] == ["completed"]
        assert run.episodes[0]["jobs"] == reference, bind
        assert run.decisions > JOBS / 2
        # and the command-line agent over the same transport gets the same metrics (with the env's
        # order FCFS as above: by default `hpcgym agent sjf` would ask for SJF's, test_policy_agents.py)
        cli = children.start("agent", "sjf", "--connect", bind, "--seed", "3", "--json", "--timeout", "10",
                             "--policy", "fcfs", name=f"agent-{bind[:3]}")
        rc, _ = wait_exit(cli, 60)
        assert rc == 0, children.stderr(cli)
        line = json.loads(children.stdout(cli))
        # episode 1 again: the previous agent left, so this one starts a new session (PROTOCOL.md 7)
        assert line.pop("reason") == "completed" and line.pop("episode") == 1
        assert line == run.episodes[0]["metrics"]
        assert env.poll() is None


def test_select_and_inspect_served_by_two_processes(children, ipc_dir, trace, tmp_path):
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    log = tmp_path / "rejected.txt"
    inspector = children.start("agent", "tests.agents_for_tests:HalfClusterInspector", "--join", "--connect", bind,
                               "--timeout", "20", "--json", name="inspector", env={"HPCGYM_TEST_LOG": str(log), **TOKEN})
    run = run_agent(PriorityAgent("sjf"), bind, name="sjf", reset={"require": ["inspect"], "records": True},
                    timeout=20, token=TOKEN["HPCGYM_SESSION_TOKEN"])
    rc, _ = wait_exit(inspector, 20)
    assert rc == 0, children.stderr(inspector)
    end = run.episodes[0]
    assert end["reason"] == "completed"
    assert json.loads(children.stdout(inspector))["reason"] == "completed"
    jobs = end["jobs"]
    rejected = [int(j) for j in log.read_text().split()]
    assert len(rejected) >= 10
    assert jobs["rejections"] == [rejected.count(j) for j in jobs["job_id"]]
    w = load_workload({"trace": str(trace)})
    expected = simulate(w, sim_config({}), agents={"select": PriorityAgent("sjf"), "inspect": HalfClusterInspector()})
    assert jobs == {k: v.tolist() for k, v in expected.jobs.items()}


def test_the_agent_command_logs_its_progress_outside_a_terminal(children, ipc_dir, tmp_path):
    """A whole trace takes minutes: outside a terminal `hpcgym agent` prints a line every
    --progress-every seconds (decisions so far, simulated time, elapsed). SlowSJF takes 50 ms per
    decision, so the counts can be checked against the clock; a quick run at the default 10 s
    prints none."""
    import re

    trace = write_trace(tmp_path / "small.swf", jobs=30, procs=32, seed=2)
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    slow = children.start("agent", "tests.agents_for_tests:SlowSJF", "--connect", bind, "--progress-every", "0.25",
                          "--json", "--timeout", "20", name="slow")
    rc, _ = wait_exit(slow, 60)
    assert rc == 0, children.stderr(slow)
    pattern = re.compile(r"agent: (\d+) decisions, 0 episode\(s\) done, simulated time ([0-9.]+) days, "
                         r"([0-9.]+) s elapsed")
    lines = children.stderr(slow).splitlines()
    parsed = [pattern.fullmatch(line) for line in lines]
    assert lines and all(parsed), lines
    decisions = [int(p.group(1)) for p in parsed]
    elapsed = [float(p.group(3)) for p in parsed]
    assert len(lines) >= 3 and decisions == sorted(set(decisions))
    assert all(b - a >= 0.25 - 0.1 for a, b in zip(elapsed, elapsed[1:])), elapsed  # shown to 0.1 s
    assert all(e >= 0.05 * (d - 1) - 0.05 for d, e in zip(decisions, elapsed))  # 50 ms per decision answered
    assert json.loads(children.stdout(slow))["reason"] == "completed"
    quick = children.start("agent", "sjf", "--connect", bind, "--json", "--timeout", "20", name="quick")
    rc, _ = wait_exit(quick, 60)
    assert rc == 0 and children.stderr(quick) == ""


# ------------------------------------------------------------------------------------------ failures
@pytest.mark.parametrize("mode", ["fallback", "end"])
def test_killing_the_inspect_agent_mid_episode(children, ipc_dir, trace, tmp_path, mode):
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace), "--on-agent-lost", mode, "--decision-timeout", "2")
    marker = tmp_path / "stuck"
    inspector = children.start("agent", "tests.agents_for_tests:StuckInspector", "--join", "--connect", bind,
                               name="inspector", env={"HPCGYM_TEST_MARKER": str(marker), **TOKEN})
    select = children.start("agent", "sjf", "--connect", bind, "--require", "inspect", "--json", "--timeout", "10",
                            name="select", env=TOKEN)
    wait_for(marker, inspector)
    inspector.send_signal(signal.SIGKILL)
    rc, took = wait_exit(select, 30)
    end = json.loads(children.stdout(select))
    if mode == "fallback":
        assert rc == 0, children.stderr(select)
        assert end["reason"] == "completed" and end["jobs"] == JOBS
    else:
        assert rc == 1, children.stderr(select)
        assert end["reason"].startswith("agent 'tests.agents_for_tests:StuckInspector@")
        assert "(inspect) lost: no answer within 2 s" in end["reason"]
    assert took < 15
    assert env.poll() is None  # the env serves on
    run = run_agent(PriorityAgent("sjf"), bind, name="next", reset={}, timeout=10)
    assert run.episodes[0]["reason"] == "completed"


def test_killing_the_env_mid_episode_ends_the_agent_within_its_timeout(children, ipc_dir, trace, tmp_path):
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace))
    marker = tmp_path / "started"
    agent = children.start("agent", "tests.agents_for_tests:SlowSJF", "--connect", bind, "--timeout", "2",
                           name="agent", env={"HPCGYM_TEST_MARKER": str(marker)})
    wait_for(marker, agent)
    env.send_signal(signal.SIGKILL)
    rc, took = wait_exit(agent, 15)
    assert rc != 0
    assert took < 2 + 3
    assert "did not answer within 2 s" in children.stderr(agent)
    assert "Traceback" not in children.stderr(agent)


def test_a_joining_agent_gives_up_when_no_episode_starts(children, ipc_dir, trace):
    """`--join` with nobody resetting: the env answers `pending` at every heartbeat; the agent
    stops after its --timeout with one line, instead of polling forever."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    agent = children.start("agent", "reject-large", "--join", "--connect", bind, "--timeout", "2", name="joiner")
    rc, _ = wait_exit(agent, 30)
    assert rc == 2
    assert "no episode started" in children.stderr(agent) and "Traceback" not in children.stderr(agent)


def test_sigterm_ends_episodes_answers_waiting_agents_exits_0_and_removes_the_ipc_file(children, ipc_dir, trace,
                                                                                      tmp_path):
    path = ipc_dir / "env.ipc"
    bind = f"ipc://{path}"
    env = start_env(children, bind, "--trace", str(trace))
    assert path.exists()
    marker = tmp_path / "stuck"
    inspector = children.start("agent", "tests.agents_for_tests:StuckInspector", "--join", "--connect", bind,
                               name="inspector", env={"HPCGYM_TEST_MARKER": str(marker), **TOKEN})
    select = children.start("agent", "sjf", "--connect", bind, "--require", "inspect", "--json", "--timeout", "3",
                            name="select", env=TOKEN)
    wait_for(marker, inspector)
    idle = dealer(bind)
    try:
        assert ask(idle, {"type": "hello", "protocol": "1.0", "agent": "idle", "kinds": [],
                          "session": "elsewhere"})["type"] == "welcome"
        while True:  # a join with nothing to do waits; signal the env before its heartbeat answers it
            idle.send_multipart([b"", msgpack.packb({"type": "join"})])
            if not idle.poll(300):
                break
            assert msgpack.unpackb(idle.recv_multipart()[-1])["type"] == "pending"
        env.send_signal(signal.SIGTERM)
        rc, took = wait_exit(env, 10)
        assert rc == 0 and took < 5
        assert not path.exists()
        assert idle.poll(2000)
        err = msgpack.unpackb(idle.recv_multipart()[-1])
        assert err["type"] == "error" and err["code"] == "shutdown" and err["recoverable"] is False
    finally:
        idle.close()
    # the select agent was waiting on the stuck inspector: it gets the episode's end, with the reason
    rc, _ = wait_exit(select, 15)
    assert rc == 1
    assert json.loads(children.stdout(select))["reason"] == "shutdown"


def test_curve_lets_in_only_allowed_agents(children, trace, tmp_path):
    keys = tmp_path / "keys"
    for name in ("env", "a", "b"):
        proc = children.start("keys", name, "--dir", str(keys), name=f"keys-{name}")
        assert wait_exit(proc, 30)[0] == 0, children.stderr(proc)
    bind = free_tcp()
    server_public, _ = zmq.auth.load_certificate(str(keys / "env.key"))
    a_public, a_secret = zmq.auth.load_certificate(str(keys / "a.key_secret"))
    env = start_env(children, bind, "--trace", str(trace), "--curve-secret", str(keys / "env.key_secret"),
                    "--curve-allow", str(keys / "a.key"), curve=(server_public, a_public, a_secret))
    a = children.start("agent", "sjf", "--connect", bind, "--json", "--timeout", "10",
                       "--curve-server", str(keys / "env.key"), "--curve-secret", str(keys / "a.key_secret"), name="a")
    b = children.start("agent", "sjf", "--connect", bind, "--json", "--timeout", "2",
                       "--curve-server", str(keys / "env.key"), "--curve-secret", str(keys / "b.key_secret"), name="b")
    rc, _ = wait_exit(a, 30)
    assert rc == 0, children.stderr(a)
    assert json.loads(children.stdout(a))["reason"] == "completed"
    rc, took = wait_exit(b, 15)
    assert rc != 0 and took < 10
    assert "did not answer within 2 s" in children.stderr(b) and children.stdout(b) == ""
    # and a plain (no CURVE) client gets no answer either
    plain = dealer(bind)
    try:
        assert ask(plain, {"type": "hello", "protocol": "1.0", "agent": "plain", "kinds": []}, 1.0) is None
    finally:
        plain.close()
    assert env.poll() is None


def test_a_message_over_the_limit_does_not_kill_the_server(children, ipc_dir, trace):
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind, "--trace", str(trace))
    # past ZMQ_MAXMSGSIZE: the transport drops it (and the connection); no reply
    sock = dealer(bind)
    try:
        assert ask(sock, b"\x00" * (MAX_MESSAGE_BYTES + 4096), 1.5) is None
    finally:
        sock.close()
    # over the protocol limit but under the transport's: refused with too_large
    sock = dealer(bind)
    try:
        err = ask(sock, msgpack.packb({"type": "poll"}) + b"\x00" * MAX_MESSAGE_BYTES, 10)
        assert err is not None and err["type"] == "error" and err["code"] == "too_large"
        assert ask(sock, {"type": "hello", "protocol": "1.0", "agent": "x", "kinds": [],
                          "session": "x"})["type"] == "welcome"
    finally:
        sock.close()
    assert env.poll() is None
    run = run_agent(PriorityAgent("sjf"), bind, name="sjf", reset={}, timeout=10)
    assert run.episodes[0]["reason"] == "completed" and run.episodes[0]["metrics"]["jobs"] == JOBS


def test_the_agent_runtime_ignores_reply_fields_it_does_not_know(ipc_dir):
    """PROTOCOL.md section 8: a 1.x env may add reply fields; a reader MUST ignore them."""
    bind = f"ipc://{ipc_dir / 'fake.ipc'}"
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(bind)
    obs = {"time": 0, "procs": 4, "free": 4, "queue_length": 1, "queue": {"id": [7], "submit": [0], "size": [1],
           "requested": [10], "estimate": [10], "wait": [0], "rejections": [0], "user": [1]},
           "running": {"id": [], "start": [], "size": [], "requested": [], "estimated_end": []}, "context": {}}
    script = {
        "hello": {"type": "welcome", "protocol": "1.3", "session": "default", "env": {}, "motd": "hi"},
        "reset": {"type": "decision", "episode": 1, "decision": 1, "step": 1, "time": 0, "kind": "select",
                  "observation": obs, "candidates": [7], "can_wait": False, "reward": 0.0, "deadline": 5},
        "act": {"type": "episode_end", "episode": 1, "reason": "completed", "metrics": {"jobs": 1},
                "reward": 0.0, "jobs": None, "trace_hash": "abc"},
        "bye": {"type": "bye", "farewell": True},
    }
    seen = []

    def serve() -> None:
        for _ in range(4):
            if not router.poll(10_000):
                return
            peer, *envelope, body = router.recv_multipart()  # ["", BODY] or a single-frame [BODY]
            msg = msgpack.unpackb(body)
            seen.append(msg)
            router.send_multipart([peer, *envelope, msgpack.packb(script[msg["type"]])])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        run = run_agent(PriorityAgent("sjf"), bind, reset={}, timeout=5)
    finally:
        thread.join(15)
        router.close()
    assert [e["reason"] for e in run.episodes] == ["completed"]
    assert [m["type"] for m in seen] == ["hello", "reset", "act", "bye"] and seen[2]["action"] == 7


def test_req_sockets_and_single_frame_dealers_get_their_own_envelope(children, ipc_dir, trace):
    """PROTOCOL.md section 2: REQ works as is; a DEALER's single-frame [BODY] is answered [BODY]."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind, "--trace", str(trace))
    ctx = zmq.Context.instance()
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(bind)
    single = dealer(bind)
    try:
        req.send(msgpack.packb({"type": "hello", "protocol": "1.0", "agent": "req", "kinds": ["select"]}))
        assert req.poll(5000)
        welcome = msgpack.unpackb(req.recv())
        assert welcome["type"] == "welcome"
        req.send(msgpack.packb({"type": "reset", "seed": 3}))
        assert req.poll(5000)
        first = msgpack.unpackb(req.recv())
        assert first["type"] == "decision" and first["kind"] == "select"
        single.send(msgpack.packb({"type": "hello", "protocol": "1.3", "agent": "one", "kinds": ["select"],
                                   "token": welcome["token"]}))
        assert single.poll(5000)
        frames = single.recv_multipart()
        assert len(frames) == 1
        err = msgpack.unpackb(frames[0])
        assert err["code"] == "kind_taken" and "req" in err["message"]
    finally:
        req.close()
        single.close()
