"""Machines of nodes (environment/machine.py, docs/semantics.md section 13): EASY's reservations
hold on every resource, no node is ever oversubscribed, and the processor pool as one-core nodes
schedules exactly as the pool."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from hpcgym.environment.config import SimConfig
from hpcgym.environment.errors import ConfigError
from hpcgym.environment.machine import (
    KB_PER_GB,
    Machine,
    Partition,
    machine_from_dict,
    machine_from_header,
    on_machine,
)
from hpcgym.environment.simulator import Simulation, simulate
from hpcgym.environment.swf import read_swf
from hpcgym.environment.workload import Workload

GB = KB_PER_GB
#: HPC2N's 240 processors as 120 nodes of two cores and 768 MB: less memory per core than most
#: of its jobs ask (400 MB a core), so memory binds (the trace's header states no node memory; with
#: 1 GB nodes the window below barely meets a memory limit, and a reservation blind to memory
#: breaks none of its reservations, where here it breaks thousands).
TIGHT = Machine((Partition("tight", 120, 2, 768 * 1024),))


def _hpc2n(traces_dir, jobs: int = 3000, start: int = 54_000) -> Workload:
    return read_swf(traces_dir / "HPC2N-2002-2.2-cln.swf.gz").take(slice(start, start + jobs))


def _jobs(rows: list[tuple[int, int, int, int, int]]) -> Workload:
    """(submit, run, cores, memory KB per core, GPUs) per job; requests are the run times."""
    submit, run, size, memory, gpus = (np.array(col) for col in zip(*rows))
    n = len(rows)
    return Workload("hand", int(size.sum()), np.arange(1, n + 1), submit, run, size, run, np.zeros(n, int),
                    memory=memory, gpus=gpus)


def test_two_nodes_by_hand():
    """Two nodes of 4 cores and 8 GB, shared, first fit, FCFS + EASY, exact estimates:
    t=0  J1 (4 cores x 1 GB, 100 s) takes node 0 (left: 0 cores, 4 GB); J2 (1 core x 4 GB, 50 s)
         takes node 1 (left: 3 cores, 4 GB).
    t=1  J3 (2 cores x 3 GB) has 3 free cores but only one 3 GB unit fits node 1: reserved. Its
         shadow time is J2's end, 50, on node 1, which then keeps 2 cores and 2 GB over.
         J4 (1 core x 3 GB, 200 s) fits node 1 now but would end after 50 and needs 3 GB of the
         2 GB left over: it waits (by cores alone it would start and push J3 to 100).
         J5 (1 core x 1 GB, 20 s) ends by 50: it starts on node 1 at once.
    t=50 J3 starts on node 1 (left: 2 cores, 2 GB); J4 fits neither node (node 0 has no core):
         reserved for J1's end; t=100 J4 starts on node 0."""
    w = _jobs([(0, 100, 4, GB, 0), (0, 50, 1, 4 * GB, 0), (1, 50, 2, 3 * GB, 0), (1, 200, 1, 3 * GB, 0),
               (1, 20, 1, GB, 0)])
    machine = Machine((Partition("two", 2, 4, 8 * GB),))
    too_big = _jobs([(0, 1, 1, 9 * GB, 0), (0, 1, 3, GB, 0)])
    assert on_machine(too_big, machine).dropped["no_partition_fits"] == 1  # no node has 9 GB
    sim = Simulation(on_machine(w, machine), SimConfig())
    result = sim.run()
    assert result.jobs["start"].tolist() == [0, 0, 50, 100, 1]
    assert {j: sim._nodes.placed[j].nodes.tolist() for j in range(5)} == {0: [0], 1: [1], 2: [1], 3: [0], 4: [1]}
    # the same jobs on the pool of 8 processors: J3 starts at once
    assert simulate(w, SimConfig()).jobs["start"].tolist()[2] == 1


