"""Generated workloads drawn ahead in a helper process, so that an env's reset need not draw them.

A generated episode draws its whole Lublin workload (10,000 jobs by default) at reset: about 1 ms
on a quick core, 5 ms under a virtualised kernel, some 10% of an env's stepping. An env knows its
next seedless episode's seed (this one's plus its stride), so a helper process on a free core can
draw that workload while this episode runs. In a vector env it pays n times over: while one env
resets, every env in the lockstep waits.

    envs = make_vector(8, "select", workload={"jobs": 256, "sample": True})   # on where a core is free
    env = make("select", workload={"jobs": 256, "sample": True}, prefetch=True)

One helper serves one connection per process that holds envs. `PrefetchClient.take` hands over a
workload only if it has already arrived, else the env draws it itself, so a helper that falls
behind never slows an env down; what it hands over is what `load_workload` gives for the same
spec and seed, bit for bit. Traces are read once per process and cut cheaply, so only generated
workloads are drawn ahead.
"""

from __future__ import annotations

import multiprocessing
import time
import warnings
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from ..environment.spec import load_workload
from ..environment.workload import Workload

#: Workloads kept that no reset took (a reset with another seed than the one foreseen), at most.
KEEP = 16


def _key(spec: dict[str, Any], seed: int) -> tuple:
    return seed, repr(sorted(spec.items()))


def start_helper(clients: int, context: str | None = "spawn") -> tuple[BaseProcess, list[Connection]]:
    """A helper process and `clients` connections to it, one for each `PrefetchClient`; it ends
    when all of them are closed (a forked child closes its copies of this side's ends)."""
    ctx = multiprocessing.get_context(context)
    pairs = [ctx.Pipe() for _ in range(clients)]
    near, far = [a for a, _ in pairs], [b for _, b in pairs]
    helper = ctx.Process(target=_serve, args=(far, near), name="hpcgym-prefetch", daemon=True)
    helper.start()
    for end in far:
        end.close()
    return helper, near


def _serve(conns: list[Connection], others: list[Connection]) -> None:
    """The helper: draws each asked workload in turn; ends when every client has hung up."""
    for end in others:
        end.close()
    live = list(conns)
    while live:
        for conn in wait(live):
            try:
                spec, seed = conn.recv()
            except (EOFError, OSError):
                live.remove(conn)
                continue
            try:
                workload = load_workload(spec, seed)
            except Exception:  # the env draws it itself, and raises the error where it is seen
                workload = None
            try:
                conn.send((_key(spec, seed), workload))
            except OSError:
                live.remove(conn)


class PrefetchClient:
    """One process's end of a helper: `ask` for a workload ahead, `take` it at reset if it came."""

    def __init__(self, conn: Connection, helper: BaseProcess | None = None) -> None:
        self._conn: Connection | None = conn
        self._helper = helper  # a helper of this client's alone (a lone env's): `close` ends it
        self._asked: set[tuple] = set()
        self._ready: dict[tuple, Workload] = {}

    @classmethod
    def alone(cls) -> PrefetchClient:
        """A client with a helper of its own."""
        helper, (conn,) = start_helper(1)
        return cls(conn, helper)

    @property
    def alive(self) -> bool:
        return self._conn is not None

    def ask(self, spec: dict[str, Any], seed: int) -> None:
        """Have the helper draw the workload of `spec` for `seed`."""
        key = _key(spec, seed)
        if self._conn is None or key in self._asked or key in self._ready:
            return
        try:
            self._conn.send((spec, seed))
        except OSError:
            self._lost()
            return
        self._asked.add(key)

    def take(self, spec: dict[str, Any], seed: int) -> Workload | None:
        """The workload of `spec` for `seed` if the helper has sent it; None: draw it yourself."""
        self._receive()
        return self._ready.pop(_key(spec, seed), None)

    def wait(self, timeout_s: float) -> bool:
        """Wait until every workload asked for has arrived (True), or `timeout_s` has passed."""
        end = time.monotonic() + timeout_s
        self._receive()
        while self._asked and self._conn is not None and time.monotonic() < end:
            self._conn.poll(max(0.0, end - time.monotonic()))
            self._receive()
        return self._conn is not None and not self._asked

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        if self._helper is not None:
            join_or_kill(self._helper)
            self._helper = None
        self._ready.clear()

    def _receive(self) -> None:
        """What has arrived, without waiting for the rest."""
        try:
            while self._conn is not None and self._conn.poll():
                key, workload = self._conn.recv()
                self._asked.discard(key)
                if workload is not None:
                    self._ready[key] = workload
        except (EOFError, OSError):
            self._lost()
        while len(self._ready) > KEEP:  # the oldest first: asked for resets that went elsewhere
            del self._ready[next(iter(self._ready))]

    def _lost(self) -> None:
        warnings.warn("the workload prefetch helper has stopped; envs draw their own workloads from now on",
                      RuntimeWarning, stacklevel=3)
        self._conn = None
        self._asked.clear()


def join_or_kill(process: BaseProcess, timeout_s: float = 5.0) -> None:
    """Wait for a process that was told to end (a helper whose clients have all closed, a vector
    env's worker); kill it if it does not end within `timeout_s`."""
    process.join(timeout=timeout_s)
    if process.is_alive():
        process.kill()
        process.join()
