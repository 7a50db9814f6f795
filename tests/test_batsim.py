"""hpcgym as Batsim 4 (environment/batsim.py, gymbridge/batsim.py, docs/batsim.md).

Wrong decisions are checked in process with scripted schedulers; the rest runs real scheduler
processes over real ZeroMQ sockets: the schedulers of tests/batsim_schedulers.py (raw JSON, no
pybatsim needed) and pybatsim's own examples, unchanged (skipped when pybatsim is not installed:
`pip install --no-deps pybatsim==3.2.1 procset sortedcontainers docopt`, as .ci/run does).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hpcgym.environment.batsim import BatsimReplay, SchedulerFailed, format_interval_set, parse_interval_set
from hpcgym.environment.config import SimConfig
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload
from hpcgym.environment.workload import Workload
from hpcgym.gymbridge.scheduler_program import run_scheduler
from hpcgym.gymbridge.cli import main
from hpcgym.gymbridge.compare.policy import parse_policy

HERE = Path(__file__).resolve().parent
SCHEDULERS = HERE / "batsim_schedulers.py"
PYBATSIM = Path(sys.executable).parent / "pybatsim"
needs_pybatsim = pytest.mark.skipif(
    not PYBATSIM.exists(), reason="pybatsim is not installed: pip install --no-deps pybatsim==3.2.1 procset "
                                  "sortedcontainers docopt (as .ci/run does)")


def workload(rows: list[tuple[int, int, int, int]], procs: int = 4) -> Workload:
    """Jobs 1, 2, ... from (submit, run, size, requested) rows."""
    n = len(rows)
    submit, run, size, requested = (np.array(col, dtype=np.int64) for col in zip(*rows))
    return Workload("hand", procs, job_id=np.arange(1, n + 1), submit=submit, run=run, size=size,
                    requested=requested, user=np.zeros(n, dtype=np.int64))


def records(run) -> dict[int, tuple[int, int, int]]:
    jobs = run.result.jobs
    return {j: (s, b, e) for j, s, b, e in zip(*(jobs[c].tolist() for c in ("job_id", "submit", "start", "end")))}


# ------------------------------------------------------------------ interval sets
def test_interval_sets_read_and_write_batsims_notation():
    assert parse_interval_set("0-3 7") == [0, 1, 2, 3, 7]
    assert parse_interval_set("5") == [5]
    assert format_interval_set([0, 1, 2, 3, 7, 9, 10]) == "0-3 7 9-10"
    for bad in ("", "a-b", "3-1", "-2", 4):
        with pytest.raises(ValueError):
            parse_interval_set(bad)


# ------------------------------------------------------------------ scripted, in process
class Scripted:
    """A scheduler answering the n-th message that carries events of time t with script[t]."""

    def __init__(self, script: dict[int, list[dict]]) -> None:
        self.script = {t: list(events) for t, events in script.items()}
        self.seen: list[dict] = []

    def __call__(self, message: dict) -> dict:
        self.seen.append(message)
        t = int(message["now"])
        if any(e["type"] == "SIMULATION_BEGINS" for e in message["events"]):
            return {"now": message["now"], "events": []}
        return {"now": message["now"], "events": [{"timestamp": message["now"], **e} for e in self.script.pop(t, [])]}


def execute(job: int, alloc: str) -> dict:
    return {"type": "EXECUTE_JOB", "data": {"job_id": f"w0!{job}", "alloc": alloc}}


# two jobs of 2 hosts on 4 hosts: job 1 at 0 (runs 100), job 2 at 5 (runs 50)
TWO = [(0, 100, 2, 200), (5, 50, 2, 60)]


def test_a_right_schedule_gives_hpcgyms_records():
    run = BatsimReplay(workload(TWO)).run(Scripted({0: [execute(1, "0-1")], 5: [execute(2, "2 3")]}))
    assert records(run) == {1: (0, 0, 100), 2: (5, 5, 55)}  # by hand: each starts at its submit
    assert run.summary["mean_wait"] == 0 and run.summary["rejected"] == 0


@pytest.mark.parametrize("script, expected", [
    ({0: [execute(1, "3-4")]}, "EXECUTE_JOB of w0!1 on '3-4' at time 0: host 4 is outside the cluster"),
    ({0: [execute(1, "0-1")], 5: [execute(2, "1-2")]}, "EXECUTE_JOB of w0!2 on '1-2' at time 5: host 1 runs w0!1"),
    ({0: [execute(2, "2-3")]}, "EXECUTE_JOB of w0!2 on '2-3' at time 0: the job is not submitted yet"),
    ({0: [execute(1, "0-1")], 5: [execute(1, "2-3")]}, "EXECUTE_JOB of w0!1 on '2-3' at time 5: the job already "
                                                         "started at 0"),
    ({0: [execute(1, "0")]}, "EXECUTE_JOB of w0!1 on '0' at time 0: 1 host(s) for a job of 2"),
    ({0: [execute(1, "0 0")]}, "names a host twice"),
    ({0: [execute(9, "0-1")]}, "names job 'w0!9', which is not in the workload"),
    ({0: [execute(1, "zero")]}, "is not an interval set"),
    ({0: [{"type": "KILL_JOB", "data": {"job_ids": ["w0!1"]}}]}, "KILL_JOB of w0!1 at time 0: the job is waiting"),
    ({0: [{"type": "REGISTER_JOB", "data": {}}]}, "dynamic job registration is out of scope"),
    ({0: [{"type": "CALL_ME_LATER", "data": {"timestamp": -1}}]}, "CALL_ME_LATER at time 0 asks for -1"),
    ({}, "the scheduler left 2 job(s) waiting (first w0!1) with nothing running and no call requested"),
    ({0: [{"type": "REJECT_JOB", "data": {"job_id": "w0!1"}}]}, "left 1 job(s) waiting (first w0!2)"),
])
def test_a_wrong_decision_ends_the_run_with_one_line_naming_it(script, expected):
    with pytest.raises(SchedulerFailed) as caught:
        BatsimReplay(workload(TWO)).run(Scripted(script))
    assert expected in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("reply", ["hello", {"events": []}, {"now": 0, "events": [{"type": "EXECUTE_JOB"}]}])
def test_a_reply_that_is_not_a_batsim_message_ends_the_run(reply):
    with pytest.raises(SchedulerFailed, match="not a Batsim message|an event that is not"):
        BatsimReplay(workload(TWO)).run(lambda message: reply)


def test_a_scheduler_that_asks_to_be_called_now_forever_is_stopped():
    def now_again(message):
        return {"now": message["now"], "events": [{"timestamp": message["now"], "type": "CALL_ME_LATER",
                                                   "data": {"timestamp": message["now"]}}]}
    with pytest.raises(SchedulerFailed, match="kept asking to be called at 0"):
        BatsimReplay(workload(TWO)).run(now_again)


def test_run_times_are_hidden_unless_revealed():
    w = workload(TWO)
    hidden = Scripted({0: [execute(1, "0-1")], 5: [execute(2, "2-3")]})
    BatsimReplay(w).run(hidden)
    shown = json.dumps(hidden.seen[:3])
    assert '"delay"' not in shown and "delay_100" not in shown and '"profile": "hidden"' in shown
    revealed = Scripted({0: [execute(1, "0-1")], 5: [execute(2, "2-3")]})
    BatsimReplay(w, reveal_run_times=True).run(revealed)
    begins = revealed.seen[0]["events"][0]["data"]
    assert begins["profiles"]["w0"]["delay_100"] == {"type": "delay", "delay": 100.0}
    assert revealed.seen[1]["events"][0]["data"]["job"]["profile"] == "delay_100"


def test_events_of_one_instant_come_in_one_message_completions_first():
    # job 1 ends at 100 when job 3 arrives; job 2 overruns its walltime of 60 and is killed at 65
    w = workload([(0, 100, 2, 200), (5, 90, 2, 60), (100, 10, 1, 10)])
    scheduler = Scripted({0: [execute(1, "0-1")], 5: [execute(2, "2-3")], 100: [execute(3, "0")]})
    run = BatsimReplay(w).run(scheduler)
    by_time = {int(m["now"]): [(e["type"], e["data"].get("job_id") or e["data"].get("type")) for e in m["events"]]
               for m in scheduler.seen[1:]}
    assert by_time[65] == [("JOB_COMPLETED", "w0!2")]
    assert by_time[100] == [("JOB_COMPLETED", "w0!1"), ("JOB_SUBMITTED", "w0!3"),
                            ("NOTIFY", "no_more_static_job_to_submit")]
    states = [e["data"]["job_state"] for m in scheduler.seen for e in m["events"] if e["type"] == "JOB_COMPLETED"]
    assert states == ["COMPLETED_WALLTIME_REACHED", "COMPLETED_SUCCESSFULLY", "COMPLETED_SUCCESSFULLY"]
    assert scheduler.seen[-1]["events"][0]["type"] == "SIMULATION_ENDS"
    assert records(run)[2] == (5, 5, 65) and run.result.jobs["walltime_killed"].tolist() == [0, 1, 0]


# ------------------------------------------------------------------ real scheduler processes
def scheduler(mode: str, *args: str) -> list[str]:
    return [sys.executable, str(SCHEDULERS), mode, *args]


def test_wake_up_reject_and_kill_over_a_socket(tmp_path, ipc_dir):
    # 4 hosts. Job 1 (2 hosts) starts at 0. Job 2 takes the whole cluster: rejected at 10. Job 3
    # requests 400 s: starts at 20 on hosts 2-3, and the scheduler asks to be called at 80. Job 4
    # (1 host) waits. At 80 the call comes, the scheduler kills job 3 (60 s of 300 done: progress
    # 0.2); with its hosts back, job 4 starts at 80 and reaches its walltime of 30 s at 110.
    w = workload([(0, 100, 2, 200), (10, 50, 4, 100), (20, 300, 2, 400), (30, 40, 1, 30)])
    log = tmp_path / "seen.jsonl"
    run, latency = run_scheduler(w, scheduler("wake-reject-kill", str(log)), folder=ipc_dir, timeout=20)
    assert records(run) == {1: (0, 0, 100), 3: (20, 20, 80), 4: (30, 80, 110)}
    assert run.rejected == [2]
    jobs = run.result.jobs
    assert jobs["kills"].tolist() == [0, 1, 0] and jobs["walltime_killed"].tolist() == [0, 0, 1]
    assert jobs["run"].tolist() == [100, 60, 30]
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [e["timestamp"] for e in seen if e["type"] == "REQUESTED_CALL"]
    killed = [e["data"] for e in seen if e["type"] == "JOB_KILLED"]
    assert calls == [80.0]
    assert killed == [{"job_ids": ["w0!3"], "job_progress": {"w0!3": {"profile": "hidden", "progress": 0.2}}}]
    assert [e["type"] for e in seen][-1] == "SIMULATION_ENDS"
    assert len(latency) == run.exchanges


@pytest.mark.parametrize("mode, expected", [
    ("crash", "the scheduler exited with status 3 (crash: this scheduler fails on purpose) before answering"),
    ("garbage", "with something that is not JSON: b'hello, this is not JSON'"),
    ("silent", "the scheduler did not answer the message of time 0 within 2 s"),
])
def test_a_scheduler_that_crashes_talks_nonsense_or_goes_silent_ends_the_run_in_bounded_time(mode, expected, ipc_dir):
    began = time.monotonic()
    with pytest.raises(SchedulerFailed) as caught:
        run_scheduler(workload(TWO), scheduler(mode), folder=ipc_dir, timeout=2)
    assert expected in str(caught.value) and "\n" not in str(caught.value)
    assert time.monotonic() - began < 20  # the timeout, start-up and the program's end, far from a hang


def test_cli_runs_a_scheduler_and_writes_its_records(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 4\n" + "".join(
        f"{j} {s} 0 {r} {n} -1 -1 {n} {q} -1 1 1 1 1 1 -1 -1 -1\n"
        for j, (s, r, n, q) in enumerate([(0, 100, 2, 200), (10, 50, 4, 100), (20, 300, 2, 400), (30, 40, 1, 30)], 1)))
    out = tmp_path / "jobs.csv"
    result = CliRunner().invoke(main, ["batsim", "run", "--trace", str(trace), "--json", "--jobs-out", str(out), "--",
                                       *scheduler("wake-reject-kill", str(tmp_path / "log"))])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.splitlines()[0])
    assert summary["jobs"] == 3 and summary["rejected"] == 1 and summary["kills"] == 1
    # waits 0, 0, 50 (job 4 waited from 30 to 80)
    assert summary["mean_wait"] == pytest.approx(50 / 3)
    assert out.read_text().splitlines()[0].startswith("job_id,submit,start,end")
    failed = CliRunner().invoke(main, ["batsim", "run", "--trace", str(trace), "--jobs-out", str(out), "--timeout", "2",
                                       "--", *scheduler("garbage")])
    assert failed.exit_code == 2 and failed.output.count("\n") == 1 and "not JSON" in failed.output


def test_cli_writes_under_its_output_folder_only(tmp_path, monkeypatch):
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 4\n1 0 0 100 2 -1 -1 2 200 -1 1 1 1 1 1 -1 -1 -1\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = CliRunner().invoke(main, ["batsim", "run", "--trace", str(trace), "--out", "o", "--",
                                       *scheduler("wake-reject-kill", str(tmp_path / "log"))])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in work.iterdir()) == ["o"] and (work / "o" / "jobs.csv").is_file()


def test_export_writes_a_batsim_workload_and_platform(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 8\n1 0 0 100 2 -1 -1 2 200 -1 1 1 1 1 1 -1 -1 -1\n"
                     "2 5 0 50 8 -1 -1 8 40 -1 1 1 1 1 1 -1 -1 -1\n")
    result = CliRunner().invoke(main, ["batsim", "export", "--trace", str(trace), "--out", str(tmp_path / "bs")])
    assert result.exit_code == 0, result.output
    exported = json.loads((tmp_path / "bs" / "workload.json").read_text())
    assert exported["nb_res"] == 8
    assert exported["jobs"] == [{"id": "1", "subtime": 0.0, "walltime": 200.0, "res": 2, "profile": "delay_100"},
                                {"id": "2", "subtime": 5.0, "walltime": 40.0, "res": 8, "profile": "delay_50"}]
    assert exported["profiles"]["delay_50"] == {"type": "delay", "delay": 50.0}
    platform = (tmp_path / "bs" / "platform.xml").read_text()
    assert 'radical="0-7"' in platform and 'value="master"' in platform


def test_export_on_whole_nodes_makes_the_nodes_hosts_and_refuses_what_batsim_cannot_express(tmp_path):
    """Two nodes of 4 cores (the header's), whole-node jobs: a 5-core job takes 2 hosts, a 2-core
    one 1; shared nodes without memory or GPUs stay cores. Several partitions with GPUs are refused."""
    from hpcgym.environment.batsim import on_hosts
    from hpcgym.environment.errors import ConfigError

    trace = tmp_path / "t.swf"
    trace.write_text("; MaxNodes: 2\n; MaxProcs: 8\n1 0 0 100 5 -1 -1 5 200 -1 1 1 1 1 1 -1 -1 -1\n"
                     "2 5 0 50 2 -1 -1 2 40 -1 1 1 1 1 1 -1 -1 -1\n")
    for machine, hosts, res in (("nodes", 2, [2, 1]), ("nodes:shared", 8, [5, 2])):
        result = CliRunner().invoke(main, ["batsim", "export", "--trace", str(trace), "--machine", machine,
                                           "--out", str(tmp_path / machine)])
        assert result.exit_code == 0, result.output
        exported = json.loads((tmp_path / machine / "workload.json").read_text())
        assert exported["nb_res"] == hosts and [j["res"] for j in exported["jobs"]] == res
        assert f'radical="0-{hosts - 1}"' in (tmp_path / machine / "platform.xml").read_text()
    with pytest.raises(ConfigError, match="cannot express"):
        on_hosts(load_workload({"model": "gpu-mixed", "jobs": 20, "start": 0}))


def test_export_starts_the_window_at_time_0(tmp_path):
    """A window later in the trace is written from its first submit (real Batsim would otherwise
    idle until the absolute submit time), and the command says the offset."""
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 8\n" + "".join(f"{i} {1000 * i} 0 100 2 -1 -1 2 200 -1 1 1 1 1 1 -1 -1 -1\n"
                                                   for i in range(1, 6)))
    result = CliRunner().invoke(main, ["batsim", "export", "--trace", str(trace), "--start", "2", "--jobs", "3",
                                       "--out", str(tmp_path / "bs")])
    assert result.exit_code == 0, result.output
    exported = json.loads((tmp_path / "bs" / "workload.json").read_text())
    assert [(j["id"], j["subtime"]) for j in exported["jobs"]] == [("3", 0.0), ("4", 1000.0), ("5", 2000.0)]
    assert "first submit, 3000 s into the trace" in result.output


def test_batsim_policies_parse_alone_only():
    policy = parse_policy("pyb=batsim:pybatsim easyBackfill -t 0 -s {addr}")
    assert policy.batsim.target == "pybatsim easyBackfill -t 0 -s {addr}" and policy.external
    for bad in ("batsim:", "sjf,batsim:pybatsim easyBackfill", "batsim:pybatsim easyBackfill,overrun:run"):
        with pytest.raises(Exception, match="batsim"):
            parse_policy(bad)


# ------------------------------------------------------------------ pybatsim's examples, unchanged
def pybatsim(name: str) -> list[str]:
    # -t 0: wait for Batsim without pybatsim's 2 s limit; its high-level schedulers log their events
    # to EXPORT-PREFIX_events.csv (out_events.csv in the working folder by default): a temporary one
    prefix = Path(tempfile.mkdtemp(prefix="hpcgym-pybatsim-")) / "out"
    return [str(PYBATSIM), name, "-t", "0", "-o", json.dumps({"export-prefix": str(prefix)})]


@pytest.fixture(scope="module")
def lublin_200(traces_dir):
    return load_workload({"trace": str(traces_dir / "lublin_256.swf.gz"), "jobs": 200})


@needs_pybatsim
@pytest.mark.parametrize("name", ["easyBackfill", "fillerSched", *(pytest.param(name, marks=pytest.mark.slow) for name in (
    "schedFcfs", "schedFiller", "schedEasySjfBackfill"))])  # pybatsim's high-level API: 5 to 70 s here
def test_pybatsims_example_schedulers_run_unchanged_to_the_end(name, lublin_200, ipc_dir):
    run, _ = run_scheduler(lublin_200, pybatsim(name), folder=ipc_dir, timeout=120)
    jobs = run.result.jobs
    # no job is larger than the 256 hosts, so none is rejected and every job has its record
    assert run.rejected == [] and sorted(jobs["job_id"].tolist()) == sorted(lublin_200.job_id.tolist())
    # every job ran its whole run time (Lublin's requested times are its run times: no walltime kill)
    order = np.argsort(jobs["job_id"])
    assert (jobs["run"][order] == lublin_200.run[np.argsort(lublin_200.job_id)]).all()
    assert (jobs["start"] >= jobs["submit"]).all()


def on_halves(w: Workload) -> Workload:
    """Every job takes half the machine or all of it."""
    return w.with_columns(size=np.where(w.size <= w.procs // 2, w.procs // 2, w.procs))


@needs_pybatsim
def test_easy_backfill_equals_hpcgyms_fcfs_easy_where_contiguous_placement_cannot_fragment(traces_dir, ipc_dir):
    # SDSC-SP2's first 200 jobs, each made to take half the machine (64 hosts) or all of it (128).
    # easyBackfill allocates from either end of a free interval, so every allocation is one half
    # or the whole machine, and the free hosts are always one interval (none, a half, or all):
    # a job fits contiguously exactly when it fits by count, and the reservation of the first
    # waiting job holds the very hosts hpcgym's count reserves. So pybatsim's EASY (first come
    # first served, reservation by requested times, backfill of what ends before it or uses other
    # hosts) must give hpcgym's FCFS + EASY with walltime kills, job for job. Not a trivial
    # schedule: 40% of the jobs are backfilled and 8 reach their walltime.
    w = on_halves(load_workload({"trace": str(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"), "jobs": 200}))
    ours = simulate(w, SimConfig(overrun="kill"), policy="fcfs")
    theirs, _ = run_scheduler(w, pybatsim("easyBackfill"), folder=ipc_dir, timeout=120)
    assert ours.summary["started_backfilled"] > 0.2 and ours.summary["walltime_killed"] > 0
    for column in ("job_id", "start", "end", "walltime_killed"):
        assert theirs.result.jobs[column].tolist() == ours.jobs[column].tolist(), column


@needs_pybatsim
def test_easy_backfill_first_differs_from_hpcgym_where_the_free_hosts_are_fragmented(lublin_200, ipc_dir):
    # On Lublin-256's first 200 jobs the schedules first part at time 41986: job 41 (7 hosts,
    # submitted at 41968) starts then in hpcgym, which counts 9 free processors, but pybatsim's
    # easyBackfill places jobs on contiguous hosts only, and the 9 free hosts lie in three
    # intervals of 4, 1 and 4: it waits until an interval of 7 is free (41989).
    ours = simulate(lublin_200, SimConfig(overrun="kill"), policy="fcfs")
    theirs, _ = run_scheduler(lublin_200, pybatsim("easyBackfill"), folder=ipc_dir, timeout=120)
    a, b = ours.jobs, theirs.result.jobs
    assert a["job_id"].tolist() == b["job_id"].tolist()
    differ = np.flatnonzero(a["start"] != b["start"])
    first = differ[np.argmin(np.minimum(a["start"], b["start"])[differ])]
    t = int(a["start"][first])
    assert (int(a["job_id"][first]), int(a["size"][first]), t) == (41, 7, 41986) and b["start"][first] > t
    running = (b["start"] < t) & (b["end"] > t)
    busy = {h for j in b["job_id"][running].tolist() for h in parse_interval_set(theirs.allocations[j])}
    free = format_interval_set(sorted(set(range(lublin_200.procs)) - busy))
    lengths = [len(parse_interval_set(part)) for part in free.split()]
    assert sum(lengths) >= 7 and max(lengths) < 7, free


def test_compare_runs_a_batsim_scheduler_beside_hpcgyms_policies_on_the_same_windows(tmp_path):
    from .test_compare import write_trace

    trace = write_trace(tmp_path / "trace.swf", n_jobs=120, procs=32)
    out = tmp_path / "out"
    mine = f"mine=batsim:{sys.executable} {SCHEDULERS} wake-reject-kill {tmp_path / 'seen.jsonl'} -s {{addr}}"
    result = CliRunner().invoke(main, ["compare", "--trace", str(trace), "--jobs", "40", "--samples", "2",
                                       "--policy", "fcfs+easy", "--policy", mine, "--out", str(out), "--no-plots",
                                       "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "| mine | ok |" in (out / "summary.md").read_text()
    for seq in ("seq-000.csv", "seq-001.csv"):
        ours = {row[0]: row for row in csv_rows(out / "jobs" / "fcfs+easy" / seq)}
        theirs = {row[0]: row for row in csv_rows(out / "jobs" / "mine" / seq)}
        # the same window: every job the scheduler did not reject (it rejects whole-machine jobs)
        assert set(theirs) == {job for job, row in ours.items() if row[6] != "32"} and len(theirs) < len(ours)


def csv_rows(path: Path) -> list[list[str]]:
    return [line.split(",") for line in path.read_text().splitlines()[1:]]


def test_a_killed_job_does_not_complete_later():
    # job 1 (planned end 100) is killed at 5; job 2 runs until 155: nothing may happen at 100
    scheduler = Scripted({0: [execute(1, "0-1")], 5: [execute(2, "2-3"), {"type": "KILL_JOB",
                                                                          "data": {"job_ids": ["w0!1"]}}]})
    run = BatsimReplay(workload([(0, 100, 2, 200), (5, 150, 2, 200)])).run(scheduler)
    assert [int(m["now"]) for m in scheduler.seen[1:]] == [0, 5, 5, 155, 155]  # the kill acknowledged at 5
    assert records(run) == {1: (0, 0, 5), 2: (5, 5, 155)}


def test_the_same_window_gives_the_same_schedule_and_connect_reaches_a_running_scheduler(lublin_200, ipc_dir):
    import subprocess

    first, _ = run_scheduler(lublin_200, scheduler("fcfs"), folder=ipc_dir, timeout=60)
    address = f"ipc://{ipc_dir}/mine.ipc"
    running = subprocess.Popen(scheduler("fcfs", "-s", address))
    try:
        second, _ = run_scheduler(lublin_200, connect=address, timeout=60)
    finally:
        running.wait(10)
    for column in ("job_id", "start", "end"):
        assert first.result.jobs[column].tolist() == second.result.jobs[column].tolist()
    assert first.allocations == second.allocations
    # first come first served, without backfilling: starts never go backwards in submit order
    assert (np.diff(first.result.jobs["start"]) >= 0).all()
