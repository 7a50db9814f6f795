"""From a recipe (a plain algorithm: the command's own defaults) and the flags of `hpcgym train` to a
run's TrainSettings: every flag given wins over the recipe, `--set` options over its config."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...agents.encoders import ENCODER_OPTIONS
from ...agents.recipes import RECIPES, TRAIN_ALIASES, Recipe, get_recipe
from ...environment.decisions import KILL, SELECT_KILL
from ...environment.errors import ConfigError, HpcgymError
from ...environment.spec import resolve_trace, sim_config

if TYPE_CHECKING:  # the trainer needs the rl extra; `hpcgym train --help` does not
    from .trainer import TrainSettings

BASE_ALGORITHMS = ("pg", "a2c", "ppo", "dql")
#: The names `hpcgym train` takes: the update rules alone, and the recipes (with their older spellings).
ALGORITHMS = (*BASE_ALGORITHMS, *TRAIN_ALIASES, *RECIPES)
#: The flags a recipe sets (besides those of its config), by the command's parameter names.
RECIPE_FLAGS = {"kind": "kind", "window": "window", "reward": "reward", "n_jobs": "jobs",
                "trajectories": "trajectories", "policy": "policy"}
#: Config keys with flags of their own.
CONFIG_FLAGS = ("net", "hidden", "lr", "gamma")


def parse_value(text: str) -> Any:
    """A KEY=VALUE value: JSON when it parses (numbers, true/false, null, lists), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def sjf_range(text: str) -> list[float]:
    """--sjf-range LOW,HIGH as two numbers (the workload key checks LOW < HIGH)."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--sjf-range takes LOW,HIGH such as 10,150; got {text!r}") from None
    return [low, high]


def key_values(items: tuple[str, ...], flag: str, example: str) -> dict[str, Any]:
    """`--flag KEY=VALUE` items as a dict, or one clear error."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} takes KEY=VALUE ({example}), got {item!r}")
        out[key.strip()] = parse_value(value.strip())
    return out


def train_recipe(algorithm: str | None, recipe: str | None, semantics: str | None, base: str | None) -> Recipe:
    """The recipe that ALGORITHM (an update rule or a recipe's name), --recipe and --semantics name."""
    algorithm = (algorithm or "").lower()
    if algorithm in BASE_ALGORITHMS:
        if recipe is None:
            if base is not None or semantics is not None:
                raise ConfigError(f"--base and --semantics belong to the recipes ({', '.join(RECIPES)}), not to "
                                  f"plain {algorithm}")
            return Recipe(name=algorithm, summary=f"plain {algorithm}", algorithm=algorithm)
        named = get_recipe(recipe)
        if named.algorithm != algorithm:
            raise ConfigError(f"recipe {named.full_name} trains with {named.algorithm}, not {algorithm}: "
                              f"drop {algorithm} or name another recipe")
        return named if semantics is None else get_recipe(f"{named.name}:{semantics}")
    if algorithm and recipe is not None and get_recipe(algorithm).name != get_recipe(recipe).name:
        raise ConfigError(f"{algorithm} and --recipe {recipe} name two recipes: give one")
    spec = recipe or algorithm
    if not spec:
        raise ConfigError("name what to train: an ALGORITHM (pg, a2c, ppo, dql, or a recipe) or --recipe NAME")
    if semantics is not None:
        if ":" in spec:
            raise ConfigError(f"--semantics {semantics} and {spec} both name a variant: give one")
        spec = f"{get_recipe(spec).name}:{semantics}"
    return get_recipe(spec)


def train_settings(recipe: Recipe, flags: dict[str, Any], given: set[str], label: str) -> TrainSettings:
    """The run of `recipe` with the fields the flags `given` replace, then the run's own flags."""
    from .trainer import TrainSettings

    recipe = replace(recipe, **{field: flags[flag] for flag, field in RECIPE_FLAGS.items() if flag in given},
                     **({"policy": flags["base"]} if flags["base"] else {}))
    kind, teacher = recipe.kind, flags["teacher"] or recipe.teacher(recipe.kind)
    workload, eval_workload = training_workloads(recipe, flags)
    return TrainSettings(
        algorithm=recipe.algorithm, kind=kind, workload=workload, eval_workload=eval_workload,
        options=training_options(recipe, flags, given), reward=recipe.reward,
        encoder=flags["encoder"] or recipe.encoder_for(kind), encoder_options=encoder_options(flags),
        config=algorithm_config(recipe, flags, teacher, kind, recipe.window), epochs=flags["epochs"],
        trajectories=recipe.trajectories, envs=flags["envs"], seed=flags["seed"],
        checkpoint_every=flags["checkpoint_every"], eval_episodes=flags["eval_episodes"],
        no_wait=not flags["allow_wait"] if "allow_wait" in given else recipe.no_wait,
        max_steps=flags["max_steps"] or recipe.max_steps, discard_after=flags["discard_after"],
        curriculum=training_curriculum(recipe, flags, given), teacher=teacher,
        baselines=flags["baselines"] or recipe.baseline_policies(kind, recipe.policy, teacher), name=label,
        recipe=recipe.full_name if recipe.name in RECIPES else None,
        init_from=str(flags["init_from"].resolve()) if flags["init_from"] else None)


