"""Simulation options: every rule a result depends on is a named, validated field here."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

from .errors import ConfigError

BACKFILL_MODES = ("easy", "conservative", "none")
OVERRUN_MODES = ("run", "kill")
ESTIMATE_KINDS = ("requested", "actual", "noisy")


def check_int(value: object, what: str, minimum: int) -> int:
    """`value` as an int >= minimum, or a ConfigError naming the option (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(f"{what} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise ConfigError(f"{what} must be at least {minimum}, got {value}")
    return int(value)


@dataclass(frozen=True)
class EstimateSpec:
    """Which run-time estimate reservations are computed with.

    `noisy` multiplies the actual run time by (1 + error * u), u uniform in [-1, 1], seeded.
    """

    kind: str = "requested"
    error: float = 0.0

    @classmethod
    def parse(cls, text: str) -> EstimateSpec:
        """Parse `requested`, `actual` or `noisy:E` (E a relative error such as 0.2)."""
        kind, _, arg = text.strip().partition(":")
        if kind not in ESTIMATE_KINDS:
            raise ConfigError(f"unknown estimate {text!r}: use requested, actual or noisy:E (e.g. noisy:0.2)")
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


@dataclass(frozen=True)
class SimConfig:
    """Options of one simulation; the defaults follow the RL scheduling papers.

    backfill: easy, conservative or none.
    estimate: the run-time estimate used for reservations (requested, actual or noisy).
    overrun: what happens when a job runs past its requested time: `run` lets it run to its
        recorded end (as most RL papers do), `kill` ends it at its walltime like a resource
        manager would.
    window: how many queued jobs an external agent sees and may pick from.
    max_interval: after an inspector rejects a pick, the next look happens no later than this.
    max_rejections: a job rejected this many times is accepted without asking; None: no cap, an
        inspector is asked at every pass (SchedInspector's code).
    exact_requests: every job's requested time is its run time, for the priority policies, the
        estimates and the agents' observations alike (SchedInspector's code: oracle requests).
    commit_pick: a pick that does not fit (accepted, if an inspector is asked) stays the pick
        until it starts: no new select or inspect meanwhile (SchedInspector's code; off: every
        scheduling pass selects afresh, docs/semantics.md section 4).
    seed: seeds every random choice of the run (noisy estimates, the random policy).
    """

    backfill: str = "easy"
    estimate: EstimateSpec = EstimateSpec()
    overrun: str = "run"
    window: int = 128
    max_interval: int = 600
    max_rejections: int | None = 72
    exact_requests: bool = False
    commit_pick: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.estimate, str):
            object.__setattr__(self, "estimate", EstimateSpec.parse(self.estimate))
        if not isinstance(self.estimate, EstimateSpec):
            raise ConfigError(f"estimate must be requested, actual or noisy:E, got {self.estimate!r}")
        for name in ("window", "max_interval", "max_rejections", "seed"):
            if name == "max_rejections" and self.max_rejections is None:
                continue
            if not isinstance(getattr(self, name), int) or isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be an integer, got {getattr(self, name)!r}")
        if self.backfill not in BACKFILL_MODES:
            raise ConfigError(f"unknown backfill {self.backfill!r}: use one of {', '.join(BACKFILL_MODES)}")
        for name in ("exact_requests", "commit_pick"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.overrun not in OVERRUN_MODES:
            raise ConfigError(f"unknown overrun {self.overrun!r}: use one of {', '.join(OVERRUN_MODES)}")
        for name in ("window", "max_interval"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_rejections is not None and self.max_rejections < 0:
            raise ConfigError(f"max_rejections must be non-negative, got {self.max_rejections}")
