"""Broken reservations, one record each (`Simulation.reservation_breaks`, `RunResult`), and their
marks in the schedule report: a backfill agent past EASY's guard is what breaks them."""

from __future__ import annotations

import pytest

from hpcgym.agents.base import Agent
from hpcgym.environment.config import SimConfig
from hpcgym.environment.metrics import ReservationBreak
from hpcgym.environment.simulator import Simulation
from hpcgym.environment.spec import load_workload


class FirstCandidate(Agent):
    """Backfills the first candidate every time it is asked."""

    kinds = ("backfill",)

    def act(self, decision):
        return decision.candidates[0]


def unguarded_run(jobs: int = 300, seed: int = 3) -> tuple[Simulation, object]:
    """A generated window under unguarded candidates, with exact estimates so that a shadow time
    is when the reserved job would have started."""
    sim = Simulation(load_workload({"jobs": jobs}, seed),
                     SimConfig(seed=seed, estimate="actual", backfill_candidates="unguarded"), external={"backfill"})
    return sim, sim.run({"backfill": FirstCandidate()})


def test_each_break_is_recorded_and_its_reserved_job_started_after_the_old_shadow_time():
    sim, result = unguarded_run()
    breaks = sim.reservation_breaks
    assert sim.reservation_delays > 0  # the window does break reservations
    assert len(breaks) == sim.reservation_delays
    assert sum(b.delay for b in breaks) == sim.reservation_delay_s
    assert result.reservation_breaks == tuple(breaks)
    row = {int(j): k for k, j in enumerate(result.jobs["job_id"])}
    for b in breaks:
        assert isinstance(b, ReservationBreak) and b.delay > 0
        assert result.jobs["start"][row[b.backfilled]] == b.time
        assert result.jobs["start"][row[b.reserved]] >= b.shadow + b.delay > b.shadow


def test_a_guarded_run_breaks_none():
    sim = Simulation(load_workload({"jobs": 300}, 3), SimConfig(seed=3, estimate="actual"), external={"backfill"})
    assert sim.run({"backfill": FirstCandidate()}).reservation_breaks == () and sim.reservation_breaks == []


def test_the_report_marks_each_broken_reservation():
    pytest.importorskip("plotly", reason="the report draws with plotly (the compare extra)")
    from hpcgym.gymbridge.compare.schedule_report import Schedule, report_html, window_figure

    _, result = unguarded_run()
    schedule = Schedule("fcfs + first candidate", "generated", result.jobs, result.procs, result.reservation_breaks)
    marks = [t for t in window_figure([schedule]).data if t.name == "broken reservation"]
    assert len(marks) == 1
    shadows = [x for x, size in zip(marks[0].x, marks[0].marker.size) if size]  # the x's, one per break
    assert len(shadows) == len(result.reservation_breaks)
    page = report_html([schedule], "breaks")
    assert "broken reservation" in page
    assert all(f"reservation of job {b.reserved} broken" in page for b in result.reservation_breaks)
    clean = Schedule("fcfs", "generated", result.jobs, result.procs)
    assert not [t for t in window_figure([clean]).data if t.name == "broken reservation"]


def test_compare_marks_the_breaks_of_its_units_in_process_and_over_the_protocol(tmp_path, monkeypatch):
    pytest.importorskip("plotly", reason="the report draws with plotly (the compare extra)")
    import json

    from click.testing import CliRunner

    from hpcgym.gymbridge.cli import main

    from .test_compare import write_trace

    trace = write_trace(tmp_path / "t.swf", n_jobs=80, procs=16)
    (tmp_path / "first_candidate.py").write_text(
        "from hpcgym.agents.base import Agent\n\n\nclass FirstCandidate(Agent):\n    kinds = ('backfill',)\n\n"
        "    def act(self, decision):\n        return decision.candidates[0]\n")
    monkeypatch.chdir(tmp_path)
    found = {}
    for mode in ("--inproc", "--no-plots"):  # the second over the protocol (an agent process per unit)
        out = tmp_path / mode
        result = CliRunner().invoke(main, ["compare", "--trace", str(trace), "--jobs", "60", "--samples", "2", mode,
                                           "--workers", "1", "--bootstrap", "100", "--out", str(out), "--policy", "fcfs",
                                           "--policy", "first=backfill_candidates:unguarded,backfill:first_candidate:"
                                                       "FirstCandidate"])
        assert result.exit_code == 0, result.output
        units = {p: [json.loads(f.read_text()) for f in sorted((out / "units" / p).glob("seq-*.json"))]
                 for p in ("fcfs", "first")}
        assert all(u["reservation_breaks"] == [] for u in units["fcfs"])
        found[mode] = [ReservationBreak(*b) for u in units["first"] for b in u["reservation_breaks"]]
    breaks = found["--inproc"]
    assert breaks and found["--no-plots"] == breaks  # the agent does break reservations, the same in both modes
    out = tmp_path / "--inproc"
    page = (out / "report.html").read_text(encoding="utf-8")
    assert all(f"reservation of job {b.reserved} broken" in page and f"by backfilling job {b.backfilled} at" in page
               for b in breaks)
