"""What several commands share: options declared once (`--trace`, `--jobs`, `--seed`, `--procs`, the other workload
keys' from `environment/spec.py`), and checks of options that only mean something together."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..environment.config import EstimateSpec
from ..environment.errors import HpcgymError
from ..environment.spec import MODELS, WORKLOAD_KEYS
from ..environment.swf import CLEANINGS

TRACE_HELP = "SWF or SWF.gz trace: a path, or a file name found in $HPCGYM_TRACES"

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def trace_option(default: str | None = "a generated Lublin workload", *, required: bool = False,
                 what: str = "") -> Decorator:
    """--trace; `default` says what a command uses without one, `what` what the trace is for."""
    suffix = f" (default: {default})" if default and not required else ""
    return click.option("--trace", type=click.Path(path_type=Path, dir_okay=False), required=required,
                        help=f"{what}{TRACE_HELP}{suffix}.")


def jobs_option(help: str, **kwargs: Any) -> Decorator:
    """--jobs (the parameter `n_jobs`): how many jobs a window, sequence or episode holds."""
    return click.option("--jobs", "n_jobs", type=click.IntRange(min=1), help=help, **kwargs)


def seed_option(help: str | None = None, default: int | None = 0) -> Decorator:
    """--seed, never negative (numpy's generators refuse negative seeds)."""
    return click.option("--seed", type=click.IntRange(min=0), default=default, show_default=default is not None,
                        help=help)


#: The command-line type of each workload key a command takes as an option (a flag where None).
_WORKLOAD_OPTION_TYPES: dict[str, Any] = {
    "start": click.IntRange(min=0), "sample": click.IntRange(min=0), "first_jobs": click.IntRange(min=1),
    "train_fraction": click.FloatRange(0, 1, min_open=True, max_open=True), "part": click.Choice(["train", "test"]),
    "cleaning": click.Choice(CLEANINGS), "model": click.Choice(MODELS), "machine": click.STRING,
    "sampled_jobset": None}


def workload_option(key: str, help: str | None = None, **kwargs: Any) -> Decorator:
    """The option of workload key `key`, its help the key's own (WorkloadSpec) unless a command gives one."""
    kind = _WORKLOAD_OPTION_TYPES[key]
    text = help or WORKLOAD_KEYS[key][0].upper() + WORKLOAD_KEYS[key][1:] + "."
    if kind is None:
        return click.option(f"--{key.replace('_', '-')}", is_flag=True, help=text, **kwargs)
    return click.option(f"--{key.replace('_', '-')}", type=kind, show_default="default" in kwargs, help=text, **kwargs)


def procs_option(default: int | None = None, *, when_unset: str = "the trace header") -> Decorator:
    """--procs, the cluster size: `default`, or `when_unset` says where it comes from."""
    return click.option("--procs", type=click.IntRange(min=1), default=default, show_default=default is not None,
                        help=None if default is not None else f"Cluster size (default: {when_unset}).")


def reading_options(f):
    """--procs, --strict and --skip-malformed: how an SWF trace is read."""
    f = click.option("--skip-malformed", is_flag=True, help="Skip and count malformed SWF lines instead of failing.")(f)
    f = click.option("--strict", is_flag=True, help="Fail on a job larger than the cluster instead of dropping it.")(f)
    return procs_option(when_unset="the SWF header's MaxProcs/MaxNodes")(f)


def workload_keys(flags: dict[str, Any]) -> dict[str, Any]:
    """A command's workload options as a workload spec (--jobs is the parameter `n_jobs`)."""
    return {("jobs" if k == "n_jobs" else k): v for k, v in flags.items()}


def check_part(ctx: click.Context, train_fraction: float | None) -> None:
    """--part chooses a side of the --train-fraction split; alone it would be silently ignored."""
    if train_fraction is None and ctx.get_parameter_source("part") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--part chooses a part of the split: give --train-fraction F too (the first F of "
                               "the trace is train, the rest test)")


def recipe_option(f):
    """`--recipe NAME[:VARIANT]`: a paper's episode (agents/recipes.py) as the command's defaults."""
    return click.option("--recipe", metavar="NAME[:VARIANT]|FILE",
                        help="A paper's episode (`hpcgym recipes`), e.g. rlbf:scw: its simulation rules, window, "
                             "priority policy, reward and workload keys; or those of the run a checkpoint (.pt) or "
                             "eval.json records; the flags given here win.")(f)


def estimate_spec(ctx: click.Context, param: click.Parameter, value: str | None) -> EstimateSpec | None:
    """--estimate read and checked as the option is parsed (a bad one is a usage error)."""
    try:
        return None if value is None else EstimateSpec.parse(value)
    except HpcgymError as exc:
        raise click.BadParameter(str(exc)) from None


def given(ctx: click.Context, **values):
    """The values of the options the command line (or an environment variable) gave, by name."""
    return {k: v for k, v in values.items() if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT}
