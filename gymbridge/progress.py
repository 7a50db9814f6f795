"""Progress of long commands on stderr: a tqdm bar on a terminal; in a log, a plain line at the start, one every
`EVERY` seconds and the last (`compare: 12/40 units (30%), 01:21 elapsed, 03:09 left`)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

#: Seconds between two plain progress lines (0: a line at every update, and no heartbeat).
EVERY = 30.0


def progress(total: int, unit: str, desc: str, enabled: bool | None, initial: int = 0, leave: bool = True) -> Any:
    """A bar (`enabled` True, or None on a terminal), plain lines (None elsewhere) or nothing (False)."""
    from tqdm import tqdm

    if enabled is False or (enabled is None and not sys.stderr.isatty()):
        return tqdm(disable=True) if enabled is False else ProgressLines(total, unit, desc, initial)
    return tqdm(total=total, initial=initial, unit=unit, desc=desc, file=sys.stderr, dynamic_ncols=True, leave=leave)


class ProgressLines:
    """tqdm's progress as plain stderr lines: at the start, every `every` seconds (a heartbeat) and the last."""

    FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%), {elapsed} elapsed, {remaining} left{postfix}"

    def __init__(self, total: int, unit: str, desc: str, initial: int = 0, every: float | None = None) -> None:
        self.total, self.unit, self.desc, self.n = total, unit, desc, initial
        self.every = EVERY if every is None else every
        self.postfix = ""
        self.start = self.last = time.monotonic()
        self._lock, self._closed = threading.Lock(), threading.Event()
        self._say(self.start)
        if self.every > 0:
            threading.Thread(target=self._beat, name=f"{desc}-progress", daemon=True).start()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every or self.n >= self.total:
            self._say(now)

    def _beat(self) -> None:
        while not self._closed.wait(max(0.0, self.last + self.every - time.monotonic())):
            if time.monotonic() - self.last >= self.every:
                self._say(time.monotonic())

    def _say(self, now: float) -> None:
        with self._lock:
            if not self._closed.is_set():
                self.last = now
                self.write(self.line(now - self.start))

    def line(self, elapsed: float) -> str:
        from tqdm import tqdm

        return tqdm.format_meter(self.n, self.total, elapsed, prefix=self.desc, unit=self.unit,
                                 bar_format=self.FORMAT, postfix=self.postfix or None)

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def write(self, text: str, file: Any = None) -> None:
        print(text, file=file or sys.stderr, flush=True)

    def close(self) -> None:
        """Stop the heartbeat: every other line was written as it came."""
        with self._lock:
            self._closed.set()
