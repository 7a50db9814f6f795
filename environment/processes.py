"""Worker processes, started, watched and ended one way wherever hpcgym runs work in other
processes (rollout workers, vector envs, compare's units, the env's workers).

A worker is a daemon that ignores SIGINT: Ctrl-C reaches every process of the terminal's group,
and the parent, which ends its workers, decides. `Workers` waits on a worker's pipe and its
sentinel together, so a death is seen at once, not at a timeout. `end` gives workers asked to
stop (each caller's stop message is its own) a grace to exit, then SIGTERM, which a worker may
catch to clean up, then SIGKILL.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any


def spawn(target: Callable[..., Any], args: tuple, name: str, context: str | None = "spawn",
          parent_end: Connection | None = None) -> BaseProcess:
    """A started daemon process running `target(*args)` with SIGINT ignored; `context`: the start
    method (spawn by default: no fork of a parent holding torch or ZeroMQ threads)."""
    process = multiprocessing.get_context(context).Process(target=_run, args=(target, args, parent_end), name=name,
                                                           daemon=True)
    process.start()
    return process


def _run(target: Callable[..., Any], args: tuple, parent_end: Connection | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_end is not None:   # forked: the parent's end of the pipe must not stay open here too
        parent_end.close()
    target(*args)


def end(processes: Iterable[BaseProcess], grace: float, asked: bool = True) -> None:
    """End `processes`: if `asked` to stop, they get `grace` seconds to exit; then those still
    alive get SIGTERM and `grace` seconds more, then SIGKILL."""
    processes = list(processes)
    for stage in ([None] if asked else []) + [BaseProcess.terminate, BaseProcess.kill]:
        deadline = time.monotonic() + grace
        for process in processes:
            if stage is not None and process.is_alive():
                stage(process)
        for process in processes:
            process.join(None if stage is BaseProcess.kill else max(0.0, deadline - time.monotonic()))


class Workers:
    """Worker processes, each with a pipe to this one: worker w runs `target(conn, *args[w])`,
    `conn` its end of the pipe."""

    def __init__(self, target: Callable[..., Any], args: list[tuple], name: str, context: str | None = "spawn"
                 ) -> None:
        self.target, self.name, self.context = target, name, context
        started = [self._started(w, worker_args) for w, worker_args in enumerate(args)]
        self.conns: list[Connection] = [conn for conn, _ in started]
        self.processes: list[BaseProcess] = [process for _, process in started]

    def __len__(self) -> int:
        return len(self.processes)

    def _started(self, w: int, args: tuple) -> tuple[Connection, BaseProcess]:
        conn, child = multiprocessing.Pipe()
        process = spawn(self.target, (child, *args), f"{self.name}-{w}", self.context, conn)
        child.close()
        return conn, process

    def restart(self, w: int, args: tuple) -> None:
        """A new worker w, with a new pipe, in the place of one that died."""
        self.conns[w].close()
        self.conns[w], self.processes[w] = self._started(w, args)

    def wait(self, workers: Iterable[int], timeout: float | None) -> list[tuple[int, bytes | None]]:
        """The messages that came from `workers` within `timeout` seconds, as (worker, its bytes),
        one a worker at most; a worker that died gives (worker, None)."""
        waiting: dict[Any, int] = {}
        for w in workers:
            waiting[self.conns[w]] = waiting[self.processes[w].sentinel] = w
        events: dict[int, bytes | None] = {}
        for ready in multiprocessing.connection.wait(list(waiting), timeout):
            if waiting[ready] not in events:
                events[waiting[ready]] = self.receive(waiting[ready])
        return list(events.items())

    def receive(self, w: int) -> bytes | None:
        """Worker w's next message (waiting for it); None if the worker died."""
        try:
            return self.conns[w].recv_bytes()
        except (EOFError, OSError):
            return None

    def exit_code(self, w: int, grace: float = 5.0) -> int | None:
        """Worker w's exit code once it has exited (None if it has not within `grace` seconds)."""
        self.processes[w].join(grace)
        return self.processes[w].exitcode

    def end(self, grace: float, asked: bool = True) -> None:
        """End every worker (see `end`) and close the pipes."""
        end(self.processes, grace, asked)
        for conn in self.conns:
            conn.close()
