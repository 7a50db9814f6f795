"""The schedule report: one self-contained HTML page (plotly.js embedded, so it opens offline)
that shows schedules rather than their averages, for `hpcgym run --report` and `hpcgym compare`.

Per window, the policies side by side on one time axis: a Gantt chart of the jobs over processor
ids (`allocate_processors`, hover: job, wait, kind of start), busy processors and queue length
over time, and the distributions of waits and bounded slowdowns. The Gantt chart is one bar
trace per kind of start (bars with a base, one per processor interval), not a shape per job:
a 10,000-job window draws in a few seconds. Reservations a backfill agent broke
(`RunResult.reservation_breaks`, where the run gave them) are marked on it: an x where the
reserved job's reservation stood, a line to where it started.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...environment.metrics import START_KINDS, ReservationBreak, allocate_processors, intervals, read_jobs_csv

#: Colours of the kinds of start: ready, reserved, backfilled.
KIND_COLOURS = ("#4c78a8", "#f58518", "#54a24b")
BREAK_COLOUR = "#e45756"
HOUR = 3600.0
#: Windows of a comparison drawn in its report.html: the first few, to keep the page light.
COMPARE_WINDOWS = 3


@dataclass
class Schedule:
    """One policy's schedule of one window: per-job columns as `RunResult.jobs` or
    `read_jobs_csv` hold them, and the reservations broken in it (none known: empty)."""

    policy: str
    window: str
    jobs: dict[str, Any]
    procs: int
    breaks: Sequence[ReservationBreak] = ()


def _gantt(go: Any, s: Schedule, t0: int) -> list[Any]:
    """Bars over [start, end] x [low id, high id + 1], one trace per kind of start."""
    jobs = s.jobs
    start, end, size = (np.asarray(jobs[c], dtype=np.int64) for c in ("start", "end", "size"))
    allocation = jobs.get("allocated_resources")
    if allocation is None:
        allocation = allocate_processors(start, end, size, s.procs)
    row, low, high = intervals(list(allocation))
    kinds = np.asarray(jobs["start_kind"], dtype=np.int64)[row]
    ids, waits = np.asarray(jobs["job_id"])[row], np.asarray(jobs["wait"])[row]
    traces = []
    for k, name in enumerate(START_KINDS):
        pick = kinds == k
        if not pick.any():
            continue
        r = row[pick]
        traces.append(go.Bar(
            orientation="h", name=name, legendgroup=name, marker_color=KIND_COLOURS[k], marker_line_width=0,
            base=(start[r] - t0) / HOUR, x=(end[r] - start[r]) / HOUR,
            y=(low[pick] + high[pick] + 1) / 2, width=high[pick] - low[pick] + 1,
            customdata=np.stack([ids[pick], waits[pick], size[r]], axis=1).tolist(),
            hovertemplate=f"job %{{customdata[0]}}<br>wait %{{customdata[1]}} s<br>{name} start<br>"
                          "%{customdata[2]} processors<extra></extra>"))
    if s.breaks:
        traces.append(_breaks(go, s.breaks, jobs["job_id"], start, row, low, high, t0))
    return traces


def _breaks(go: Any, breaks: Sequence[ReservationBreak], job_id: Any, start: np.ndarray, row: np.ndarray,
            low: np.ndarray, high: np.ndarray, t0: int) -> Any:
    """One trace marking each broken reservation across the reserved job's processors: an x at
    the shadow time it had before the backfill, a line on to its actual start."""
    record = {int(j): k for k, j in enumerate(job_id)}
    x, y, size, text = [], [], [], []
    for b in breaks:
        k = record.get(int(b.reserved), -1)
        first, last = np.searchsorted(row, k), np.searchsorted(row, k, side="right")
        if first == last:  # never ran (or not in these records): nowhere to draw it
            continue
        mid = (low[first] + high[last - 1] + 1) / 2
        note = (f"reservation of job {b.reserved} broken<br>by backfilling job {b.backfilled} at "
                f"{(b.time - t0) / HOUR:.2f} h<br>its shadow time {b.delay} s later")
        x += [(b.shadow - t0) / HOUR, (start[k] - t0) / HOUR, None]
        y += [mid, mid, None]
        size += [11, 0, 0]
        text += [note, note, None]
    return go.Scatter(x=x, y=y, mode="lines+markers", name="broken reservation", legendgroup="broken reservation",
                      line={"color": BREAK_COLOUR, "width": 1, "dash": "dot"},
                      marker={"symbol": "x", "size": size, "color": BREAK_COLOUR}, text=text,
                      hovertemplate="%{text}<extra></extra>")


def _steps(times: np.ndarray, deltas: np.ndarray, t0: int) -> tuple[list[float], list[float]]:
    """A step curve of the running sum of `deltas` at `times` (one point per distinct time)."""
    order = np.argsort(times, kind="stable")
    t, level = times[order], np.cumsum(deltas[order])
    last = np.r_[t[1:] != t[:-1], True]
    return ((t[last] - t0) / HOUR).tolist(), level[last].tolist()


def _usage(go: Any, s: Schedule, t0: int, colour: str) -> tuple[Any, Any]:
    """Busy processors (share of the machine) and queued jobs over time."""
    jobs = s.jobs
    submit, start, end, size = (np.asarray(jobs[c], dtype=np.int64) for c in ("submit", "start", "end", "size"))
    ran = start >= 0
    x, busy = _steps(np.r_[start[ran], end[ran]], np.r_[size[ran], -size[ran]], t0)
    used = go.Scatter(x=x, y=(np.asarray(busy) / max(s.procs, 1)).tolist(), mode="lines", line_shape="hv",
                      line_color=colour, line_width=1, showlegend=False, name=s.policy,
                      hovertemplate="%{y:.1%} busy<extra>" + html.escape(s.policy) + "</extra>")
    leave = np.where(ran, start, end)  # a job that never started leaves the queue when it is given up
    x, queued = _steps(np.r_[submit, leave], np.r_[np.ones(len(submit), np.int64), -np.ones(len(leave), np.int64)], t0)
    queue = go.Scatter(x=x, y=queued, mode="lines", line_shape="hv", line_color=colour, line_width=1,
                       showlegend=False, name=s.policy,
                       hovertemplate="%{y} queued<extra>" + html.escape(s.policy) + "</extra>")
    return used, queue


def _ecdf(go: Any, values: Any, name: str, colour: str, what: str) -> Any:
    """The share of jobs at or below each value (log axis: zeros drawn at the smallest positive)."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    share = np.arange(1, len(v) + 1) / max(len(v), 1)
    keep = np.r_[v[1:] != v[:-1], True]  # the last of each run of equal values
    return go.Scatter(x=np.maximum(v[keep], 1.0).tolist(), y=share[keep].tolist(), mode="lines", line_shape="hv",
                      line_color=colour, name=name, legendgroup=f"policy {name}", showlegend=what == "wait",
                      hovertemplate=f"{what} ≤ %{{x:.3s}}: %{{y:.1%}} of jobs<extra>{html.escape(name)}</extra>")


