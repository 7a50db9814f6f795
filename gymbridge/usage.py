"""Command-line checks several commands share: options that only mean something together."""

from __future__ import annotations

import click


def check_part(ctx: click.Context, train_fraction: float | None) -> None:
    """--part chooses a side of the --train-fraction split; alone it would be silently ignored."""
    if train_fraction is None and ctx.get_parameter_source("part") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--part chooses a part of the split: give --train-fraction F too (the first F of "
                               "the trace is train, the rest test)")
