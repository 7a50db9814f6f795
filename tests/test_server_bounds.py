"""The env server's third hardening round (issue 42): what one request may cost is bounded by
what costs (jobs parsed per trace, the trace cache's disk, CPU time per reset), work ends with
its agent, and a session left to the built-ins holds up no other session."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import msgpack
import numpy as np

from hpcgym.environment import trace_cache
from hpcgym.environment.service import Limits
from hpcgym.environment.swf import read_swf

from .test_service import Net, hello
from .test_sockets import ask, children, dealer, start_env  # noqa: F401 - fixtures

# One short job line (18 fields): a small .gz of such lines unpacks to millions of jobs.
SHORT_JOB = b"1 0 -1 1 1 -1 -1 1 1 -1 1 1 1 1 1 -1 -1 -1\n"


# ------------------------------------------------------------------------------------------ jobs per trace
def test_a_trace_of_more_jobs_than_the_limit_is_refused_while_parsed_and_never_cached(tmp_path, monkeypatch):
    """The probe's 4.7 MB .gz of 24.9 M one-line jobs took the env to 5.1 GB and left a 2.39 GB
    cache entry. Here 300,000 jobs over a limit of 100,000: refused naming the limit and its
    option, and nothing of it is written to the cache; an entry an unbounded reader left is
    refused by its size alone."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HPCGYM_CACHE", str(cache))
    traces = tmp_path / "traces"
    traces.mkdir()
    many = traces / "many.swf.gz"
    with gzip.open(many, "wb", compresslevel=1) as out:
        out.write(b"; MaxProcs: 4\n" + SHORT_JOB * 300_000)
    net = Net(limits=Limits(trace_dirs=(traces,), max_trace_jobs=100_000))
    assert net.request(b"a", hello("a", []))["type"] == "welcome"
    for attempt in ("parsed", "cached by an unbounded reader"):
        err = net.request(b"a", {"type": "reset", "workload": {"trace": "many.swf.gz"}})
        assert err["type"] == "error" and err["code"] == "bad_request", (attempt, err)
        assert "more than 100,000 jobs" in err["message"] and "--max-trace-jobs" in err["message"], err
        assert not list(cache.glob("swf*")) if attempt == "parsed" else len(list(cache.glob("swf*"))) == 1
        assert len(read_swf(many)) == 300_000  # without a bound it is a trace like any other (and is cached)


def test_the_trace_cache_stays_within_its_bound_evicting_the_least_recently_used(tmp_path, monkeypatch):
    """The cache had no bound: one refused trace left 2.39 GB on disk."""
    monkeypatch.setenv("HPCGYM_CACHE", str(tmp_path))
    columns, lines = np.zeros((1000, 12), dtype=np.int64), np.arange(1000, dtype=np.int64)
    entry = columns.nbytes + lines.nbytes + 2048  # the arrays, their headers and the zip's records
    monkeypatch.setenv("HPCGYM_CACHE_BYTES", str(2 * entry))
    assert trace_cache.store("a", {}, columns, lines) and trace_cache.store("b", {}, columns, lines)
    for age, key in enumerate("ab"):  # a stored before b (file times may tie within a few ms)
        os.utime(tmp_path / f"swf{trace_cache.FORMAT}-{key}.npz", (1000 + age, 1000 + age))
    assert trace_cache.load("a") is not None  # now a is the recently used one
    assert trace_cache.store("c", {}, columns, lines)
    assert trace_cache.load("b") is None and trace_cache.load("a") is not None and trace_cache.jobs("c") == 1000
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 2 * entry
    huge = np.zeros((3000, 12), dtype=np.int64)  # larger than the whole bound: not written at all
    assert not trace_cache.store("huge", {}, huge, np.arange(3000))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"swf{trace_cache.FORMAT}-{k}.npz" for k in "ac"]


# ------------------------------------------------------------------------------------------ work and its agent
HELLO = {"type": "hello", "protocol": "1.6", "agent": "probe", "kinds": []}


def _cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU seconds of a process (and, with `children`, of its descendants alive now)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    if not children:
        return own
    kids = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    return own + sum(_cpu_seconds(k, True) for k in kids if Path(f"/proc/{k}").exists())


def _answer(sock, timeout_s: float = 30.0) -> dict | None:
    """The next reply that is not `pending`."""
    while sock.poll(int(timeout_s * 1000)):
        reply = msgpack.unpackb(sock.recv_multipart()[1])
        if reply["type"] != "pending":
            return reply
    return None


