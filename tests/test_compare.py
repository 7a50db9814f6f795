"""`hpcgym compare`: policies on identical job sequences, checked against their own per-job CSVs.

One comparison (module fixture) of five policies on three windows of a small overloaded trace:
two built-in env policies (the baseline fcfs+easy, and sjf+easy), a Python select agent in its
own process, the C agent of examples/c-sjf as an external command, and a Python agent that
raises mid-episode. Other tests resume it, re-run it in process, and on Ray, and compare.
"""

from __future__ import annotations

import csv
import json
import random
import re
import shutil
import subprocess
from pathlib import Path
from statistics import mean, median

import numpy as np
import pytest
from click.testing import CliRunner

from hpcgym.gymbridge.cli import main
from hpcgym.gymbridge.compare.policy import parse_policy
from hpcgym.gymbridge.compare.stats import METRICS

from .test_allocation import processor_clashes

ROOT = Path(__file__).resolve().parents[1]
C_AGENT_DIR = ROOT / "examples" / "c-sjf"
MISSING_MARKERS = ("zmq.h", "msgpack.h", "cannot find -lzmq", "cannot find -lmsgpack", "not found",
                   "No such file or directory")
SAMPLES, JOBS, SEED = 3, 60, 11
AGENTS_MODULE = "compare_test_agents"
AGENTS_SOURCE = '''
from hpcgym.agents.base import PriorityAgent

class Broken(PriorityAgent):
    """SJF for five decisions, then an exception."""

    def __init__(self):
        super().__init__("sjf")
        self.decisions = 0

    def act(self, decision):
        self.decisions += 1
        if self.decisions > 5:
            raise RuntimeError("broken on purpose")
        return super().act(decision)
'''


