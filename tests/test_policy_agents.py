"""A built-in priority policy served as an external agent gives the built-in schedule job for job,
because its resets set the env's `policy` option, which orders the queue window and the built-in
backfill scan (PROTOCOL.md section 4). A real `hpcgym env` process, real sockets."""

from __future__ import annotations

import json
import subprocess

import pytest

from hpcgym.agents.base import PriorityAgent
from hpcgym.agents.runtime import episode_policy, load_agent, run_agent
from hpcgym.environment.priorities import POLICIES
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload, sim_config

from .agents_for_tests import write_trace
from .test_sockets import HPCGYM, Children, start_env

AGENT_POLICIES = [name for name, p in POLICIES.items() if not p.env_only]
SEED = 5
WINDOW = {"jobs": 150, "sample": 3}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One env for every policy: (its address, its trace)."""
    folder = tmp_path_factory.mktemp("policies")
    trace = write_trace(folder / "t.swf", jobs=400, procs=32, seed=7)
    kids = Children(folder)
    bind = f"ipc://{folder / 'env.ipc'}"
    try:
        start_env(kids, bind, "--trace", str(trace))
        yield bind, trace
    finally:
        kids.kill_all()


def builtin_jobs(trace, policy: str) -> dict[str, list]:
    result = simulate(load_workload({"trace": str(trace), **WINDOW}, SEED), sim_config({}, SEED), policy=policy)
    return {k: v.tolist() for k, v in result.jobs.items()}


def served_jobs(bind: str, agent, options: dict | None) -> dict[str, list]:
    reset = {"seed": SEED, "workload": WINDOW, "records": True, **({"options": options} if options else {})}
    run = run_agent(agent, bind, name="policy-test", reset=reset, timeout=20)
    assert run.episodes[0]["reason"] == "completed"
    return run.episodes[0]["jobs"]


@pytest.mark.parametrize("policy", AGENT_POLICIES)
def test_a_builtin_policy_as_an_external_agent_gives_the_builtin_schedule(served, policy):
    bind, trace = served
    order = episode_policy(policy)  # what `hpcgym agent POLICY` puts in its resets
    assert order == policy
    assert served_jobs(bind, load_agent(policy, seed=SEED), {"policy": order}) == builtin_jobs(trace, policy)


def test_without_the_policy_option_the_window_order_differs(served):
    """The test above has teeth: an SJF agent choosing from the env's default (FCFS) window."""
    bind, trace = served
    assert served_jobs(bind, PriorityAgent("sjf"), None)["start"] != builtin_jobs(trace, "sjf")["start"]


def test_hpcgym_agent_name_reproduces_hpcgym_run_policy_name(served):
    bind, trace = served
    window = ["--seed", str(SEED), "--jobs", str(WINDOW["jobs"]), "--sample", str(WINDOW["sample"]), "--json"]
    agent = subprocess.run([HPCGYM, "agent", "sjf", "--connect", bind, "--timeout", "20", *window],
                           capture_output=True, text=True, timeout=60)
    assert agent.returncode == 0, agent.stderr
    run = subprocess.run([HPCGYM, "run", "--trace", str(trace), "--policy", "sjf", *window],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    served_metrics, builtin = json.loads(agent.stdout.splitlines()[-1]), json.loads(run.stdout)
    assert {k: served_metrics[k] for k in ("jobs", "mean_wait", "mean_bsld", "max_wait", "makespan")} == \
           {k: builtin[k] for k in ("jobs", "mean_wait", "mean_bsld", "max_wait", "makespan")}


def test_standing_orders_give_the_same_schedule_in_fewer_messages(served):
    """`hpcgym agent sjf` sends standing orders (protocol 1.4) by default: the env answers the
    select decisions its ranking covers, so the agent is asked fewer times, for the same jobs."""
    bind, _ = served
    reset = {"seed": SEED, "workload": WINDOW, "records": True, "options": {"policy": "sjf"}}
    runs, asked = {}, {}
    for orders in (True, False):
        seen = []
        runs[orders] = run_agent(PriorityAgent("sjf"), bind, name=f"orders-{orders}", reset=reset, timeout=20,
                                 progress=lambda run, decision: seen.append(decision), orders=orders)
        asked[orders] = len(seen)
    assert runs[True].episodes[0]["jobs"] == runs[False].episodes[0]["jobs"]
    assert runs[True].decisions == runs[False].decisions == asked[False]
    assert asked[True] < asked[False]
