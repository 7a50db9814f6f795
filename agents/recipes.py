"""The seed papers' runs as recipes: what a paper's agent is trained and evaluated in, as data.

A recipe (`agents/recipe.py`) names the simulation rules (a reset's `options`), the workload keys,
the reward, the encoder, the algorithm and its config, the teacher, the baselines, and its named
variants (RL backfilling's `public`, `scw` and `textbook` rules, DRAS's four algorithms).
`get_recipe("rlbf:scw")` resolves one; every entry point (train, compare, agent, env, record,
distill, `gymbridge.make`) goes through it, and `hpcgym recipes` lists them. Each paper's module
holds its `RECIPE` literal, gathered here. Adding a paper: its pieces on their floors, its
`RECIPE`, and its module in RECIPES.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..environment.errors import ConfigError
from . import dras, irl, rlbf, rlschert, schedinspector
from .recipe import BASE, TEACHER, Recipe

__all__ = ["BASE", "RECIPES", "TEACHER", "TRAIN_ALIASES", "Recipe", "get_recipe", "recipe_episode"]

RECIPES: dict[str, Recipe] = {module.RECIPE.name: module.RECIPE for module in (dras, schedinspector, rlbf, rlschert,
                                                                                irl)}
#: `hpcgym train` names that are recipes (the older spellings): name -> recipe[:variant].
TRAIN_ALIASES: dict[str, str] = {**{f"dras-{a}": f"dras:{a}" for a in ("pg", "a2c", "ppo", "dql")},
                                 "irl-dqn": "irl"}


def get_recipe(spec: str) -> Recipe:
    """The recipe `NAME[:VARIANT]` names (its default variant without one), variant applied."""
    name, _, variant = spec.strip().lower().partition(":")
    name = TRAIN_ALIASES.get(name, name)
    if ":" in name:
        name, _, alias_variant = name.partition(":")
        variant = variant or alias_variant
    recipe = RECIPES.get(name)
    if recipe is None:
        raise ConfigError(f"unknown recipe {spec!r}; recipes: {', '.join(RECIPES)} (`hpcgym recipes` lists them)")
    if not variant:
        variant = recipe.variant
    if variant and variant not in recipe.variants:
        known = ", ".join(recipe.variants) or "none"
        raise ConfigError(f"recipe {name} has no variant {variant!r}; its variants: {known}")
    return replace(recipe, variant=variant, **recipe.variants[variant]) if variant else recipe


def recipe_episode(spec: str | None, **given: Any) -> dict[str, Any]:
    """`Recipe.episode` of the recipe `spec` names, under what the caller was `given` (values that
    are not None win; `workload` and `options` are merged key by key); without a recipe, `given`."""
    if spec is None:
        return {k: v for k, v in given.items() if v is not None}
    kind = given.get("kind")
    episode = get_recipe(spec).episode(kind if isinstance(kind, str) else None)
    for key, value in given.items():
        if value is None:
            continue
        episode[key] = {**episode.get(key, {}), **value} if isinstance(value, Mapping) else value
    return episode
