"""Processor allocation (environment/metrics.py `allocate_processors`): every started job gets
processor ids, lowest free first, so that a schedule, which the simulator keeps as counts only,
is a complete Gantt chart (docs/semantics.md section 10). The checks here do not share its code:
they expand each interval set into ids and look at every processor's timeline."""

from __future__ import annotations

import pytest

from hpcgym.environment.config import SimConfig
from hpcgym.environment.metrics import allocate_processors, read_jobs_csv
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload

SDSC = "SDSC-SP2-1998-4.2-cln.swf.gz"


def ids(interval_set: str) -> list[int]:
    """The processor ids of a Batsim interval set such as "0-3 7 9-10"."""
    out = []
    for part in interval_set.split():
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def processor_clashes(start, end, size, allocation: list[str], procs: int) -> list[str]:
    """What is wrong with an allocation: a set of the wrong size, an id outside [0, procs), or
    two jobs on one processor at once (runs are [start, end): an end frees before a start at the
    same instant, and a zero-length run holds nothing)."""
    problems, timeline = [], {}
    for k, (s, e, n, text) in enumerate(zip(list(start), list(end), list(size), allocation)):
        got = ids(text)
        if len(set(got)) != n or len(got) != n:
            problems.append(f"record {k}: {text!r} is not {n} distinct processors")
        problems += [f"record {k}: processor {p} outside [0, {procs})" for p in got if not 0 <= p < procs]
        for p in got:
            timeline.setdefault(p, []).append((s, e, k))
    for p, runs in timeline.items():
        runs = sorted(r for r in runs if r[1] > r[0])
        problems += [f"processor {p}: record {a[2]} runs until {a[1]}, record {b[2]} starts at {b[0]}"
                     for a, b in zip(runs, runs[1:]) if a[1] > b[0]]
    return problems


def test_a_hand_worked_schedule():
    # 8 processors; records in this order (F before E on purpose):
    #   A 0..10 x3: at 0, A, B, C start in record order: A takes 0-2,
    #   B 0..5  x2: B 3-4,
    #   C 0..20 x2: C 5-6; 7 stays free.
    #   D 5..15 x3: at 5 B's end frees 3-4 first, then D takes the lowest free: 3-4 and 7.
    #   F 10..12 x3: at 10 A's end frees 0-2; E runs no time and goes first: it takes 0-2 and gives
    #   E 10..10 x3:  them back at once; then F takes 0-2. (Were F first, E would find nothing free.)
    #   X never started: no processors.
    start, end, size = [0, 0, 0, 5, 10, 10, -1], [10, 5, 20, 15, 12, 10, -1], [3, 2, 2, 3, 3, 3, 4]
    assert allocate_processors(start, end, size, 8) == ["0-2", "3-4", "5-6", "3-4 7", "0-2", "0-2", ""]


def test_a_schedule_that_overfills_the_machine_is_refused():
    with pytest.raises(ValueError, match="overfills"):
        allocate_processors([0, 3], [10, 10], [5, 4], 8)


@pytest.fixture(scope="module")
def sdsc_window(traces_dir):
    workload = load_workload({"trace": str(traces_dir / SDSC), "jobs": 2000})
    return simulate(workload, SimConfig(backfill="easy"))


def test_a_real_window_gets_disjoint_sets_of_the_right_size(sdsc_window):
    jobs, procs = sdsc_window.jobs, sdsc_window.procs
    allocation = allocate_processors(jobs["start"], jobs["end"], jobs["size"], procs)
    assert len(allocation) == 2000
    assert processor_clashes(jobs["start"].tolist(), jobs["end"].tolist(), jobs["size"].tolist(), allocation,
                             procs) == []
    assert max(max(ids(a)) for a in allocation) == procs - 1  # the whole machine is used at times
    assert sum(" " in a for a in allocation) > 0  # and some sets are fragmented


def test_the_allocation_round_trips_through_the_csv(sdsc_window, tmp_path):
    path = tmp_path / "jobs.csv"
    sdsc_window.write_jobs_csv(path)
    back = read_jobs_csv(path)
    jobs = sdsc_window.jobs
    assert back["allocated_resources"].tolist() == allocate_processors(jobs["start"], jobs["end"], jobs["size"],
                                                                       sdsc_window.procs)
    for name, column in jobs.items():
        assert back[name].tolist() == column.tolist(), name


def test_evalys_reads_the_csv_and_draws_its_gantt_chart(sdsc_window, tmp_path):
    """evalys (Batsim's Gantt charts) reads `allocated_resources` as it writes it; its time columns
    have Batsim's names (docs/semantics.md section 10 gives this recipe)."""
    pd = pytest.importorskip("pandas", reason="evalys is not installed (pip install evalys)")
    jobset = pytest.importorskip("evalys.jobset", reason="evalys is not installed (pip install evalys)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from evalys.visu.gantt import plot_gantt
    from procset import ProcSet

    path = tmp_path / "jobs.csv"
    sdsc_window.write_jobs_csv(path)
    frame = pd.read_csv(path, converters={"allocated_resources": ProcSet.from_str}).rename(
        columns={"submit": "submission_time", "start": "starting_time", "end": "finish_time"})
    js = jobset.JobSet(frame)
    assert js.df["proc_alloc"].tolist() == sdsc_window.jobs["size"].tolist()
    assert js.MaxProcs == sdsc_window.procs
    assert js.df["waiting_time"].tolist() == sdsc_window.jobs["wait"].tolist()
    plot_gantt(jobset.JobSet(frame.head(200)))  # all 2,000 take evalys 9 s
    drawn = sum(len(ax.patches) for ax in plt.gcf().axes)
    plt.close("all")
    assert drawn >= 200  # a rectangle per job, one per interval of a fragmented set
