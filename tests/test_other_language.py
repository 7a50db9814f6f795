"""An agent in another language: the C SJF agent of examples/c-sjf, written from
protocol/PROTOCOL.md alone, must schedule an episode job for job like the Python SJF agent.

The C agent is built with `make -C examples/c-sjf` (needs a C compiler, pkg-config, libzmq and
msgpack-c; .ci/run installs them). It and the Python agent play the same episode (same trace,
seed and job window) against one real `hpcgym env` process.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from hpcgym.agents.base import PriorityAgent
from hpcgym.agents.runtime import run_agent

ROOT = Path(__file__).resolve().parents[1]
AGENT_DIR = ROOT / "examples" / "c-sjf"
HPCGYM = Path(sys.executable).parent / "hpcgym"

EPISODE = {"seed": 5, "jobs": 300, "sample": 1}
# Build output that means the toolchain or a library is missing rather than a bug in the agent.
MISSING_MARKERS = ("zmq.h", "msgpack.h", "cannot find -lzmq", "cannot find -lmsgpack",
                   "not found", "No such file or directory")


@pytest.fixture(scope="module")
def c_agent() -> Path:
    """Builds the C agent; skips (saying what is missing) only when the toolchain or libs are."""
    if shutil.which("make") is None:
        pytest.skip("`make` is not installed; the C agent cannot be built")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler (cc/gcc) is installed; the C agent cannot be built")
    build = subprocess.run(["make", "-C", str(AGENT_DIR)], capture_output=True, text=True,
                           timeout=180)
    output = build.stdout + build.stderr
    if build.returncode != 0:
        if any(marker in output for marker in MISSING_MARKERS):
            pytest.skip("libzmq/msgpack-c development files are missing (Debian: apt-get install "
                        "libzmq3-dev libmsgpack-dev pkg-config); make said:\n" + output[-2000:])
        pytest.fail("make -C examples/c-sjf failed:\n" + output)
    assert "warning" not in output.lower(), "the C agent must compile without warnings:\n" + output
    binary = AGENT_DIR / "build" / "sjf_agent"
    assert binary.is_file(), output
    return binary


def write_swf(path: Path, n_jobs: int = 400, procs: int = 64, seed: int = 2024) -> None:
    """An overloaded little trace: bursts of same-second submits and a few coarse requested
    times, so the queue outgrows the 128-job window and SJF's tie rule (requested, then submit,
    then id) decides often; run times are below the requests, as in real traces."""
    rng = random.Random(seed)
    lines = [f"; MaxNodes: {procs}", f"; MaxProcs: {procs}"]
    submit = 0
    for job in range(1, n_jobs + 1):
        if rng.random() > 0.4:
            submit += rng.randint(1, 900)
        requested = rng.choice([600, 1800, 3600, 7200, 14400])
        run = rng.randint(1, requested)
        size = rng.choice([1, 2, 4, 8, 16, 32, 48, 64])
        lines.append(f"{job} {submit} -1 {run} {size} -1 -1 {size} {requested} -1 1 1 1 1 1 1 -1 -1")
    path.write_text("\n".join(lines) + "\n")


def short_dir(tmp_path: Path) -> Path:
    """tmp_path, or a shorter folder when an ipc:// path there would pass the ~107-byte limit."""
    if len(str(tmp_path / "env.ipc")) < 90:
        return tmp_path
    return Path(tempfile.mkdtemp(prefix="hpcgym-c-", dir="/tmp"))


def wait_until_serving(address: str, proc: subprocess.Popen, deadline_s: float = 30.0) -> None:
    """Says hello (no kinds) and bye until the env answers: then it accepts agents."""
    ctx = zmq.Context.instance()
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"hpcgym env exited early with {proc.returncode}")
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(address)
            hello = {"type": "hello", "protocol": "1.0", "agent": "probe", "kinds": []}
            sock.send_multipart([b"", msgpack.packb(hello)])
            if sock.poll(500, zmq.POLLIN):
                reply = msgpack.unpackb(sock.recv_multipart()[-1])
                assert reply["type"] == "welcome", reply
                sock.send_multipart([b"", msgpack.packb({"type": "bye"})])
                sock.poll(2000, zmq.POLLIN)
                return
        finally:
            sock.close()
    raise AssertionError(f"hpcgym env did not answer at {address} within {deadline_s} s")


