"""`hpcgym batsim`: Batsim's schedulers (pybatsim, batsched) on hpcgym's workloads (docs/batsim.md).

    hpcgym batsim run --trace T [--jobs N --start K] -- PROGRAM ARGS   (PROGRAM binds; we connect)
    hpcgym batsim run --trace T --connect ADDR                          (a scheduler already running)
    hpcgym batsim export --trace T [--jobs N ...] --out DIR             (workload JSON + platform for real Batsim)

The scheduler's address goes where PROGRAM's arguments say `{addr}`; with no `{addr}`, it is
appended as `-s ADDR`, the socket option of pybatsim, batsched and Batsim alike.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import click

from ..environment.batsim import BatsimReplay, BatsimRun, SchedulerSocket, platform_xml, workload_json
from ..environment.errors import ConfigError, HpcgymError
from ..environment.spec import load_workload
from ..environment.workload import Workload
from .cli import SUMMARY_LABELS, _reading_options, _workload_spec
from .compare.unit import ipc_folder

#: Seconds the scheduler program may take to exit after the simulation ended.
EXIT_WAIT_S = 10.0


def scheduler_argv(argv: list[str], address: str) -> list[str]:
    """PROGRAM ARGS with the scheduler's address put in: at `{addr}`, else as `-s ADDR`."""
    if any("{addr}" in arg for arg in argv):
        return [arg.replace("{addr}", address) for arg in argv]
    return [*argv, "-s", address]


class SchedulerProgram:
    """A scheduler program started for one run, its output kept in `log` for error messages."""

    def __init__(self, argv: list[str], log: Path, cwd: str | None = None) -> None:
        self.argv, self.log = argv, log
        with open(log, "wb") as out:
            try:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                             cwd=cwd)
            except OSError as exc:
                raise ConfigError(f"cannot start the scheduler {argv[0]!r}: {exc.strerror or exc}") from None

    def gone(self) -> str | None:
        """None while the program runs; else how it ended, with its last line of output."""
        code = self.proc.poll()
        if code is None:
            return None
        lines = [line.strip() for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        return f"exited with status {code}" + (f" ({lines[-1][:200]})" if lines else "")

    def stop(self, wait: float = 0.0) -> None:
        """Give the program `wait` seconds to exit on its own, then end it."""
        try:
            self.proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_scheduler(workload: Workload, argv: list[str] | None = None, *, connect: str | None = None,
                  reveal_run_times: bool = False, timeout: float = 30.0,
                  cwd: str | None = None) -> tuple[BatsimRun, list[float]]:
    """Play Batsim for a scheduler over `workload`: the program `argv` started on an ipc://
    address of its own, or the one listening at `connect`. Returns the run and each exchange's
    round trip in seconds; raises SchedulerFailed (one line) when the scheduler fails."""
    if (argv is None) == (connect is None):
        raise ConfigError("give the scheduler program (after --) or --connect ADDR, one of the two")
    folder = ipc_folder("hpcgym-batsim-")
    program = None
    socket = None
    try:
        address = connect or f"ipc://{folder}/scheduler.ipc"
        if argv is not None:
            program = SchedulerProgram(scheduler_argv(argv, address), folder / "scheduler.log", cwd)
        socket = SchedulerSocket(address, timeout, program.gone if program else None)
        run = BatsimReplay(workload, reveal_run_times=reveal_run_times).run(socket)
        if program is not None:
            program.stop(EXIT_WAIT_S)
        return run, socket.latency
    finally:
        if socket is not None:
            socket.close()
        if program is not None:
            program.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _window_options(f):
    f = click.option("--sample", type=int, help="Seed of a random window start (with --jobs).")(f)
    f = click.option("--start", type=click.IntRange(min=0), help="First job of the window (with --jobs).")(f)
    f = click.option("--jobs", "n_jobs", type=click.IntRange(min=1), help="Only this many jobs (a window).")(f)
    f = _reading_options(f)
    return click.option("--trace", type=click.Path(path_type=Path, dir_okay=False), required=True,
                        help="SWF or SWF.gz trace: a path, or a file name found in $HPCGYM_TRACES.")(f)


def _load(trace: Path, procs: int | None, strict: bool, skip_malformed: bool, n_jobs: int | None,
          start: int | None, sample: int | None) -> Workload:
    spec = _workload_spec(trace, procs, strict, skip_malformed)
    spec.update(jobs=n_jobs, start=start, sample=sample)
    return load_workload(spec)


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
@click.option("--jobs-out", type=click.Path(path_type=Path, dir_okay=False), default=Path("batsim-jobs.csv"),
              show_default=True, help="Per-job records (CSV; rejected jobs have none).")
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
def run_command(trace, procs, strict, skip_malformed, n_jobs, start, sample, connect, reveal_run_times, timeout,
                as_json, jobs_out, program) -> None:
    """Run a Batsim scheduler over a trace window and print hpcgym's metrics:
    hpcgym batsim run --trace lublin_256.swf.gz --jobs 200 -- pybatsim easyBackfill -t 0"""
    if program and connect:
        raise click.UsageError("give PROGRAM (after --) or --connect ADDR, not both")
    if not program and not connect:
        raise click.UsageError("give the scheduler program after --, e.g. -- pybatsim easyBackfill -t 0, "
                               "or --connect ADDR")
    workload = _load(trace, procs, strict, skip_malformed, n_jobs, start, sample)
    run, latency = run_scheduler(workload, list(program) or None, connect=connect, reveal_run_times=reveal_run_times,
                                 timeout=timeout)
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
def export_command(trace, procs, strict, skip_malformed, n_jobs, start, sample, out, speed) -> None:
    """Write a trace window as a Batsim workload (delay profiles, walltime = requested time) and a
    homogeneous platform of as many hosts as processors, to replay the same jobs in real Batsim."""
    workload = _load(trace, procs, strict, skip_malformed, n_jobs, start, sample)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "workload.json").write_text(json.dumps(workload_json(workload), indent=1) + "\n")
        (out / "platform.xml").write_text(platform_xml(workload.procs, speed))
    except OSError as exc:
        raise HpcgymError(f"cannot write to {out}: {exc.strerror or exc}") from None
    click.echo(f"wrote {len(workload)} jobs on {workload.procs} hosts to {out}/workload.json and {out}/platform.xml "
               f"(batsim -p {out}/platform.xml -w {out}/workload.json)")
