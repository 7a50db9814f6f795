"""`hpcgym batsim`: Batsim's schedulers on hpcgym's workloads, run or exported for a real Batsim (docs/batsim.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click

from ..environment.batsim import on_hosts, platform_xml, workload_json
from ..environment.errors import HpcgymError
from ..environment.spec import load_workload
from .cli import SUMMARY_LABELS
from .compare.unit import ipc_folder
from .scheduler_program import run_scheduler
from .usage import jobs_option, reading_options, trace_option, workload_keys, workload_option


def _window_options(f):
    f = workload_option("sample", "Seed of a random window start (with --jobs).")(f)
    f = workload_option("start", "First job of the window (with --jobs).")(f)
    f = jobs_option("Only this many jobs (a window).")(f)
    f = workload_option("machine")(f)
    return trace_option(required=True)(reading_options(f))


@click.group("batsim")
def batsim() -> None:
    """Batsim's schedulers (pybatsim, batsched) on hpcgym's workloads: hpcgym plays Batsim 4."""


@batsim.command("run", context_settings={"ignore_unknown_options": True})
@_window_options
@click.option("--connect", help="Address of a scheduler already listening (instead of PROGRAM).")
@click.option("--reveal-run-times", is_flag=True,
              help="Show each job's run time to the scheduler (its delay profile), as Batsim does; by default "
                   "it sees requested times only, like hpcgym's policies.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds the scheduler may take to answer one message (its start-up included).")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON object.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("batsim-out"),
              show_default=True, help="Output folder: the per-job records, and what the scheduler writes in its "
                                      "working folder (it runs there; pybatsim's out_events.csv).")
@click.option("--jobs-out", type=click.Path(path_type=Path, dir_okay=False),
              help="Per-job records (CSV; rejected jobs have none) [default: OUT/jobs.csv].")
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
def run_command(connect, reveal_run_times, timeout, as_json, out, jobs_out, program, **spec) -> None:
    """Run a Batsim scheduler over a trace window and print hpcgym's metrics:
    hpcgym batsim run --trace lublin_256.swf.gz --jobs 200 -- pybatsim easyBackfill -t 0"""
    if bool(program) == bool(connect):
        raise click.UsageError("give the scheduler program after --, e.g. -- pybatsim easyBackfill -t 0, or --connect "
                               "ADDR (one of the two)")
    workload, jobs_out = on_hosts(load_workload(workload_keys(spec))), jobs_out or out / "jobs.csv"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HpcgymError(f"cannot write to {out}: {exc.strerror or exc}") from None
    folder = ipc_folder("hpcgym-batsim-")
    try:
        run, latency = run_scheduler(workload, list(program) or None, connect=connect, folder=folder,
                                     reveal_run_times=reveal_run_times, timeout=timeout, cwd=str(out.resolve()))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    run.result.write_jobs_csv(jobs_out)
    summary = run.summary
    if as_json:
        click.echo(json.dumps({**summary, "workload": workload.name, "procs": workload.procs, "overrun": "kill",
                               "reveal_run_times": reveal_run_times, "exchanges": run.exchanges,
                               "wall_s": round(run.wall_s, 3)}))
        return
    who = connect or " ".join(program)
    click.echo(f"{workload.name}: {len(workload)} jobs on {workload.procs} hosts, Batsim scheduler {who} "
               f"(run times {'revealed' if reveal_run_times else 'hidden'}, walltime kills)")
    for key, label, fmt in SUMMARY_LABELS:
        if key in summary:
            click.echo(f"  {label:<24}{fmt.format(summary[key])}")
    click.echo(f"  {'rejected jobs':<24}{summary['rejected']}")
    click.echo(f"  {'walltime kills':<24}{summary.get('walltime_killed', 0)}")
    click.echo(f"  {'scheduler kills':<24}{summary.get('kills', 0)}")
    slowest = max(latency) if latency else 0.0
    click.echo(f"{run.exchanges} messages in {run.wall_s:.2f} s (slowest answer {slowest * 1000:.1f} ms); "
               f"per-job records in {jobs_out}", err=True)


@batsim.command("export")
@_window_options
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Folder for workload.json and platform.xml.")
@click.option("--speed", default="1Gf", show_default=True, help="Host speed in the platform (delay profiles ignore it).")
def export_command(out, speed, **spec) -> None:
    """Write a trace window as a Batsim workload (delay profiles, walltime = requested time, submit times from the
    window's first) and a platform of a host per processor (per node with --machine), to replay in real Batsim."""
    workload = on_hosts(load_workload(workload_keys(spec)))
    origin = int(workload.submit.min()) if len(workload) else 0
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "workload.json").write_text(json.dumps(workload_json(workload, origin=origin), indent=1) + "\n")
        (out / "platform.xml").write_text(platform_xml(workload.procs, speed))
    except OSError as exc:
        raise HpcgymError(f"cannot write to {out}: {exc.strerror or exc}") from None
    click.echo(f"wrote {len(workload)} jobs on {workload.procs} hosts to {out}/workload.json and {out}/platform.xml "
               f"(batsim -p {out}/platform.xml -w {out}/workload.json); submit times count from the window's "
               f"first submit, {origin} s into the trace")
