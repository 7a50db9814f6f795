"""Reward specifications, computed by the env so that agents in any language receive them
(docs/semantics.md section 14 defines each)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .config import BACKFILL_ORDERS
from .errors import ConfigError
from .priorities import get_policy


class Reward:
    """Per-episode reward state (the default earns nothing); at the end a dense reward pays its last step."""

    def step(self, sim: Any) -> float:
        return 0.0

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return self.step(sim)


class EndReward(Reward):
    """A single reward at the end, from the episode's summary metrics."""

    def __init__(self, fn: Callable[[dict[str, Any]], float]) -> None:
        self.fn = fn

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return self.fn(summary)


class QueueWait(Reward):
    """Minus the job-hours waited in the queue since the previous decision (dense)."""

    def __init__(self) -> None:
        self.seen = 0

    def step(self, sim: Any) -> float:
        area = sim.queue_area
        waited, self.seen = area - self.seen, area
        return -waited / 3600.0


class DRASReward(Reward):
    """DRAS's per-decision rewards over the jobs started since the previous decision (docs/semantics.md 14)."""

    def __init__(self) -> None:
        self.mark = 0

    #: what the score reads of the jobs left waiting: their waits, or their estimated run times
    queue_times = "queue_waits"

    def step(self, sim: Any) -> float:
        starts = sim.started_since(self.mark)
        self.mark = sim.started_count
        if not starts:
            return 0.0
        at = starts[-1][1]
        return self.score(sim, starts, getattr(sim, self.queue_times)(at))

    def score(self, sim: Any, starts: list[tuple[int, int, int, int, int]], waiting: list[int]) -> float:
        raise NotImplementedError


class DRASCapability(DRASReward):
    """DRAS eq. (1), capability computing; the objective `agents.knapsack.best_capability` maximizes."""

    def __init__(self, weights: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)) -> None:
        super().__init__()
        self.w1, self.w2, self.w3 = (float(w) for w in weights)

    def score(self, sim, starts, waiting) -> float:
        k, procs = len(starts), sim.procs
        waits = [s[2] for s in starts]
        t_max = max(max(waits), max(waiting, default=0))
        wait_term = self.w1 * (sum(waits) / k) / t_max if t_max > 0 else 0.0
        size_term = self.w2 * (sum(s[3] for s in starts) / k) / procs
        return wait_term + size_term + self.w3 * starts[-1][4] / procs


class DRASCapacity(DRASReward):
    """DRAS eq. (2), capacity computing, read as `agents.knapsack` reads it."""

    def __init__(self, min_wait: float = 1.0) -> None:
        super().__init__()
        self.min_wait = float(min_wait)

    def score(self, sim, starts, waiting) -> float:
        if not waiting:
            return 0.0
        m = self.min_wait
        return -sum(1.0 / max(t, m) for t in waiting) / (len(waiting) + len(starts))


class DRASCapacityRuntime(DRASCapacity):
    """DRAS eq. (2) with the estimated run time in place of the wait, which the paper leaves open."""

    queue_times = "queue_estimates"


class SystemSlowdown(Reward):
    """DeepRM's slowdown reward over every job queued or running, integrated between decisions."""

    def __init__(self, times: str = "run", wait: bool = False) -> None:
        self.times, self.wait = times, wait
        self.since: int | None = None
        self.tracked = np.zeros(0, np.int64)   # job indices in the system at the previous step
        self.submitted = 0

    def step(self, sim: Any) -> float:
        now = sim.now
        since = now if self.since is None else self.since
        jobs = np.concatenate([self.tracked, np.arange(self.submitted, sim.submitted_count)])
        self.since, self.submitted = now, sim.submitted_count
        if not len(jobs):
            return 0.0
        t = sim.job_times(jobs)
        self.tracked = jobs[~t["done"]]
        lo = np.maximum(since, t["submit"]).astype(np.float64)
        hi = np.where(t["done"], np.minimum(t["end"], now), now).astype(np.float64)
        hi = np.maximum(hi, lo)
        ideal = np.full(len(jobs), 3600.0) if self.times == "hour" else np.maximum(t[self.times], 1).astype(np.float64)
        if not self.wait:
            return -float(np.sum((hi - lo) / ideal))
        start = np.where(t["start"] >= 0, t["start"], np.inf)
        waited = _waited_area(hi, t["submit"], start) - _waited_area(lo, t["submit"], start)
        return -float(np.sum((hi - lo) + waited / ideal)) / 3600.0


