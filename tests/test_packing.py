"""The packing agents (agents/packing.py) and DRAS's Optimization baseline (agents/knapsack.py).

1. exactness    -- the knapsack DP agrees with brute force over every subset on small seeded
                   random instances (up to 12 jobs), for capability with random weights and
                   capacity under both readings of its count;
2. hand-worked  -- BinPacking, Tetris, Tetris* and both knapsack objectives on small queues whose
                   answers are computed by hand in the docstrings;
3. episodes     -- every agent runs a whole episode (300 generated jobs, 64 processors,
                   backfill none), every action fits the free processors and names only
                   candidates, every job completes;
4. determinism  -- RandomPackingAgent gives the same episode for the same seed;
5. names        -- the built-in names load the right agents, priority names still work.

Runtime budget: a few seconds on 2 cores.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from hpcgym.agents.base import Agent, PriorityAgent
from hpcgym.agents.knapsack import KnapsackAgent, best_capability, best_capacity, subset_table
from hpcgym.agents.packing import BinPackingAgent, RandomPackingAgent, TetrisAgent, TetrisStarAgent
from hpcgym.agents.runtime import BUILTIN_AGENTS, load_agent
from hpcgym.environment.config import SimConfig
from hpcgym.environment.decisions import SELECT, Decision
from hpcgym.environment.errors import ConfigError, HpcgymError
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import load_workload

TOL = 1e-9


# ----------------------------------------------------------------- helpers
def all_subsets(n: int) -> np.ndarray:
    """Every subset of n items as a boolean row (2^n rows)."""
    return ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(bool)


def capability_values(masks, waits, sizes, t_max, procs, free, w) -> np.ndarray:
    """DRAS eq. (1) for every subset, straight from the formula (means of an empty set: 0)."""
    k = masks.sum(axis=1)
    total_wait = masks @ np.asarray(waits, float)
    total_size = masks @ np.asarray(sizes, float)
    kk = np.maximum(k, 1)
    wait_term = (total_wait / kk) / t_max if t_max > 0 else 0.0
    value = w[0] * wait_term + w[1] * (total_size / kk) / procs + w[2] * (procs - free + total_size) / procs
    return np.where(k > 0, value, w[2] * (procs - free) / procs)


def capacity_values(masks, waits, count) -> np.ndarray:
    """DRAS eq. (2) for every subset of the whole queue: -(sum of 1/t over the jobs left) / c."""
    u = 1.0 / np.maximum(np.asarray(waits, float), 1.0)
    left = (~masks) @ u
    if count == "decision":
        return -left / masks.shape[1]
    remaining = (~masks).sum(axis=1)
    return np.where(remaining > 0, -left / np.maximum(remaining, 1), 0.0)


def make_decision(jobs: list[tuple[int, int, int, int]], *, free: int, procs: int, time: int = 100,
                  step: int = 1, can_wait: bool = True, estimates: list[int] | None = None) -> Decision:
    """A select decision over a queue of (id, submit, size, requested) rows, no simulation."""
    ids = [j[0] for j in jobs]
    decision = Decision(None, SELECT, time, step, ids, {}, can_wait)  # type: ignore[arg-type]
    decision._observation = {
        "time": time, "procs": procs, "free": free, "queue_length": len(jobs),
        "queue": {"id": ids, "submit": [j[1] for j in jobs], "size": [j[2] for j in jobs],
                  "requested": [j[3] for j in jobs],
                  "estimate": estimates if estimates is not None else [j[3] for j in jobs],
                  "wait": [time - j[1] for j in jobs], "rejections": [0] * len(jobs), "user": [0] * len(jobs)},
        "running": {"id": [], "start": [], "size": [], "requested": [], "estimated_end": []},
        "context": {},
    }
    return decision


def random_instance(rng: np.random.Generator, n: int):
    procs = int(rng.integers(4, 80))
    free = int(rng.integers(0, procs + 1))
    if rng.random() < 0.3:  # sizes sharing a factor, so the gcd scaling is exercised
        sizes = (4 * rng.integers(1, max(2, procs // 4), n)).tolist()
    else:
        sizes = rng.integers(1, procs + 1, n).tolist()
    waits = rng.integers(0, 200, n).tolist()
    if rng.random() < 0.2:  # many equal waits, including 0
        waits = rng.integers(0, 3, n).tolist()
    return procs, free, sizes, waits


# ----------------------------------------------------------------- 1. exactness
def test_subset_table_matches_brute_force():
    rng = np.random.default_rng(11)
    for _ in range(40):
        n = int(rng.integers(1, 9))
        sizes = rng.integers(1, 7, n)
        values = rng.integers(0, 20, n).astype(float)
        capacity = int(rng.integers(0, 20))
        best, _ = subset_table(sizes, values, capacity, n)
        masks = all_subsets(n)
        k, c, v = masks.sum(1), masks @ sizes, masks @ values
        for kk in range(n + 1):
            for cc in range(capacity + 1):
                hit = (k == kk) & (c == cc)
                expected = v[hit].max() if hit.any() else -np.inf
                assert best[kk, cc] == expected, (kk, cc)


def test_capability_dp_equals_brute_force():
    """eq. (1), random weights (Dirichlet, and some with zero terms), up to 12 jobs, t_max taken
    over a queue longer than the pickable window."""
    rng = np.random.default_rng(2024)
    for trial in range(300):
        n = int(rng.integers(1, 13))
        procs, free, sizes, waits = random_instance(rng, n)
        others = rng.integers(0, 400, int(rng.integers(0, 4))).tolist()  # visible, not pickable
        t_max = float(max(waits + others))
        w = rng.dirichlet([1, 1, 1]) if trial % 5 else rng.random(3) * (rng.random(3) < 0.5)
        value, picks = best_capability(waits, sizes, t_max=t_max, procs=procs, free=free, weights=w)
        masks = all_subsets(n)
        values = capability_values(masks, waits, sizes, t_max, procs, free, w)
        feasible = masks @ np.asarray(sizes) <= free
        assert value == pytest.approx(values[feasible].max(), abs=TOL), trial
        assert sum(sizes[i] for i in picks) <= free and len(set(picks)) == len(picks)
        mask = np.zeros(n, bool)
        mask[picks] = True
        assert capability_values(mask[None], waits, sizes, t_max, procs, free, w)[0] == pytest.approx(value, abs=TOL)
        nonempty_value, nonempty_picks = best_capability(waits, sizes, t_max=t_max, procs=procs, free=free,
                                                         weights=w, nonempty=True)
        nonempty = feasible & masks.any(axis=1)
        if nonempty.any():
            assert nonempty_picks and nonempty_value == pytest.approx(values[nonempty].max(), abs=TOL)


@pytest.mark.parametrize("count", ["decision", "remaining"])
def test_capacity_dp_equals_brute_force(count):
    """eq. (2) over the whole visible queue; only the first `pickable` jobs may be picked."""
    rng = np.random.default_rng(7 if count == "decision" else 8)
    for trial in range(250):
        queue = int(rng.integers(1, 13))
        pickable = int(rng.integers(1, queue + 1))
        procs, free, sizes, waits = random_instance(rng, queue)
        value, picks = best_capacity(waits, sizes, pickable, free=free, count=count)
        masks = all_subsets(queue)
        masks = masks[~masks[:, pickable:].any(axis=1)]  # subsets of the pickable jobs
        values = capacity_values(masks, waits, count)
        feasible = masks @ np.asarray(sizes) <= free
        assert value == pytest.approx(values[feasible].max(), abs=TOL), trial
        assert all(i < pickable for i in picks) and sum(sizes[i] for i in picks) <= free
        mask = np.zeros(queue, bool)
        mask[picks] = True
        assert capacity_values(mask[None], waits, count)[0] == pytest.approx(value, abs=TOL)


# ----------------------------------------------------------------- 2. hand-worked cases
#: (id, submit, size, requested); 16 processors, 10 free, decided at t = 100.
QUEUE = [(1, 0, 4, 100), (2, 5, 6, 50), (3, 6, 3, 10), (4, 2, 6, 200), (5, 7, 2, 20)]


def test_binpacking_by_hand():
    """Largest first, ties to the earlier submit: order 4 (6, s=2), 2 (6, s=5), 1 (4), 3 (3), 5 (2).
    Free 10: take 4 (4 left); 2 needs 6, no; take 1 (0 left); 3 and 5 do not fit. -> [4, 1].
    Equal size and submit go to the lower id: 7 and 6 (size 5, s=1) on 5 free processors -> [6]."""
    assert BinPackingAgent().act(make_decision(QUEUE, free=10, procs=16)) == [4, 1]
    assert BinPackingAgent().act(make_decision([(7, 1, 5, 9), (6, 1, 5, 9)], free=5, procs=16)) == [6]
    assert BinPackingAgent().act(make_decision(QUEUE, free=1, procs=16)) is None


def test_tetris_by_hand():
    """Alignment a_j = (n_j / 16) * (F / 16). F = 10: a = 40, 60, 30, 60, 20 (/256) for jobs 1..5;
    4 and 2 tie at 60/256, 4 submitted earlier -> 4; F = 4: a = 16, 12, 8 (/256) for 1, 3, 5 (2 no
    longer fits) -> 1; F = 0: stop. -> [4, 1], the same as BinPacking (one resource)."""
    assert TetrisAgent().act(make_decision(QUEUE, free=10, procs=16)) == [4, 1]


def test_tetris_star_by_hand():
    """knob 0.5, score = 0.5 * n_j / max n + 0.5 * min r / r_j over the jobs that fit.
    F = 10, all fit, max n = 6, min r = 10:
      1: 0.5*4/6 + 0.5*10/100 = 0.383; 2: 0.5 + 0.5*10/50 = 0.600; 3: 0.25 + 0.5 = 0.750;
      4: 0.5 + 0.5*10/200 = 0.525; 5: 0.5*2/6 + 0.5*10/20 = 0.417  -> 3 (F = 7).
    F = 7, jobs 1, 2, 4, 5 fit, max n = 6, min r = 20:
      1: 0.333 + 0.5*20/100 = 0.433; 2: 0.5 + 0.5*20/50 = 0.700; 4: 0.5 + 0.5*20/200 = 0.550;
      5: 0.167 + 0.5 = 0.667  -> 2 (F = 1); nothing fits.  -> [3, 2].
    knob 0 is shortest-requested first: 3 (r 10, F 7), 5 (r 20, F 5), 1 (r 100, F 1) -> [3, 5, 1].
    With time="estimate" it reads the estimate column instead of the requested one."""
    assert TetrisStarAgent(knob=0.5).act(make_decision(QUEUE, free=10, procs=16)) == [3, 2]
    assert TetrisStarAgent(knob=0.0).act(make_decision(QUEUE, free=10, procs=16)) == [3, 5, 1]
    assert TetrisStarAgent(knob=1.0).act(make_decision(QUEUE, free=10, procs=16)) == [4, 1]
    estimates = [100, 50, 500, 200, 20]  # job 3 now looks long, job 5 shortest
    decision = make_decision(QUEUE, free=10, procs=16, estimates=estimates)
    assert TetrisStarAgent(knob=0.0, time="estimate").act(decision) == [5, 2]


def test_knapsack_capability_by_hand():
    """10 processors, all free, waits 100, 0, 50, sizes 6, 5, 4, t_max 100, weights 1/3:
      {1}: (1 + 0.6 + 0.6)/3 = 0.733;  {2}: (0 + 0.5 + 0.5)/3 = 0.333;  {3}: (0.5 + 0.4 + 0.4)/3 = 0.433
      {1,3}: (0.75 + 0.5 + 1.0)/3 = 0.750;  {2,3}: (0.25 + 0.45 + 0.9)/3 = 0.533;  {1,2}: 11 > 10.
    -> jobs 1 and 3."""
    queue = [(1, 0, 6, 10), (2, 100, 5, 10), (3, 50, 4, 10)]
    agent = KnapsackAgent("capability")
    assert agent.act(make_decision(queue, free=10, procs=10)) == [1, 3]
    assert agent.last_value == pytest.approx(0.75)


def test_knapsack_capacity_by_hand():
    """Waits 100, 0, 50 (1/t = 0.01, 1, 0.02; a wait of 0 counts as 1 s), sizes 6, 5, 4, 10 free:
    the largest sum of 1/t that fits is {2, 3} = 1.02 -> jobs 2 and 3 under both counts.
    Then waits 100, 50 (sizes 6, 6, pickable) and a just-submitted job of 12 (does not fit), 10 free:
      count=decision: {1}: -(0.02 + 1)/3, {2}: -(0.01 + 1)/3 (best), {}: -1.03/3   -> [2]
      count=remaining: {}: -1.03/3 = -0.343 (best), {1}: -1.02/2, {2}: -1.01/2   -> wait."""
    queue = [(1, 0, 6, 10), (2, 100, 5, 10), (3, 50, 4, 10)]
    for count in ("decision", "remaining"):
        assert KnapsackAgent("capacity", capacity_count=count).act(make_decision(queue, free=10, procs=12)) == [2, 3]
    queue = [(1, 0, 6, 10), (2, 50, 6, 10), (3, 100, 12, 10)]
    assert KnapsackAgent("capacity").act(make_decision(queue, free=10, procs=12)) == [2]
    remaining = KnapsackAgent("capacity", capacity_count="remaining")
    assert remaining.act(make_decision(queue, free=10, procs=12)) is None
    assert remaining.last_value == pytest.approx(-1.03 / 3)
    # When the simulation cannot wait, the best nonempty set starts anyway.
    assert remaining.act(make_decision(queue, free=10, procs=12, can_wait=False)) == [2]


def test_knapsack_capacity_with_run_times_by_hand():
    """capacity_time="runtime": t_j is the estimate. Estimates 100, 2000, 400 (1/t = 0.01, 0.0005,
    0.0025), sizes 6, 5, 4, 10 free: {1, 3} = 0.0125 beats {1} = 0.01, {2, 3} = 0.003 and {1, 2}
    (11 > 10) -> jobs 1 and 3; by waits (100, 0 -> 1 s, 50) it would be {2, 3}."""
    queue = [(1, 0, 6, 100), (2, 100, 5, 2000), (3, 50, 4, 400)]
    assert KnapsackAgent("capacity", capacity_time="runtime").act(make_decision(queue, free=10, procs=12)) == [1, 3]
    assert KnapsackAgent("capacity").act(make_decision(queue, free=10, procs=12)) == [2, 3]
    with pytest.raises(HpcgymError, match="capacity_time"):
        KnapsackAgent("capacity", capacity_time="queue")


def test_knapsack_window_and_once_per_instant():
    """Only the first `window` jobs are picked; a second select at the same instant waits."""
    queue = [(1, 0, 8, 10), (2, 10, 1, 10), (3, 20, 1, 10)]
    agent = KnapsackAgent("capability", window=1)
    assert agent.act(make_decision(queue, free=10, procs=10, step=1)) == [1]
    assert agent.act(make_decision(queue[1:], free=2, procs=10, step=2)) is None          # same instant
    assert agent.act(make_decision(queue[1:], free=2, procs=10, time=101, step=3)) == [2]
    again = KnapsackAgent("capability", window=1, once_per_instant=False)
    again.act(make_decision(queue, free=10, procs=10, step=1))
    assert again.act(make_decision(queue[1:], free=2, procs=10, step=2)) == [2]


def test_theta_sized_decision():
    """N = 4360 (Theta), 50 jobs of 1..199 processors (gcd 1): the DP is 50 x 51 x 4361; it must
    still be exact in shape (fit the free processors) and quick. The bound is loose on purpose
    (a shared machine); docs/agents.md reports the measured times."""
    rng = np.random.default_rng(5)
    jobs = [(i, int(s), int(n), 3600) for i, (s, n) in
            enumerate(zip(rng.integers(0, 90000, 50), rng.integers(1, 200, 50)), start=1)]
    for objective in ("capability", "capacity"):
        agent = KnapsackAgent(objective)
        decision = make_decision(jobs, free=4360, procs=4360, time=100000)
        start = time.perf_counter()
        picks = agent.act(decision)
        assert time.perf_counter() - start < 2.0
        sizes = {j[0]: j[2] for j in jobs}
        assert picks and sum(sizes[j] for j in picks) <= 4360


# ----------------------------------------------------------------- 3. whole episodes
class Checked(Agent):
    """Wraps an agent; checks every action against its decision and counts starts per instant."""

    kinds = (SELECT,)

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.decisions = 0
        self.started = 0
        self.actions: list[Any] = []

    def act(self, decision: Decision):
        action = self.agent.act(decision)
        self.decisions += 1
        self.actions.append(action)
        obs = decision.observation
        if action is None or action == []:
            assert decision.can_wait
            return action
        ids = action if isinstance(action, list) else [action]
        assert len(set(ids)) == len(ids) and all(j in decision.candidates for j in ids)
        size = dict(zip(obs["queue"]["id"], obs["queue"]["size"]))
        assert sum(size[j] for j in ids) <= obs["free"], "a packing agent never reserves"
        self.started += len(ids)
        return action


AGENTS = {
    "knapsack": lambda: KnapsackAgent("capability"),
    "knapsack-weights": lambda: KnapsackAgent("capability", weights=(0.6, 0.1, 0.3), window=20),
    "knapsack-capacity": lambda: KnapsackAgent("capacity"),
    "knapsack-capacity-remaining": lambda: KnapsackAgent("capacity", capacity_count="remaining"),
    "binpacking": BinPackingAgent,
    "random-packing": lambda: RandomPackingAgent(seed=3),
    "tetris": TetrisAgent,
    "tetris-star": TetrisStarAgent,
}


@pytest.fixture(scope="module")
def workload():
    return load_workload({"generate_jobs": 300, "procs": 64}, 5)


@pytest.mark.parametrize("name", AGENTS)
def test_full_episode(name, workload):
    checked = Checked(AGENTS[name]())
    result = simulate(workload, SimConfig(backfill="none"), agents={"select": checked})
    assert result.summary["jobs"] == len(workload) == 300
    assert checked.started == 300  # every job started by this agent, exactly once
    jobs = result.jobs
    assert (jobs["start"] >= jobs["submit"]).all() and (jobs["end"] >= jobs["start"]).all()


def test_tetris_equals_binpacking_with_one_resource(workload):
    a = simulate(workload, SimConfig(backfill="none"), agents={"select": BinPackingAgent()})
    b = simulate(workload, SimConfig(backfill="none"), agents={"select": TetrisAgent()})
    assert (a.jobs["start"] == b.jobs["start"]).all()


# ----------------------------------------------------------------- 4. determinism
def test_random_packing_is_deterministic(workload):
    runs = []
    for seed in (9, 9, 10):
        checked = Checked(RandomPackingAgent(seed=seed))
        result = simulate(workload, SimConfig(backfill="none"), agents={"select": checked})
        runs.append((checked.actions, result.jobs["start"].tolist()))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    # The same decision sequence, replayed by hand, gives the same picks.
    decisions = [make_decision(QUEUE, free=f, procs=16) for f in (10, 7, 12, 16)]
    first, second = RandomPackingAgent(seed=1), RandomPackingAgent(seed=1)
    assert [first.act(d) for d in decisions] == [second.act(d) for d in decisions]


# ----------------------------------------------------------------- 5. names
def test_builtin_names():
    assert load_agent("knapsack").objective == "capability"
    assert load_agent("knapsack-capacity").objective == "capacity"
    assert isinstance(load_agent("binpacking"), BinPackingAgent)
    assert isinstance(load_agent("random-packing", seed=4), RandomPackingAgent)
    assert type(load_agent("tetris")) is TetrisAgent
    assert type(load_agent("Tetris-Star")) is TetrisStarAgent
    assert isinstance(load_agent("sjf"), PriorityAgent) and isinstance(load_agent("random"), PriorityAgent)
    assert load_agent("knapsack-capacity-runtime").capacity_time == "runtime"
    assert set(BUILTIN_AGENTS) == {"knapsack", "knapsack-capacity", "knapsack-capacity-runtime", "binpacking",
                                   "random-packing", "tetris", "tetris-star", "accept-all", "reject-large",
                                   "rlschert-rule", "rlschert-joint"}
    with pytest.raises(HpcgymError, match="knapsack"):
        load_agent("no-such-agent")


# ----------------------------------------------------------------- on nodes (docs/semantics.md section 13)
def _on_nodes(machine, rows):
    """(submit, run, cores, GPUs) per job, placed on `machine`."""
    from hpcgym.environment.machine import on_machine
    from hpcgym.environment.workload import Workload

    submit, run, size, gpus = (np.array(c) for c in zip(*rows))
    n = len(rows)
    return on_machine(Workload("hand", 1, np.arange(1, n + 1), submit, run, size, run, np.zeros(n, int), gpus=gpus),
                      machine)


def test_tetris_packs_every_resource_on_nodes():
    """Two nodes of 4 cores and 2 GPUs, all free; job 1 asks for 4 cores, job 2 for 2 cores and 2
    GPUs. Alignment, summed over resources of demand/capacity x free/capacity (by hand): job 1
    4/8 = 0.5, job 2 2/8 + 2/4 = 0.75, so Tetris names job 2 first (one resource: job 1, the
    larger), then job 1 once job 2 has started."""
    from hpcgym.environment.machine import Machine, Partition
    from hpcgym.environment.simulator import Simulation

    w = _on_nodes(Machine((Partition("g", 2, 4, 0, 2),)), [(0, 10, 4, 0), (0, 10, 2, 2)])
    sim = Simulation(w, SimConfig(backfill="none"), external={"select"})
    d, named = sim.reset(), []
    while d is not None:
        named += TetrisAgent().act(d)
        d = sim.step(named[-1:])
    assert named == [2, 1]
    assert TetrisAgent().act(make_decision([(1, 0, 4, 10), (2, 0, 2, 10)], free=8, procs=8)) == [1, 2]


def test_knapsack_on_whole_nodes_names_its_subset_one_job_at_a_time_and_refuses_several_resources():
    """Three idle 4-core nodes of whole-node jobs of 5, 4 and 3 cores: as one pool all three fit the
    12 cores, but 5 cores hold 2 nodes, so the jobs hold 8, 4 and 4 cores. Capability (waits all 0,
    by hand): {1, 2} and {1, 3} score (12/2 / 12 + 12/12) / 3 = 0.5, above {1} 0.444 and {2, 3}
    0.333; ties go to the earlier jobs: [1, 2], named one per decision. On the gpu-mixed machine a
    subset is a knapsack in several resources: refused, naming tetris."""
    from hpcgym.environment.machine import Machine, Partition
    from hpcgym.environment.simulator import Simulation

    w = _on_nodes(Machine((Partition("n", 3, 4),), exclusive=True), [(0, 10, 5, 0), (0, 10, 4, 0), (0, 10, 3, 0)])
    sim = Simulation(w, SimConfig(backfill="none"), external={"select"})
    agent, d, named = KnapsackAgent(), sim.reset(), []
    while d is not None and d.time == 0:
        action = agent.act(d)
        named += action or []
        d = sim.step(action)
    assert named == [1, 2]
    assert KnapsackAgent().act(make_decision([(1, 0, 5, 10), (2, 0, 4, 10), (3, 0, 3, 10)], free=12, procs=12,
                                             time=0)) == [1, 2, 3]
    mixed = Simulation(load_workload({"model": "gpu-mixed", "jobs": 50, "start": 0}), SimConfig(backfill="none"),
                       external={"select"})
    with pytest.raises(ConfigError, match="use tetris"):
        KnapsackAgent().act(mixed.reset())
