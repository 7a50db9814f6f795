"""Command-line checks several commands share: options that only mean something together."""

from __future__ import annotations

import click


def check_part(ctx: click.Context, train_fraction: float | None) -> None:
    """--part chooses a side of the --train-fraction split; alone it would be silently ignored."""
    if train_fraction is None and ctx.get_parameter_source("part") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--part chooses a part of the split: give --train-fraction F too (the first F of "
                               "the trace is train, the rest test)")


def recipe_option(f):
    """`--recipe NAME[:VARIANT]`: a paper's episode (agents/recipes.py) as the command's defaults."""
    return click.option("--recipe", metavar="NAME[:VARIANT]",
                        help="A paper's episode (`hpcgym recipes`), e.g. rlbf:scw: its simulation rules, window, "
                             "priority policy, reward and workload keys; the flags given here win.")(f)


def given(ctx: click.Context, **values):
    """The values of the options the command line (or an environment variable) gave, by name."""
    return {k: v for k, v in values.items() if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT}