def test_bye_stops_a_reset_of_an_unsatisfiable_sjf_range_while_others_are_served(children, ipc_dir):  # noqa: F811
    """The probe's 90-byte reset ran up to 200 SJF simulations in the env's process (six cut
    another session's throughput 25x), its `bye` was answered `pending` and the work went on
    after it. Here: another session plays an episode meanwhile, the draws run in a process of
    their own (the env's is idle), the bye is answered and they stop (the env's processes idle)."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = start_env(children, bind)
    attacker, other = dealer(bind), dealer(bind)
    try:
        assert ask(attacker, {**HELLO, "session": "a"})["type"] == "welcome"
        attacker.send_multipart([b"", msgpack.packb({"type": "reset", "workload": {
            "jobs": 2000, "sample": 1, "sjf_range": [1e9, 2e9]}})])
        assert ask(other, {**HELLO, "session": "o"})["type"] == "welcome"
        other.send_multipart([b"", msgpack.packb({"type": "reset", "workload": {"generate_jobs": 50}})])
        assert _answer(other)["type"] == "episode_end"  # served while the draws go on
        busy, own = _cpu_seconds(env.pid, children=True), _cpu_seconds(env.pid)
        deadline = time.monotonic() + 30  # the draws' process is niced: on a loaded machine it gets little
        while _cpu_seconds(env.pid, children=True) - busy < 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _cpu_seconds(env.pid, children=True) - busy >= 0.5, "the draws ended before the bye: nothing to stop"
        assert _cpu_seconds(env.pid) - own < 0.25, "the draws ran in the env's process"
        attacker.send_multipart([b"", msgpack.packb({"type": "bye"})])
        assert _answer(attacker, 10)["type"] == "bye"  # its reset's `pending`s before
        time.sleep(1.0)  # stopped within a second: the next second is idle
        idle = _cpu_seconds(env.pid, children=True)
        time.sleep(1.0)
        assert _cpu_seconds(env.pid, children=True) - idle < 0.2, "the work went on after the bye"
    finally:
        attacker.close()
        other.close()


def test_a_reset_over_its_cpu_time_is_refused_naming_the_limit():
    net = Net(limits=Limits(max_reset_cpu=0.2))
    assert net.request(b"a", hello("a", []))["type"] == "welcome"
    err = net.request(b"a", {"type": "reset", "workload": {"jobs": 2000, "sample": 1, "sjf_range": [1e9, 2e9]}})
    assert err["type"] == "error" and err["code"] == "bad_request", err
    assert "0.2 s of CPU time" in err["message"] and "--max-reset-cpu" in err["message"], err
    assert net.request(b"a", {"type": "reset", "workload": {"generate_jobs": 50}})["type"] == "episode_end"


def test_a_bye_that_leaves_a_long_episode_to_the_built_ins_holds_up_no_other_session(children, ipc_dir):  # noqa: F811
    """E6: the task the bye left ran in the thread of the next request, of any session, before
    that request's own: another session's 50-job reset was answered `pending` after a heartbeat."""
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    start_env(children, bind)
    controller, agent, other = dealer(bind), dealer(bind), dealer(bind)
    try:
        welcome = ask(controller, {**HELLO, "session": "s"})
        assert ask(agent, {**HELLO, "agent": "sjf", "kinds": ["select"], "session": "s",
                           "token": welcome["token"]})["type"] == "welcome"
        assert ask(other, {**HELLO, "session": "o"})["type"] == "welcome"
        agent.send_multipart([b"", msgpack.packb({"type": "join"})])
        controller.send_multipart([b"", msgpack.packb({"type": "reset", "workload": {"generate_jobs": 200_000}})])
        assert _answer(agent, 60)["type"] == "decision"
        assert ask(agent, {"type": "bye"}, timeout_s=10)["type"] == "bye"
        started = time.monotonic()
        reply = ask(other, {"type": "reset", "workload": {"generate_jobs": 50}}, timeout_s=10)
        waited = time.monotonic() - started
        assert reply["type"] == "episode_end" and waited < 0.9, (reply, waited)  # before: `pending` at 1.0 s
        while controller.poll(0):  # its reset was answered `pending`: it polls for the end
            controller.recv_multipart()
        end = ask(controller, {"type": "poll"}, timeout_s=60)
        while end["type"] == "pending":
            end = ask(controller, {"type": "poll"}, timeout_s=60)
        assert end["type"] == "episode_end" and end["metrics"]["jobs"] == 200_000, end  # it still played out
    finally:
        for sock in (controller, agent, other):
            sock.close()
