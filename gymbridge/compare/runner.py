"""Run a comparison: plan, run the units not done yet, write every output (docs/compare.md). A unit's
files are written atomically, its JSON last, so an interrupted comparison resumes where it stopped."""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...agents.runtime import CHECKPOINT_SOURCES
from ...environment.errors import ConfigError
from ...environment.metrics import write_jobs
from . import report
from .executors import run_local, run_ray
from ..progress import progress
from ..provenance import git_commit, provenance, sha256_file
from .plan import SequenceSpec, build_sequences, fingerprint, trace_checksums, unit_id
from .policy import PolicySpec
from .stats import METRICS, latency_stats, summarize_policies
from .unit import DEFAULT_START_TIMEOUT
from ...environment.service import kinds_key
from ...environment.workload import describe_dropped


@dataclass
class Comparison:
    """Everything `hpcgym compare` was asked for."""

    policies: list[PolicySpec]
    sequences: SequenceSpec
    out: Path
    baseline: str | None = None
    options: dict[str, Any] = field(default_factory=dict)   # sim options common to all policies
    metric: str = "mean_bsld"
    resamples: int = 10_000
    mode: str = "protocol"
    executor: str = "local"
    address: str | None = None
    workers: int = 1
    decision_timeout: float = 30.0
    start_timeout: float = DEFAULT_START_TIMEOUT  # for the agent processes to start and say hello
    plots: bool = True
    progress: bool | None = None   # None: a progress bar on a terminal
    record: dict[str, Any] | None = None   # {kind, encoder, window}: decision records per unit
    argv: list[str] = field(default_factory=lambda: list(sys.argv))


@dataclass
class Outcome:
    out: Path
    table: str            # the summary Markdown
    latency: str          # the latency Markdown
    failed: list[str]     # names of failed policies
    ran: list[str]        # unit ids run now
    reused: list[str]     # unit ids found finished


def check(c: Comparison) -> None:
    if not c.policies:
        raise ConfigError("name at least one policy (--policy NAME=SPEC)")
    names = [p.name for p in c.policies]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"policy name(s) used twice: {', '.join(dup)}; name them with NAME=SPEC")
    slugs = [p.slug for p in c.policies]
    if len(set(slugs)) != len(slugs):
        raise ConfigError("two policy names map to the same folder name; give them distinct NAME=SPEC names")
    if c.baseline is not None and c.baseline not in names:
        raise ConfigError(f"baseline {c.baseline!r} is not one of the policies: {', '.join(names)}")
    c.sequences.check()


def load_saved(out: Path) -> dict[str, Any] | None:
    path = out / "run.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def from_saved(saved: dict[str, Any], out: Path, **overrides: Any) -> Comparison:
    """A Comparison rebuilt from a folder's run.json (for --resume without the original options)."""
    c = Comparison(policies=[PolicySpec.from_json(p) for p in saved["policies"]],
                   sequences=SequenceSpec.from_json(saved["sequence_spec"]), out=out, baseline=saved.get("baseline"),
                   options=dict(saved.get("options", {})), metric=saved.get("metric", "mean_bsld"),
                   resamples=saved.get("bootstrap", {}).get("resamples", 10_000))
    for key, value in overrides.items():
        if value is not None:
            setattr(c, key, value)
    return c


