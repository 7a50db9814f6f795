"""The comparison's tables and plots, and the picture of a training run's learning curve. summary.*
hold only numbers the job sequences determine (identical for any executor and worker count)."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .stats import HIGHER_IS_BETTER, METRICS, STATS

LABELS = {key: label for key, label, _ in METRICS}


#: Decimals of a metric in the Markdown tables (1 where not named).
DECIMALS = {"utilization": 4, "mean_bsld": 2, "mean_slowdown": 2, "max_bsld": 2}


def fmt(key: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{DECIMALS.get(key, 1)}f}"


def fmt_signed(key: str, value: float | None) -> str:
    text = fmt(key, value)
    return text if text == "-" or text.startswith("-") else f"+{text}"


def _diff_cell(key: str, row: dict[str, Any]) -> str:
    diff, low, high, win = (row.get(f"{key}_{s}") for s in ("diff", "ci_low", "ci_high", "win_rate"))
    if diff is None:
        return "-"
    if win is None:
        return "(baseline)"
    if low is None:
        return f"{fmt_signed(key, diff)} (one sample: no CI), wins {win:.0%}"
    return f"{fmt_signed(key, diff)} [{fmt_signed(key, low)}, {fmt_signed(key, high)}], wins {win:.0%}"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def summary_markdown(title: str, notes: list[str], policies: list[dict[str, Any]], stats: dict[str, dict[str, Any]],
                     primary: str) -> str:
    """The summary: a main table (primary metric, wait, utilization), then every metric."""
    keys = list(dict.fromkeys([primary, "mean_wait", "utilization"]))
    header = ["policy", "status"]
    for key in keys:
        header += [f"{LABELS[key]}: mean / median", f"{LABELS[key]}: Δ vs baseline [95% CI]"]
    rows = []
    for p in policies:
        row, cells = stats[p["name"]], [p["name"], p["status"]]
        for key in keys:
            cells += [f"{fmt(key, row[f'{key}_mean'])} / {fmt(key, row[f'{key}_median'])}", _diff_cell(key, row)]
        rows.append(cells)
    parts = [f"# {title}\n", "\n".join(notes) + "\n", _md_table(header, rows)]
    every = ["policy"] + [LABELS[k] for k, _, _ in METRICS]
    parts += ["\n## All metrics: mean / median over samples\n\n",
              _md_table(every, [[p["name"]] + [f"{fmt(k, stats[p['name']][f'{k}_mean'])} / "
                                               f"{fmt(k, stats[p['name']][f'{k}_median'])}" for k, _, _ in METRICS]
                                for p in policies]),
              "\n## All metrics: paired difference to the baseline [bootstrap 95% CI], win rate\n\n",
              _md_table(every, [[p["name"]] + [_diff_cell(k, stats[p["name"]]) for k, _, _ in METRICS] for p in policies])]
    errors = [p for p in policies if p.get("error")]
    if errors:
        parts.append("\n## Errors\n\n")
        parts.append("".join(f"- **{p['name']}** (`{p['spec']}`): {p['error']}\n" for p in errors))
    return "".join(parts)


def summary_csv(policies: list[dict[str, Any]], stats: dict[str, dict[str, Any]]) -> str:
    """One row per policy; every metric's statistics at full precision (Python's repr)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    columns = [f"{key}_{s}" for key, _, _ in METRICS for s in STATS]
    writer.writerow(["policy", "spec", "status", "error", "samples", "samples_ok"] + columns)
    for p in policies:
        row = stats[p["name"]]
        writer.writerow([p["name"], p["spec"], p["status"], p.get("error") or "", p["samples"], p["samples_ok"]]
                        + ["" if row[c] is None else repr(row[c]) for c in columns])
    return buf.getvalue()


def latency_rows(latency: list[dict[str, Any]]) -> tuple[str, str]:
    """latency.md and latency.csv from rows of {policy, agent, kinds, mode, asked, ordered, mean_ms, ...}."""
    keys = ["policy", "agent", "kinds", "mode", "asked", "ordered", "mean_ms", "p50_ms", "p95_ms", "max_ms"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(keys)
    for row in latency:
        writer.writerow([row.get(k, "") if not isinstance(row.get(k), float) else repr(row[k]) for k in keys])
    md_rows = [[r["policy"], r["agent"], r["kinds"], r["mode"], str(r["asked"]), str(r["ordered"])]
               + [f"{r[k]:.3f}" if r.get(k) is not None else "-" for k in ("mean_ms", "p50_ms", "p95_ms", "max_ms")]
               for r in latency]
    md = ("## Decision latency per agent (ms)\n\nOver the protocol: env-side, from handing a decision to its agent "
          "until its act arrives. In process: the agent's act call. Asked: the decisions the agent answered itself "
          "(the latencies' count); ordered: those its standing orders answered inside the env (no latency). Policies "
          "without agents decide inside the env.\n\n"
          + (_md_table(["policy", "agent", "kinds", "mode", "asked", "ordered", "mean", "median", "p95", "max"], md_rows)
             if md_rows else "No policy has agents.\n"))
    return md, buf.getvalue()


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend: files only, so it runs without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(folder: Path, names: list[str], per_sample: dict[str, dict[str, list[float]]], primary: str) -> list[str]:
    """Box plots of per-sample bsld and wait (SchedInspector's figures), a radar chart (DRAS's); the files."""
    plt = pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    names = [n for n in names if n in per_sample]
    if not names:
        return []
    written = []
    for key, file in (("mean_bsld", "bsld.png"), ("mean_wait", "wait.png")):
        fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(names) + 2), 4.2))
        ax.boxplot([per_sample[n][key] for n in names], showmeans=True)
        ax.set_xticks(range(1, len(names) + 1), names, rotation=20, ha="right")
        ax.set_ylabel(f"mean {LABELS[key]} of a sequence")
        ax.set_title(f"{LABELS[key]} over {len(per_sample[names[0]][key])} sequences (triangle: mean)")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(folder / file, dpi=110)
        plt.close(fig)
        written.append(file)
    scores = radar_scores(names, per_sample)
    keys = list(next(iter(scores.values())))
    angles = [2 * math.pi * k / len(keys) for k in range(len(keys))]
    fig = plt.figure(figsize=(6.2, 6.2))
    ax = fig.add_subplot(projection="polar")
    for n in names:
        values = [scores[n][k] for k in keys]
        ax.plot(angles + angles[:1], values + values[:1], label=n)
        ax.fill(angles + angles[:1], values + values[:1], alpha=0.08)
    ax.set_xticks(angles, [LABELS[k] for k in keys])
    ax.set_ylim(0, 1.05)
    ax.set_title("Normalized metrics (1 = best policy on that metric)")
    ax.legend(loc="lower right", bbox_to_anchor=(1.25, -0.1), fontsize="small")
    fig.tight_layout()
    fig.savefig(folder / "radar.png", dpi=110)
    plt.close(fig)
    written.append("radar.png")
    return written