def _waited_area(x: np.ndarray, submit: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The integral from submit to x of a job's wait so far (min(tau, start) - submit)."""
    waited = np.minimum(x, start) - submit
    return waited * waited / 2 + np.maximum(x - start, 0) * waited


#: Relative rewards' metrics: name -> (summary key, scale, True if lower is better).
RELATIVE_METRICS: dict[str, tuple[str, float, bool]] = {  # wait in hours, as the `wait` reward
    "bsld": ("mean_bsld", 1.0, True), "wait": ("mean_wait", 1 / 3600.0, True), "mbsld": ("max_bsld", 1.0, True),
    "util": ("utilization", 1.0, False)}
#: Relative rewards' forms, d = base - x (x - base for utilization): name -> description.
RELATIVE_FORMS: dict[str, str] = {
    "pct": "d / base (SchedInspector's text)", "pct_max": "d / max(base, x, 1) (SchedInspector's code)",
    "diff": "d (the 'native' reward)", "winloss": "the sign of d: 1, 0 or -1"}
RELATIVE_SYNTAX = "relative:METRIC[:FORM[:POLICY[:SCAN]]]"


class RelativeReward(Reward):
    """At the end, the episode against the same jobs scheduled by a base policy alone."""

    def __init__(self, metric: str, form: str = "pct", policy: str | None = None, scan: str | None = None) -> None:
        self.key, self.scale, self.lower_better = RELATIVE_METRICS[metric]
        self.form, self.policy, self.scan = form, policy, scan

    def baseline(self, sim: Any) -> dict[str, Any]:
        from .simulator import simulate

        config = sim.config if self.scan is None else replace(sim.config, backfill_order=self.scan)
        return simulate(sim.workload, config, policy=self.policy or sim.policy).summary

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        if not summary.get("jobs"):
            return 0.0
        x = float(summary[self.key]) * self.scale
        base = float(self.baseline(sim)[self.key]) * self.scale
        d = base - x if self.lower_better else x - base
        if self.form == "pct":
            return d / base if base else d
        if self.form == "pct_max":
            return d / max(base, x, 1.0)
        return d if self.form == "diff" else float((d > 0) - (d < 0))


def relative_spec(name: str) -> RewardSpec:
    """The spec of a `relative:METRIC[:FORM[:POLICY]]` name, checked part by part."""
    parts = name.split(":")[1:]
    if not parts or len(parts) > 4 or not parts[0]:
        raise ConfigError(f"reward {name!r}: write {RELATIVE_SYNTAX}, e.g. relative:bsld, "
                          f"relative:bsld:pct_max:sjf or relative:bsld:pct:fcfs:sjf")
    metric, form, policy, scan = (parts + [None, None, None])[:4]
    form = form or "pct"
    if scan is not None and scan not in BACKFILL_ORDERS:
        raise ConfigError(f"reward {name!r}: unknown backfill scan order {scan!r}; use one of {', '.join(BACKFILL_ORDERS)}")
    if metric not in RELATIVE_METRICS:
        raise ConfigError(f"reward {name!r}: unknown metric {metric!r}; use one of {', '.join(RELATIVE_METRICS)}")
    if form not in RELATIVE_FORMS:
        raise ConfigError(f"reward {name!r}: unknown form {form!r}; use one of {', '.join(RELATIVE_FORMS)}")
    if policy is not None:
        policy = get_policy(policy).name  # an unknown base policy fails here, before any episode
    base = f"the {policy} policy alone" if policy else "the episode's priority policy alone"
    if scan:
        base += f" (backfill scanned in {scan} order)"
    return RewardSpec(name, f"at the end, {metric} improvement over {base}: {RELATIVE_FORMS[form]}",
                      lambda: RelativeReward(metric, form, policy, scan))


class DelayPenalty(Reward):
    """RL backfilling's penalty for delaying the reserved job by unguarded backfills."""

    def __init__(self, per_second: float) -> None:
        self.per_second, self.seen = per_second, 0

    def step(self, sim: Any) -> float:
        delay, self.seen = sim.reservation_delay_s - self.seen, sim.reservation_delay_s
        return -self.per_second * delay


class SumReward(Reward):
    """Several rewards earned together (`a+b`)."""

    def __init__(self, parts: list[Reward]) -> None:
        self.parts = parts

    def step(self, sim: Any) -> float:
        return sum(part.step(sim) for part in self.parts)

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return sum(part.end(sim, summary) for part in self.parts)


DELAY_SYNTAX = "delay_penalty[:C]"
DEFAULT_DELAY_PENALTY = 1 / 3600  #: C of `delay_penalty` when none is given: -1 per hour of delay.


def delay_spec(name: str) -> RewardSpec:
    """The spec of a `delay_penalty[:C]` name (C per second of delay, at least 0)."""
    _, _, arg = name.partition(":")
    try:
        per_second = float(arg) if arg else DEFAULT_DELAY_PENALTY
    except ValueError:
        per_second = -1.0
    if not per_second >= 0:
        raise ConfigError(f"reward {name!r}: write {DELAY_SYNTAX} with C >= 0 the penalty per second of delay, "
                          "e.g. delay_penalty:0.001")

    def unguarded(config: Any) -> str | None:
        if getattr(config, "backfill_candidates", "guarded") != "unguarded":
            return ("only unguarded backfill candidates can delay the reservation; set the option "
                    "backfill_candidates: unguarded (or drop the penalty)")
        return None

    return RewardSpec(name, f"at every decision, minus {per_second:g} per second the reserved job's start was "
                            "delayed by unguarded backfills since the previous decision",
                      lambda: DelayPenalty(per_second), unguarded)


def sum_spec(name: str) -> RewardSpec:
    """The spec of `a+b[+...]`: the parts' rewards added."""
    parts = [get_reward(part.strip()) for part in name.split("+")]
    if len(parts) < 2 or any(not part.name for part in parts):
        raise ConfigError(f"reward {name!r}: join two or more reward names with '+', e.g. relative:bsld+delay_penalty")

    def requires(config: Any) -> str | None:
        return next((problem for part in parts if (problem := part.requires(config))), None)

    return RewardSpec(name, " plus ".join(part.description for part in parts),
                      lambda: SumReward([part.make() for part in parts]), requires)


class ScaledReward(Reward):
    """Another reward times a constant (`K*NAME`), to bring returns where a critic can fit them."""

    def __init__(self, factor: float, part: Reward) -> None:
        self.factor, self.part = factor, part

    def step(self, sim: Any) -> float:
        return self.factor * self.part.step(sim)

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return self.factor * self.part.end(sim, summary)


SCALE_SYNTAX = "K*REWARD"


def scale_spec(name: str) -> RewardSpec:
    """The spec of `K*NAME`: NAME's reward times the number K."""
    factor, _, inner = name.partition("*")
    try:
        k = float(factor)
    except ValueError:
        k = math.nan
    if not math.isfinite(k) or not inner.strip():
        raise ConfigError(f"reward {name!r}: write {SCALE_SYNTAX} with K a finite number, e.g. "
                          "0.001*system_slowdown_prediction")
    part = get_reward(inner.strip())
    return RewardSpec(name, f"{k:g} times {part.description}", lambda: ScaledReward(k, part.make()), part.requires)


@dataclass(frozen=True)
class RewardSpec:
    """A named reward; `requires(config)` says what is wrong with a simulation's options for it."""

    name: str
    description: str
    make: Callable[[], Reward]
    requires: Callable[[Any], str | None] = lambda config: None

    def check(self, config: Any) -> None:
        problem = self.requires(config)
        if problem:
            raise ConfigError(f"reward {self.name!r}: {problem}")


REWARDS: dict[str, RewardSpec] = {
    r.name: r
    for r in (
        RewardSpec("none", "always 0", Reward),
        RewardSpec("bsld", "at the end, minus the mean bounded slowdown",
                   lambda: EndReward(lambda s: -float(s["mean_bsld"]))),
        RewardSpec("wait", "at the end, minus the mean wait in hours",
                   lambda: EndReward(lambda s: -float(s["mean_wait"]) / 3600.0)),
        RewardSpec("max_wait", "at the end, minus the longest wait in hours (prices starvation, which sums "
                               "of per-job terms do not; e.g. dras_capacity+0.01*max_wait)",
                   lambda: EndReward(lambda s: -float(s["max_wait"]) / 3600.0)),
        RewardSpec("utilization", "at the end, the utilization", lambda: EndReward(lambda s: float(s["utilization"]))),
        RewardSpec("queue_wait", "at every decision, minus the job-hours waited in the queue since the previous "
                                 "decision", QueueWait),
        RewardSpec("dras_capability", "at every decision, DRAS eq. (1) for the jobs started since the previous "
                                      "decision: (mean wait / max queued wait + mean size / N + busy / N) / 3; "
                                      "0 if none started", DRASCapability),
        RewardSpec("dras_capacity", "at every decision, DRAS eq. (2) for the jobs started since the previous "
                                    "decision: minus the sum of 1/wait (s, at least 1) over the jobs left waiting, "
                                    "divided by the jobs waiting before the picks; 0 if none started",
                   DRASCapacity),
        RewardSpec("dras_capacity_runtime", "as dras_capacity with 1/estimated run time (s, at least 1) in place "
                                            "of 1/wait (DeepRM's slowdown reward over the queue)", DRASCapacityRuntime),
        RewardSpec("system_slowdown", "dense: minus the integral since the previous decision of the sum of 1/run "
                                      "time (s, at least 1) over the jobs queued or running (DeepRM; IRL's reward A); "
                                      "an episode's rewards add up to minus the sum of the slowdowns",
                   SystemSlowdown),
        RewardSpec("system_slowdown_estimate", "as system_slowdown with the estimated run time (what reservations "
                                               "use) in place of the run time",
                   lambda: SystemSlowdown("estimate")),
        RewardSpec("system_wait_slowdown", "dense: minus the integral in hours since the previous decision of the "
                                           "sum of (wait so far + run time) / run time over the jobs queued or "
                                           "running (IRL's reward I)", lambda: SystemSlowdown(wait=True)),
        RewardSpec("system_slowdown_prediction", "as system_slowdown with the predicted run time: a running job's "
                                                 "current prediction, a waiting one's pre-run one (RLSchert eq. 9)",
                   lambda: SystemSlowdown("prediction"), lambda config: None if config.prediction.on else
                   "it reads run-time predictions: set the option prediction (e.g. running)"),
        RewardSpec("system_jobs", "dense: minus the job-hours spent in the system (queued or running) since the "
                                  "previous decision; an episode's rewards add up to minus the sum of the response "
                                  "times in hours (RLSchert eq. 10)", lambda: SystemSlowdown("hour")),
    )
}


#: The longest reward spec and the most scaled or added parts in one: a spec comes from any agent
#: of a shared env, and its parser recurses once per part.
MAX_REWARD_CHARS = 512
MAX_REWARD_PARTS = 16


def get_reward(name: str) -> RewardSpec:
    """The spec called `name`: one of `REWARDS`, or a `relative:` name."""
    if not isinstance(name, str):
        raise ConfigError(f"reward must be a name, not {name!r}")
    if len(name) > MAX_REWARD_CHARS or name.count("*") + name.count("+") >= MAX_REWARD_PARTS:
        raise ConfigError(f"a reward spec is at most {MAX_REWARD_CHARS} characters and {MAX_REWARD_PARTS} parts "
                          f"(scaled or added); got {len(name):,} characters: name fewer rewards")
    if "+" in name:
        return sum_spec(name)
    if "*" in name:
        return scale_spec(name)
    if name == "relative" or name.startswith("relative:"):
        return relative_spec(name)
    if name == "delay_penalty" or name.startswith("delay_penalty:"):
        return delay_spec(name)
    try:
        return REWARDS[name]
    except KeyError:
        raise ConfigError(f"unknown reward {name!r}; use one of {', '.join(REWARDS)}, "
                          f"{RELATIVE_SYNTAX} or {DELAY_SYNTAX}, scaled ({SCALE_SYNTAX}) or several joined by "
                          "'+'") from None


SUM_SYNTAX = "REWARD+REWARD[+...]"
#: What the `welcome` lists beside `REWARDS`: each family's syntax and description.
FAMILIES = {
    RELATIVE_SYNTAX: f"at the end, the improvement over a base policy alone on the same jobs; METRIC one of "
                     f"{', '.join(RELATIVE_METRICS)}; FORM one of {', '.join(RELATIVE_FORMS)} (default pct); POLICY a "
                     f"priority policy (default: the episode's); SCAN the base run's backfill scan order, one of "
                     f"{', '.join(BACKFILL_ORDERS)} (default: the episode's)",
    DELAY_SYNTAX: f"at every decision, minus C (default {DEFAULT_DELAY_PENALTY:.6g}: 1 per hour) per second the "
                  "reserved job's start was delayed by unguarded backfills; needs backfill_candidates: unguarded",
    SUM_SYNTAX: "the rewards named added together, e.g. relative:bsld+delay_penalty:0.001",
    SCALE_SYNTAX: "the reward named times the number K, e.g. 0.001*system_slowdown_prediction"}
