"""The work a request starts, bounded in CPU time and cancelled when its agent leaves.

A shared env runs a reset's work on the thread that serves it, and its heaviest part (the
windows `sjf_range` draws, each simulated with SJF: `offload`) in a process of its `Calls` pool,
where it holds up no other session and is stopped by killing the process. `running(work)` makes
`work` the thread's current work; `check()`, called at cheap points (before each drawn window,
every 1,024 finished jobs of a simulation), raises once the work has used its CPU time or was
cancelled from another thread (its agent said bye or closed its connection), and otherwise
lets the other threads take the interpreter for a moment. Outside `running` it costs one lookup.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from .errors import HpcgymError
from .processes import CallCancelled, Calls

T = TypeVar("T")

#: How long `check` gives the other threads (a thread waiting for the interpreter gets it).
YIELD_S = 0.0002


class OverLimit(HpcgymError):
    """The work used its CPU time: refused with a message naming the limit and what to do."""


class Cancelled(Exception):
    """The work was cancelled (its agent left): nobody waits for an answer."""


class Work:
    """One request's work: at most `cpu_s` seconds of its thread's CPU time (None: no bound),
    `what` naming it and `setting` the option that sets the bound, in the refusal; `spent`: CPU
    seconds it used elsewhere; its offloaded parts run in `calls`' processes (None: here)."""

    def __init__(self, cpu_s: float | None, what: str, setting: str = "", calls: Calls | None = None,
                 spent: float = 0.0) -> None:
        self.cpu_s, self.what, self.setting, self.calls, self.spent = cpu_s, what, setting, calls, spent
        self.cancelled: str | None = None  # why, once cancelled
        self._ends = float("inf")

    def cancel(self, why: str) -> None:
        """Stop the work at its next check (from any thread)."""
        self.cancelled = why

    def check(self) -> None:
        if self.cancelled is not None:
            raise Cancelled(f"{self.what} cancelled: {self.cancelled}")
        if time.thread_time() > self._ends:
            raise OverLimit(f"{self.what} took more than {self.cpu_s:g} s of CPU time, this env's limit per reset"
                            + (f" (the operator sets it with {self.setting})" if self.setting else "")
                            + "; ask for less work: fewer jobs, a wider sjf_range, or agents that take kinds")
        time.sleep(YIELD_S)


_current = threading.local()


@contextmanager
def running(work: Work) -> Iterator[Work]:
    """Make `work` this thread's current work, its CPU time counted from now."""
    work._ends = time.thread_time() + work.cpu_s - work.spent if work.cpu_s is not None else float("inf")
    before = getattr(_current, "work", None)
    _current.work = work
    try:
        yield work
    finally:
        _current.work = before


def offload(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` (picklable) for this thread's current work: in a process of its pool, within
    the CPU time the work has left, if it has a pool; else here."""
    work = getattr(_current, "work", None)
    if work is None or work.calls is None:
        return fn(*args)
    spent = 0.0 if work.cpu_s is None else work.cpu_s - max(0.0, work._ends - time.thread_time())
    try:
        return work.calls.call(_bounded, (fn, args, Work(work.cpu_s, work.what, work.setting, spent=spent)),
                               lambda: work.cancelled is not None)
    except CallCancelled:
        raise Cancelled(f"{work.what} cancelled: {work.cancelled}") from None


def _bounded(fn: Callable[..., T], args: tuple, work: Work) -> T:
    with running(work):
        return fn(*args)


def check() -> None:
    """Check this thread's current work, if any (see the module docstring)."""
    work = getattr(_current, "work", None)
    if work is not None:
        work.check()
