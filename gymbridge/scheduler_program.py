"""A Batsim scheduler program over an hpcgym workload, hpcgym playing Batsim (`hpcgym batsim run`, compare's
`batsim:` policies; docs/batsim.md); `Program` also starts and ends compare's agent processes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..environment.batsim import BatsimReplay, BatsimRun, SchedulerSocket
from ..environment.errors import ConfigError
from ..environment.workload import Workload

#: Seconds the scheduler program may take to exit after the simulation ended.
EXIT_WAIT_S = 10.0


def scheduler_argv(argv: list[str], address: str) -> list[str]:
    """PROGRAM ARGS with the scheduler's address put in: at `{addr}`, else as `-s ADDR`."""
    if any("{addr}" in arg for arg in argv):
        return [arg.replace("{addr}", address) for arg in argv]
    return [*argv, "-s", address]


class Program:
    """A program started for one run (a scheduler, an agent), its output kept in `log` for error messages."""

    def __init__(self, argv: list[str], log: Path, cwd: str | None = None, env: dict[str, str] | None = None,
                 what: str = "the scheduler") -> None:
        self.argv, self.log = argv, log
        with open(log, "wb") as out:
            try:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                             cwd=cwd, env=env)
            except OSError as exc:
                raise ConfigError(f"cannot start {what} {argv[0]!r}: {exc.strerror or exc}") from None

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
                  folder: Path | None = None, reveal_run_times: bool = False, timeout: float = 30.0,
                  cwd: str | None = None) -> tuple[BatsimRun, list[float]]:
    """Play Batsim for `argv` (on an ipc:// address in `folder`) or `connect`: the run, each exchange's time (s)."""
    if (argv is None) == (connect is None):
        raise ConfigError("give the scheduler program (after --) or --connect ADDR, one of the two")
    if argv is not None and folder is None:
        raise ConfigError("a scheduler program needs a folder for its socket and output")
    program, socket = None, None
    try:
        address = connect or f"ipc://{folder}/scheduler.ipc"
        if argv is not None:
            program = Program(scheduler_argv(argv, address), folder / "scheduler.log", cwd)
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
