"""The command line: results through `hpcgym run`, and one clear line (exit 2) for every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcgym.environment.metrics import read_jobs_csv
from hpcgym.environment.swf import read_swf
from hpcgym.gymbridge.cli import main

# The FCFS-without-backfilling scenario of test_schedules: starts 0, 10, 10, 13 for submits
# 0, 1, 2, 3, so waits are 0, 9, 8, 10 (mean 6.75, max 10); the last job ends at 15.
SWF = """; MaxProcs: 10
1 0 -1 10 6 -1 -1 6 10 -1 1 1 -1 -1 -1 -1 -1 -1
2 1 -1 5 6 -1 -1 6 5 -1 1 1 -1 -1 -1 -1 -1 -1
3 2 -1 3 2 -1 -1 2 3 -1 1 1 -1 -1 -1 -1 -1 -1
4 3 -1 2 4 -1 -1 4 2 -1 1 1 -1 -1 -1 -1 -1 -1
"""


@pytest.fixture
def swf(tmp_path):
    path = tmp_path / "tiny.swf"
    path.write_text(SWF)
    return path


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_run_json_matches_the_hand_worked_schedule(swf):
    r = invoke("run", "--trace", swf, "--backfill", "none", "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    for key in ("jobs", "mean_wait", "max_wait", "mean_bsld", "max_bsld", "mean_slowdown", "utilization", "makespan"):
        assert key in summary
    assert summary["jobs"] == 4 and summary["mean_wait"] == 6.75 and summary["max_wait"] == 10
    assert summary["makespan"] == 15
    # used: 10*6 + 5*6 + 3*2 + 2*4 = 104 processor-seconds of 10 * 15 available
    assert summary["utilization"] == pytest.approx(104 / 150)


def test_run_writes_per_job_csv(swf, tmp_path):
    out = tmp_path / "jobs.csv"
    r = invoke("run", "--trace", swf, "--backfill", "none", "--jobs-out", out)
    assert r.exit_code == 0, r.output
    jobs = read_jobs_csv(out)
    assert jobs["start"].tolist() == [0, 10, 10, 13]
    assert "mean bounded slowdown" in r.output


def test_run_without_trace_uses_the_generated_workload():
    r = invoke("run", "--jobs", 300, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["jobs"] == 300


@pytest.mark.parametrize("args, words", [
    (["run", "--trace", "no/such/file.swf"], "not found"),
    (["run", "--estimate", "noisy:x"], "noisy"),
    (["run", "--estimate", "guess"], "unknown estimate"),
    (["run", "--policy", "bogus"], "bogus"),
    (["run", "--backfill", "aggressive"], "aggressive"),
    (["run", "--start", "3"], "--jobs"),
    (["run", "--jobs", "5", "--start", "1", "--sample", "2"], "either"),
    (["run", "--jobs", "5", "--sampled-jobset"], "--sample"),
    (["run", "--procs", "0"], "procs"),
    (["trace", "info", "no/such/file.swf"], "not found"),
])
def test_bad_options_get_one_clear_line_and_exit_2(args, words):
    r = invoke(*args)
    assert r.exit_code == 2
    assert words in r.output
    assert "Traceback" not in r.output


def test_malformed_line_is_an_error_naming_file_and_line_unless_skipped(tmp_path):
    path = tmp_path / "bad.swf"
    path.write_text(SWF + "5 4 -1 oops 2 -1 -1 2 3 -1 1 1 -1 -1 -1 -1 -1 -1\n")
    r = invoke("run", "--trace", path)
    assert r.exit_code == 2 and "bad.swf:6" in r.output and "Traceback" not in r.output
    r = invoke("trace", "info", path, "--skip-malformed", "--json")
    assert r.exit_code == 0, r.output
    stats = json.loads(r.output)
    assert stats["jobs"] == 4 and stats["dropped_malformed"] == 1


def test_window_larger_than_trace_is_a_clear_error(swf):
    r = invoke("run", "--trace", swf, "--jobs", 10)
    assert r.exit_code == 2 and "error:" in r.output


def test_trace_generate_writes_a_readable_swf(tmp_path):
    out = tmp_path / "gen.swf.gz"
    r = invoke("trace", "generate", out, "--jobs", 250, "--procs", 64, "--seed", 5)
    assert r.exit_code == 0, r.output
    w = read_swf(out)
    assert len(w) == 250 and w.procs == 64 and int(w.size.max()) <= 64


def test_trace_info_agrees_with_the_manifest(traces_dir):
    """MANIFEST: HPC2N has 202,871 jobs on 240 processors; every one of them is valid."""
    r = invoke("trace", "info", traces_dir / "HPC2N-2002-2.2-cln.swf.gz", "--json")
    assert r.exit_code == 0, r.output
    stats = json.loads(r.output)
    assert stats["jobs"] == 202_871 and stats["procs"] == 240 and stats["dropped_total"] == 0


@pytest.fixture
def traces_env(tmp_path, monkeypatch):
    """tiny.swf in a folder named by HPCGYM_TRACES; the working folder is elsewhere."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "tiny.swf").write_text(SWF)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("HPCGYM_TRACES", str(folder))
    return folder


