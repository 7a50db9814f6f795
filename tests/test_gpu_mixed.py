"""Mixed CPU/GPU machines through every face (issue 44): the gpu-mixed model holds the published
Helios statistics it cites (docs/gpu.md), runs under FCFS+EASY and a select agent on its nodes,
the workload key `machine` reaches the Gymnasium env and a protocol reset (its spec file held to
the trace folders), a PPO agent trains on it, and an external agent over a real socket sees each
queued job's GPU request and the partitions' free resources."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from click.testing import CliRunner

from hpcgym.environment.config import SimConfig
from hpcgym.environment.errors import ConfigError, HpcgymError, InvalidAction
from hpcgym.environment.gpu_mixed import generate_gpu_mixed, gpu_mixed_machine
from hpcgym.environment.limits import Limits
from hpcgym.environment.machine import load_machine
from hpcgym.environment.simulator import Simulation
from hpcgym.environment.spec import WorkloadSpec, load_workload
from hpcgym.protocol.messages import PROTOCOL_VERSION

from .test_sockets import ask, children, dealer, free_tcp, start_env  # noqa: F401 (children: a fixture)

SPEC = {"model": "gpu-mixed", "generate_jobs": 600, "jobs": 300, "start": 0}


def test_the_model_holds_the_published_statistics():
    """Helios Venus (helios_cluster_summary.csv): GPU jobs 125,303 of 246,708; GPUs median 1, mean
    6.736; run time medians 21 s (CPU) and 204 s (GPU), means 1,649.859 s and 13,040.598 s; 1.319
    jobs a day per GPU."""
    w = generate_gpu_mixed(200_000, seed=1)
    gpu = w.gpus > 0
    assert gpu.mean() == pytest.approx(125_303 / 246_708, abs=0.005)
    assert np.median(w.gpus[gpu]) == 1 and w.gpus[gpu].mean() == pytest.approx(6.736, rel=0.02)
    assert np.median(w.run[~gpu]) == pytest.approx(21, rel=0.05) and np.median(w.run[gpu]) == pytest.approx(204, rel=0.05)
    assert w.run[~gpu].mean() == pytest.approx(1_649.859, rel=0.05)
    assert w.run[gpu].mean() == pytest.approx(13_040.598, rel=0.05)
    assert len(w) / (w.submit[-1] / 86_400) == pytest.approx(246_708 / 183 / 1_022 * 128, rel=0.02)
    assert w.dropped["no_partition_fits"] == 0 and set(np.unique(w.gpus[gpu])) <= {1, 2, 4, 8, 16, 32, 64}
    assert (w.size[gpu] == 6 * w.gpus[gpu]).all() and w.machine == gpu_mixed_machine()


def test_the_documented_machine_spec_is_the_models():
    assert load_machine("docs/machines/gpu-mixed.json") == gpu_mixed_machine()


def _held_within_capacity(sim: Simulation, jobs: dict) -> None:
    """Replaying every start and end on the nodes each job got, no node holds more than it has,
    and every GPU job ran on the GPU nodes, every CPU job on the CPU nodes."""
    machine, w = sim.workload.machine, sim.workload
    events = defaultdict(list)
    for i, (s, e) in enumerate(zip(jobs["start"].tolist(), jobs["end"].tolist())):
        events[s].append((1, sim._nodes.placed[i]))
        events[e].append((-1, sim._nodes.placed[i]))
    use = [np.zeros((p.nodes, 3), dtype=np.int64) for p in machine.partitions]
    capacity = [np.array([p.cores, p.memory, p.gpus]) for p in machine.partitions]
    for t in sorted(events):
        for sign, a in sorted(events[t], key=lambda e: e[0]):
            use[a.partition][a.nodes] += sign * a.used
        assert all((u <= cap).all() for u, cap in zip(use, capacity)), t
    assert all(sim._nodes.placed[i].partition == int(w.gpus[i] > 0) for i in range(len(w)))


def test_fcfs_easy_runs_the_mixed_workload_from_its_workload_key():
    w = load_workload(SPEC)
    assert w.machine == gpu_mixed_machine() and (w.gpus > 0).any()
    sim = Simulation(w, SimConfig(backfill="easy"))
    result = sim.run()
    _held_within_capacity(sim, result.jobs)
    assert (result.jobs["start"] >= result.jobs["submit"]).all() and result.summary["started_backfilled"] > 0
    assert 0 < result.summary["utilization_gpus"] < 1


def test_a_select_agent_schedules_on_nodes_one_job_at_a_time():
    """Random picks over the whole episode: each starts or is reserved; no node oversubscribed."""
    w = load_workload(SPEC)
    sim = Simulation(w, SimConfig(backfill="easy"), external={"select"})
    rng, d, multi_refused = np.random.default_rng(3), sim.reset(), False
    while d is not None:
        if len(d.candidates) > 1 and not multi_refused:
            with pytest.raises(InvalidAction, match="one job at a time"):
                d.parse(d.candidates[:2])
            multi_refused = True
        assert d.observation["machine"]["name"] == ["cpu", "gpu"]
        d = sim.step(int(rng.choice(d.candidates)))
    assert multi_refused
    _held_within_capacity(sim, sim.result().jobs)


def test_the_observation_shows_requests_and_free_resources_per_partition():
    w = load_workload(SPEC)
    sim = Simulation(w, SimConfig(backfill="easy"), external={"select"})
    d, seen = sim.reset(), 0
    while d is not None and seen < 200:
        obs, index = d.observation, {int(j): k for k, j in enumerate(w.job_id)}
        queued = [index[j] for j in obs["queue"]["id"]]
        assert obs["queue"]["gpus"] == w.gpus[queued].tolist()
        assert obs["queue"]["partition"] == w.partition[queued].tolist()
        assert obs["machine"]["free_cores"] == [t[0] for t in sim._nodes.totals]
        assert sum(obs["machine"]["free_cores"]) == obs["free"]
        held = int(sum(w.gpus[index[j]] for j in obs["running"]["id"]))
        assert obs["machine"]["free_gpus"] == [0, 16 * 8 - held]
        d, seen = sim.step(d.candidates[0]), seen + 1


def test_the_machine_key_reaches_the_gymnasium_env(tmp_path):
    import hpcgym.gymbridge as gb

    spec = tmp_path / "m.json"
    spec.write_text(json.dumps({"partitions": [{"name": "n", "nodes": 8, "cores": 4}], "exclusive": True}))
    env = gb.make("select", workload={"generate_jobs": 300, "procs": 32, "jobs": 64, "sample": True,
                                      "machine": str(spec)})
    _, info = env.reset(seed=0)
    done = False
    while not done:
        _, _, term, trunc, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        done = term or trunc
    assert "utilization_cores" in info["metrics"] and "utilization_gpus" not in info["metrics"]


def test_a_machine_spec_file_over_the_protocol_comes_only_from_the_trace_folders(tmp_path):
    served, elsewhere = tmp_path / "traces", tmp_path / "other"
    served.mkdir(), elsewhere.mkdir()
    text = json.dumps({"partitions": [{"name": "n", "nodes": 8, "cores": 4}]})
    (served / "m.json").write_text(text)
    (elsewhere / "m.json").write_text(text)
    limits = Limits(trace_dirs=(served,), max_trace_bytes=1 << 20)
    assert limits.workload({"machine": "m.json,best_fit"})["machine"] == f"{(served / 'm.json').resolve()},best_fit"
    assert limits.workload({"machine": "nodes:shared"})["machine"] == "nodes:shared"
    with pytest.raises(HpcgymError, match="only from its machine spec folders"):
        limits.workload({"machine": str(elsewhere / "m.json")})
    with pytest.raises(ConfigError, match="drop procs and trace"):
        WorkloadSpec(model="gpu-mixed", procs=64)


def test_an_external_agent_sees_each_jobs_gpu_request_over_a_socket(children):
    """`hpcgym env` as its own process; a 1.7 agent's reset asks for the gpu-mixed workload and
    every decision's queue carries the jobs' GPUs and the machine table; a 1.6 agent's does not
    carry the new columns."""
    bind = free_tcp()
    start_env(children, bind)
    w = load_workload(SPEC)
    gpus = dict(zip(w.job_id.tolist(), w.gpus.tolist()))
    for version, session in (("1.7", "new"), ("1.6", "old")):
        sock = dealer(bind)
        try:
            welcome = ask(sock, {"type": "hello", "protocol": version, "agent": "gpu-reader", "kinds": ["select"],
                                 "session": session}, 10)
            assert welcome["type"] == "welcome" and welcome["protocol"] == PROTOCOL_VERSION, welcome
            reply = ask(sock, {"type": "reset", "workload": SPEC, "seed": 0}, 30)
            seen_gpu_jobs = 0
            for _ in range(40):
                assert reply["type"] == "decision", reply
                queue = reply["observation"]["queue"]
                assert reply["observation"]["machine"]["gpus"] == [0, 8]
                if version == "1.6":
                    assert "gpus" not in queue
                else:
                    assert queue["gpus"] == [gpus[j] for j in queue["id"]]
                    seen_gpu_jobs += sum(g > 0 for g in queue["gpus"])
                reply = ask(sock, {"type": "act", "decision": reply["decision"], "action": reply["candidates"][0]},
                            30)
            assert version == "1.6" or seen_gpu_jobs > 0
        finally:
            sock.close()


@pytest.mark.slow
def test_ppo_trains_on_the_mixed_workload_through_the_gymnasium_env(tmp_path):
    from hpcgym.gymbridge.cli import main

    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", "ppo", "--model", "gpu-mixed", "--jobs", "64", "--epochs", "2",
                                       "--trajectories", "3", "--envs", "2", "--eval-episodes", "2", "--out", str(out),
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    curve = (out / "curve.csv").read_text().splitlines()
    assert len(curve) == 3  # a header and two epochs
    assert (out / "model.pt").exists()


def test_an_env_serves_its_default_trace_on_the_nodes_its_header_names(children, tmp_path):
    """`hpcgym env --trace T --machine nodes`: a reset without a workload plays T on whole nodes,
    so a 1.7 agent sees the machine table of T's header (4 nodes of 4 cores)."""
    trace = tmp_path / "nodes.swf"
    lines = ["; MaxNodes: 4", "; MaxProcs: 16"]
    lines += [f"{i + 1} {10 * i} -1 {300 + 20 * i} {1 + i % 6} -1 -1 {1 + i % 6} 600 -1 1 1 1 1 1 1 -1 -1"
              for i in range(24)]
    trace.write_text("\n".join(lines) + "\n")
    bind = free_tcp()
    start_env(children, bind, "--trace", str(trace), "--machine", "nodes")
    sock = dealer(bind)
    try:
        welcome = ask(sock, {"type": "hello", "protocol": "1.7", "agent": "nodes", "kinds": ["select"],
                             "session": "nodes"}, 10)
        assert welcome["type"] == "welcome" and welcome["env"]["defaults"]["workload"]["machine"] == "nodes"
        reply = ask(sock, {"type": "reset", "seed": 0}, 30)
        assert reply["type"] == "decision", reply
        machine = reply["observation"]["machine"]
        assert machine["nodes"] == [4] and machine["cores"] == [4], machine
    finally:
        sock.close()


