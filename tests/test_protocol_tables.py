"""The protocol's tables are held once (protocol/tables.py): PROTOCOL.md prints the same rows, and
the env sends exactly the columns and metrics they list, of their types."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcgym.environment.config import SimConfig
from hpcgym.environment.metrics import FILE_COLUMNS, JOB_COLUMNS, read_jobs_csv, write_jobs
from hpcgym.environment.predictions import PredictionSpec
from hpcgym.environment.simulator import Simulation
from hpcgym.environment.lublin import generate_lublin
from hpcgym.protocol import tables
from hpcgym.protocol.conformance import _EnvChecker
from hpcgym.protocol.tables import Column

PROTOCOL_MD = Path(tables.__file__).with_name("PROTOCOL.md")

#: The heading of PROTOCOL.md under which each table is printed.
DOC_TABLES = {
    "### The observation": tables.OBSERVATION,
    "### `queue` columns": tables.QUEUE,
    "### `running` columns": tables.RUNNING,
    "### `machine` columns": tables.MACHINE,
    "#### episode_end metrics": tables.METRICS,
    "#### episode_end per-job records": tables.JOB_RECORDS,
}


def markdown_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows (cells stripped) of the first table after the line `heading`."""
    lines = text.splitlines()
    start = lines.index(heading)
    first = next(k for k in range(start + 1, len(lines)) if lines[k].startswith("|"))
    rows = []
    for line in lines[first + 2:]:  # past the header and the |---| line
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def disagreements(text: str, heading: str, table: tuple[Column, ...]) -> list[str]:
    """Where the document's table under `heading` differs from `table`, row by row."""
    doc = [(row[0].strip("`"), *row[1:]) for row in markdown_rows(text, heading)]
    data = [(c.name, c.type, c.since, c.sent, c.meaning) for c in table]
    problems = [f"{heading}: row {k + 1}: the text has {d}, tables.py {t}" for k, (d, t) in enumerate(zip(doc, data))
                if d != t]
    if len(doc) != len(data):
        problems.append(f"{heading}: {len(doc)} rows in the text, {len(data)} in tables.py")
    return problems


@pytest.mark.parametrize("heading", DOC_TABLES)
def test_the_protocol_text_prints_each_table_as_held(heading):
    assert disagreements(PROTOCOL_MD.read_text(encoding="utf-8"), heading, DOC_TABLES[heading]) == []


def test_an_edit_on_either_side_is_found():
    text = PROTOCOL_MD.read_text(encoding="utf-8")
    heading, table = "### `queue` columns", tables.QUEUE
    edited_text = text.replace("| `wait` | int | 1.0 | always | the decision's", "| `wait` | float | 1.0 | always | the decision's")
    assert edited_text != text and len(disagreements(edited_text, heading, table)) == 1
    dropped_row = text.replace("| `user` | int | 1.0 | always | user id, -1 if unknown |\n", "", 1)
    assert dropped_row != text and disagreements(dropped_row, heading, table)
    added_column = (*table, Column("nodes", "int", "1.6", tables.ALWAYS, "nodes requested"))
    assert disagreements(text, heading, added_column) == [f"{heading}: 15 rows in the text, 16 in tables.py"]
    reworded = tuple(Column(c.name, c.type, c.since, c.sent, c.meaning + ".") for c in tables.METRICS)
    assert len(disagreements(text, "#### episode_end metrics", reworded)) == len(tables.METRICS)


def observations(prediction: str) -> list[dict]:
    """Every observation of a small generated episode (built-in decisions for all but select)."""
    config = SimConfig(prediction=PredictionSpec.parse(prediction))
    sim = Simulation(generate_lublin(60, 32, seed=3), config, external={"select"})
    seen, d = [], sim.reset()
    while d is not None:
        seen.append(d.observation)
        d = sim.step(d.candidates[0])
    return seen


@pytest.mark.parametrize("prediction", ["none", "running"])
def test_the_env_sends_the_observation_the_tables_list(prediction):
    predicted = prediction != "none"
    obs = observations(prediction)
    assert len(obs) > 20
    assert all(list(o) == [c.name for c in tables.OBSERVATION if c.sent != tables.ON_NODES] for o in obs)
    for name, columns in tables.JOB_TABLES.items():
        sent = [c for c in columns if predicted or c.sent != tables.WITH_PREDICTOR]
        assert all(set(o[name]) == {c.name for c in sent} for o in obs)
        for c in sent:
            assert all(type(v) is int for o in obs for v in o[name][c.name]), f"{name}.{c.name}"


def test_the_env_sends_the_metrics_and_records_the_tables_list(tmp_path):
    sim = Simulation(generate_lublin(60, 32, seed=3), SimConfig())
    assert sim.reset() is None  # no external kind: the episode runs through
    result = sim.result()
    assert list(result.summary) == list(tables.names(tables.METRICS))
    for c in tables.METRICS:
        assert isinstance(result.summary[c.name], float if c.type == "float" else int), c.name
    sent = [c for c in tables.JOB_RECORDS if c.sent != tables.IN_FILES]
    assert JOB_COLUMNS == tables.names(tables.JOB_RECORDS)[:len(sent)] == tuple(c.name for c in sent) == tuple(result.jobs)
    for c in sent:
        assert result.jobs[c.name].dtype.kind == ("f" if c.type == "float" else "i"), c.name
    # the columns only files hold follow from the others, and a file writes them all
    assert FILE_COLUMNS == tables.names(tables.JOB_RECORDS)
    with open(tmp_path / "jobs.csv", "w", newline="") as f:
        write_jobs(f, {k: v.tolist() for k, v in result.jobs.items()}, result.procs)
    assert tuple(read_jobs_csv(tmp_path / "jobs.csv")) == FILE_COLUMNS


def test_an_older_agent_is_not_sent_the_columns_added_after_its_version():
    # PROTOCOL.md section 8: 1.4 added the prediction columns, 1.5 the queue's group, executable and
    # memory, 1.7 its gpus, exclusive and partition
    assert tables.columns_newer_than(3) == {"queue": ("group", "executable", "memory", "prediction", "gpus",
                                                      "exclusive", "partition"),
                                            "running": ("submit", "prediction0", "prediction")}
    assert tables.columns_newer_than(4) == {"queue": ("group", "executable", "memory", "gpus", "exclusive",
                                                      "partition")}
    assert tables.columns_newer_than(6) == {"queue": ("gpus", "exclusive", "partition")}
    assert tables.columns_newer_than(7) == {}


def test_the_conformance_checker_reads_names_and_types_from_the_tables():
    sim = Simulation(generate_lublin(60, 32, seed=3), SimConfig())
    sim.reset()
    metrics = dict(sim.result().summary)
    verdicts = {}
    for case, sent in (("as_sent", metrics), ("whole_float_as_int", {**metrics, "mean_bsld": 3}),
                       ("missing", {k: v for k, v in metrics.items() if k != "walltime_killed"})):
        checker = _EnvChecker("ipc:///nonexistent/hpcgym", 1.0, None, 1)
        try:
            checker.check_end({"type": "episode_end", "episode": 1, "reason": "completed", "reward": -1.0,
                               "metrics": sent, "jobs": None}, 1)
        finally:
            checker.ctx.term()
        verdicts[case] = next(c for c in checker.results if c.name == "metrics_keys")
    assert verdicts["as_sent"].passed
    # section 3: an env MUST send the float metrics as floats, also when whole
    assert not verdicts["whole_float_as_int"].passed and "mean_bsld (float)" in verdicts["whole_float_as_int"].detail
    assert not verdicts["missing"].passed and "walltime_killed" in verdicts["missing"].detail
