"""`hpcgym compare`: several policies on the same job sequences, one table (see docs/compare.md)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ...agents.runtime import NETWORK_SOURCES, AgentRef, check_agent_file
from ...environment.config import OVERRUN_MODES
from ...environment.errors import ConfigError, HpcgymError
from ...environment.spec import resolve_trace
from ..usage import (check_part, estimate_spec, given, jobs_option, reading_options, recipe_option, seed_option,
                     trace_option, workload_keys, workload_option)
from .executors import EXECUTORS
from .policy import AgentSpec, PolicySpec, parse_policy
from .stats import METRICS
from .unit import DEFAULT_START_TIMEOUT

if TYPE_CHECKING:  # plan reads numpy: only the commands that compare import it
    from .plan import SequenceSpec

POLICY_HELP = ("A policy, NAME=SPEC (repeat for each). SPEC items joined by , or +: a priority (fcfs, sjf, ...), a "
               "backfill mode (easy, conservative, none), KIND:AGENT (KIND: select, inspect, backfill, kill, "
               "select_kill; AGENT: a built-in name, module:Class, model:CHECKPOINT, or cmd:'PROGRAM {addr} ...'), "
               "agent:module:Class, model:CHECKPOINT (a trained model, taking its own kind), sampled:CHECKPOINT (the "
               "same, sampling its actions), online:CHECKPOINT (the same, updating itself while it serves), "
               "estimate:E, overrun:O, window:N, prediction:P. E.g. --policy fcfs+easy --policy sjf=sjf+easy --policy "
               "ppo=select:model:runs/ppo/model.pt --policy 'c=cmd:examples/c-sjf/build/sjf_agent {addr} --join'; "
               "alone, batsim:'PROGRAM {addr} ...' is a Batsim scheduler (docs/batsim.md), e.g. --policy "
               "'pyb=batsim:pybatsim easyBackfill -t 0 -s {addr}'.")
#: The C agent of the examples, built by `make -C examples/c-sjf`.
C_AGENT = "examples/c-sjf"


@click.command("compare")
@click.option("--policy", "policies", multiple=True, metavar="NAME=SPEC", help=POLICY_HELP)
@click.option("--baseline", metavar="NAME", help="Policy the others are compared with (default: the first).")
@trace_option()
@reading_options
@click.option("--samples", type=click.IntRange(min=1), help="Number of job sequences (default 10 with --jobs, else 1).")
@jobs_option("Jobs per sequence: random windows of this length (absent: the whole trace is one sequence).")
@workload_option("sampled_jobset", "Draw random jobs with Poisson arrivals instead of windows (DRAS).")
@workload_option("train_fraction", "Split the trace chronologically; draw from one part (--part).")
@workload_option("part", default="test")
@seed_option("Sample i uses seed SEED+i (its window and its episode); also seeds the bootstrap.")
@workload_option("first_jobs", "Random windows start within the trace's first N jobs (the RL papers' code: 10,000).")
@workload_option("start", help="One fixed window instead of random ones: --jobs M jobs from the Nth (0-based; of --part "
                   "with --train-fraction), e.g. --start 10000 --jobs 2500 for jobs 10,001-12,500.")
@workload_option("cleaning", default="hpcgym")
@workload_option("machine")
@workload_option("model")
@recipe_option
@click.option("--estimate", callback=estimate_spec, help="Run-time estimate for all policies: requested, actual, noisy:E.")
@click.option("--overrun", type=click.Choice(OVERRUN_MODES), default=None, help="Overrun rule for all policies.")
@click.option("--metric", type=click.Choice([k for k, _, _ in METRICS]), default="mean_bsld", show_default=True,
              help="The main metric of the table.")
@click.option("--bootstrap", "resamples", type=click.IntRange(min=100), default=10_000, show_default=True,
              help="Bootstrap resamples for the confidence intervals.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("compare-out"), show_default=True,
              help="Output folder.")
@click.option("--resume", is_flag=True, help="Continue the comparison in --out, skipping finished units.")
@click.option("--force", is_flag=True, help="Start over in an --out folder that holds a comparison.")
@click.option("--inproc", is_flag=True,
              help="Run agents in the worker process instead of as separate processes over the protocol "
                   "(cmd: agents still use the protocol).")
@click.option("--workers", type=click.IntRange(min=1), help="Parallel units (default: the number of CPUs).")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="local worker processes, or Ray tasks (in the clone: pip install -e '.[ray]').")
@click.option("--address", help="Ray cluster address (with --executor ray; default: a local Ray instance).")
@click.option("--decision-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds an agent may take for one decision before its unit fails.")
@click.option("--start-timeout", type=click.FloatRange(min=0.1), default=DEFAULT_START_TIMEOUT, show_default=True,
              help="Seconds the agent processes of a unit may take to start and say hello (importing PyTorch on "
                   "a loaded machine can take a minute), apart from --decision-timeout.")
@click.option("--no-plots", is_flag=True, help="Skip the plots and report.html (the first windows' schedules).")
@click.option("--record", metavar="KIND[:ENCODER]",
              help="Write each unit's decisions of KIND (features by ENCODER, default the kind's usual one; mask; "
                   "action) to units/POLICY/seq-NNN.records.npz (agents/records.py; local executor).")
@click.pass_context
def compare(ctx, policies, baseline, samples, recipe, estimate, overrun, metric, resamples, out, resume, force, inproc,
            workers, executor, address, decision_timeout, start_timeout, no_plots, record, **drawn) -> None:
    """Compare scheduling policies on the same job sequences: summary table, paired differences to
    a baseline with bootstrap confidence intervals, per-job CSVs, plots (see docs/compare.md).

    Exit status: 0 all policies finished, 1 some policy failed (it is in the table with its error),
    2 a bad option."""
    from .plan import SequenceSpec
    from .runner import Comparison, from_saved, load_saved, run_comparison

    if address and executor != "ray":
        raise ConfigError("--address is for --executor ray")
    if resume and force:
        raise ConfigError("use --resume or --force, not both")
    check_part(ctx, drawn["train_fraction"])
    how = {"mode": "inproc" if inproc else "protocol", "executor": executor, "address": address,  # how it runs
           "workers": workers or os.cpu_count() or 1, "decision_timeout": decision_timeout,
           "start_timeout": start_timeout, "plots": not no_plots, "argv": command_line(ctx)}
    if resume and not policies:
        saved = load_saved(out)
        if saved is None:
            raise ConfigError(f"nothing to resume in {out} (no run.json); give the policies to start a comparison")
        comparison = from_saved(saved, out, baseline=baseline, metric=None if metric == "mean_bsld" else metric, **how)
    else:
        options = {k: str(v) for k, v in (("estimate", estimate), ("overrun", overrun)) if v is not None}
        if recipe is not None:  # its rules and window for every policy (a policy's own items win), its cleaning
            from ...agents.recipes import recipe_episode

            episode = recipe_episode(recipe)
            options = {**{k: v for k, v in episode["options"].items() if k != "policy"}, **options}
            if "cleaning" not in given(ctx, cleaning=drawn["cleaning"]):
                drawn["cleaning"] = episode["workload"].get("cleaning", drawn["cleaning"])
        if drawn["trace"] is not None:  # a bare name is looked up in $HPCGYM_TRACES
            drawn["trace"] = str(resolve_trace(drawn["trace"]).resolve())
        one = drawn["n_jobs"] is None or drawn["start"] is not None  # the whole trace, or one fixed window
        spec = SequenceSpec(**workload_keys(drawn), samples=samples or (1 if one else 10))
        parsed = [parse_policy(p) for p in policies]
        _check_files(parsed, executor)
        for line in [*_batsim_rules(parsed, options), *_trained_elsewhere(parsed, spec)]:
            click.echo(line, err=True)
        if how["mode"] == "protocol" and any(a.source in NETWORK_SOURCES for p in parsed for a in p.agents):
            click.echo("note: over the protocol every unit starts its own agent process, which imports PyTorch; "
                       "--inproc gives the same schedules several times faster (docs/compare.md)", err=True)
        comparison = Comparison(parsed, spec, out, baseline=baseline, options=options, metric=metric,
                                resamples=resamples, **how,
                                record=record_settings(*record.partition(":")[::2], executor) if record else None)
    try:
        outcome = run_comparison(comparison, resume=resume, force=force)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: the finished units are saved in {out}; `hpcgym compare --resume --out {out}` "
                   "runs the rest", err=True)
        sys.exit(130)
    click.echo(outcome.table.split("\n## All metrics")[0].rstrip() + "\n")
    errors = outcome.table.split("\n## Errors\n")
    if len(errors) > 1:
        click.echo("Errors:\n" + errors[1].strip() + "\n")
    click.echo(outcome.latency)
    if outcome.reused:
        click.echo(f"resumed: {len(outcome.reused)} unit(s) were already done, {len(outcome.ran)} run now", err=True)
    plots = "".join(f" {name}," for name in ("plots/", "report.html")
                    if comparison.plots and (out / name.rstrip("/")).exists())
    click.echo(f"results in {out}/ (summary.md, summary.csv, latency.csv, jobs/,{plots} run.json)", err=True)
    if outcome.failed:
        sys.exit(1)


def record_settings(kind: str, encoder: str | None, executor: str = "local", window: int = 128,
                    what: str = "--record") -> dict:
    """Units' record settings (kind, encoder, window), checked before any unit runs; `what` names the option."""
    from ...agents.encoders import DEFAULT_ENCODERS, get_encoder
    from ...environment.decisions import KINDS

    if kind not in KINDS:
        raise ConfigError(f"{what}: unknown decision kind {kind!r}; use one of {', '.join(KINDS)}")
    if executor != "local":
        raise ConfigError(f"{what} writes files beside the units: use the local executor")
    encoder = encoder or DEFAULT_ENCODERS[kind]
    try:
        made = get_encoder(encoder, window, None)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    if made.kinds is not None and kind not in made.kinds:
        raise ConfigError(f"{what}: encoder {encoder!r} reads {'/'.join(made.kinds)} decisions only, not {kind}")
    return {"kind": kind, "encoder": encoder, "window": window}


