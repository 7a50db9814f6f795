"""What `HpcEnv.render()` returns: the pending decision as text ("ansi") and the schedule so far
as a Gantt chart image ("rgb_array"), the two frames Gymnasium's tools (RecordVideo, a notebook
print) expect of an env that has no screen of its own.

The text reads only the decision's observation, so a remote env gives it too; the picture needs
the simulation itself (each started job's start, end and processors), which only an in-process
env holds.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from ..environment.decisions import Decision
from ..environment.errors import ConfigError
from ..environment.metrics import START_KINDS, allocate_processors, intervals

RENDER_MODES = ("ansi", "rgb_array")
#: Frames per second for a video of the decisions (RecordVideo): a few decisions a second read well.
RENDER_FPS = 4
#: The frame's size in pixels (width, height) and resolution.
FRAME_SIZE, FRAME_DPI = (640, 400), 80
#: Running jobs listed in the text at most (the queue is the decision's window already).
RUNNING_ROWS = 10
HOUR = 3600.0


def check_render_mode(mode: str | None, remote: str | None) -> str | None:
    """The env's render mode, refused in one line when unknown or when this env cannot draw it."""
    if mode is None or mode == "ansi":
        return mode
    if mode != "rgb_array":
        raise ConfigError(f"render_mode {mode!r} is not offered: use one of {', '.join(RENDER_MODES)} (or None)")
    if remote is not None:
        raise ConfigError("a remote env renders 'ansi' only: rgb_array draws the simulation, which runs in the "
                          "hpcgym env at the other end")
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError("render_mode 'rgb_array' draws with matplotlib, which is not installed: "
                          "pip install -e '.[compare]' (in the clone)")
    return mode


def decision_text(decision: Decision, running_rows: int = RUNNING_ROWS) -> str:
    """The pending decision and the machine around it: time, free processors, the queue window
    (size, requested time, wait), the running jobs by estimated end, the kind and its context.
    Columns the observation leaves out (an env that gathers only its encoder's) show as '-'."""
    obs = decision.observation
    queue, running = obs["queue"], obs["running"]
    lines = [f"t={obs['time']} s  step {decision.step}  processors: {obs['free']} free of {obs['procs']}  "
             f"queue: {obs['queue_length']} jobs, {len(queue['id'])} in the window",
             f"{decision.kind} decision ({'may wait' if decision.can_wait else 'must act'})"
             + "".join(f"  {k}={v}" for k, v in sorted(decision.context.items()))]
    lines.append(f"  {'slot':>4} {'job':>8} {'size':>6} {'requested':>10} {'wait':>8}")
    for k, row in enumerate(_rows(queue, ("id", "size", "requested", "wait"))):
        lines.append(f"  {k:>4} " + " ".join(f"{v:>{w}}" for v, w in zip(row, (8, 6, 10, 8))))
    lines.append(f"running: {len(running['id'])} jobs, by estimated end")
    lines.append(f"  {'job':>13} {'size':>6} {'started':>10} {'est. end':>10}")
    for row in _rows(running, ("id", "size", "start", "estimated_end"))[:running_rows]:
        lines.append("  " + " ".join(f"{v:>{w}}" for v, w in zip(row, (13, 6, 10, 10))))
    if len(running["id"]) > running_rows:
        lines.append(f"  ... {len(running['id']) - running_rows} more")
    return "\n".join(lines) + "\n"


def ended_text(metrics: dict[str, Any]) -> str:
    """The ended episode's main metrics, one line."""
    shown = [f"{k} {metrics[k]:.4g}" for k in ("jobs", "mean_bsld", "mean_wait", "utilization", "makespan")
             if k in metrics]
    return "episode ended: " + ", ".join(shown) + "\n"


def _rows(table: dict[str, list[Any]], columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """A columnar table's rows over `columns`, '-' where the table lacks a column."""
    n = len(table["id"])
    return list(zip(*[table.get(c) or ["-"] * n for c in columns]))


def gantt_frame(schedule: dict[str, list[int]], procs: int, now: int, t0: int) -> np.ndarray:
    """The jobs started so far over processor ids and time (hours since `t0`), running jobs cut
    at `now`, as an H x W x 3 uint8 image. `schedule`: `Simulation.schedule_so_far()`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from .compare.schedule_report import KIND_COLOURS  # the report's colours of the kinds of start

    start, end, size, kind = (np.asarray(schedule[c], dtype=np.int64) for c in ("start", "end", "size", "start_kind"))
    # the allocation from the whole runs (ends the agent is not told), so that ids never overlap
    row, low, high = intervals(allocate_processors(start, end, size, procs))
    fig = Figure(figsize=(FRAME_SIZE[0] / FRAME_DPI, FRAME_SIZE[1] / FRAME_DPI), dpi=FRAME_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    shown = np.minimum(end[row], now) - start[row]
    colours = np.asarray(KIND_COLOURS)[np.clip(kind[row], 0, len(KIND_COLOURS) - 1)]
    ax.barh(low, shown / HOUR, left=(start[row] - t0) / HOUR, height=high - low + 1, align="edge",
            color=colours, linewidth=0)
    span = max(now - t0, 1) / HOUR
    ax.axvline(span, color="black", linewidth=0.8)
    ax.set(xlim=(0, span * 1.02), ylim=(0, max(procs, 1)), xlabel="hours since the first submit", ylabel="processor")
    ax.set_title(f"t = {now} s: {int((start >= 0).sum())} jobs started", loc="left")
    ax.legend(handles=[Patch(color=c, label=k) for c, k in zip(KIND_COLOURS, START_KINDS)], loc="lower right",
              bbox_to_anchor=(1, 1), ncols=len(START_KINDS), frameon=False, fontsize="small")
    fig.tight_layout()
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