def test_whole_nodes_and_gpus_by_hand():
    """Whole nodes: a 1-core job holds a 4-core node. GPU units: 2 GPUs and 4 cores are two units
    of 2 cores + 1 GPU; a node of 4 cores and 1 GPU holds one, so the job spans two nodes."""
    w = _jobs([(0, 10, 1, 0, 0), (0, 10, 1, 0, 0), (0, 10, 1, 0, 0)])
    machine = Machine((Partition("n", 2, 4),), exclusive=True)
    assert simulate(on_machine(w, machine), SimConfig()).jobs["start"].tolist() == [0, 0, 10]
    gpu = Machine((Partition("g", 2, 4, 0, 1),))
    sim = Simulation(on_machine(_jobs([(0, 10, 4, 0, 2), (0, 10, 2, 0, 1)]), gpu), SimConfig())
    assert sim.run().jobs["start"].tolist() == [0, 10]
    assert sim._nodes.placed[0].used.tolist() == [[2, 0, 1], [2, 0, 1]]


@pytest.mark.parametrize("trace,policy,backfill", [("SDSC-SP2-1998-4.2-cln", "fcfs", "easy"),
                                                   ("HPC2N-2002-2.2-cln", "sjf", "easy"),
                                                   ("SDSC-SP2-1998-4.2-cln", "wfp3", "none"),
                                                   ("SDSC-SP2-1998-4.2-cln", "fcfs", "conservative")])
def test_one_core_nodes_schedule_as_the_pool(traces_dir, trace, policy, backfill):
    """The pool as nodes of one core (shared or whole: the same) gives the pool's schedule."""
    w = read_swf(traces_dir / f"{trace}.swf.gz").take(slice(10_000, 13_000))
    config = SimConfig(backfill=backfill)
    pool = simulate(w, config, policy=policy)
    for exclusive in (False, True):
        nodes = simulate(on_machine(w, Machine((Partition("one", w.procs, 1),), exclusive=exclusive)), config,
                         policy=policy)
        assert np.array_equal(pool.jobs["start"], nodes.jobs["start"])
        assert nodes.summary["utilization_cores"] == pytest.approx(pool.summary["utilization"])


def _reservations(sim: Simulation) -> list[tuple[int, int]]:
    """Record (head, shadow time) of every reservation the run makes."""
    made = []
    reserve = sim._nodes.reserve

    def recording(head, now, running):
        reservation = reserve(head, now, running)
        made.append((head, reservation.shadow))
        return reservation
    sim._nodes.reserve = recording
    return made


def test_easy_reservations_hold_on_memory(traces_dir):
    """A real HPC2N window with its memory requests on 2-core nodes of 768 MB: every reservation
    EASY makes is kept (jobs end by their walltime, so estimates hold): the reserved job starts
    no later than the shadow time computed then, on every resource."""
    w = on_machine(_hpc2n(traces_dir), TIGHT)
    sim = Simulation(w, SimConfig(overrun="kill"))
    made = _reservations(sim)
    start = sim.run().jobs["start"]
    assert len(made) > 3000
    late = [(head, shadow, int(start[head])) for head, shadow in made if start[head] > shadow]
    assert late == []
    # memory binds here: without it the same nodes give another schedule
    blind = on_machine(w, Machine((Partition("tight", 120, 2),)))
    assert not np.array_equal(simulate(blind, SimConfig(overrun="kill")).jobs["start"], start)