def write_trace(path: Path, n_jobs: int = 240, procs: int = 32, seed: int = 3) -> Path:
    """An overloaded little cluster: bursts of submits, sizes up to the whole machine, requested
    times above the run times, so FCFS, SJF and backfilling all give different schedules."""
    rng = random.Random(seed)
    lines = ["; Computer: compare test", f"; MaxProcs: {procs}"]
    t = 0
    for job in range(1, n_jobs + 1):
        t += rng.choice([0, 0, 0, 10, 60, 300, 900])
        run = rng.randint(5, 5000)
        requested = run + rng.choice([0, 120, 1800, 7200])
        size = rng.choice([1, 1, 2, 4, 8, 16, 24, 32])
        lines.append(f"{job} {t} -1 {run} {size} -1 -1 {size} {requested} -1 1 {rng.randint(1, 9)} 1 1 1 1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def c_agent() -> Path | None:
    """The C agent, built with make; None (the tests that need it skip) without the toolchain/libs."""
    if shutil.which("make") is None or (shutil.which("cc") is None and shutil.which("gcc") is None):
        return None
    build = subprocess.run(["make", "-C", str(C_AGENT_DIR)], capture_output=True, text=True, timeout=180)
    output = build.stdout + build.stderr
    if build.returncode != 0:
        if any(marker in output for marker in MISSING_MARKERS):
            return None
        pytest.fail("make -C examples/c-sjf failed:\n" + output)
    return C_AGENT_DIR / "build" / "sjf_agent"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A working directory holding the trace and the test agents' module (agents are imported
    from the working directory, as `hpcgym agent` does)."""
    folder = tmp_path_factory.mktemp("compare")
    write_trace(folder / "trace.swf")
    (folder / f"{AGENTS_MODULE}.py").write_text(AGENTS_SOURCE)
    return folder


def policies(c_agent: Path | None) -> list[str]:
    out = ["fcfs+easy", "sjf=sjf+easy", "py-sjf=select:sjf", f"broken=select:{AGENTS_MODULE}:Broken"]
    if c_agent is not None:
        out.insert(3, f"c-sjf=cmd:{c_agent} {{addr}} --join --timeout 20")
    return out


def compare_args(workdir: Path, c_agent: Path | None, out: str, *extra: str) -> list[str]:
    args = ["compare", "--trace", str(workdir / "trace.swf"), "--samples", str(SAMPLES), "--jobs", str(JOBS),
            "--seed", str(SEED), "--out", str(workdir / out), "--workers", "2", "--bootstrap", "2000"]
    for p in policies(c_agent):
        args += ["--policy", p]
    return args + list(extra)


def run_cli(workdir: Path, args: list[str]):
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(workdir)
        return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.fixture(scope="module")
def base(workdir, c_agent) -> Path:
    result = run_cli(workdir, compare_args(workdir, c_agent, "base"))
    assert result.exit_code == 1, result.output  # 1: a policy failed (broken), the others finished
    return workdir / "base"


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def summary_rows(out: Path) -> dict[str, dict[str, str]]:
    return {row["policy"]: row for row in read_csv(out / "summary.csv")}


def procs_of(swf: Path) -> int:
    for line in swf.read_text().splitlines():
        if line.startswith("; MaxProcs:"):
            return int(line.split(":")[1])
    raise AssertionError(f"no MaxProcs in {swf}")


def recompute(jobs_csv: Path, procs: int) -> dict[str, float]:
    """Run metrics from the per-job CSV text alone; its processor sets never clash."""
    rows = read_csv(jobs_csv)
    col = {name: [float(r[name]) for r in rows] for name in rows[0] if name != "allocated_resources"}
    as_int = {name: [int(v) for v in col[name]] for name in ("start", "end", "size")}
    assert processor_clashes(as_int["start"], as_int["end"], as_int["size"],
                             [r["allocated_resources"] for r in rows], procs) == []
    span = max(col["end"]) - min(col["submit"])
    used = sum(r * s for r, s in zip(col["run"], col["size"])) + sum(col["lost_work"])
    for r in rows:  # the derived columns are what their definitions say
        wait, run = int(r["start"]) - int(r["submit"]), int(r["run"])
        assert int(r["wait"]) == wait and int(r["response"]) == int(r["end"]) - int(r["submit"])
        assert float(r["bsld"]) == pytest.approx(max((wait + run) / max(run, 10), 1.0), rel=1e-12)
    return {"mean_bsld": mean(col["bsld"]), "mean_wait": mean(col["wait"]), "mean_response": mean(col["response"]),
            "mean_slowdown": mean(col["slowdown"]), "max_bsld": max(col["bsld"]), "max_wait": max(col["wait"]),
            "utilization": used / (procs * span), "makespan": span}


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


# --------------------------------------------------------------------------- policy syntax
def test_policy_syntax():
    p = parse_policy("fcfs+easy")
    assert (p.name, p.priority, p.options, p.agents) == ("fcfs+easy", "fcfs", {"backfill": "easy"}, ())
    p = parse_policy("mine=select:sjf,inspect:my.mod:Inspector,backfill:none,window:64")
    assert p.name == "mine" and p.options == {"backfill": "none", "window": 64}
    assert [(a.kinds, a.source, a.target) for a in p.agents] == [(("select",), "builtin", "sjf"),
                                                                  (("inspect",), "python", "my.mod:Inspector")]
    p = parse_policy("c=cmd:./agent {addr} --join --list 1,2,3,easy")  # a comma in a command stays in it
    assert p.agents[0].kinds == ("select",) and p.agents[0].source == "cmd"
    assert p.agents[0].target == "./agent {addr} --join --list 1,2,3" and p.options == {"backfill": "easy"}
    assert parse_policy("wfp3,estimate:noisy:0.2").options == {"estimate": "noisy:0.2"}
    p = parse_policy("ppo=select:model:runs/ppo+a/model.pt,sjf")  # a trained checkpoint
    assert [(a.kinds, a.source, a.target, a.label) for a in p.agents] == [
        (("select",), "model", "runs/ppo+a/model.pt", "select:model:runs/ppo+a/model.pt")]
    assert p.priority == "sjf"
    p = parse_policy("rl=fcfs,preset:rlbf-public,backfill:model:runs/rlbf/model.pt")  # an agent, not a mode
    assert p.options == {"preset": "rlbf-public"}
    assert [(a.kinds, a.source, a.target) for a in p.agents] == [(("backfill",), "model", "runs/rlbf/model.pt")]
    for text in ("model:m.pt,window:64", "agent:model:m.pt,window:64"):  # the checkpoint's own kind
        p = parse_policy(text)
        assert [(a.kinds, a.source, a.target) for a in p.agents] == [((), "model", "m.pt")]
        assert p.options == {"window": 64}
    for bad, why in [("nonsense", "cannot read"), ("sjf,fcfs", "two priority"), ("cmd:./a", "{addr}"),
                     ("select:sjf,select:fcfs", "taken by two"), ("inspect:sjf", "select only"),
                     ("select:sjf,conservative", "conservative"), ("window:x", "integer"),
                     ("select:model:", "checkpoint path"), ("model:a.pt,select:sjf", "name the kinds of each")]:
        with pytest.raises(Exception, match=None) as info:
            parse_policy(bad)
        assert why in str(info.value), (bad, str(info.value))


# --------------------------------------------------------------------------- end to end
def test_table_matches_per_job_csvs(base, c_agent):
    """Every number of the table, recomputed from the per-job CSV text (the C agent's row too,
    where it can be built)."""
    run = json.loads((base / "run.json").read_text())
    rows = summary_rows(base)
    external = ["c-sjf"] if c_agent is not None else []
    assert list(rows) == ["fcfs+easy", "sjf", "py-sjf"] + external + ["broken"]
    seqs = run["sequences"]
    assert [s["seed"] for s in seqs] == [SEED, SEED + 1, SEED + 2] == run["sample_seeds"]
    ok = [name for name, row in rows.items() if row["status"] == "ok"]
    assert ok == ["fcfs+easy", "sjf", "py-sjf"] + external

    values: dict[str, dict[str, list[float]]] = {}
    for name in ok:
        values[name] = {key: [] for key, _, _ in METRICS}
        for s in seqs:
            swf = base / s["file"]
            submitted = [int(line.split()[0]) for line in swf.read_text().splitlines() if not line.startswith(";")]
            jobs_csv = base / "jobs" / name / f"seq-{s['index']:03d}.csv"
            assert [int(r["job_id"]) for r in read_csv(jobs_csv)] == submitted  # same jobs for every policy
            for key, v in recompute(jobs_csv, procs_of(swf)).items():
                values[name][key].append(v)
    base_vals = values["fcfs+easy"]
    for name in ok:
        row = rows[name]
        for key, _, higher in METRICS:
            v = values[name][key]
            assert close(float(row[f"{key}_mean"]), mean(v)), (name, key)
            assert close(float(row[f"{key}_median"]), median(v)), (name, key)
            if name == "fcfs+easy":
                assert float(row[f"{key}_diff"]) == 0.0 and row[f"{key}_ci_low"] == ""
                continue
            d = [a - b for a, b in zip(v, base_vals[key])]
            assert close(float(row[f"{key}_diff"]), mean(d)), (name, key)
            wins = sum(1.0 if (a > b if higher else a < b) else 0.5 if a == b else 0.0 for a, b in zip(v, base_vals[key]))
            assert close(float(row[f"{key}_win_rate"]), wins / len(v)), (name, key)
            # the documented bootstrap: 2000 resamples of the sample indices, seeded with --seed
            idx = np.random.default_rng(SEED).integers(0, len(d), size=(2000, len(d)))
            low, high = np.percentile(np.asarray(d)[idx].mean(axis=1), [2.5, 97.5])
            assert close(float(row[f"{key}_ci_low"]), low) and close(float(row[f"{key}_ci_high"]), high)
            assert min(d) - 1e-9 <= low <= mean(d) + 1e-9 <= high + 2e-9 <= max(d) + 3e-9
    # the comparison has teeth: SJF is not FCFS here
    assert values["sjf"]["mean_bsld"] != values["fcfs+easy"]["mean_bsld"]
    # the printed Markdown table carries the same means
    md = (base / "summary.md").read_text()
    assert f"| sjf | ok | {float(rows['sjf']['mean_bsld_mean']):.2f} / " in md


def test_external_c_agent_schedules_like_the_python_agent(base, c_agent):
    if c_agent is None:
        pytest.skip("the C agent cannot be built here (needs make, a C compiler, libzmq and msgpack-c dev files)")
    for k in range(SAMPLES):
        c_csv = (base / "jobs" / "c-sjf" / f"seq-{k:03d}.csv").read_bytes()
        assert c_csv == (base / "jobs" / "py-sjf" / f"seq-{k:03d}.csv").read_bytes()
    latency = {row["policy"]: row for row in read_csv(base / "latency.csv")}
    assert set(latency) == {"py-sjf", "c-sjf"}  # env policies decide inside the env; broken never finished
    # the C agent answers every decision; the Python one sends standing orders (protocol 1.4),
    # which the env follows for most of the same decisions
    c, py = latency["c-sjf"], latency["py-sjf"]
    assert int(c["ordered"]) == 0 and int(py["ordered"]) > 0
    assert int(c["asked"]) == int(py["asked"]) + int(py["ordered"]) > int(py["asked"]) > 0
    assert latency["c-sjf"]["mode"] == "protocol" and float(latency["c-sjf"]["mean_ms"]) > 0


def test_a_failing_policy_is_reported_and_the_others_finish(base):
    rows = summary_rows(base)
    assert rows["broken"]["status"] == "failed"
    assert "RuntimeError: broken on purpose" in rows["broken"]["error"]
    assert rows["broken"]["samples_ok"] == "0" and rows["broken"]["mean_bsld_mean"] == ""
    assert all(row["status"] == "ok" for name, row in rows.items() if name != "broken")
    md = (base / "summary.md").read_text()
    assert "| broken | failed |" in md and "broken on purpose" in md.split("## Errors")[1]
    assert json.loads((base / "run.json").read_text())["failed_policies"] == ["broken"]


def test_a_worker_that_dies_fails_only_its_unit(workdir):
    """A unit whose worker process is killed fails with one line saying so; its worker is
    replaced and the other units finish."""
    (workdir / "dying_agents.py").write_text(
        "import os\nimport signal\nfrom hpcgym.agents.base import PriorityAgent\n\n\n"
        "class Dying(PriorityAgent):\n    def __init__(self):\n        super().__init__('sjf')\n\n"
        "    def act(self, decision):\n        os.kill(os.getpid(), signal.SIGKILL)\n")
    out = workdir / "dying"
    result = run_cli(workdir, ["compare", "--trace", str(workdir / "trace.swf"), "--jobs", "30", "--samples", "2",
                               "--inproc", "--workers", "2", "--no-plots", "--bootstrap", "100", "--policy", "fcfs",
                               "--policy", "dying=select:dying_agents:Dying", "--out", str(out)])
    assert result.exit_code == 1, result.output
    rows = summary_rows(out)
    assert rows["fcfs"]["status"] == "ok" and rows["fcfs"]["samples_ok"] == "2"
    assert rows["dying"]["status"] == "failed"
    assert "the worker process running this unit failed: it died (exit code -9)" in rows["dying"]["error"]


def test_outputs_and_provenance(base, workdir):
    run = json.loads((base / "run.json").read_text())
    assert run["command"][:4] == ["hpcgym", "compare", "--policy", "fcfs+easy"] and "--jobs" in run["command"]
    assert run["trace"]["sha256"] == __import__("hashlib").sha256((workdir / "trace.swf").read_bytes()).hexdigest()
    for s in run["sequences"]:
        assert __import__("hashlib").sha256((base / s["file"]).read_bytes()).hexdigest() == s["sha256"]
    assert run["versions"]["hpcgym"] and run["versions"]["numpy"] and run["bootstrap"]["resamples"] == 2000
    made = run["provenance"]
    assert made["command"].startswith("hpcgym compare --policy fcfs+easy") and made["settings"]["policies"]
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", made["commit"])
    assert run["units"]["run"] == run["units"]["total"] and run["units"]["failed"] == SAMPLES
    for png in ("bsld.png", "wait.png", "radar.png"):
        assert (base / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_runs_only_unfinished_units(base, workdir, c_agent):
    out = workdir / "resumed"
    shutil.copytree(base, out)
    (out / "units" / "py-sjf" / "seq-001.json").unlink()    # as if interrupted before it finished
    kept = {p: p.stat().st_mtime_ns for p in (out / "units").rglob("seq-*.json") if not p.name.endswith(".error.json")}
    result = run_cli(workdir, ["compare", "--resume", "--out", str(out), "--workers", "2"])
    assert result.exit_code == 1, result.output
    run = json.loads((out / "run.json").read_text())
    # finished units are not run again; the missing one and the failed ones are
    assert run["ran"] == ["broken/seq-000", "broken/seq-001", "broken/seq-002", "py-sjf/seq-001"]
    assert run["units"]["reused"] == run["units"]["total"] - 4
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    assert (out / "summary.csv").read_text() == (base / "summary.csv").read_text()
    assert len(run["history"]) == 2 and run["command"] == json.loads((base / "run.json").read_text())["command"]
    assert run["history"][1]["command"][:3] == ["hpcgym", "compare", "--out"] and run["history"][1]["ran"] == 4


def test_inproc_and_protocol_give_identical_per_job_csvs(base, workdir, c_agent):
    result = run_cli(workdir, compare_args(workdir, c_agent, "inproc", "--inproc", "--no-plots"))
    assert result.exit_code == 1, result.output
    out = workdir / "inproc"
    files = sorted(p.relative_to(base) for p in (base / "jobs").rglob("*.csv"))
    assert files and files == sorted(p.relative_to(out) for p in (out / "jobs").rglob("*.csv"))
    for rel in files:
        assert (out / rel).read_bytes() == (base / rel).read_bytes(), rel
    inproc_rows, protocol_rows = summary_rows(out), summary_rows(base)
    assert "agent select:compare_test_agents:Broken raised RuntimeError: broken on purpose" \
        in inproc_rows["broken"].pop("error")
    protocol_rows["broken"].pop("error")  # how the failure is seen differs: an exception, or a process exit
    assert inproc_rows == protocol_rows
    latency = {row["policy"]: row for row in read_csv(out / "latency.csv")}
    assert latency["py-sjf"]["mode"] == "inproc"
    if c_agent is not None:
        assert latency["c-sjf"]["mode"] == "protocol"  # an outside program always talks over the protocol


@pytest.mark.slow
def test_ray_executor_gives_the_identical_table(base, workdir, c_agent):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        result = run_cli(workdir, compare_args(workdir, c_agent, "ray", "--executor", "ray", "--no-plots"))
    finally:
        ray.shutdown()
    assert result.exit_code == 1, result.output
    out = workdir / "ray"
    assert (out / "summary.csv").read_text() == (base / "summary.csv").read_text()
    assert (out / "summary.md").read_text() == (base / "summary.md").read_text()
    assert json.loads((out / "run.json").read_text())["executor"] == "ray"


def test_bad_input_is_one_line_and_status_2(workdir, base):
    r = run_cli(workdir, ["compare", "--trace", str(workdir / "trace.swf"), "--policy", "nonsense"])
    assert r.exit_code == 2 and "cannot read 'nonsense'" in r.output
    r = run_cli(workdir, compare_args(workdir, None, "base"))  # the folder holds a comparison already
    assert r.exit_code == 2 and "--resume" in r.output and "Traceback" not in r.output
    r = run_cli(workdir, ["compare", "--resume", "--out", str(workdir / "nothing-here")])
    assert r.exit_code == 2 and "nothing to resume" in r.output


def test_the_results_line_names_plots_only_when_they_were_drawn(workdir):
    common = ["compare", "--trace", str(workdir / "trace.swf"), "--jobs", "20", "--samples", "1", "--inproc",
              "--workers", "1", "--bootstrap", "100", "--policy", "fcfs", "--policy", "sjf"]

    def results_line(out: str, *extra: str) -> str:
        r = run_cli(workdir, [*common, "--out", str(workdir / out), *extra])
        assert r.exit_code == 0, r.output
        lines = [line for line in r.output.splitlines() if line.startswith("results in")]
        assert len(lines) == 1, r.output
        return lines[0]

    assert "plots/" not in results_line("bare", "--no-plots")
    assert not (workdir / "bare" / "plots").exists()
    pytest.importorskip("matplotlib")
    assert "plots/" in results_line("drawn")
    assert (workdir / "drawn" / "plots" / "bsld.png").is_file()


@pytest.mark.parametrize("name", ["knapsack", "knapsack-capacity", "binpacking", "random-packing", "tetris",
                                  "tetris-star", "sjf"])
def test_every_built_in_agent_name_is_a_select_agent_in_a_policy(name):
    from hpcgym.gymbridge.compare.policy import parse_policy

    policy = parse_policy(f"p=select:{name},none")
    assert [(a.kinds, a.source, a.target) for a in policy.agents] == [(("select",), "builtin", name)]
    assert policy.options == {"backfill": "none"}


def test_a_built_in_agent_is_read_as_hpcgym_agent_spells_it():
    """`reject-large` (as `hpcgym agent` takes it) is `inspect:reject-large`, in compare and record
    alike: the agent's own kinds; beside a priority it is split off as an item."""
    from hpcgym.gymbridge.compare.policy import parse_policy

    for text in ("reject-large", "inspect:reject-large"):
        assert parse_policy(text).agents == parse_policy("inspect:reject-large").agents
    policy = parse_policy("sjf+reject-large+none")
    assert (policy.priority, policy.options) == ("sjf", {"backfill": "none"})
    assert [(a.kinds, a.target) for a in policy.agents] == [(("inspect",), "reject-large")]
    assert [a.kinds for a in parse_policy("knapsack").agents] == [("select",)]


