"""`hpcgym recipes [show NAME[:VARIANT]]`: the seed papers' runs (agents/recipes.py), listed or one shown."""

from __future__ import annotations

import json

import click

from ..agents.recipes import RECIPES, get_recipe


@click.group("recipes", invoke_without_command=True)
@click.pass_context
def recipes(ctx: click.Context) -> None:
    """List the papers' recipes: `--recipe NAME[:VARIANT]` names one in train, compare, agent, env,
    record and distill (and `recipe=` in gymbridge.make)."""
    if ctx.invoked_subcommand is not None:
        return
    width = max(len(name) for name in RECIPES) + 2
    for name, recipe in RECIPES.items():
        variants = f" [variants: {', '.join(recipe.variants)}; default {recipe.variant}]" if recipe.variants else ""
        click.echo(f"{name:<{width}}{recipe.summary}{variants}")


@recipes.command("show")
@click.argument("name", metavar="NAME[:VARIANT]")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def show(name: str, as_json: bool) -> None:
    """Every setting of one recipe, its variant applied."""
    settings = get_recipe(name).to_json()
    if as_json:
        click.echo(json.dumps(settings))
        return
    width = max(len(key) for key in settings) + 2
    for key, value in settings.items():
        click.echo(f"{key + ':':<{width}}{json.dumps(value) if isinstance(value, (dict, list)) else value}")
