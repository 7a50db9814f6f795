"""Simulation options: every rule a result depends on is a named, validated field here."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, fields
from numbers import Integral, Real

from .errors import ConfigError
from .predictions import PredictionSpec

BACKFILL_MODES = ("easy", "conservative", "none")
#: In which order EASY scans the waiting jobs for backfilling (and lists an agent's candidates).
BACKFILL_ORDERS = ("queue", "submit", "sjf")
#: Which waiting jobs an EASY backfill agent may start: those that cannot delay the reserved
#: job (by estimates), or every one that fits now.
BACKFILL_CANDIDATES = ("guarded", "unguarded")
OVERRUN_MODES = ("run", "kill")
#: Which of the jobs ending in the same second releases its processors first under `one_event`:
#: the lowest job index, or the one that started first (RLScheduler's running list).
RELEASE_ORDERS = ("index", "start")
#: The largest `backfill_relax` (a bound that keeps it finite; 100 lets a job end 100 expected waits late).
MAX_RELAX = 100.0
ESTIMATE_KINDS = ("requested", "actual", "noisy", "predicted")


def check_int(value: object, what: str, minimum: int) -> int:
    """`value` as an int >= minimum, or a ConfigError naming the option (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(f"{what} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise ConfigError(f"{what} must be at least {minimum}, got {value}")
    return int(value)


@dataclass(frozen=True)
class EstimateSpec:
    """Which run-time estimate reservations use: `noisy:E` is run time x (1 + E u), u seeded uniform in [-1, 1]."""

    kind: str = "requested"
    error: float = 0.0

    @classmethod
    def parse(cls, text: str) -> EstimateSpec:
        """Parse `requested`, `actual` or `noisy:E` (E a relative error such as 0.2)."""
        kind, _, arg = text.strip().partition(":")
        if kind not in ESTIMATE_KINDS:
            raise ConfigError(f"unknown estimate {text!r}: use requested, actual, predicted or noisy:E (e.g. noisy:0.2)")
        if kind != "noisy":
            if arg:
                raise ConfigError(f"estimate {kind!r} takes no argument, got {text!r}")
            return cls(kind)
        try:
            error = float(arg)
        except ValueError:
            raise ConfigError(f"noisy estimate needs a relative error, e.g. noisy:0.2; got {text!r}") from None
        if not 0.0 <= error <= 10.0:
            raise ConfigError(f"noisy estimate error must be within [0, 10], got {error}")
        return cls("noisy", error)

    def __str__(self) -> str:
        return f"noisy:{self.error:g}" if self.kind == "noisy" else self.kind


#: The on/off options of SimConfig.
BOOL_FIELDS = ("exact_requests", "raise_requests", "commit_pick", "backfill_stop", "easy_extra", "strict_shadow",
               "keep_shadow", "one_event", "backfill_skip_next")


@dataclass(frozen=True)
class SimConfig:
    """Options of one simulation, defaults as in the RL scheduling papers (PROTOCOL.md's reset `options`,
    docs/semantics.md sections 4-8 and 12); the switches that replay one paper's code are `PRESETS`."""

    backfill: str = "easy"
    estimate: EstimateSpec = EstimateSpec()
    overrun: str = "run"
    window: int = 128
    max_interval: int = 600
    max_rejections: int | None = 72
    exact_requests: bool = False
    raise_requests: bool = False
    commit_pick: bool = False
    backfill_order: str = "queue"
    backfill_candidates: str = "guarded"
    backfill_stop: bool = True
    easy_extra: bool = True
    strict_shadow: bool = False
    keep_shadow: bool = False
    one_event: bool = False
    release_order: str = "index"
    backfill_skip_next: bool = False
    backfill_relax: float = 0.0
    prediction: PredictionSpec = PredictionSpec()
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.estimate, str):
            object.__setattr__(self, "estimate", EstimateSpec.parse(self.estimate))
        if not isinstance(self.estimate, EstimateSpec):
            raise ConfigError(f"estimate must be requested, actual, predicted or noisy:E, got {self.estimate!r}")
        if isinstance(self.prediction, str):
            object.__setattr__(self, "prediction", PredictionSpec.parse(self.prediction))
        if not isinstance(self.prediction, PredictionSpec):
            raise ConfigError(f"prediction must be a string such as running or user_history, got {self.prediction!r}")
        if self.estimate.kind == "predicted" and not self.prediction.on:
            raise ConfigError("estimate predicted needs a predictor: set prediction to user_history, learned:MODEL "
                              "or running")
        if self.estimate.kind == "predicted" and self.backfill == "conservative":
            raise ConfigError("conservative backfilling does not re-plan on predictions yet; with estimate "
                              "predicted use backfill easy or none")
        for name, least in (("window", 1), ("max_interval", 1), ("max_rejections", 0), ("seed", None)):
            value = getattr(self, name)
            if name == "max_rejections" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{name} must be an integer, got {value!r}")
            if least is not None and value < least:
                raise ConfigError(f"{name} must be at least {least}, got {value}")
        for name in BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name, allowed in (("backfill", BACKFILL_MODES), ("backfill_order", BACKFILL_ORDERS),
                              ("backfill_candidates", BACKFILL_CANDIDATES), ("release_order", RELEASE_ORDERS),
                              ("overrun", OVERRUN_MODES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"unknown {name} {getattr(self, name)!r}: use one of {', '.join(allowed)}")
        relax = self.backfill_relax
        if isinstance(relax, str):  # as compare's KEY:VALUE items and the CLI's --option give it
            with suppress(ValueError):
                relax = float(relax)
        if isinstance(relax, bool) or not isinstance(relax, Real) or not 0.0 <= relax <= MAX_RELAX:
            raise ConfigError(f"backfill_relax must be a number in [0, {MAX_RELAX:g}], got {relax!r}")
        object.__setattr__(self, "backfill_relax", float(relax))
        if self.release_order != "index" and not self.one_event:
            raise ConfigError("release_order orders the finishes of one second, which only one_event applies one "
                              "at a time: set one_event true or leave release_order at index")
        if self.keep_shadow and not self.commit_pick:
            raise ConfigError("keep_shadow keeps the shadow time of a committed pick: it needs commit_pick")
        if self.commit_pick and self.backfill == "conservative":
            raise ConfigError("commit_pick keeps the one reserved job of backfill easy or none until it starts; "
                              "conservative backfilling already keeps every queued job's reservation: turn "
                              "commit_pick off or use backfill easy")

    def to_options(self) -> dict[str, object]:
        """Every option (the seed aside) as a reset's `options` map."""
        options = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("seed", "prediction")}
        options["estimate"] = str(self.estimate)
        if self.prediction.on:  # only then: the protocol does not know the option yet
            options["prediction"] = str(self.prediction)
        return options


#: RL backfilling's SC-W code (its Table 4; docs/rlbackfilling.md): the first blocked pick keeps its
#: shadow time until it starts, one event per pass, candidates scanned in submit order, no
#: extra-processor rule, a backfilled job ends strictly before the shadow time.
_RLBF_SCW = {"backfill": "easy", "commit_pick": True, "keep_shadow": True, "one_event": True,
             "backfill_order": "submit", "easy_extra": False, "strict_shadow": True}
_RLBF_PUBLIC = {**_RLBF_SCW, "backfill_candidates": "unguarded", "backfill_stop": False}
#: Named rule sets, one per paper code: where that code trained and measured, so agents can train there too
#: (docs/semantics.md section 5). A reset's own options override its preset's.
PRESETS: dict[str, dict[str, object]] = {
    # SchedInspector's public code: oracle requests, a committed pick, no backfilling
    "schedinspector-code": {"backfill": "none", "exact_requests": True, "commit_pick": True},
    "rlbf-scw": _RLBF_SCW,
    # RL backfilling's public code: the same loop, unguarded candidates, no stop action
    "rlbf-public": _RLBF_PUBLIC,
    # RLScheduler's heuristic loop (schedule_curr_sequence_reset): the head waits without
    # backfilling until it fits, one event at a time, finishes of one second in start order
    "rlscheduler": {"backfill": "none", "commit_pick": True, "one_event": True, "release_order": "start"},
    # the same with its backfilling (`--backfil`): rlbf-scw's loop, which RL backfilling inherited
    "rlscheduler-backfill": {**_RLBF_SCW, "release_order": "start"},
    # the public code's own heuristic baseline: its loop, whose EASY scan skips the job after each
    # backfilled one, with every request below the run time raised to it
    "rlbf-public-baseline": {**_RLBF_PUBLIC, "backfill_skip_next": True, "raise_requests": True},
}
for _rules in PRESETS.values():  # each a valid SimConfig, checked at import
    SimConfig(**_rules)


def expand_preset(options: dict[str, object]) -> dict[str, object]:
    """`options` with its `preset` (if any) replaced by the preset's options, its own winning."""
    if options.get("preset") is None:
        return {k: v for k, v in options.items() if k != "preset"}
    name = options["preset"]
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; use one of {', '.join(PRESETS)}")
    return {**PRESETS[name], **{k: v for k, v in options.items() if k != "preset"}}