def training_options(recipe: Recipe, flags: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """The simulation options: the recipe's, --backfill, --option KEY=VALUE, the window and policy."""
    options = dict(recipe.options)
    if "backfill" in given:
        options["backfill"] = flags["backfill"]
    options.update(key_values(flags["env_options"], "--option", "a simulation option, e.g. backfill_stop=true"))
    options.update(window=recipe.window, policy=recipe.policy)
    sim_config(options, flags["seed"])  # a bad option fails here, not mid-training
    return options


def training_workloads(recipe: Recipe, flags: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The training workload and, where it differs, the held-out evaluation's: a chronological split; the
    recipe's first jobs, --sjf-range and --prefill (training windows only); --cleaning over the recipe's."""
    trace, start, sampled = flags["trace"], flags["start"], flags["sampled_jobset"]
    if sampled and start is not None:
        raise ConfigError("--start (one fixed window) and --sampled-jobset exclude each other")
    if trace is not None:  # saved with the settings: the file itself, not a name to look up again
        trace = resolve_trace(trace).resolve()
    workload = {k: v for k, v in {"trace": str(trace) if trace else None, "procs": flags["procs"],
                                  "model": flags["model"], "machine": flags["machine"],
                                  "jobs": recipe.jobs, "start": start, "sample": None if start is not None else True,
                                  "sampled_jobset": sampled or None}.items() if v is not None}
    eval_workload = None
    if flags["train_fraction"] is not None:
        eval_workload = {**workload, "train_fraction": flags["train_fraction"], "part": "test", **recipe.workload}
        workload.update(train_fraction=flags["train_fraction"], part="train")
    workload.update(recipe.workload)
    if recipe.first_jobs is not None and trace is not None and flags["train_fraction"] is None and start is None:
        eval_workload = dict(workload)  # train on the trace's first jobs, evaluate on windows of all of it
        workload["first_jobs"] = recipe.first_jobs
    if flags["sjf_range"] is not None or flags["prefill"]:  # the training windows only
        eval_workload = eval_workload or dict(workload)
        if flags["sjf_range"] is not None:
            workload["sjf_range"] = sjf_range(flags["sjf_range"])
        if flags["prefill"]:
            workload["prefill"] = True
    if flags["cleaning"] is not None:  # after the recipe's workload keys: the flag wins
        if trace is None:
            raise ConfigError("--cleaning is a rule for cleaning an SWF trace: give --trace")
        for spec in (workload, eval_workload):
            if spec is not None:
                spec["cleaning"] = flags["cleaning"]
    return workload, eval_workload


def training_curriculum(recipe: Recipe, flags: dict[str, Any], given: set[str]) -> list[list[Any]] | None:
    """The phases of training episodes: --curriculum, else the recipe's on a trace's random windows."""
    from .trainer import parse_curriculum

    trace, start, sampled = flags["trace"], flags["start"], flags["sampled_jobset"]
    curriculum = flags["curriculum"] if "curriculum" in given else None
    if curriculum is None and trace is not None and start is None and not sampled:
        curriculum = recipe.curriculum
    if curriculum is None or curriculum.strip().lower() == "none":
        return None
    if trace is None:
        raise ConfigError("--curriculum draws its phases from a trace: give --trace (and --train-fraction)")
    if sampled or start is not None:
        raise ConfigError("--curriculum sets each phase's episodes itself: drop --sampled-jobset / --start")
    return parse_curriculum(curriculum, flags["epochs"] * recipe.trajectories)


def encoder_options(flags: dict[str, Any]) -> dict[str, Any]:
    """--encoder-option KEY=VALUE items, checked against the encoders' options."""
    options = key_values(flags["encoder_options"], "--encoder-option", "e.g. priority_size=26")
    settable = set(ENCODER_OPTIONS) - {"max_rejections"}  # that one follows the env's option
    unknown = sorted(set(options) - settable)
    if unknown:
        known = "; ".join(f"{k} ({ENCODER_OPTIONS[k]})" for k in sorted(settable))
        raise ConfigError(f"unknown --encoder-option {', '.join(unknown)}; known: {known}; max_rejections "
                          "follows --option max_rejections")
    return options


def algorithm_config(recipe: Recipe, flags: dict[str, Any], teacher: str | None, kind: str,
                     window: int) -> dict[str, Any]:
    """The recipe's algorithm config (a kill kind's prior) under --net, --hidden, --lr, --gamma and --set, checked."""
    from ...agents.rl.algorithms import get_algorithm
    from ...agents.slots import kill_prior

    config = dict(recipe.config)
    if teacher is None and config.get("imitation_coef"):
        config["imitation_coef"] = 0.0  # nothing to imitate on this kind (the recipe's teacher takes another)
    if recipe.kill_rate is not None and kind in (KILL, SELECT_KILL):
        config["initial_bias"] = kill_prior(kind, window, recipe.kill_rate)
    hidden = flags["hidden"]
    if hidden is not None:
        try:
            flags = {**flags, "hidden": [int(h) for h in hidden.split(",") if h.strip()]}
        except ValueError:
            raise ConfigError(f"--hidden takes layer widths like 64,64; got {hidden!r}") from None
    config.update({k: flags[k] for k in CONFIG_FLAGS if flags[k] is not None})
    config.update(key_values(flags["sets"], "--set", "an option of the algorithm's config, e.g. clip=0.1"))
    fields = get_algorithm(recipe.algorithm).Config.__dataclass_fields__
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise ConfigError(f"unknown {recipe.algorithm} option(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    return config


def resumed_settings(out: Path, algorithm: str, epochs: int) -> TrainSettings:
    """The settings of the run in `out`, to go on with until `epochs`."""
    from ...agents.rl.checkpoint import latest_checkpoint, load_checkpoint
    from .trainer import TrainSettings

    last = latest_checkpoint(out)
    if last is None:
        raise HpcgymError(f"nothing to resume: no epoch_*.pt checkpoint in {out}")
    saved = load_checkpoint(last).trainer.get("settings")
    if not saved:
        raise HpcgymError(f"{last} has no training settings to resume with")
    settings = TrainSettings.from_json(saved, epochs=epochs)
    if settings.algorithm != algorithm:
        raise HpcgymError(f"{out} holds a {settings.algorithm} run, not {algorithm}")
    return settings
