"""The built-in inspect agents (agents/inspectors.py): accept-all changes nothing, reject-large
rejects exactly the picks its rule names, in process and over the protocol."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcgym.agents.inspectors import AcceptAllInspector, RejectLargeInspector
from hpcgym.agents.runtime import BUILTIN_AGENTS, load_agent
from hpcgym.environment.decisions import Decision
from hpcgym.environment.service import EnvService
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload, sim_config
from hpcgym.gymbridge.cli import main

from .agents_for_tests import write_trace

# Four processors, EASY backfilling, FCFS (the built-in select). Job (submit, size, run = requested):
# 1 (0, 3, 1000), 2 (10, 4, 50), 3 (20, 1, 10).
TINY = """; MaxProcs: 4
1 0 -1 1000 3 -1 -1 3 1000 -1 1 1 1 1 1 1 -1 -1
2 10 -1 50 4 -1 -1 4 50 -1 1 1 1 1 1 1 -1 -1
3 20 -1 10 1 -1 -1 1 10 -1 1 1 1 1 1 1 -1 -1
"""
# Worked by hand (docs/semantics.md sections 3-5; a rejection ends the pass and sets a wake-up
# max_interval = 600 s later):
# - no inspector: job 1 starts at 0 (3 of 4 free). At 10 job 2 (4) does not fit: reserved, shadow
#   time 1000. At 20 FCFS picks job 2 again (reserved again) and job 3 backfills (ends 30 <= 1000):
#   starts 0, 1000, 20.
# - reject-large: at 0 and 10 it accepts (job 1 fits; job 2 does not, but nothing else waits). At
#   20 the pick, job 2, needs 4 > 1 free while job 3 (1) would fit: rejected, nothing starts, wake-up
#   at 620. At 620 the same: rejected again (2 rejections), wake-up at 1220. At 1000 job 1 ends: job 2
#   fits (accepted, starts); job 3 does not fit (0 free) and nothing else waits: accepted, reserved
#   until job 2 ends at 1050: starts 0, 1000, 1050.
# - reject-large with max_rejections 1: at 620 job 2 has had its one rejection, so the pick is not
#   inspected: job 2 is reserved again and job 3 backfills at 620 (ends 630 <= 1000): starts 0,
#   1000, 620.
BY_HAND = {
    "none": ([0, 1000, 20], [0, 0, 0]),
    "reject-large": ([0, 1000, 1050], [0, 2, 0]),
    "reject-large, cap 1": ([0, 1000, 620], [0, 1, 0]),
}


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.swf"
    path.write_text(TINY)
    return path


def over_the_protocol(trace: Path, agent, options: dict | None = None) -> tuple[dict, int]:
    """One episode through the env's request handler, `agent` taking its kinds and resetting:
    (the per-job records, the number of decisions it was asked)."""
    svc = EnvService({"workload": {"trace": str(trace)}})
    (_, welcome), = svc.handle_message(b"a", {"type": "hello", "protocol": "1.0", "agent": "insp",
                                              "kinds": list(agent.kinds)})
    assert welcome["type"] == "welcome"
    (_, reply), = svc.handle_message(b"a", {"type": "reset", "records": True, "options": options or {}})
    asked = 0
    while reply["type"] == "decision":
        assert reply["kind"] in agent.kinds
        asked += 1
        (_, reply), = svc.handle_message(b"a", {"type": "act", "decision": reply["decision"],
                                                "action": agent.act(Decision.from_message(reply))})
    assert reply["type"] == "episode_end" and reply["reason"] == "completed", reply
    return reply["jobs"], asked


def test_accept_all_over_the_protocol_schedules_as_no_inspector(tmp_path):
    trace = write_trace(tmp_path / "t.swf", jobs=60, procs=32, seed=1)
    plain = simulate(load_workload({"trace": str(trace)}), sim_config({})).jobs
    jobs, asked = over_the_protocol(trace, AcceptAllInspector())
    assert asked >= 60  # every job's start was inspected
    assert jobs == {k: v.tolist() for k, v in plain.items()}
    # the comparison can tell inspectors apart: the rule rejects here, and that changes the schedule
    ruled, _ = over_the_protocol(trace, RejectLargeInspector())
    assert sum(ruled["rejections"]) > 0 and ruled["start"] != jobs["start"]


@pytest.mark.parametrize("case", list(BY_HAND))
def test_reject_large_on_a_hand_worked_workload(tiny, case):
    options = {"max_rejections": 1} if "cap 1" in case else {}
    agents = {} if case == "none" else {"inspect": RejectLargeInspector()}
    result = simulate(load_workload({"trace": str(tiny)}), sim_config(options), agents=agents)
    starts, rejections = BY_HAND[case]
    assert result.jobs["start"].tolist() == starts
    assert result.jobs["rejections"].tolist() == rejections
    if agents:
        jobs, _ = over_the_protocol(tiny, RejectLargeInspector(), options)
        assert (jobs["start"], jobs["rejections"]) == (starts, rejections)
    accepted = simulate(load_workload({"trace": str(tiny)}), sim_config(options),
                        agents={"inspect": AcceptAllInspector()}).jobs
    assert accepted["start"].tolist() == BY_HAND["none"][0]


def test_the_inspectors_are_built_in_agents_listed_in_the_agent_help():
    assert type(load_agent("accept-all")) is AcceptAllInspector
    assert type(load_agent("reject-large")) is RejectLargeInspector
    text = CliRunner().invoke(main, ["agent", "--help"]).output
    listed = text[text.index("Built-in agents"):]
    from hpcgym.environment.priorities import POLICIES

    for name in [*(n for n, p in POLICIES.items() if not p.env_only), *BUILTIN_AGENTS]:
        assert sum(line.split()[:1] == [name] for line in listed.splitlines()) == 1, name
    assert not any(line.split()[:1] == ["multifactor"] for line in listed.splitlines())  # the env's only


def test_inspectors_in_compare_policies(tmp_path, monkeypatch):
    from hpcgym.gymbridge.compare.policy import parse_policy
    from hpcgym.environment.errors import ConfigError

    policy = parse_policy("p=select:sjf,inspect:reject-large")
    assert [(a.kinds, a.source, a.target) for a in policy.agents] == [
        (("select",), "builtin", "sjf"), (("inspect",), "builtin", "reject-large")]
    with pytest.raises(ConfigError, match="takes inspect only; write inspect:accept-all"):
        parse_policy("p=select:accept-all")
    # in a comparison (in process), accept-all leaves every sequence's schedule as FCFS's
    trace = write_trace(tmp_path / "t.swf", jobs=80, procs=32, seed=3)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["compare", "--trace", str(trace), "--jobs", "30", "--samples", "2", "--inproc",
                                       "--workers", "1", "--bootstrap", "100", "--no-plots", "--out", "out",
                                       "--policy", "fcfs", "--policy", "acc=inspect:accept-all",
                                       "--policy", "rej=inspect:reject-large"])
    assert result.exit_code == 0, result.output
    for k in range(2):
        fcfs = (tmp_path / "out" / "jobs" / "fcfs" / f"seq-{k:03d}.csv").read_text()
        assert (tmp_path / "out" / "jobs" / "acc" / f"seq-{k:03d}.csv").read_text() == fcfs
    assert any((tmp_path / "out" / "jobs" / "rej" / f"seq-{k:03d}.csv").read_text()
               != (tmp_path / "out" / "jobs" / "fcfs" / f"seq-{k:03d}.csv").read_text() for k in range(2))