def test_bare_trace_names_resolve_through_hpcgym_traces(traces_env, tmp_path):
    r = invoke("run", "--trace", "tiny.swf", "--backfill", "none", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["mean_wait"] == 6.75
    r = invoke("trace", "info", "tiny.swf", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["jobs"] == 4
    out = tmp_path / "cmp"
    r = invoke("compare", "--trace", "tiny.swf", "--policy", "fcfs", "--policy", "sjf", "--inproc", "--no-plots",
               "--workers", 1, "--out", out)
    assert r.exit_code == 0, r.output
    assert json.loads((out / "run.json").read_text())["trace"]["path"] == str(traces_env / "tiny.swf")


@pytest.mark.parametrize("args", [
    ["run", "--trace", "absent.swf"],
    ["trace", "info", "absent.swf"],
    ["compare", "--trace", "absent.swf", "--policy", "fcfs"],
    ["env", "--trace", "absent.swf", "--bind", "ipc:///nonexistent/never-bound"],
])
def test_a_missing_bare_trace_name_says_where_it_was_looked_for(traces_env, args):
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert "absent.swf" in r.output and str(traces_env) in r.output and "HPCGYM_TRACES" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_train_resolves_the_trace_name_too(traces_env, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    r = invoke("train", "ppo", "--trace", "absent.swf", "--out", tmp_path / "run")
    assert r.exit_code == 2 and str(traces_env) in r.output, r.output


# ------------------------------------------------------------------ a newcomer's error paths (one line, exit 2)
def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "Aborted" not in result.output
    assert all(f in result.output for f in fragments), result.output


def test_dropped_jobs_are_reported_in_text_and_json(tmp_path):
    # two jobs with run time -1 and 0, one larger than the cluster's 10 processors
    path = tmp_path / "drops.swf"
    path.write_text(SWF + "5 4 -1 -1 1 -1 -1 1 5 -1 0 1 -1 -1 -1 -1 -1 -1\n"
                          "6 5 -1 0 1 -1 -1 1 5 -1 0 1 -1 -1 -1 -1 -1 -1\n"
                          "7 6 -1 9 12 -1 -1 12 9 -1 1 1 -1 -1 -1 -1 -1 -1\n")
    text = invoke("run", "--trace", path)
    assert text.exit_code == 0 and "left out when read: 3 (nonpositive_run 2, larger_than_cluster 1)" in text.output
    summary = json.loads(invoke("run", "--trace", path, "--json").output)
    assert summary["jobs"] == 4 and summary["dropped"]["nonpositive_run"] == 2
    assert summary["dropped"]["larger_than_cluster"] == 1
    out = tmp_path / "cmp"
    assert invoke("compare", "--trace", path, "--policy", "fcfs", "--out", out, "--no-plots").exit_code == 0
    assert "left out when the trace was read: 3 (nonpositive_run 2, larger_than_cluster 1)" in \
        (out / "summary.md").read_text()


def test_part_without_a_split_is_refused(swf, tmp_path):
    for command in (["run"], ["compare", "--policy", "fcfs", "--out", tmp_path / "c"]):
        one_line_error(invoke(*command, "--trace", swf, "--part", "train"), "--train-fraction")


def test_a_file_that_is_not_swf_says_so(tmp_path):
    prose = tmp_path / "notes.txt"
    prose.write_text("these are my notes\nnot a trace at all\n")
    one_line_error(invoke("run", "--trace", prose), "not an SWF file")


def test_messages_name_command_line_options_not_python_parameters(tmp_path):
    headless = tmp_path / "headless.swf"
    headless.write_text(SWF.split("\n", 1)[1])
    result = invoke("run", "--trace", headless)
    one_line_error(result, "--procs N")
    assert "procs=" not in result.output


def test_compare_on_a_truncated_gzip_trace(tmp_path):
    import gzip

    whole = gzip.compress((SWF * 200).encode())
    cut = tmp_path / "cut.swf.gz"
    cut.write_bytes(whole[:len(whole) // 2])
    one_line_error(invoke("compare", "--trace", cut, "--policy", "fcfs", "--out", tmp_path / "c"), "truncated gzip")


def test_compare_checks_checkpoints_before_running(swf, tmp_path):
    out = tmp_path / "c"
    one_line_error(invoke("compare", "--trace", swf, "--policy", "m=model:nosuch.pt", "--out", out),
                   "no checkpoint at nosuch.pt")
    assert not (out / "units").exists()


def test_env_refuses_an_address_that_is_not_zeromq():
    one_line_error(invoke("env", "--bind", "garbage"), "not a ZeroMQ address", "tcp://HOST:PORT")


def test_agent_model_without_torch_is_one_line(tmp_path):
    """The light install (no torch): simulated by blocking the import in a child process."""
    import subprocess
    import sys

    model = tmp_path / "model.pt"
    model.write_bytes(b"not used")
    code = ("import sys; sys.modules['torch'] = None; from hpcgym.gymbridge.cli import main; "
            f"main(['agent', '--model', {str(model)!r}, '--connect', 'ipc:///tmp/none'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "needs PyTorch" in done.stderr and "torch==2.13.0" in done.stderr and "Traceback" not in done.stderr


def test_env_checks_its_trace_reward_and_exposure_before_listening(tmp_path):
    prose = tmp_path / "notes.txt"
    prose.write_text("not a trace\n")
    one_line_error(invoke("env", "--bind", f"ipc://{tmp_path}/e.ipc", "--trace", prose), "not an SWF file")
    one_line_error(invoke("env", "--bind", f"ipc://{tmp_path}/e.ipc", "--reward", "nosuch"), "unknown reward 'nosuch'")
    one_line_error(invoke("env", "--bind", f"ipc://{tmp_path}/e.ipc", "--reward", "delay_penalty"),
                   "backfill_candidates: unguarded")
    one_line_error(invoke("env", "--bind", "tcp://0.0.0.0:5599", "--allow-remote"), "--insecure", "--curve-secret")


def test_keys_writes_the_secret_key_for_its_owner_only(tmp_path):
    import stat

    result = invoke("keys", "me", "--dir", tmp_path)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE((tmp_path / "me.key_secret").stat().st_mode) == 0o600


def test_agent_refuses_an_address_that_is_not_zeromq():
    one_line_error(invoke("agent", "sjf", "--connect", "garbage"), "cannot connect to 'garbage'", "tcp://HOST:PORT")


def test_train_option_sets_a_simulation_option_or_names_the_bad_one(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    one_line_error(invoke("train", "ppo", "--option", "backfil_stop=true", "--out", tmp_path / "a"),
                   "unknown simulation option", "backfil_stop", "backfill_stop")
    one_line_error(invoke("train", "ppo", "--option", "backfill_stop", "--out", tmp_path / "b"), "KEY=VALUE")
    one_line_error(invoke("train", "ppo", "--option", "max_interval=soon", "--out", tmp_path / "c"), "max_interval")


@pytest.mark.slow
def test_train_option_reaches_the_checkpoint(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    from hpcgym.agents.rl.checkpoint import latest_checkpoint, load_checkpoint

    out = tmp_path / "run"
    r = invoke("train", "ppo", "--option", "max_interval=600", "--epochs", "1", "--trajectories", "1", "--envs", "1",
               "--jobs", "12", "--eval-episodes", "0", "--no-progress", "--out", out)
    assert r.exit_code == 0, r.output
    assert load_checkpoint(latest_checkpoint(out)).trainer["settings"]["options"]["max_interval"] == 600


def test_train_help_lists_the_rewards_itself():
    """`train --help` said `hpcgym env` lists the rewards; it does not (issue 28): the help lists them."""
    r = invoke("train", "--help")
    assert r.exit_code == 0 and "hpcgym env` lists" not in r.output
    assert "system_slowdown_prediction" in r.output.replace("\n", " ") and "relative:METRIC" in r.output


def test_tree_picture_draws_as_many_levels_as_depth_asks(monkeypatch, tmp_path):
    """`hpcgym tree T --depth 3 --picture P` draws 3 levels (it drew 2, issue 28); --levels wins."""
    from pathlib import Path

    from hpcgym.gymbridge.distill import plot

    drawn = []
    monkeypatch.setattr(plot, "draw_tree", lambda tree, path, levels, title=None: drawn.append(levels) or path)
    tree = Path(__file__).resolve().parents[1] / "docs/results/irl/sdsc-sp2/distill/irl-d8.npz"
    for extra in (["--depth", "3"], ["--depth", "3", "--levels", "4"], []):
        r = invoke("tree", tree, *extra, "--picture", tmp_path / "t.png")
        assert r.exit_code == 0, r.output
    assert drawn == [3, 4, 2]
    assert "Levels of splits the picture draws" in invoke("tree", "--help").output


def test_the_shared_options_are_declared_once_in_the_package():
    """--trace, --jobs, --seed and --procs mean the same on every command: one declaration each
    (gymbridge/usage.py), so their names, types and help cannot drift apart (issue 41); the workload
    keys' options are made from the keys' own declarations (environment/spec.py WorkloadSpec)."""
    root = Path(__file__).resolve().parents[1]
    sources = [p for folder in ("protocol", "environment", "agents", "gymbridge") for p in (root / folder).rglob("*.py")]
    for name in ("--trace", "--jobs", "--seed", "--procs", "--cleaning", "--start", "--sample", "--train-fraction",
                 "--part", "--sampled-jobset", "--first-jobs"):
        places = [(p.name, text.count(f'"{name}"')) for p in sources if f'"{name}"' in (text := p.read_text())]
        assert places in ([("usage.py", 1)], []), name


@pytest.mark.parametrize("command", [["run"], ["compare"], ["train", "ppo"], ["batsim", "export"]])
def test_a_negative_window_seed_or_start_is_refused_by_every_command(command):
    for flag in ("--sample", "--start"):
        result = CliRunner().invoke(main, [*command, flag, "-1"])
        if "No such option" in result.output:
            continue
        assert result.exit_code == 2 and "x>=0" in result.output, (command, flag, result.output)


def test_a_folder_named_as_a_trace_is_called_a_folder(traces_env):
    (traces_env / "sub").mkdir()
    r = invoke("run", "--trace", "sub")
    assert r.exit_code == 2 and "is a directory, not a trace file" in r.output, r.output


def test_run_into_a_pipe_its_reader_closed_exits_0(swf):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "from hpcgym.gymbridge.cli import main; main()", "run",
                             "--trace", str(swf)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # as `| head -1` does once it has its line: every write fails
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == b"", err
