"""DRAS's "Optimization" baseline (Fan et al., IEEE TPDS 2022, section 5.1): the queue window's subset maximizing eq.
(1) or (2), solved exactly by one DP table over (count, size) (docs/agents.md, "The exact DP")."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..environment.decisions import SELECT, Action, Decision
from ..environment.errors import ConfigError
from ..environment.machine import REQUESTS, machine_from_table, one_resource
from .base import Agent

OBJECTIVES = ("capability", "capacity")
#: What the capacity objective divides by: the jobs waiting at the decision, or after the picks.
CAPACITY_COUNTS = ("decision", "remaining")
#: What t_j of the capacity objective is: the job's wait, or its estimated run time (`DRASCapacityRuntime`).
CAPACITY_TIMES = ("wait", "runtime")

TIE_TOLERANCE = 1e-12  #: Objective values within this relative distance of the best count as ties.


def subset_table(sizes: np.ndarray, values: np.ndarray, capacity: int,
                 max_items: int) -> tuple[np.ndarray, np.ndarray]:
    """best[k, c]: the largest value sum of exactly k of the items whose (gcd-divided) sizes sum to exactly c (-inf if
    none), k <= max_items, c <= capacity; take[i, k, c]: item i is in that subset among items 0..i (a cell is replaced
    only when strictly better, so ties keep the earlier items). O(n K C) time, n K C bytes."""
    n = len(sizes)
    best = np.full((max_items + 1, capacity + 1), -np.inf)
    best[0, 0] = 0.0
    take = np.zeros((n, max_items + 1, capacity + 1), dtype=bool)
    reach = 0  # the largest total size of items 0..i, capped: columns past it are unreachable
    for i in range(n):
        s, v = int(sizes[i]), float(values[i])
        if s > capacity:
            continue
        reach = min(capacity, reach + s)
        top = min(i + 1, max_items)  # subsets of items 0..i hold at most i + 1 items
        candidate = best[:top, :reach + 1 - s] + v  # a copy: read before the update below
        target = best[1:top + 1, s:reach + 1]       # a view into best
        better = candidate > target
        np.copyto(target, candidate, where=better)
        take[i, 1:top + 1, s:reach + 1] = better
    return best, take


def read_back(take: np.ndarray, sizes: np.ndarray, k: int, c: int) -> list[int]:
    """The items of the subset that `subset_table` kept for cell (k, c), in increasing order."""
    items = []
    for i in range(take.shape[0] - 1, -1, -1):
        if k == 0:
            break
        if take[i, k, c]:
            items.append(i)
            k -= 1
            c -= int(sizes[i])
    if k != 0 or c != 0:
        raise AssertionError("knapsack read-back did not end at the empty subset")
    return items[::-1]


def _prepare(sizes: Sequence[int], free: int) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """Positions of the jobs that fit alone, their sizes divided by the gcd g, the scaled
    capacity C = min(free, total size) // g, the item bound K, and g."""
    sizes = np.asarray(sizes, dtype=np.int64)
    fit = np.flatnonzero((sizes <= free) & (sizes > 0))
    if len(fit) == 0:
        return fit, sizes[fit], 0, 0, 1
    g = math.gcd(*sizes[fit].tolist())
    scaled = sizes[fit] // g
    capacity = int(min(free, int(sizes[fit].sum())) // g)
    # the item bound: as many of the smallest as fit together
    return fit, scaled, capacity, int(np.searchsorted(np.cumsum(np.sort(scaled)), capacity, side="right")), g


def _argmax_cell(objective: np.ndarray, used: np.ndarray) -> tuple[int, int] | None:
    """The best cell of an objective table over (k, c): ties (within TIE_TOLERANCE) go to fewer
    jobs, then to more processors used. None when no cell is finite."""
    finite = np.isfinite(objective)
    if not finite.any():
        return None
    top = objective[finite].max()
    near = finite & (objective >= top - TIE_TOLERANCE * max(1.0, abs(top)))
    ks, cs = np.nonzero(near)
    order = np.lexsort((-used[ks, cs], ks))  # fewest jobs first, then most processors
    return int(ks[order[0]]), int(cs[order[0]])


def best_capability(waits: Sequence[float], sizes: Sequence[int], *, t_max: float, procs: int, free: int,
                    weights: Sequence[float] = (1 / 3, 1 / 3, 1 / 3),
                    nonempty: bool = False) -> tuple[float, list[int]]:
    """The subset of the given jobs (positions) maximizing DRAS eq. (1), and its value. The empty subset scores w3
    (procs - free) / procs (with `nonempty` it is not allowed unless none fits); a t_max of 0 makes the wait term 0."""
    w1, w2, w3 = (float(w) for w in weights)
    used0 = procs - free
    empty_value = w3 * used0 / procs
    fit, scaled, capacity, kmax, g = _prepare(sizes, free)
    if kmax == 0:
        return empty_value, []
    values = np.asarray(waits, dtype=np.float64)[fit]
    best, take = subset_table(scaled, values, capacity, kmax)
    k = np.arange(kmax + 1, dtype=np.float64)[:, None]
    total = np.arange(capacity + 1, dtype=np.float64)[None, :] * g
    reachable = np.isfinite(best)
    reachable[0, :] = False  # the empty subset is scored apart
    k[0] = 1.0               # (row 0 is masked; avoid dividing by zero there)
    wait_sum = np.where(reachable, best, 0.0)
    wait_term = w1 * wait_sum / (k * t_max) if t_max > 0 else 0.0
    objective = wait_term + w2 * total / (k * procs) + w3 * (used0 + total) / procs
    objective = np.where(reachable, objective, -np.inf)
    cell = _argmax_cell(objective, np.broadcast_to(total, objective.shape))
    value = float(objective[cell])
    if not nonempty and empty_value > value + TIE_TOLERANCE * max(1.0, abs(value)):
        return empty_value, []
    return value, [int(fit[i]) for i in read_back(take, scaled, *cell)]


def best_capacity(waits: Sequence[float], sizes: Sequence[int], pickable: int, *, free: int,
                  count: str = "decision", min_wait: float = 1.0,
                  nonempty: bool = False) -> tuple[float, list[int]]:
    """The subset of the first `pickable` jobs maximizing DRAS eq. (2), and its value; `waits` covers the whole visible
    queue (all count in J); c counts the jobs waiting at the decision or, with count="remaining", after the picks."""
    if count not in CAPACITY_COUNTS:
        raise ConfigError(f"count must be one of {', '.join(CAPACITY_COUNTS)}, got {count!r}")
    u = 1.0 / np.maximum(np.asarray(waits, dtype=np.float64), min_wait)
    total_u, queued = float(u.sum()), len(u)

    def value(k: int, removed: float) -> float:
        if count == "decision":
            return -(total_u - removed) / queued
        return 0.0 if queued == k else -(total_u - removed) / (queued - k)

    fit, scaled, capacity, kmax, _ = _prepare(sizes[:pickable], free)
    empty = value(0, 0.0)
    if kmax == 0:
        return empty, []
    best, take = subset_table(scaled, u[fit], capacity, kmax)
    # For a count k the objective only grows with the removed sum: take the best over sizes.
    per_k = best[1:].max(axis=1)
    cols = best[1:].argmax(axis=1)  # the first (fewest processors) size reaching that sum
    objective = np.array([value(k, removed) if np.isfinite(removed) else -np.inf
                          for k, removed in enumerate(per_k, start=1)])
    top = objective.max()
    k = int(np.flatnonzero(objective >= top - TIE_TOLERANCE * max(1.0, abs(top)))[0]) + 1  # fewest jobs
    if not nonempty and empty > top + TIE_TOLERANCE * max(1.0, abs(top)):
        return empty, []
    return float(objective[k - 1]), [int(fit[i]) for i in read_back(take, scaled, k, int(cols[k - 1]))]


def _on_nodes(obs: dict, n: int) -> tuple[np.ndarray, int]:
    """The first n jobs' sizes and the free amount of the one resource that decides on nodes; refused where jobs compete
    for several resources or partitions (an exact DP grows with the product of their free amounts)."""
    table, queue = obs["machine"], obs["queue"]
    found = one_resource(machine_from_table(table), *(np.asarray(queue[c][:n]) for c in REQUESTS))
    if found is None:
        raise ConfigError("the knapsack agent packs one resource: on nodes it runs on one partition whose jobs all get "
                          "whole nodes (--machine nodes) or whose nodes model no memory or GPUs; here a subset is a "
                          "knapsack in several resources with jobs assigned to partitions, too large to solve exactly "
                          "per decision: use tetris or tetris-star, which pack every resource (docs/semantics.md "
                          "section 13)")
    sizes, unit = found
    cores = int(table["cores"][0])
    return (sizes * cores, int(table["idle_nodes"][0]) * cores) if unit == "nodes" else (sizes, int(obs["free"]))


class KnapsackAgent(Agent):
    """DRAS's Optimization baseline: each scheduling instance, start the subset of the first `window` queued jobs
    maximizing eq. (1) or (2) within the free processors (docs/agents.md); on nodes one job per decision."""

    kinds = (SELECT,)

    def __init__(self, objective: str = "capability", weights: Sequence[float] = (1 / 3, 1 / 3, 1 / 3),
                 window: int = 50, once_per_instant: bool = True, capacity_count: str = "decision",
                 min_wait: float = 1.0, capacity_time: str = "wait") -> None:
        if objective not in OBJECTIVES:
            raise ConfigError(f"unknown knapsack objective {objective!r}: use {' or '.join(OBJECTIVES)}")
        if len(weights) != 3:
            raise ConfigError(f"the capability objective takes three weights, got {weights!r}")
        if window < 1:
            raise ConfigError(f"window must be at least 1, got {window}")
        for name, value, allowed in (("capacity_time", capacity_time, CAPACITY_TIMES),
                                     ("capacity_count", capacity_count, CAPACITY_COUNTS)):
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        self.objective, self.capacity_count, self.capacity_time = objective, capacity_count, capacity_time
        self.weights, self.window, self.min_wait = tuple(float(w) for w in weights), int(window), float(min_wait)
        self.once_per_instant = once_per_instant
        self._started_at: tuple[int, int] | None = None  # (time, step) of the last nonempty pick
        self._rest: list[int] = []  # on nodes: the subset's jobs not yet named, at _started_at's time
        self.last_value: float | None = None

    def act(self, decision: Decision) -> Action:
        while self._rest and decision.time == self._started_at[0]:
            job = self._rest.pop(0)
            if job in decision.candidates:
                return [job]
        if (self.once_per_instant and decision.can_wait and self._started_at is not None
                and decision.time == self._started_at[0] and decision.step > self._started_at[1]):
            return None
        obs = decision.observation
        queue = obs["queue"]
        ids = queue["id"]
        pickable = min(self.window, len(ids))
        must_start = not decision.can_wait
        sizes, free = _on_nodes(obs, pickable) if "machine" in obs else (queue["size"], int(obs["free"]))
        if self.objective == "capability":
            waits = queue["wait"]
            value, picks = best_capability(
                waits[:pickable], sizes[:pickable], t_max=float(max(waits, default=0)),
                procs=int(obs["procs"]), free=free, weights=self.weights, nonempty=must_start)
        else:
            times = queue["wait"] if self.capacity_time == "wait" else queue["estimate"]
            value, picks = best_capacity(times, sizes, pickable, free=free,
                                         count=self.capacity_count, min_wait=self.min_wait, nonempty=must_start)
        self.last_value = value
        if not picks:
            return None if decision.can_wait else int(ids[0])
        self._started_at = (decision.time, decision.step)
        chosen = [int(ids[i]) for i in picks]
        if "machine" in obs:
            chosen, self._rest = chosen[:1], chosen[1:]
        return chosen

    def on_episode_end(self, metrics) -> None:
        self._started_at, self._rest = None, []