def run_comparison(c: Comparison, *, resume: bool = False, force: bool = False) -> Outcome:
    check(c)
    out = c.out
    saved = load_saved(out)
    if saved is not None and not resume and not force:
        raise ConfigError(f"{out} already holds a comparison: --resume continues it, --force starts it over")
    resuming = saved is not None and resume
    # a resumed comparison's sequences are cut already: the trace itself is not needed again
    trace = saved.get("trace") if resuming else trace_checksums(c.sequences.trace) if c.sequences.trace else None
    plan = {"policies": [p.to_json() for p in c.policies], "sequence_spec": c.sequences.to_json(),
            "options": dict(c.options), "trace": trace,  # what defines the comparison: --resume must find it again
            "fingerprint": fingerprint(c.policies, trace["sha256"] if trace else None, c.sequences, c.options)}
    if resuming and saved.get("fingerprint") != plan["fingerprint"]:
        raise ConfigError(f"{out} holds a different comparison (other policies, sequences or options); "
                          "resume it with the same options (or none), or use another --out")
    baseline, started = c.baseline or c.policies[0].name, time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if resuming:
        sequences = saved["sequences"]
        for s in sequences:
            path = out / s["file"]
            if not path.is_file() or sha256_file(path) != s["sha256"]:
                raise ConfigError(f"{path} is missing or changed since the comparison started; it cannot be resumed")
        history = saved.get("history", [])
    else:
        if force:  # the outputs of the comparison there before
            for name in ("units", "jobs", "sequences", "plots"):
                shutil.rmtree(out / name, ignore_errors=True)
            for name in ("run.json", "summary.md", "summary.csv", "latency.md", "latency.csv", "report.html"):
                (out / name).unlink(missing_ok=True)
        sequences, history = build_sequences(c.sequences, out / "sequences"), []
    # run.json's command is the one that started the comparison; every start and resume is in history
    first = history[0]["command"] if history else c.argv
    entry = {"started": started, "finished": None, "command": c.argv, "mode": c.mode, "executor": c.executor,
             "workers": c.workers}
    history = history + [entry]
    meta = {"hpcgym_compare": 1, "command": first, "command_line": shlex.join(first),
            "process_argv": list(sys.argv), "cwd": os.getcwd(), "versions": versions(c.executor),
            **plan, "baseline": baseline, "metric": c.metric, "seed": c.sequences.seed,
            "sample_seeds": [s["seed"] for s in sequences],
            "bootstrap": {"resamples": c.resamples, "seed": c.sequences.seed, "method": "percentile, paired, 95%"},
            "mode": c.mode, "executor": c.executor, "workers": c.workers, "decision_timeout_s": c.decision_timeout,
            "start_timeout_s": c.start_timeout, "sequences": sequences, "history": history, "status": "running",
            "started": history[0]["started"],
            "provenance": provenance({"policies": {p.name: p.text for p in c.policies}, "options": dict(c.options),
                                      "sequences": c.sequences.to_json()},
                                     [Path.cwd() / a.target for p in c.policies for a in p.agents
                                      if a.source in CHECKPOINT_SOURCES], argv=first)}
    _write_json(out / "run.json", meta)

    units = {unit_id(p, s["index"]): (p, s) for p in c.policies for s in sequences}
    reused = [uid for uid in units if (out / "units" / f"{uid}.json").is_file()]
    texts = {s["index"]: (out / s["file"]).read_text() for s in sequences}
    common = {"options": dict(c.options), "mode": c.mode, "cwd": os.getcwd(), "decision_timeout": c.decision_timeout,
              "start_timeout": c.start_timeout}
    jobs = [(uid, {"policy": p.to_json(), "seed": s["seed"], "sequence": s["index"], "procs": s["procs"], **common,
                   "record": {**c.record, "path": str((out / "units" / f"{uid}.records.npz").resolve())}
                   if c.record else None},  # decision records go beside the unit's result
             s["index"], texts[s["index"]]) for uid, (p, s) in units.items() if uid not in set(reused)]
    ran: list[str] = []

    bar = progress(len(units), "units", "compare", c.progress, initial=len(reused), leave=False)

    def on_done(uid: str, result: dict[str, Any]) -> None:
        _save_unit(out, uid, result)
        ran.append(uid)
        bar.update(1)
        if result.get("status") != "ok":
            bar.write(f"{uid}: {result.get('error')}", file=sys.stderr)

    try:
        run_ray(jobs, c.workers, c.address, on_done) if c.executor == "ray" else run_local(jobs, c.workers, on_done)
    finally:
        bar.close()

    outcome = write_outputs(c, out, sequences, baseline)
    outcome.ran, outcome.reused = sorted(ran), sorted(reused)
    meta.update(status="complete" if not outcome.failed else "complete with failed policies",
                finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"), failed_policies=outcome.failed,
                units={"total": len(units), "reused": len(reused), "run": len(ran),
                       "failed": sum(not (out / "units" / f"{uid}.json").is_file() for uid in units)}, ran=outcome.ran)
    entry.update(finished=meta["finished"], ran=len(ran), reused=len(reused))
    _write_json(out / "run.json", meta)
    return outcome