@pytest.fixture
def env_address(tmp_path):
    """A real env process serving a small SWF over ipc://; always terminated afterwards."""
    folder = short_dir(tmp_path)
    trace = tmp_path / "bursty.swf"
    write_swf(trace)
    address = f"ipc://{folder / 'env.ipc'}"
    log = open(tmp_path / "env.log", "wb")
    # --open-sessions: the C agent speaks protocol 1.0, which has no session tokens
    proc = subprocess.Popen([str(HPCGYM), "env", "--bind", address, "--trace", str(trace), "--open-sessions"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_serving(address, proc)
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def read_starts(path: Path) -> dict[int, int]:
    """The C agent's --starts file: one `ID START` line per job."""
    starts = {}
    for line in path.read_text().splitlines():
        job, start = line.split()
        starts[int(job)] = int(start)
    return starts


def python_episode(address: str, policy: str) -> dict:
    reset = {"seed": EPISODE["seed"], "records": True,
             "workload": {"jobs": EPISODE["jobs"], "sample": EPISODE["sample"]}}
    run = run_agent(PriorityAgent(policy), address, name=f"python-{policy}", reset=reset,
                    timeout=10.0)
    assert len(run.episodes) == 1
    end = run.episodes[0]
    assert end["reason"] == "completed", end["reason"]
    return end


def c_command(binary: Path, address: str, *extra: str) -> list[str]:
    return [str(binary), address, "--reset", "--seed", str(EPISODE["seed"]),
            "--jobs", str(EPISODE["jobs"]), "--sample", str(EPISODE["sample"]), *extra]


def test_c_agent_schedules_like_the_python_sjf_agent(c_agent, env_address, tmp_path):
    starts = tmp_path / "starts.txt"
    c = subprocess.run(c_command(c_agent, env_address, "--json", "--starts", str(starts)),
                       capture_output=True, text=True, timeout=60)
    assert c.returncode == 0, c.stderr
    assert len(c.stdout.splitlines()) == 1, c.stdout[-2000:]   # the metrics, nothing else
    c_metrics, c_starts = json.loads(c.stdout), read_starts(starts)

    py = python_episode(env_address, "sjf")
    py_starts = dict(zip(py["jobs"]["job_id"], py["jobs"]["start"]))

    assert c_metrics["jobs"] == EPISODE["jobs"] == len(c_starts)
    assert c_starts == py_starts  # job for job
    assert c_metrics["mean_bsld"] == py["metrics"]["mean_bsld"]
    assert c_metrics == py["metrics"]  # floats are printed so that they read back exactly

    # The comparison has teeth: on this trace FCFS gives a different schedule.
    fcfs = python_episode(env_address, "fcfs")
    assert dict(zip(fcfs["jobs"]["job_id"], fcfs["jobs"]["start"])) != py_starts


def test_c_agent_joins_an_episode_another_agent_starts(c_agent, env_address, tmp_path):
    """--join: the C agent takes `select` in an episode a kind-less Python driver resets. It
    prints one short summary line (the starts go to the --starts file)."""
    starts = tmp_path / "starts.txt"
    joiner = subprocess.Popen([str(c_agent), env_address, "--join", "--timeout", "10", "--starts", str(starts)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(env_address)

        def request(message: dict) -> dict:
            sock.send_multipart([b"", msgpack.packb(message)])
            assert sock.poll(10_000, zmq.POLLIN), f"no reply to {message['type']}"
            return msgpack.unpackb(sock.recv_multipart()[-1])

        assert request({"type": "hello", "protocol": "1.0", "agent": "driver", "kinds": []})["type"] == "welcome"
        # `require` makes the env wait for the joiner's hello, so it takes part in the episode.
        reply = request({"type": "reset", "seed": EPISODE["seed"], "records": True,
                         "require": ["select"],
                         "workload": {"jobs": EPISODE["jobs"], "sample": EPISODE["sample"]}})
        deadline = time.monotonic() + 60
        while reply["type"] == "pending" and time.monotonic() < deadline:
            reply = request({"type": "poll"})
        assert reply["type"] == "episode_end" and reply["reason"] == "completed", reply
        request({"type": "bye"})
        out, err = joiner.communicate(timeout=30)
    finally:
        sock.close()
        if joiner.poll() is None:
            joiner.kill()
            joiner.communicate(timeout=10)
    assert joiner.returncode == 0, err
    m = reply["metrics"]
    assert out == (f"episode {reply['episode']}: completed, {m['jobs']} jobs, mean bounded slowdown "
                   f"{m['mean_bsld']:.2f}, mean wait {m['mean_wait']:.1f} s, utilization {m['utilization']:.4f}\n")
    assert read_starts(starts) == dict(zip(reply["jobs"]["job_id"], reply["jobs"]["start"]))


def test_c_agent_gives_up_when_no_env_answers(c_agent, tmp_path):
    address = f"ipc://{short_dir(tmp_path) / 'nobody.ipc'}"
    began = time.monotonic()
    r = subprocess.run([str(c_agent), address, "--reset", "--timeout", "1"],
                       capture_output=True, text=True, timeout=15)
    elapsed = time.monotonic() - began
    assert r.returncode != 0
    assert r.returncode == 3, r.stderr
    assert f"env at {address} did not answer within 1 s" in r.stderr
    assert elapsed < 5, elapsed
