"""The `hpcgym` command line: run a simulation, inspect or generate traces.

Every user mistake (bad option, missing or malformed file) ends in one line on stderr and exit
status 2; nothing here prints a traceback for a problem the user can fix.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..agents.heuristics import POLICIES
from ..environment.config import BACKFILL_MODES, OVERRUN_MODES, EstimateSpec, SimConfig
from ..environment.errors import HpcgymError
from ..environment.lublin import generate_lublin
from ..environment.simulator import simulate
from ..environment.spec import DEFAULT_JOBS, DEFAULT_MODEL, DEFAULT_PROCS, LUBLIN_MODELS, load_workload
from ..environment.swf import trace_stats, write_swf
from ..environment.workload import Workload

SUMMARY_LABELS = [
    ("jobs", "jobs", "{:d}"),
    ("mean_wait", "mean wait (s)", "{:.1f}"),
    ("max_wait", "max wait (s)", "{:d}"),
    ("mean_response", "mean response (s)", "{:.1f}"),
    ("mean_slowdown", "mean slowdown", "{:.2f}"),
    ("mean_bsld", "mean bounded slowdown", "{:.2f}"),
    ("max_bsld", "max bounded slowdown", "{:.2f}"),
    ("utilization", "utilization", "{:.4f}"),
    ("makespan", "makespan (s)", "{:d}"),
]


class HpcgymGroup(click.Group):
    """Turns HpcgymError anywhere below into one clear line and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HpcgymError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=HpcgymGroup)
@click.version_option(package_name="hpcgym")
def main() -> None:
    """hpcgym: simulate HPC batch scheduling and compare policies on identical job sequences."""


def _estimate(ctx: click.Context, param: click.Parameter, value: str) -> EstimateSpec:
    try:
        return EstimateSpec.parse(value)
    except HpcgymError as exc:
        raise click.BadParameter(str(exc)) from None


def _workload_spec(trace: Path | None, procs: int | None, strict: bool, skip_malformed: bool) -> dict[str, Any]:
    return {"trace": trace, "procs": procs, "strict": strict, "skip_malformed": skip_malformed}


def _reading_options(f):
    f = click.option("--skip-malformed", is_flag=True, help="Skip and count malformed SWF lines instead of failing.")(f)
    f = click.option("--strict", is_flag=True, help="Fail on a job larger than the cluster instead of dropping it.")(f)
    f = click.option("--procs", type=click.IntRange(min=1), help="Cluster size (default: the SWF header's MaxProcs/MaxNodes).")(f)
    return f


@main.command()
@click.option("--trace", type=click.Path(path_type=Path, dir_okay=False),
              help=f"SWF or SWF.gz trace (default: a generated Lublin workload of {DEFAULT_JOBS} jobs).")
@_reading_options
@click.option("--policy", type=click.Choice(list(POLICIES), case_sensitive=False), default="fcfs", show_default=True,
              help="Priority policy that orders the queue.")
@click.option("--backfill", type=click.Choice(BACKFILL_MODES), default="easy", show_default=True)
@click.option("--estimate", default="requested", show_default=True, callback=_estimate,
              help="Run-time estimate for reservations: requested, actual or noisy:E (e.g. noisy:0.2).")
@click.option("--overrun", type=click.Choice(OVERRUN_MODES), default="run", show_default=True,
              help="A job past its requested time: run to its recorded end, or kill it at its walltime.")
@click.option("--jobs", "n_jobs", type=click.IntRange(min=1), help="Simulate only this many jobs (a window).")
@click.option("--start", type=click.IntRange(min=0), help="First job of the window (with --jobs).")
@click.option("--sample", type=int, help="Seed of a random window start (with --jobs).")
@click.option("--sampled-jobset", is_flag=True,
              help="With --sample: draw jobs at random and re-draw Poisson arrivals (DRAS's sampled jobsets).")
@click.option("--train-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Split the trace: the first fraction is train, the rest test.")
@click.option("--part", type=click.Choice(["train", "test"]), default="test", show_default=True,
              help="Which part of the split to draw from (with --train-fraction).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the generated workload, noisy estimates and the random policy.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--jobs-out", type=click.Path(path_type=Path, dir_okay=False), help="Write per-job records as CSV.")
def run(trace, procs, strict, skip_malformed, policy, backfill, estimate, overrun, n_jobs, start, sample,
        sampled_jobset, train_fraction, part, seed, as_json, jobs_out) -> None:
    """Replay a trace (or the generated default workload) with a policy and print its metrics."""
    spec = _workload_spec(trace, procs, strict, skip_malformed)
    spec.update(jobs=n_jobs, start=start, sample=sample, sampled_jobset=sampled_jobset,
                train_fraction=train_fraction, part=part)
    workload = load_workload(spec, seed)
    config = SimConfig(backfill=backfill, estimate=estimate, overrun=overrun, seed=seed)
    result = _simulate_with_progress(workload, config, policy)
    if jobs_out is not None:
        result.write_jobs_csv(jobs_out)
    summary = dict(result.summary)
    if as_json:
        summary.update(workload=workload.name, procs=workload.procs, policy=policy, backfill=backfill,
                       estimate=str(estimate), overrun=overrun)
        click.echo(json.dumps(summary))
        return
    click.echo(f"{workload.name}: {len(workload)} jobs on {workload.procs} processors, "
               f"{policy.upper()} + {backfill} backfill ({estimate} estimates)")
    for key, label, fmt in SUMMARY_LABELS:
        click.echo(f"  {label:<24}{fmt.format(summary[key])}")


def _simulate_with_progress(workload: Workload, config: SimConfig, policy: str):
    from tqdm import tqdm

    with tqdm(total=len(workload), unit="job", disable=None if len(workload) > 50_000 else True,
              leave=False, file=sys.stderr) as bar:
        return simulate(workload, config, policy=policy, progress=lambda done: bar.update(done - bar.n))


@main.group()
def trace() -> None:
    """Inspect or generate workload traces (Standard Workload Format)."""


@trace.command()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@_reading_options
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as one JSON object.")
def info(file, procs, strict, skip_malformed, as_json) -> None:
    """Statistics of an SWF trace: the columns of the RL papers' trace tables."""
    stats = trace_stats(load_workload(_workload_spec(file, procs, strict, skip_malformed)))
    if as_json:
        click.echo(json.dumps(stats))
        return
    for key, value in stats.items():
        click.echo(f"{key:<28}{value:.2f}" if isinstance(value, float) else f"{key:<28}{value}")


@trace.command()
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--jobs", "n_jobs", type=click.IntRange(min=1), default=DEFAULT_JOBS, show_default=True)
@click.option("--procs", type=click.IntRange(min=1), default=DEFAULT_PROCS, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--model", type=click.Choice(list(LUBLIN_MODELS)), default=DEFAULT_MODEL, show_default=True,
              help="Parameter set of the model (see docs/lublin.md).")
def generate(out, n_jobs, procs, seed, model) -> None:
    """Write a synthetic Lublin-Feitelson workload as SWF (gzip if OUT ends in .gz)."""
    workload = generate_lublin(n_jobs, procs, seed=seed, params=LUBLIN_MODELS[model]())
    write_swf(out, workload, comments=[f"Generated by hpcgym: Lublin-Feitelson model ({model}), seed {seed}"])
    click.echo(f"wrote {len(workload)} jobs on {procs} processors to {out}")
