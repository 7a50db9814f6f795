"""The schedule report (gymbridge/compare/schedule_report.py): `hpcgym run --report` and compare's
report.html are one offline page holding every job of the window; headless Chromium draws it."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcgym.gymbridge.cli import main

pytest.importorskip("plotly", reason="the report draws with plotly (the compare extra)")

SDSC = Path("/work/shared/traces/SDSC-SP2-1998-4.2-cln.swf.gz")
needs_sdsc = pytest.mark.skipif(not SDSC.is_file(), reason=f"the real trace {SDSC} is not here")


def hover_data(page: str) -> list[tuple[str, ...]]:
    """Every bar's hover data in the page's embedded figures: (job id, wait, processors)."""
    blocks = re.findall(r'"customdata":\[\[(.*?)\]\]', page)
    return [tuple(item.split(",")) for block in blocks for item in block.split("],[") if item.count(",") == 2]


def run_report(tmp_path: Path, jobs: int) -> tuple[str, list[dict[str, str]]]:
    page, records = tmp_path / "r.html", tmp_path / "jobs.csv"
    result = CliRunner().invoke(main, ["run", "--trace", str(SDSC), "--jobs", str(jobs), "--report", str(page),
                                       "--jobs-out", str(records)])
    assert result.exit_code == 0, result.output
    with open(records, newline="") as f:
        return page.read_text(encoding="utf-8"), list(csv.DictReader(f))


@needs_sdsc
def test_run_report_holds_every_job_and_plotly_offline(tmp_path):
    page, rows = run_report(tmp_path, 2000)
    drawn = {(int(i), int(w)) for i, w, _ in hover_data(page)}
    assert drawn == {(int(r["job_id"]), int(r["wait"])) for r in rows}  # every job, with its wait
    assert "plotly.js v" in page and "Plotly.newPlot" in page          # the library itself, embedded
    assert not re.search(r"<script[^>]+src=", page)                     # nothing fetched: opens offline
    assert all(kind in page for kind in ("ready", "reserved", "backfilled"))


def test_compare_report_puts_the_policies_side_by_side(tmp_path):
    from .test_compare import write_trace

    trace = write_trace(tmp_path / "t.swf", n_jobs=60, procs=16)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compare", "--trace", str(trace), "--jobs", "40", "--samples", "4",
                                       "--policy", "fcfs", "--policy", "sjf", "--inproc", "--workers", "1",
                                       "--bootstrap", "100", "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("Plotly.newPlot") == 3          # the first three of four windows
    assert page.count("plotly.js v") == 1             # the library once
    for policy in ("fcfs", "sjf"):
        with open(out / "jobs" / policy / "seq-000.csv", newline="") as f:
            ids = {r["job_id"] for r in csv.DictReader(f)}
        assert ids <= {i for i, _, _ in hover_data(page)}
    assert "report.html" in result.output


def test_gantt_bars_cover_each_jobs_processors_and_time():
    from hpcgym.gymbridge.compare.schedule_report import Schedule, window_figure

    jobs = {"job_id": [1, 2], "submit": [0, 0], "start": [0, 10], "end": [10, 20], "size": [2, 4], "wait": [0, 10],
            "bsld": [1.0, 1.5], "start_kind": [0, 1]}
    figure = window_figure([Schedule("p", "w", jobs, 4)])
    bars = [t for t in figure.data if t.type == "bar"]
    assert [t.name for t in bars] == ["ready", "reserved"]
    assert [list(t.base) for t in bars] == [[0.0], [10 / 3600]] and [list(t.x) for t in bars] == [[10 / 3600]] * 2
    assert [list(t.y) for t in bars] == [[1.0], [2.0]] and [list(t.width) for t in bars] == [[2], [4]]


@pytest.mark.slow
@needs_sdsc
def test_chromium_draws_the_gantt_chart(tmp_path):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    run_report(tmp_path, 2000)
    shot = tmp_path / "shot.png"
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--window-size=1300,1000", f"--screenshot={shot}", (tmp_path / "r.html").as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.is_file(), done.stderr
    assert "Uncaught" not in done.stderr, done.stderr
    from PIL import Image

    pixels = Image.open(shot).convert("RGB").getdata()
    ready = sum(1 for p in pixels if p == (0x4C, 0x78, 0xA8))  # the Gantt chart's ready bars
    assert ready > 5000
