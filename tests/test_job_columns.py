"""The queued jobs' group, executable and requested memory (SWF fields 13, 14, 10) in the
observation (protocol 1.5, PROTOCOL.md section 6): read from the trace, sent to 1.5 agents over
real sockets, and left out for older agents."""

from __future__ import annotations

from pathlib import Path

from hpcgym.environment.config import SimConfig
from hpcgym.environment.service import EnvService
from hpcgym.environment.simulator import Simulation
from hpcgym.environment.swf import read_swf, write_swf

from .test_prediction_protocol import hello, reset

# job, submit, run, size, requested time, requested memory, user, group, executable: J1 fills the
# 4 processors until 100, so J2 and J3 wait in the queue at their submits
JOBS = [(1, 0, 100, 4, 100, 2048, 7, 3, 11), (2, 5, 50, 2, 60, -1, 8, 4, 12), (3, 6, 50, 2, 60, 512, 7, 3, -1)]


def swf(path: Path) -> Path:
    lines = ["; MaxProcs: 4"] + [f"{j} {s} -1 {r} {n} -1 -1 {n} {q} {m} 1 {u} {g} {x} 1 1 -1 -1"
                                 for j, s, r, n, q, m, u, g, x in JOBS]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_columns_are_read_from_the_trace_and_written_back(tmp_path):
    w = read_swf(swf(tmp_path / "t.swf"))
    assert w.group.tolist() == [3, 4, 3] and w.executable.tolist() == [11, 12, -1]
    assert w.memory.tolist() == [2048, -1, 512]
    write_swf(tmp_path / "back.swf", w)
    again = read_swf(tmp_path / "back.swf")
    assert (again.group.tolist(), again.executable.tolist(), again.memory.tolist()) == \
        (w.group.tolist(), w.executable.tolist(), w.memory.tolist())


def test_the_observation_has_them_for_each_queued_job(tmp_path):
    sim = Simulation(read_swf(swf(tmp_path / "t.swf")), SimConfig(), external={"select"})
    d = sim.reset()
    while d.time < 6:  # J1 starts at 0; at 5 J2 waits; at 6 J3 too
        d = sim.step(None if d.time else d.candidates[0])
    queue = d.observation["queue"]
    assert queue["id"] == [2, 3] and queue["user"] == [8, 7]
    assert queue["group"] == [4, 3] and queue["executable"] == [12, -1] and queue["memory"] == [-1, 512]


def test_a_1_5_agent_gets_them_and_a_1_4_agent_does_not(tmp_path):
    svc = EnvService({"workload": {"trace": str(swf(tmp_path / "t.swf"))}})
    hello(svc, b"new", "1.5", ["select"])
    d = reset(svc, b"new", {})
    assert d["observation"]["queue"]["group"] == [3]  # J1, alone at 0
    assert d["observation"]["queue"]["executable"] == [11] and d["observation"]["queue"]["memory"] == [2048]
    hello(svc, b"old", "1.4", ["select"])
    d = reset(svc, b"old", {})
    assert set(d["observation"]["queue"]) == {"id", "submit", "size", "requested", "estimate", "wait", "rejections",
                                              "user"}
