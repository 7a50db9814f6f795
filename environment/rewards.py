"""Reward specifications, computed by the env so agents in any language receive them.

A spec makes one `Reward` per episode. Its `step` is called whenever a new decision arises
(any kind, any agent) and returns what was earned since the previous one; the env adds it to
every participant's account, and each agent receives its account with its own next decision.
`end` is added once, at the episode's end. `dras_capability` and `dras_capacity` are DRAS's
equations (1) and (2), earned for the jobs started between two decisions; more specs (RLSchert's
slowdown) join this table with their agents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError


class Reward:
    """Per-episode reward state; the default earns nothing."""

    def step(self, sim: Any) -> float:
        return 0.0

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return 0.0


class EndReward(Reward):
    """A single reward at the end, from the episode's summary metrics."""

    def __init__(self, fn: Callable[[dict[str, Any]], float]) -> None:
        self.fn = fn

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return self.fn(summary)


class QueueWait(Reward):
    """Minus the job-hours spent waiting in the queue since the previous decision (dense).

    Over an episode without kills the rewards add up to minus the sum of all waits, in hours.
    """

    def __init__(self) -> None:
        self.seen = 0

    def step(self, sim: Any) -> float:
        area = sim.queue_area
        waited, self.seen = area - self.seen, area
        return -waited / 3600.0

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return self.step(sim)


class DRASReward(Reward):
    """Base of DRAS's per-decision rewards (Fan et al., "DRAS: Deep reinforcement learning for
    cluster scheduling in high performance computing", IEEE TPDS 2022, section 3.1, eqs. 1, 2).

    A DRAS reward scores the jobs *selected* at a decision. Here: at each `step` (a new decision
    arises) the selected jobs S are all jobs started since the previous `step`
    (`Simulation.started_since`): the agent's picks, and also jobs a built-in default started in
    between (e.g. EASY backfilling when only select is external). A restart after a kill counts
    as a new start. Nothing started: the reward is 0 (both equations are about selected jobs).
    `end` adds the starts since the last decision.

    The state the equations read is the one right after the last start in S (time t_s):
    t_j = t_s - submit_j is a wait (for j in S its start - submit), the queue at the decision is
    S plus the jobs still queued now that had been submitted by t_s (jobs submitted later were
    not there), and N_used the processors busy right after that start (finishes after t_s are not
    seen). In the usual case (the agent picks at t_s and the next decision is at t_s too) this is
    exactly the queue and the cluster of the decision. The whole queue counts, not only the window
    the agent sees. The cluster is a processor count, so N is the processors. Cost: O(|S|) per
    decision, plus O(queue) when something started.
    """

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

    def end(self, sim: Any, summary: dict[str, Any]) -> float:
        return self.step(sim)

    def score(self, sim: Any, starts: list[tuple[int, int, int, int, int]], waiting: list[int]) -> float:
        raise NotImplementedError


class DRASCapability(DRASReward):
    """DRAS eq. (1), capability computing:

        w1 * mean_{j in S} t_j / t_max  +  w2 * mean_{j in S} n_j / N  +  w3 * N_used / N

    t_j: the wait of job j (start - submit); t_max: the largest wait in the queue at the decision
    (S and the jobs left waiting, see `DRASReward`); n_j: job j's processors; N: the cluster's
    processors; N_used: processors busy right after the picks started. t_max = 0 (every wait 0)
    makes the wait term 0. Weights default to w1 = w2 = w3 = 1/3 (DRAS section 5.3, Theta).
    The same objective as `agents.knapsack.best_capability`, so the Optimization baseline
    maximizes exactly this reward at each instance.
    """

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
    """DRAS eq. (2), capacity computing:

        (sum_{j in J} -1 / t_j) / c

    Read as `agents.knapsack` reads it by default (`capacity_count="decision"`, see
    docs/agents.md), for consistency with the Optimization baseline: J is the set of jobs still
    waiting once S started (the queue at the decision less S) and c the number of jobs waiting
    at the decision, |J| + |S|. t_j is job j's wait at the decision, counted as at least
    `min_wait` (1 s: a job submitted at this instant has t = 0). An empty J scores 0. The value
    is never positive, and 0 when nothing started (see `DRASReward`).
    """

    def __init__(self, min_wait: float = 1.0) -> None:
        super().__init__()
        self.min_wait = float(min_wait)

    def score(self, sim, starts, waiting) -> float:
        if not waiting:
            return 0.0
        m = self.min_wait
        return -sum(1.0 / max(t, m) for t in waiting) / (len(waiting) + len(starts))


class DRASCapacityRuntime(DRASCapacity):
    """DRAS eq. (2) with t_j the estimated run time of job j (at least 1 s) instead of its wait.

    The paper does not define t_j. Read as a wait, the sum hardly counts jobs that have waited
    long, so a policy maximizing it may starve them (docs/dras.md measures that). Read as the run
    time, eq. (2) is DeepRM's slowdown reward (sum of -1/T_j over the jobs in the system, Mao et
    al. 2016) restricted to the queue, which "aims to minimize the average job wait time" as the
    paper says: leaving a short job waiting costs the most.
    """

    queue_times = "queue_estimates"


@dataclass(frozen=True)
class RewardSpec:
    name: str
    description: str
    make: Callable[[], Reward]


REWARDS: dict[str, RewardSpec] = {
    r.name: r
    for r in (
        RewardSpec("none", "always 0", Reward),
        RewardSpec("bsld", "at the end, minus the mean bounded slowdown",
                   lambda: EndReward(lambda s: -float(s["mean_bsld"]))),
        RewardSpec("wait", "at the end, minus the mean wait in hours",
                   lambda: EndReward(lambda s: -float(s["mean_wait"]) / 3600.0)),
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
    )
}


def get_reward(name: str) -> RewardSpec:
    try:
        return REWARDS[name]
    except KeyError:
        raise ConfigError(f"unknown reward {name!r}; use one of {', '.join(REWARDS)}") from None