# --------------------------------------------------------------------------- trained models
def test_load_agent_model_errors_are_one_clear_line(tmp_path, monkeypatch):
    """model:PATH: a missing file, and a missing torch (heuristic agents never import it)."""
    import sys

    import hpcgym.agents
    from hpcgym.agents.runtime import load_agent
    from hpcgym.environment.errors import HpcgymError

    with pytest.raises(HpcgymError, match="no checkpoint at"):
        load_agent(f"model:{tmp_path / 'missing.pt'}")
    (tmp_path / "m.pt").write_bytes(b"whatever")
    for name in [m for m in sys.modules if m.startswith("hpcgym.agents.rl")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(hpcgym.agents, "rl", None, raising=False)  # restored (or removed) afterwards
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    with pytest.raises(HpcgymError, match="rl extra"):
        load_agent(f"model:{tmp_path / 'm.pt'}")
    assert load_agent("sjf").kinds == ("select",)


@pytest.fixture(scope="module")
def tiny_model(workdir) -> Path:
    """A PPO select checkpoint trained for one short epoch on windows of the test trace."""
    pytest.importorskip("gymnasium")
    torch = pytest.importorskip("torch")
    from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings

    torch.set_num_threads(1)
    settings = TrainSettings(algorithm="ppo", workload={"trace": str(workdir / "trace.swf"), "jobs": JOBS, "sample": True},
                             options={"window": 16}, config={"hidden": [16], "minibatch_size": 64}, epochs=1,
                             trajectories=2, envs=1, seed=5, eval_episodes=0)
    Trainer(settings, workdir / "tiny-model", device="cpu", progress=False, log=lambda m: None).train()
    return workdir / "tiny-model" / "model.pt"


@pytest.mark.slow
def test_model_policy_schedules_as_the_checkpoint_served_in_process_and_over_the_protocol(workdir, tiny_model):
    """`model:PATH` (with its kind named, or bare, a path relative to the working directory) in
    `compare --inproc`, the same policy over the protocol (an agent process), and the checkpoint as
    an in-process greedy agent in simulate(): job for job the same schedule."""
    from hpcgym.agents.rl.serve import RLAgent
    from hpcgym.environment.config import SimConfig
    from hpcgym.environment.simulator import simulate
    from hpcgym.environment.swf import read_swf

    rel = tiny_model.relative_to(workdir)
    common = ["compare", "--trace", str(workdir / "trace.swf"), "--samples", "2", "--jobs", str(JOBS),
              "--seed", str(SEED), "--bootstrap", "100", "--no-plots"]
    result = run_cli(workdir, [*common, "--inproc", "--workers", "1", "--out", str(workdir / "model-inproc"),
                               "--policy", "fcfs", "--policy", f"m=select:model:{rel}", "--policy", f"bare=model:{rel}"])
    assert result.exit_code == 0, result.output
    result = run_cli(workdir, [*common, "--workers", "2", "--out", str(workdir / "model-protocol"),
                               "--policy", f"m=model:{tiny_model}"])
    assert result.exit_code == 0, result.output
    inproc, protocol = workdir / "model-inproc", workdir / "model-protocol"
    assert json.loads((protocol / "units" / "m" / "seq-000.json").read_text())["mode"] == "protocol"
    differs = False
    for seq in json.loads((inproc / "run.json").read_text())["sequences"]:
        name = f"seq-{seq['index']:03d}.csv"
        jobs = (inproc / "jobs" / "m" / name).read_bytes()
        assert jobs == (inproc / "jobs" / "bare" / name).read_bytes() == (protocol / "jobs" / "m" / name).read_bytes()
        reference = simulate(read_swf(inproc / seq["file"]), SimConfig(seed=seq["seed"]),
                             agents={"select": RLAgent(tiny_model)}).jobs
        rows = read_csv(inproc / "jobs" / "m" / name)
        assert [int(r["job_id"]) for r in rows] == reference["job_id"].tolist()
        assert [int(r["start"]) for r in rows] == reference["start"].tolist()
        differs |= jobs != (inproc / "jobs" / "fcfs" / name).read_bytes()
    assert differs  # the model does not just schedule as FCFS
    digest = __import__("hashlib").sha256(tiny_model.read_bytes()).hexdigest()
    assert json.loads((inproc / "run.json").read_text())["provenance"]["checkpoints"] == {str(tiny_model.resolve()): digest}
    latency = {row["policy"]: row for row in read_csv(inproc / "latency.csv")}
    assert latency["bare"]["kinds"] == "select" and int(latency["bare"]["asked"]) > 0


def test_a_missing_program_is_one_line_before_any_unit_runs(workdir):
    """A `cmd:` program that is not there (the README's C agent, not built yet) fails once, with
    what to do, instead of once per unit (issue 28)."""
    r = run_cli(workdir, ["compare", "--trace", str(workdir / "trace.swf"), "--jobs", "20", "--samples", "2",
                          "--out", str(workdir / "no-program"), "--policy", "sjf",
                          "--policy", "c=cmd:examples/c-sjf/build/no_such_agent {addr} --join"])
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "no_such_agent not found" in r.output and "make -C examples/c-sjf" in r.output
    assert not (workdir / "no-program" / "units").exists()


def test_start_gives_one_fixed_window(workdir):
    """--start N --jobs M compares on jobs N+1..N+M of the trace (docs/irl.md's test window is
    --start 10000 --jobs 2500): the sequence file holds exactly those jobs, by their SWF ids."""
    out = workdir / "fixed"
    r = run_cli(workdir, ["compare", "--trace", str(workdir / "trace.swf"), "--start", "100", "--jobs", "40",
                          "--inproc", "--workers", "1", "--no-plots", "--bootstrap", "100", "--policy", "fcfs",
                          "--out", str(out)])
    assert r.exit_code == 0, r.output
    ids = [int(line.split()[0]) for line in (out / "sequences" / "seq-000.swf").read_text().splitlines()
           if line.strip() and not line.startswith(";")]
    assert ids == list(range(101, 141))   # write_trace numbers its jobs 1, 2, ...
    assert json.loads((out / "run.json").read_text())["sequences"][0]["start"] == 100
    r = run_cli(workdir, ["compare", "--trace", str(workdir / "trace.swf"), "--start", "100", "--jobs", "40",
                          "--samples", "3", "--policy", "fcfs", "--out", str(workdir / "fixed-3")])
    assert r.exit_code == 2 and "one sample" in r.output


def test_progress_outside_a_terminal_is_plain_lines(workdir, monkeypatch):
    """stderr is no terminal under CliRunner (as in a batch job): compare writes plain progress
    lines (one at the start, then at most one per EVERY seconds; here 0), not a bar's carriage
    returns, and not silence."""
    from hpcgym.gymbridge import progress

    monkeypatch.setattr(progress, "EVERY", 0.0)
    r = run_cli(workdir, ["compare", "--trace", str(workdir / "trace.swf"), "--jobs", "20", "--samples", "2",
                          "--inproc", "--workers", "1", "--no-plots", "--bootstrap", "100", "--policy", "fcfs",
                          "--out", str(workdir / "lines")])
    assert r.exit_code == 0, r.output
    lines = [line.split(" (")[0] for line in r.output.splitlines() if line.startswith("compare: ")]
    assert lines == ["compare: 0/2 units", "compare: 1/2 units", "compare: 2/2 units"] and "\r" not in r.output


def test_ctrl_c_says_how_to_resume(workdir):
    """An interrupted comparison names the --resume command that finishes it (issue 28: it said only
    "Aborted!") and exits 130, as a shell reports a command that SIGINT stopped."""
    import os
    import signal
    import sys
    import time

    (workdir / "slow_agents.py").write_text(
        "import time\nfrom hpcgym.agents.base import PriorityAgent\n\n\n"
        "class SlowSjf(PriorityAgent):\n    def __init__(self):\n        super().__init__('sjf')\n\n"
        "    def act(self, decision):\n        time.sleep(0.5)\n        return super().act(decision)\n")
    out = workdir / "interrupted"
    args = [str(Path(sys.executable).parent / "hpcgym"), "compare", "--trace", str(workdir / "trace.swf"),
            "--jobs", "60", "--samples", "4", "--inproc", "--workers", "1", "--no-plots", "--bootstrap", "100",
            "--policy", "slow=select:slow_agents:SlowSjf", "--out", str(out)]
    # SIGINT back to its default in the child: a shell starting the tests in the background
    # (`pytest &`) ignores it, the child inherits that, and Python then raises no KeyboardInterrupt
    proc = subprocess.Popen(args, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (out / "sequences").is_dir() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert f"hpcgym compare --resume --out {out}" in err and "Traceback" not in err


def test_an_unknown_word_after_a_priority_is_named():
    with pytest.raises(Exception, match=r"cannot read 'eazy' \(did you mean 'easy'\?\)"):
        parse_policy("sjf+eazy")


def test_a_batsim_policy_beside_others_that_let_jobs_overrun_is_warned_of(tmp_path):
    trace = write_trace(tmp_path / "t.swf", n_jobs=20, procs=8)
    args = ["compare", "--trace", str(trace), "--policy", "fcfs", "--policy", "b=batsim:no-such-program {addr}",
            "--inproc", "--no-plots", "--workers", "1", "--bootstrap", "100"]
    warned = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a")])
    lines = [line for line in warned.stderr.splitlines() if "Batsim's rules" in line]
    assert lines == ["warning: b run(s) under Batsim's rules, which kill a job at its walltime, but fcfs let jobs "
                     "run past it: give --overrun kill to compare under the same rules"]
    same = CliRunner().invoke(main, [*args, "--overrun", "kill", "--out", str(tmp_path / "b")])
    assert "Batsim's rules" not in same.stderr
