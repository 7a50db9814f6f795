"""A seed paper's run as one typed value, held as the `RECIPE` literal in the paper's module so that
its numbers have one home; `agents/recipes.py` gathers them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..environment.config import expand_preset

#: In a recipe's baselines: the run's base priority policy, and its teacher with that policy (if it has one).
BASE, TEACHER = "BASE", "TEACHER"


@dataclass(frozen=True)
class Recipe:
    """One paper's run. `options` are the simulation options of training and evaluation episodes (the reset's options,
    without `window` and `policy`, which have their own fields); `workload` the workload keys both draw with;
    `first_jobs` limits where training windows start (on a trace, without a chronological split or a fixed window)."""

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
        """An episode of this recipe taking `kind` (default: the recipe's), as `gymbridge.make` and a reset
        take it; a preset is spelled out as its rules, or an env's own default rules would win over it."""
        name = kind or self.kind
        options = expand_preset(self.reset_options())  # spelled out: they win over an env's defaults
        return {"kind": tuple(name.split("+")) if "+" in name else name, "workload": dict(self.workload),
                "options": options, "reward": self.reward, "encoder": self.encoder_for(name)}

    def to_json(self) -> dict[str, Any]:
        """Everything the recipe sets (what a results file records beside the commit and command)."""
        data = asdict(self)
        del data["variants"]
        return {"recipe": self.full_name, **{k: v for k, v in data.items() if k not in ("name", "variant")},
                "baselines": list(self.baseline_policies())}
