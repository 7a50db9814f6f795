"""The work a request starts, bounded in CPU time and cancelled when its agent leaves.

A shared env runs a reset's work (windows drawn for `sjf_range`, each simulated with SJF; the
simulation up to the first decision) on the thread that serves it. `running(work)` makes `work`
that thread's current work; `check()`, called at cheap points (before each drawn window, every
1,024 finished jobs of a simulation), raises once the work has used its CPU time or was
cancelled from another thread (its agent said bye or closed its connection), and otherwise lets
the other threads (the socket loop, other sessions) take the interpreter for a moment, so that
hours of work asked for in 90 bytes cannot starve them. Outside `running` it costs one lookup.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import HpcgymError

#: How long `check` gives the other threads (a thread waiting for the interpreter gets it).
YIELD_S = 0.0002


class OverLimit(HpcgymError):
    """The work used its CPU time: refused with a message naming the limit and what to do."""


class Cancelled(Exception):
    """The work was cancelled (its agent left): nobody waits for an answer."""


class Work:
    """One request's work: at most `cpu_s` seconds of its thread's CPU time (None: no bound),
    `what` naming it and `setting` the option that sets the bound, in the refusal."""

    def __init__(self, cpu_s: float | None, what: str, setting: str = "") -> None:
        self.cpu_s, self.what, self.setting = cpu_s, what, setting
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
    work._ends = time.thread_time() + work.cpu_s if work.cpu_s is not None else float("inf")
    before = getattr(_current, "work", None)
    _current.work = work
    try:
        yield work
    finally:
        _current.work = before


def check() -> None:
    """Check this thread's current work, if any (see the module docstring)."""
    work = getattr(_current, "work", None)
    if work is not None:
        work.check()
