"""The seed papers' runs as recipes, resolved by `get_recipe("NAME[:VARIANT]")` for every entry point; a new paper adds
its pieces on their floors, its `RECIPE`, and its module in RECIPES."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..environment.errors import ConfigError
from ..environment.spec import SOURCE_KEYS, WINDOW_KEYS
from . import dras, irl, rlbf, rlschert, schedinspector
from .recipe import BASE, TEACHER, Recipe

__all__ = ["BASE", "RECIPES", "TEACHER", "TRAIN_ALIASES", "Recipe", "get_recipe", "is_record", "recipe_episode",
           "recorded_settings"]

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


#: The suffixes of files that record a run: a checkpoint, or a results file (eval.json and the like).
RECORD_SUFFIXES = (".pt", ".json")
#: Workload keys a recorded run keeps as a recipe: the job source's rules, not which jobs (trace or
#: generator, size, split, windows), which each command sets, as for a named recipe.
_NOT_RULES = {*SOURCE_KEYS, "procs", "first_jobs", "train_fraction", "part", *WINDOW_KEYS}


def is_record(spec: str) -> bool:
    """Whether `--recipe SPEC` names a file recording a run rather than a recipe."""
    return spec.lower().endswith(RECORD_SUFFIXES)


def recorded_settings(path: str | Path) -> dict[str, Any]:
    """The training settings a run recorded: a checkpoint's, or those under a results file's
    `provenance` (eval.json), so a run can be remade from its own record."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--recipe {path}: no such file (a recipe is NAME[:VARIANT], or a checkpoint or results "
                          "file of a training run)")
    if path.suffix.lower() == ".pt":
        from .rl.checkpoint import load_checkpoint

        settings = load_checkpoint(path).trainer.get("settings")
    else:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--recipe {path}: not a JSON results file ({exc})") from None
        settings = (data.get("provenance") or {}).get("settings") if isinstance(data, dict) else None
    if not isinstance(settings, dict) or "kind" not in settings or "options" not in settings:
        raise ConfigError(f"--recipe {path} records no training run's settings (a checkpoint or eval.json of "
                          "`hpcgym train` does)")
    return settings


def _recorded_episode(path: str, kind: str | None) -> dict[str, Any]:
    """A recorded run's episode as `Recipe.episode` gives a recipe's."""
    s = recorded_settings(path)
    name = kind or s["kind"]
    return {"kind": tuple(name.split("+")) if "+" in name else name, "options": dict(s["options"]),
            "workload": {k: v for k, v in s["workload"].items() if k not in _NOT_RULES},
            "reward": s["reward"], "encoder": s["encoder"]}


def recipe_episode(spec: str | None, **given: Any) -> dict[str, Any]:
    """`Recipe.episode` of the recipe `spec` names (or that a checkpoint or results file records), under the caller's
    `given` values that are not None (`workload` and `options` merged key by key)."""
    if spec is None:
        return {k: v for k, v in given.items() if v is not None}
    kind = given.get("kind")
    kind = kind if isinstance(kind, str) else None
    episode = _recorded_episode(spec, kind) if is_record(spec) else get_recipe(spec).episode(kind)
    for key, value in given.items():
        if value is None:
            continue
        episode[key] = {**episode.get(key, {}), **value} if isinstance(value, Mapping) else value
    return episode