def test_compare_on_the_mixed_workload_is_hpcgym_run_of_it(tmp_path):
    """compare's sequence files carry the machine and each job's GPUs (HpcgymMachine, HpcgymJob
    header lines), so its fcfs+easy unit schedules what `hpcgym run` does on the same window:
    the same per-job records and metrics, the GPUs' utilization among them."""
    from hpcgym.environment.swf import read_swf
    from hpcgym.gymbridge.cli import main

    window = ["--model", "gpu-mixed", "--jobs", "300"]
    ran = CliRunner().invoke(main, ["run", *window, "--sample", "0", "--json", "--jobs-out", str(tmp_path / "run.csv")])
    assert ran.exit_code == 0, ran.output
    out = tmp_path / "cmp"
    compared = CliRunner().invoke(main, ["compare", *window, "--samples", "1", "--policy", "fcfs+easy", "--inproc",
                                         "--workers", "1", "--no-plots", "--bootstrap", "100", "--out", str(out)])
    assert compared.exit_code == 0, compared.output
    sequence = read_swf(out / "sequences" / "seq-000.swf")
    assert sequence.machine is not None and sequence.machine.name == "gpu-mixed" and (sequence.gpus > 0).any()
    unit = json.loads((out / "units" / "fcfs+easy" / "seq-000.json").read_text())
    summary = json.loads(ran.output)
    assert "utilization_gpus" in unit["summary"]
    assert {k: summary[k] for k in unit["summary"]} == unit["summary"]
    assert (tmp_path / "run.csv").read_text() == (out / unit["jobs_csv"]).read_text()
    assert "generated gpu-mixed workload" in (out / "summary.md").read_text()


