"""The seed papers' runs as recipes: what a paper's agent is trained and evaluated in, as data.

A recipe names the simulation rules (a reset's `options`), the workload keys, the reward, the
encoder, the algorithm and its config, the teacher, the baselines, and its named variants (RL
backfilling's `public`, `scw` and `textbook` rules, DRAS's four algorithms). `get_recipe("rlbf:scw")`
resolves one; every entry point (train, compare, agent, env, record, distill, `gymbridge.make`)
goes through it, and `hpcgym recipes` lists them. The numbers live in the papers' modules
(`agents/dras.py`, ...: TRAINING_DEFAULTS, SEMANTICS) and are only gathered here, so a paper's
settings have one home. Adding a paper: its pieces on their floors, and one entry in RECIPES.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..environment.config import PRESETS
from ..environment.errors import ConfigError
from . import dras, irl, rlbf, rlschert, schedinspector

#: In a recipe's baselines: the run's base priority policy, and its teacher running with that policy
#: (left out when the run has no teacher).
BASE, TEACHER = "BASE", "TEACHER"


@dataclass(frozen=True)
class Recipe:
    """One paper's run. `options` are the simulation options of training and evaluation episodes
    (the reset's options, without `window` and `policy`, which have their own fields); `workload`
    the workload keys both draw with; `first_jobs` limits where training windows start (on a
    trace, without a chronological split or a fixed window)."""

    name: str
    summary: str
    algorithm: str = "ppo"
    kind: str = "select"
    encoder: str | None = None
    encoders: Mapping[str, str] = field(default_factory=dict)   # per decision kind, where not `encoder`
    reward: str = "bsld"
    policy: str = "fcfs"
    window: int = 128
    no_wait: bool = False
    jobs: int = 256
    trajectories: int = 100
    options: Mapping[str, Any] = field(default_factory=lambda: {"backfill": "easy"})
    workload: Mapping[str, Any] = field(default_factory=dict)
    first_jobs: int | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    teachers: Mapping[str, str] = field(default_factory=dict)   # per decision kind
    max_steps: int | None = None
    kill_rate: float | None = None   # an untrained kill policy's kill probability (agents/slots.py kill_prior)
    curriculum: str | None = None    # phases of training episodes, on a trace
    baselines: tuple[str, ...] = ("fcfs", "sjf")
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # name -> fields it changes
    variant: str | None = None       # the variant applied (None: a recipe without variants)

    @property
    def full_name(self) -> str:
        return f"{self.name}:{self.variant}" if self.variant else self.name

    def encoder_for(self, kind: str | None = None) -> str | None:
        """The observation encoder of a run taking `kind` (default: the recipe's kind)."""
        return self.encoders.get(kind or self.kind, self.encoder)

    def teacher(self, kind: str | None = None) -> str | None:
        """The agent imitated when the run takes `kind` (default: the recipe's kind)."""
        return self.teachers.get(kind or self.kind)

    def baseline_policies(self, kind: str | None = None, policy: str | None = None,
                          teacher: str | None = None) -> tuple[str, ...]:
        """The baselines as compare policies, for a run taking `kind` with base `policy` and `teacher`
        (default: the recipe's)."""
        kind, policy = kind or self.kind, policy or self.policy
        teacher = teacher or self.teacher(kind)
        return tuple(policy if b == BASE else f"{kind}:{teacher},{policy}" if b == TEACHER else b
                     for b in self.baselines if b != TEACHER or teacher)

    def reset_options(self) -> dict[str, Any]:
        """The simulation options as a reset sends them: the rules, the window and the priority policy."""
        return {**self.options, "window": self.window, "policy": self.policy}

    def episode(self, kind: str | None = None) -> dict[str, Any]:
        """An episode of this recipe, taking `kind` (default: the recipe's), as `gymbridge.make` and a
        protocol reset take it: the decision kind(s), the workload keys, the simulation options (window
        and policy included), the reward and the kind's encoder. A preset in the options is spelled
        out as its rules, as an env's own default rules would otherwise win over the preset's."""
        name = kind or self.kind
        options = self.reset_options()
        options = {**PRESETS.get(options.pop("preset", ""), {}), **options}  # spelled out: they win over an env's defaults
        return {"kind": tuple(name.split("+")) if "+" in name else name, "workload": dict(self.workload),
                "options": options, "reward": self.reward, "encoder": self.encoder_for(name)}

    def to_json(self) -> dict[str, Any]:
        """Everything the recipe sets (what a results file records beside the commit and command)."""
        data = asdict(self)
        del data["variants"]
        return {"recipe": self.full_name, **{k: v for k, v in data.items() if k not in ("name", "variant")},
                "baselines": list(self.baseline_policies())}


def _paper(module: Any, name: str, summary: str, algorithm: str = "ppo") -> Recipe:
    """A recipe from a paper module's TRAINING_DEFAULTS and its SEMANTICS tables (one variant each)."""
    d = module.TRAINING_DEFAULTS
    variants = {}
    for semantics, options in module.SEMANTICS.items():
        workload = dict(module.SEMANTICS_WORKLOAD[semantics])
        variants[semantics] = {"options": dict(options), "reward": module.SEMANTICS_REWARD[semantics],
                               "first_jobs": workload.pop("first_jobs", None), "workload": workload}
    return Recipe(name=name, summary=summary, algorithm=algorithm, kind=d["kind"], encoder=d["encoder"],
                  encoders=dict(d.get("encoders", {})), policy=d["policy"], window=d.get("window", 128),
                  jobs=d["jobs"], trajectories=d["trajectories"],
                  config=dict(d["config"]), teachers=dict(d.get("teacher", {})), max_steps=d.get("max_steps"),
                  kill_rate=d.get("kill_rate"),
                  baselines=(BASE, TEACHER), variants=variants, variant=d["semantics"], options={})


def _dras() -> Recipe:
    d = dras.TRAINING_DEFAULTS
    variants = {algorithm: {"algorithm": algorithm, "config": {**d["config"], **(d["dql_config"] if algorithm == "dql"
                                                                                 else {})}}
                for algorithm in ("pg", "a2c", "ppo", "dql")}
    return Recipe(name="dras", summary="DRAS (Fan et al.): two levels, select then backfill, DRAS's state, network "
                                       "and capacity reward, a sampled/real/synthetic curriculum; variants: the "
                                       "update rule (docs/dras.md)",
                  kind=d["kind"], encoder=d["encoder"], window=d["window"], no_wait=d["no_wait"], reward=d["reward"],
                  config=dict(d["config"]), curriculum=d["curriculum"], variants=variants, variant="ppo")


def _irl() -> Recipe:
    d = irl.TRAINING_DEFAULTS
    return Recipe(name="irl", summary="IRL's teacher (interpretable RL scheduling): a DQN on select and backfill "
                                      "over 20 slots, reward A (system slowdown), trained on the first 10,000 jobs; "
                                      "`hpcgym distill` turns it into trees (docs/irl.md)",
                  algorithm="dql", kind=d["kind"], encoder=d["encoder"], window=d["window"], no_wait=d["no_wait"],
                  reward=d["reward"], first_jobs=d["first_jobs"], config={**d["config"], **d["dql_config"]})


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    _dras(),
    _paper(schedinspector, "schedinspector",
           "SchedInspector (Zhang et al.): a base priority policy picks, the agent accepts or rejects the pick; "
           "reward: the improvement over the base alone; variants: the authors' code rules, textbook "
           "(docs/schedinspector.md)"),
    _paper(rlbf, "rlbf",
           "RL backfilling (Kolker-Hicks et al.): the base policy picks the head job, the agent chooses the "
           "backfills; variants: public code, scw (the paper's tables), textbook EASY (docs/rlbackfilling.md)"),
    _paper(rlschert, "rlschert",
           "RLSchert (Wang et al.): a kill agent over running jobs with run-time predictions, imitating its "
           "rule-based kill at first (docs/rlschert.md)"),
    _irl(),
)}
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