def write_outputs(c: Comparison, out: Path, sequences: list[dict[str, Any]], baseline: str) -> Outcome:
    """Read every unit's result back from the folder and write the tables and plots."""
    rows, values, latency, drawn = [], {}, [], {}
    for p in c.policies:
        results, errors, records = [], [], drawn.setdefault(p.name, [])
        for s in sequences:
            uid = unit_id(p, s["index"])
            done = out / "units" / f"{uid}.json"
            records.append(json.loads(done.read_text()) if done.is_file() else None)
            if records[-1] is not None:
                results.append(records[-1])
            else:
                err = out / "units" / f"{uid}.error.json"
                errors.append(json.loads(err.read_text())["error"] if err.is_file() else "not run")
        ok = not errors
        error = None if ok else (f"{errors[0]}" + (f" ({len(errors)} of {len(sequences)} sequences failed)"
                                                   if len(sequences) > 1 else ""))
        rows.append({"name": p.name, "spec": p.text, "status": "ok" if ok else "failed", "error": error,
                     "samples": len(sequences), "samples_ok": len(results)})
        if ok:
            values[p.name] = {key: [r["summary"][key] for r in results] for key, _, _ in METRICS}
        latency.extend(_latency_rows(p, results))
    stats = summarize_policies([p.name for p in c.policies], baseline, {p.name: values.get(p.name) for p in c.policies},
                               c.resamples, c.sequences.seed)
    title, notes = _title(c, sequences, baseline)
    table = report.summary_markdown(title, notes, rows, stats, c.metric)
    _write_text(out / "summary.md", table)
    _write_text(out / "summary.csv", report.summary_csv(rows, stats))
    latency_md, latency_csv = report.latency_rows(latency)
    _write_text(out / "latency.md", latency_md)
    _write_text(out / "latency.csv", latency_csv)
    if c.plots:
        try:
            report.write_plots(out / "plots", [p.name for p in c.policies], values, c.metric)
        except ImportError:
            print("warning: matplotlib is not installed, no plots (pip install -e '.[compare]')", file=sys.stderr)
        _write_schedule_report(out, title, drawn, sequences)
    return Outcome(out, table, latency_md, [r["name"] for r in rows if r["status"] != "ok"], [], [])


def _write_schedule_report(out: Path, title: str, drawn: dict[str, list[dict[str, Any] | None]],
                           sequences: list[dict[str, Any]]) -> None:
    """report.html: the first windows' schedules of every policy side by side (schedule_report)."""
    from .schedule_report import COMPARE_WINDOWS, compare_schedules, report_html

    notes = [f"The first {min(COMPARE_WINDOWS, len(sequences))} of {len(sequences)} sequences; every policy's "
             "per-job records are in jobs/. Hover a job for its id, wait and kind of start; drag to zoom, "
             "double-click to zoom out."]
    schedules = compare_schedules(out, drawn, sequences)
    if not schedules:
        return
    try:
        _write_text(out / "report.html", report_html(schedules, title, notes))
    except ModuleNotFoundError as exc:
        if exc.name != "plotly":
            raise
        print("warning: plotly is not installed, no report.html (pip install -e '.[compare]')", file=sys.stderr)