def _check_files(policies: list[PolicySpec], executor: str) -> None:
    """A missing checkpoint or program fails here once, not in every unit (a Ray cluster's programs are not checked)."""
    for policy in policies:
        for agent in policy.agents:
            try:
                check_agent_file(AgentRef(agent.source, agent.target))
            except HpcgymError as exc:
                raise ConfigError(f"policy {policy.name!r}: {exc}") from None
            if agent.source in NETWORK_SOURCES:
                _check_checkpoint(policy.name, agent)
            if agent.source == "cmd" and executor == "local":
                program = shlex.split(agent.target)[0]
                if shutil.which(program) is None:
                    hint = f" (make -C {C_AGENT})" if Path(program).parts[:2] == Path(C_AGENT).parts else ""
                    raise ConfigError(f"policy {policy.name!r}: program {program} not found or not executable; "
                                      f"build or install it first{hint}")


def _check_checkpoint(policy: str, agent: AgentSpec) -> None:
    """A checkpoint needs torch and takes its own kinds: otherwise every unit would fail, so say it once."""
    try:
        from ...agents.rl.checkpoint import checkpoint_kinds, load_checkpoint
    except ImportError as exc:
        raise ConfigError(f"policy {policy!r}: {agent.source}:{agent.target} needs the rl extra (in the clone: "
                          f"pip install -e '.[rl]'): {exc}") from None
    try:
        takes = checkpoint_kinds(load_checkpoint(agent.target).kind)
    except HpcgymError as exc:
        raise ConfigError(f"policy {policy!r}: {exc}") from None
    if not set(agent.kinds) <= set(takes):
        raise ConfigError(f"policy {policy!r}: {agent.target} takes {'/'.join(takes)} decisions, not "
                          f"{'/'.join(agent.kinds)}; write {'/'.join(takes)}:{agent.source}:{agent.target} or "
                          f"{agent.source}:{agent.target} (its own kinds)")


