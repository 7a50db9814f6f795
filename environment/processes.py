"""Worker processes, started, watched and ended one way wherever hpcgym runs work in other processes. A worker ignores
SIGINT (Ctrl-C reaches the whole group; its parent decides), and a death is seen at once, not at a timeout."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from .errors import HpcgymError


def spawn(target: Callable[..., Any], args: tuple, name: str, context: str | None = "spawn",
          parent_end: Connection | None = None, daemon: bool = True) -> BaseProcess:
    """A started process running `target(*args)` with SIGINT ignored, by `context` (spawn by default: no fork of a
    parent holding torch or ZeroMQ threads); not a `daemon` if it starts processes of its own."""
    process = multiprocessing.get_context(context).Process(target=_run, args=(target, args, parent_end), name=name,
                                                           daemon=daemon)
    process.start()
    return process


def _run(target: Callable[..., Any], args: tuple, parent_end: Connection | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_end is not None:   # forked: the parent's end of the pipe must not stay open here too
        parent_end.close()
    target(*args)


def piped(target: Callable[..., Any], args: tuple, name: str, context: str | None = "spawn"
          ) -> tuple[Connection, BaseProcess]:
    """A started process running `target(conn, *args)`, and this side's end of its pipe `conn`."""
    conn, child = multiprocessing.Pipe()
    process = spawn(target, (child, *args), name, context, conn)
    child.close()
    return conn, process


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
        return piped(self.target, args, f"{self.name}-{w}", self.context)

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


class CallCancelled(Exception):
    """A call given up because its caller's `cancelled()` came true: its process was killed."""


class Calls:
    """Picklable calls in up to `size` processes (started when first needed, at `nice`), so CPU-heavy work holds up no
    thread of the caller's and a call is stopped at once by killing its process."""

    CHECK_S = 0.05

    def __init__(self, size: int, name: str, nice: int = 0) -> None:
        self.size, self.name, self.nice = size, name, nice
        self._idle: list[tuple[Connection, BaseProcess]] = []
        self._started = 0
        self._ready = threading.Condition()

    def call(self, fn: Callable[..., Any], args: tuple, cancelled: Callable[[], bool]) -> Any:
        """`fn(*args)`'s value, or the exception it raised; CallCancelled once `cancelled()`;
        HpcgymError if the process died."""
        with self._ready:
            while not self._idle and self._started >= self.size:
                if cancelled():
                    raise CallCancelled()
                self._ready.wait(self.CHECK_S)
            conn, process = self._idle.pop() if self._idle else (None, None)
            self._started += conn is None
        answer, ready = None, conn is not None
        try:
            if conn is None:  # a new process says when it reads: a large call sent before would block here
                conn, process = piped(_serve_calls, (self.nice,), self.name)
                ready = self._answered(conn, process, cancelled) and conn.recv_bytes() == b""
            if ready:
                conn.send_bytes(pickle.dumps((fn, args)))
                if self._answered(conn, process, cancelled):
                    answer = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            pass
        finally:
            with self._ready:
                if answer is not None:
                    self._idle.append((conn, process))
                else:  # given up, dead, or not started: never reused
                    self._started -= 1
                self._ready.notify()
            if answer is None:
                end([process] if process is not None else [], 0.0, asked=False)
                if conn is not None:
                    conn.close()
        if answer is None:
            if cancelled():
                raise CallCancelled()
            raise HpcgymError(f"a {self.name} process died (exit code {process.exitcode}) before it answered")
        ok, value = answer
        if ok:
            return value
        raise value

    def _answered(self, conn: Connection, process: BaseProcess, cancelled: Callable[[], bool]) -> bool:
        """Wait for the process's next message: False if the caller gave up or the process died."""
        while not conn.poll(self.CHECK_S):
            if cancelled() or not process.is_alive():
                return False
        return True

    def end(self) -> None:
        """End the idle processes (a busy one ends when its caller gives up)."""
        with self._ready:
            idle, self._idle = self._idle, []
        end([process for _, process in idle], 0.0, asked=False)
        for conn, _ in idle:
            conn.close()


def _serve_calls(conn: Connection, nice: int) -> None:
    os.nice(nice)
    conn.send_bytes(b"")
    while True:
        try:
            fn, args = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        try:
            answer = pickle.dumps((True, fn(*args)))
        except Exception as exc:
            try:
                answer = pickle.dumps((False, exc))
            except Exception:  # an exception that does not pickle
                answer = pickle.dumps((False, HpcgymError(f"{type(exc).__name__}: {exc}")))
        conn.send_bytes(answer)