def test_conservative_on_nodes_by_hand():
    """Two nodes of 4 cores and 2 GPUs, shared, first fit, FCFS, exact estimates. A GPU job's
    unit is 1 core + 1 GPU. J1 (2 cores, 2 GPUs, 100 s) and J2 (the same, 50 s) take node 0 and
    node 1 at 0, leaving 2 cores and no GPU on each. At 1: J3 (4 cores, 4 GPUs, 100 s) needs
    both nodes' GPUs: from 100 (J1's end), 2 units on each node. J4 (whole node, 100 s) finds no
    idle node before J3's end: node 0 at 200. At 2, J5 (3 cores, 250 s):
    - conservative: over [2, 252) node 0 keeps no core through J4's [200, 300), node 1 two cores
      at most (J2, then J3): 2 < 3; the first start with 3 cores free throughout is 200, on
      node 1 (J3 gone). At 200 J4 and J5 start.
    - EASY protects only J3: J5 ends after its shadow time 100 but fits what J3 leaves over then
      (2 cores on each node), so it starts at 2 on node 0 (2) and node 1 (1); J4 then finds no
      idle node until J5 ends, 252."""
    w = _jobs([(0, 100, 2, 0, 2), (0, 50, 2, 0, 2), (1, 100, 4, 0, 4), (1, 100, 4, 0, 0), (2, 250, 3, 0, 0)])
    w = on_machine(w.with_columns(exclusive=np.array([0, 0, 0, 1, 0])), Machine((Partition("g", 2, 4, 0, 2),)))
    assert simulate(w, SimConfig(backfill="easy")).jobs["start"].tolist() == [0, 0, 100, 252, 2]
    sim = Simulation(w, SimConfig(backfill="conservative"))
    assert sim.run().jobs["start"].tolist() == [0, 0, 100, 200, 200]
    assert [sim._nodes.placed[j].nodes.tolist() for j in (2, 3, 4)] == [[0, 1], [0], [1]]


def _promised(monkeypatch) -> dict[int, list[int]]:
    """Record, after every conservative pass on nodes, each waiting job's reserved start."""
    from hpcgym.environment import simulator
    promised: dict[int, list[int]] = defaultdict(list)
    make = simulator.node_plan

    def recording(*args):
        plan = make(*args)
        due = plan.due

        def passing(*a):
            out = due(*a)
            for i, t in plan.reservations.items():
                promised[i].append(t)
            return out
        plan.due = passing
        return plan
    monkeypatch.setattr(simulator, "node_plan", recording)
    return promised


@pytest.mark.parametrize("trace", ["HPC2N", "Thunder"])
def test_conservative_reservations_hold_on_nodes(traces_dir, monkeypatch, trace):
    """Real windows, jobs ending by their walltime (so estimates hold): HPC2N with its memory
    requests on 2-core nodes of 768 MB (reservations on given nodes, every resource), and
    LLNL-Thunder's whole nodes (counted in nodes). No reservation ever moves later, and every
    job starts by every start it was promised."""
    if trace == "HPC2N":
        w, least = on_machine(_hpc2n(traces_dir, jobs=1000), TIGHT), 900
    else:
        thunder = read_swf(traces_dir / "LLNL-Thunder-2007-1.1-cln.swf.gz")
        w, least = on_machine(thunder.take(slice(34_000, 37_000)), machine_from_header(thunder.header)), 1000
    promised = _promised(monkeypatch)
    start = simulate(w, SimConfig(backfill="conservative", overrun="kill")).jobs["start"]
    waited = [i for i, ts in promised.items() if ts[0] > w.submit[i]]
    assert len(promised) > least and len(waited) > least / 10
    assert [i for i, ts in promised.items() if any(b > a for a, b in zip(ts, ts[1:]))] == []
    assert [i for i, ts in promised.items() if start[i] > ts[-1]] == []


def _mixed(traces_dir) -> Workload:
    """The HPC2N window with a GPU request on every tenth job of 1-4 cores (one GPU per core)."""
    w = _hpc2n(traces_dir, jobs=2000)
    gpus = np.where((np.arange(len(w)) % 10 == 0) & (w.size <= 4), w.size, 0)
    return w.with_columns(gpus=gpus)