def radar_scores(names: list[str], per_sample: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Each metric's mean scaled so the best policy scores 1 (best/value, or value/best; 0 when undefined)."""
    keys = ["mean_bsld", "mean_wait", "mean_response", "mean_slowdown", "max_wait", "utilization", "makespan"]
    means = {n: {k: sum(per_sample[n][k]) / len(per_sample[n][k]) for k in keys} for n in names}
    out: dict[str, dict[str, float]] = {n: {} for n in names}
    for k in keys:
        values = [means[n][k] for n in names]
        best = max(values) if HIGHER_IS_BETTER[k] else min(values)
        for n in names:
            v = means[n][k]
            if HIGHER_IS_BETTER[k]:
                out[n][k] = v / best if best > 0 else 0.0
            else:
                out[n][k] = (best / v if v > 0 else 1.0) if best >= 0 else 0.0
    return out


#: curve.csv columns that count the run's progress rather than measure the policy: not drawn.
CURVE_COUNTERS = ("epoch", "episodes_total", "steps_total", "episodes", "updates", "seconds")


def read_curve(run: Path) -> dict[str, list[float]]:
    """A run's curve.csv (the file or its folder) by column; an empty cell is NaN, a non-numeric column left out."""
    with open(run / "curve.csv" if run.is_dir() else run, newline="") as f:
        rows = list(csv.DictReader(f))
    columns: dict[str, list[float]] = {}
    for name in rows[0] if rows else ():
        try:
            columns[name] = [float(r[name]) if r[name] not in ("", None) else math.nan for r in rows]
        except ValueError:
            continue
    return columns


@dataclass
class Panel:
    """A learning-curve plot: `lines` maps a label ("_...": not in the legend) to (x, y[, line options])."""
    title: str
    lines: dict[str, tuple] = field(default_factory=dict)
    xlabel: str = "epoch"
    ylabel: str = ""
    yscale: str = "linear"
    vlines: tuple[float, ...] = ()
    hline: float | None = None

    def runs(self, runs: dict[str, Path], y: str = "return", x: str = "epoch") -> Panel:
        """Adds each run's curve.csv column `y` against `x`, labelled by its key."""
        for label, run in runs.items():
            columns = read_curve(run)
            self.lines[label] = (columns[x], columns[y])
        return self


def write_curves(panels: list[Panel], path: Path, title: str = "", columns: int = 4, dpi: int = 100,
                 size: tuple[float, float] = (3.6, 2.7)) -> None:
    """Learning curves as one picture, `columns` panels of `size` inches a row (curve.png and docs/ figures)."""
    plt, width = pyplot(), min(columns, max(1, len(panels)))
    height = max(1, -(-len(panels) // width))
    fig, axes = plt.subplots(height, width, figsize=(size[0] * width, size[1] * height + 0.6), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for label, (xs, ys, *style) in panel.lines.items():
            options = {"linewidth": 1, "marker": "." if len(xs) < 30 else None, **(style[0] if style else {})}
            ax.plot(xs, ys, label=label, **options)
        for x in panel.vlines:
            ax.axvline(x, color="grey", linestyle="--", linewidth=0.8)
        if panel.hline is not None:
            ax.axhline(panel.hline, color="grey", linewidth=0.5)
        ax.set_yscale(panel.yscale)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel(panel.xlabel, fontsize=8)
        ax.set_ylabel(panel.ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if any(label and not label.startswith("_") for label in panel.lines):
            ax.legend(fontsize=7)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def write_curve_plot(curve_csv: Path, path: Path, title: str) -> None:
    """A training run's curve.csv, a panel per column: return and episode length first, then the file's order."""
    columns = read_curve(curve_csv)
    drawn = sorted((k for k in columns if k not in CURVE_COUNTERS), key=lambda k: (k != "return", k != "length"))
    epochs = columns.get("epoch", [])
    write_curves([Panel(name, {"": (epochs, columns[name])}) for name in drawn], path, title)