def _latency_rows(p: PolicySpec, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    labels = {kinds_key(a.kinds): a.label for a in p.agents if a.kinds}
    untyped = [a.label for a in p.agents if not a.kinds]
    merged: dict[str, list[float]] = {}
    ordered: dict[str, int] = {}
    modes = sorted({r.get("mode", "?") for r in results})
    for r in results:
        for key, samples in r.get("latency", {}).items():
            merged.setdefault(key, []).extend(samples)
        for key, count in r.get("ordered", {}).items():
            ordered[key] = ordered.get(key, 0) + count
    rows = []
    for key, samples in merged.items():
        agent = labels.get(key) or (untyped[0] if untyped else key)
        rows.append({"policy": p.name, "agent": agent, "kinds": key, "mode": "/".join(modes),
                     **latency_stats(samples), "ordered": ordered.get(key, 0)})
    return rows


def _title(c: Comparison, sequences: list[dict[str, Any]], baseline: str) -> tuple[str, list[str]]:
    s = c.sequences
    source = Path(s.trace).name if s.trace else f"generated {s.model or 'Lublin'} workload"
    if s.machine:
        source += f" on --machine {s.machine}"
    if s.train_fraction is not None:
        source += f" ({s.part} part, train fraction {s.train_fraction:g})"
    if s.jobs is None:
        what = f"the whole trace ({sequences[0]['jobs']} jobs)"
    else:
        what = f"{len(sequences)} {'sampled jobsets' if s.sampled_jobset else 'windows'} of {s.jobs} jobs"
    title = f"hpcgym compare: {source}, {what}"
    seeds = (f"Sample seeds {sequences[0]['seed']}..{sequences[-1]['seed']}" if len(sequences) > 1
             else f"Sample seed {sequences[0]['seed']}")
    notes = [f"{seeds}; baseline **{baseline}**; differences are policy minus baseline, averaged over the paired "
             f"samples, with a percentile bootstrap 95% CI ({c.resamples} resamples, seed {s.seed}); win rate on the "
             f"same metric (ties count one half).", ""]
    if c.options:
        notes.insert(1, "Common options: " + ", ".join(f"{k}={v}" for k, v in sorted(c.options.items())) + ".")
    dropped = sequences[0].get("dropped_at_load") or {}
    if dropped:
        notes.insert(1, f"Jobs left out when the trace was read: {describe_dropped(dropped)} (docs/semantics.md "
                        "section 1).")
    return title, notes


def _save_unit(out: Path, uid: str, result: dict[str, Any]) -> None:
    done, failed = out / "units" / f"{uid}.json", out / "units" / f"{uid}.error.json"  # _write_text makes folders
    if result.get("status") != "ok":
        _write_json(failed, {"unit": uid, **{k: v for k, v in result.items() if k != "jobs"}})
        return
    csv_path = out / "jobs" / f"{uid}.csv"
    _write_text(csv_path, jobs_csv(result["jobs"], result["procs"]))
    record = {"unit": uid, **{k: v for k, v in result.items() if k != "jobs"},
              "jobs_csv": str(csv_path.relative_to(out)), "jobs_csv_sha256": sha256_file(csv_path)}
    _write_json(done, record)
    failed.unlink(missing_ok=True)


def jobs_csv(jobs: dict[str, list], procs: int) -> str:
    """Per-job CSV as `RunResult.write_jobs_csv` writes it (`write_jobs`)."""
    import io

    buf = io.StringIO()
    write_jobs(buf, jobs, procs)
    return buf.getvalue()


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _write_json(path: Path, data: Any) -> None:
    _write_text(path, json.dumps(data, indent=2) + "\n")


def versions(executor: str) -> dict[str, Any]:
    from importlib import metadata

    out: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for package in ("hpcgym", "numpy", "pyzmq", "msgpack", "click", "matplotlib") + (("ray",) if executor == "ray" else ()):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = None
    import zmq  # a dependency of hpcgym's

    return {**out, "libzmq": zmq.zmq_version(), "hpcgym_git": git_commit()}