@pytest.mark.parametrize("placement,exclusive", [("first_fit", False), ("best_fit", False), ("first_fit", True)])
def test_no_node_is_oversubscribed(traces_dir, placement, exclusive):
    """Replaying every start and end with the nodes each job got, no node of a heterogeneous
    machine (CPU nodes, GPU nodes) ever holds more cores, memory or GPUs than it has."""
    machine = Machine((Partition("cpu", 100, 2, 1 * GB), Partition("gpu", 20, 4, 2 * GB, 2)), placement, exclusive)
    w = on_machine(_mixed(traces_dir), machine)
    sim = Simulation(w, SimConfig(backfill="easy"))
    jobs = sim.run().jobs
    events = defaultdict(list)
    for i, (s, e) in enumerate(zip(jobs["start"].tolist(), jobs["end"].tolist())):
        a = sim._nodes.placed[i]
        events[s].append((1, a))
        events[e].append((-1, a))
    use = [np.zeros((p.nodes, 3), dtype=np.int64) for p in machine.partitions]
    capacity = [np.array([p.cores, p.memory, p.gpus]) for p in machine.partitions]
    for t in sorted(events):
        for sign, a in sorted(events[t], key=lambda e: e[0]):  # ends before starts at one instant
            use[a.partition][a.nodes] += sign * a.used
        for u, cap in zip(use, capacity):
            assert (u <= cap).all() and (u >= 0).all(), t
    gpu_jobs = np.flatnonzero(w.gpus > 0)
    assert len(gpu_jobs) and all(sim._nodes.placed[i].partition == 1 for i in gpu_jobs.tolist())
    summary = sim.result().summary
    assert 0 < summary["utilization_gpus"] < 1 and 0 < summary["utilization_memory"] < 1


def test_machines_from_header_and_spec():
    ds = machine_from_header({"MaxNodes": "184  ( 6,  171,   7)", "MaxProcs": "1664 (72, 1368, 224)"})
    assert [(p.nodes, p.cores) for p in ds.partitions] == [(6, 12), (171, 8), (7, 32)]
    thunder = machine_from_header({"MaxNodes": "1002", "MaxProcs": "4008"})
    assert thunder.exclusive and thunder.cores == 4008
    spec = machine_from_dict({"placement": "best_fit", "partitions": [
        {"name": "gpu", "nodes": 4, "cores": 32, "memory_gb": 256, "gpus": 4, "swf_partitions": [2]}]})
    assert spec.partitions[0].memory == 256 * GB and spec.placement == "best_fit"
    with pytest.raises(ConfigError, match="not built on nodes yet"):
        Simulation(on_machine(_jobs([(0, 1, 1, 0, 0)]), thunder), SimConfig(backfill_order="sjf"))
    with pytest.raises(ConfigError, match="multiple of its GPUs"):
        on_machine(_jobs([(0, 1, 3, 0, 2)]), spec)


def test_run_command_on_nodes(traces_dir, tmp_path):
    """`hpcgym run --machine` replays on the header's whole nodes or a spec file's partitions and
    prints the utilization of each resource held."""
    from click.testing import CliRunner
    from hpcgym.gymbridge.cli import main

    trace = str(traces_dir / "LLNL-Thunder-2007-1.1-cln.swf.gz")
    out = CliRunner().invoke(main, ["run", "--trace", trace, "--jobs", "2000", "--machine", "nodes"])
    assert out.exit_code == 0, out.output
    assert "1,002 nodes x 4 cores, whole nodes, first_fit" in out.output
    assert "utilization, cores held" in out.output
    spec = tmp_path / "hpc2n.toml"
    spec.write_text('placement = "best_fit"\n[[partitions]]\nname = "tight"\nnodes = 120\ncores = 2\n'
                    'memory_gb = 0.75\n')
    hpc2n = str(traces_dir / "HPC2N-2002-2.2-cln.swf.gz")
    out = CliRunner().invoke(main, ["run", "--trace", hpc2n, "--jobs", "1000", "--start", "54000", "--machine", str(spec),
                                    "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert 0 < summary["utilization_memory"] < 1 and summary["utilization_cores"] >= summary["utilization"]