def test_the_resources_encoder_tells_a_gpu_job_from_a_cpu_job():
    """`resources` reads each job's GPUs and the free GPUs: a GPU job's row holds GPUs / 128 (the
    machine's) where a CPU job's holds 0, the last feature is the free GPUs' share, and the same
    episode through the Gymnasium env observes it (the env narrows observations to what it reads)."""
    import hpcgym.gymbridge as gb
    from hpcgym.agents.encoders import get_encoder

    encoder = get_encoder("resources", 16)
    sim = Simulation(load_workload(SPEC), SimConfig(backfill="easy"), external={"select"})
    d = sim.reset()
    while d is not None:
        gpus = d.observation["queue"]["gpus"][:16]
        if 0 in gpus and any(gpus):
            break
        d = sim.step(d.candidates[0])
    assert d is not None, "no decision had a GPU and a CPU job waiting"
    rows = encoder.encode(d.observation)[:16 * 4].reshape(16, 4)
    gpu, cpu = gpus.index(next(g for g in gpus if g)), gpus.index(0)
    assert rows[gpu, 0] == np.float32(gpus[gpu] / 128) and rows[cpu, 0] == 0
    assert not np.array_equal(rows[gpu], rows[cpu])
    assert encoder.encode(d.observation)[-1] == np.float32(sum(d.observation["machine"]["free_gpus"]) / 128)
    env = gb.make("select", workload=SPEC, encoder="jobs+resources")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (128 * 8 + 128 * 4 + 3,) and obs[-1] > 0


def test_record_runs_on_the_mixed_workload(tmp_path):
    """`hpcgym record --model gpu-mixed`: Tetris's select decisions on the machine (one job each,
    features by jobs+resources: 128 x 8 + 128 x 4 + 3), the GPUs' utilization in the meta."""
    from hpcgym.agents.records import load_records
    from hpcgym.gymbridge.cli import main

    out = tmp_path / "r.npz"
    result = CliRunner().invoke(main, ["record", "tetris", "--kind", "select", "--encoder", "jobs+resources",
                                       "--model", "gpu-mixed", "--jobs", "100", "--samples", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    records, meta = load_records(out)
    assert records["features"].shape == (100, 128 * 8 + 128 * 4 + 3)
    assert "utilization_gpus" in meta["metrics"][0]