def window_figure(schedules: list[Schedule]) -> Any:
    """One window's figure: a column per policy (Gantt, busy share, queue), then the waits' and
    bounded slowdowns' distributions of every policy overlaid; all time axes shared."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    n = len(schedules)
    half = [{"colspan": n}] + [None] * (n - 1)
    specs = [[{"colspan": 2}, None] * n for _ in range(3)] + [half + half]
    titles = [s.policy for s in schedules] + [""] * (2 * n) + ["share of jobs that waited at most x s",
                                                               "share of jobs with bounded slowdown at most x"]
    fig = make_subplots(rows=4, cols=2 * n, specs=specs, row_heights=[0.52, 0.13, 0.13, 0.22],
                        vertical_spacing=0.07, horizontal_spacing=0.04, subplot_titles=titles)
    t0 = min(int(np.min(s.jobs["submit"])) for s in schedules if len(s.jobs["submit"]))
    seen: set[str] = set()
    for k, s in enumerate(schedules):
        col, colour = 2 * k + 1, qualitative.Plotly[k % len(qualitative.Plotly)]
        for trace in _gantt(go, s, t0):
            trace.showlegend = trace.legendgroup not in seen
            seen.add(trace.legendgroup)
            fig.add_trace(trace, row=1, col=col)
        used, queue = _usage(go, s, t0, colour)
        fig.add_trace(used, row=2, col=col)
        fig.add_trace(queue, row=3, col=col)
        fig.add_trace(_ecdf(go, s.jobs["wait"], s.policy, colour, "wait"), row=4, col=1)
        fig.add_trace(_ecdf(go, s.jobs["bsld"], s.policy, colour, "bounded slowdown"), row=4, col=n + 1)
        fig.update_yaxes(range=[0, s.procs * 1.02], row=1, col=col, title_text="processor" if k == 0 else None)
        fig.update_yaxes(range=[0, 1.02], tickformat=".0%", row=2, col=col, title_text="busy" if k == 0 else None)
        fig.update_yaxes(matches=f"y{2 * n + 1}" if k else None, rangemode="tozero", row=3, col=col,  # row-major
                         title_text="queued" if k == 0 else None)
        for row in (1, 2, 3):
            fig.update_xaxes(matches="x", row=row, col=col)
    fig.update_xaxes(type="log", row=4, col=1)
    fig.update_xaxes(type="log", row=4, col=n + 1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02], row=4)
    fig.update_layout(barmode="overlay", bargap=0, height=900, title_text=html.escape(schedules[0].window) + " (time in hours since its first submit)",
                      legend_orientation="h", legend_y=1.06, margin={"t": 110, "l": 60, "r": 20, "b": 40},
                      hovermode="closest")
    return fig


def report_html(schedules: list[Schedule], title: str, notes: list[str] = ()) -> str:
    """The page: a figure per window (in the order first seen), plotly.js embedded once."""
    windows: dict[str, list[Schedule]] = {}
    for s in schedules:
        windows.setdefault(s.window, []).append(s)
    parts = []
    for k, group in enumerate(windows.values()):
        parts.append(window_figure(group).to_html(full_html=False, include_plotlyjs=k == 0,
                                                  config={"displaylogo": False, "responsive": True}))
    width = max(1200, 520 * max(len(g) for g in windows.values()))
    notes_html = "".join(f"<p>{html.escape(line)}</p>" for line in notes)
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>body{{font-family:sans-serif;margin:1em;max-width:{width}px}}</style></head>\n"
            f"<body><h1>{html.escape(title)}</h1>{notes_html}\n" + "\n".join(parts) + "\n</body></html>\n")


def write_report(path: Path, schedules: list[Schedule], title: str, notes: list[str] = ()) -> None:
    """Write the page (`report_html`) to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_html(schedules, title, notes), encoding="utf-8")


def compare_schedules(out: Path, units: dict[str, list[dict[str, Any] | None]],
                      sequences: list[dict[str, Any]]) -> list[Schedule]:
    """The schedules of a comparison's first `COMPARE_WINDOWS` sequences, read from its per-job
    CSVs. `units`: per policy, the unit's record (units/POLICY/seq-NNN.json) of each sequence, None
    where the unit failed; its `reservation_breaks` (every unit but a Batsim one records them) are marked."""
    schedules = []
    for seq in sequences[:COMPARE_WINDOWS]:
        first = f", jobs {seq['start']}..{seq['start'] + seq['jobs'] - 1}" if seq.get("start") is not None else ""
        window = f"sequence {seq['index']}: {seq['jobs']} jobs on {seq['procs']} processors{first}"
        for policy, records in units.items():
            unit = records[seq["index"]]
            if unit is not None:
                breaks = [ReservationBreak(*b) for b in unit.get("reservation_breaks", ())]
                schedules.append(Schedule(policy, window, read_jobs_csv(out / unit["jobs_csv"]), seq["procs"], breaks))
    return schedules