def _batsim_rules(policies: list[PolicySpec], options: dict) -> list[str]:
    """A line when a batsim: scheduler (walltime kills) meets policies that let jobs overrun: not comparable."""
    batsim = [p.name for p in policies if p.batsim]
    others = [p.name for p in policies if not p.batsim and {**options, **p.options}.get("overrun", "run") != "kill"]
    if not batsim or not others:
        return []
    return [f"warning: {', '.join(batsim)} run(s) under Batsim's rules, which kill a job at its walltime, but "
            f"{', '.join(others)} let jobs run past it: give --overrun kill to compare under the same rules"]


def _trained_elsewhere(policies: list[PolicySpec], spec: SequenceSpec) -> list[str]:
    """A line per checkpoint trained on other jobs (trace, cleaning, split, window) than the comparison's: they
    win, as every policy sees the same sequences, but the change should be seen."""
    from ...agents.rl.checkpoint import load_checkpoint

    compared, lines = spec.workload(), []
    for policy in policies:
        for agent in policy.agents:
            if agent.source in NETWORK_SOURCES:
                trained = load_checkpoint(agent.target).trained_workload()
                if trained.trace is not None and compared.trace is not None \
                        and Path(trained.trace).name == Path(compared.trace).name:
                    trained = replace(trained, trace=compared.trace)  # the same file, by another path
                if trained.sample is not None and compared.sample is not None:
                    trained = replace(trained, sample=compared.sample)  # both draw per sequence
                changes = compared.changes_from(trained)
                if changes:
                    lines.append(f"note: policy {policy.name!r}: {agent.target} was trained on other jobs; "
                                 f"compared on this comparison's ({changes})")
    return lines


def command_line(ctx: click.Context) -> list[str]:
    """The command as a canonical argument list (every option that differs from its default)."""
    argv = ["hpcgym", ctx.info_name or "compare"]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if not isinstance(param, click.Option) or value is None or value == ():
            continue
        flag = param.opts[0]
        if param.is_flag:
            if value is True:
                argv.append(flag)
            continue
        source = ctx.get_parameter_source(param.name)
        if source is not None and source.name == "DEFAULT":
            continue
        for item in value if param.multiple else (value,):
            argv += [flag, str(item)]
    return argv
