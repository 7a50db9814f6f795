"""Greedy packing agents: start jobs one after another, each chosen by a rule among the jobs that
still fit the free processors, until none fits. They answer a select decision with the whole
list (started together), never reserve, and are meant for `--backfill none`, as in DRAS. On a
machine of nodes (docs/semantics.md section 13) select takes one job at a time, so they name the
one they would choose first and are asked again once it starts; Tetris then scores every resource.

- BinPackingAgent: the largest job that fits (DRAS section 5.1, "BinPacking").
- RandomPackingAgent: a uniformly random job that fits (DRAS section 5.1, "Random").
- TetrisAgent: the job with the highest alignment score, the dot product of its normalised
  demand and the normalised free resources (Grandl et al., SIGCOMM 2014; RLSchert's "Tetris").
- TetrisStarAgent: a weighted sum of that score and a preference for short jobs (DeepRM,
  Mao et al., HotNets 2016, as used by RLSchert: "Tetris*").

Ties, everywhere: the earlier submit, then the lower job id (the project's rule).
"""

from __future__ import annotations

import numpy as np

from ..environment.decisions import SELECT, Action, Decision
from ..environment.errors import ConfigError
from ..environment.machine import REQUESTS, machine_from_table, unit_options
from .base import Agent



def node_fit(obs: dict, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """On nodes, for the first n queued jobs: whether each fits now in the first partition that can
    hold it (a whole-node job: on idle nodes; else in the partition's free cores, memory and GPUs
    together, which fragmentation may still refuse: the pick is then reserved), the cores it holds
    there, and its Tetris alignment (Grandl et al.): sum over the partition's resources of
    demand / capacity x free / capacity."""
    table, queue = obs["machine"], obs["queue"]
    machine = machine_from_table(table)
    columns = (np.asarray(queue[c][:n]) for c in REQUESTS)
    free = np.array([table["free_cores"], table["free_memory"], table["free_gpus"]], dtype=np.float64).T
    capacity = np.array([[p.nodes * p.cores, p.nodes * p.memory, p.nodes * p.gpus] for p in machine.partitions],
                        dtype=np.float64)
    fits, cores, align = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64), np.zeros(n)
    for i, options in enumerate(unit_options(machine, *columns)):
        for p, units, *shape in options:
            demand = units * np.array(shape, dtype=np.float64)
            if table["idle_nodes"][p] >= units if queue["exclusive"][i] else (demand <= free[p]).all():
                fits[i], cores[i] = True, int(demand[0])
                align[i] = float(np.sum(np.divide(demand * free[p], capacity[p] ** 2, out=np.zeros(3),
                                                  where=capacity[p] > 0)))
                break
    return fits, cores, align


class PackingAgent(Agent):
    """Base of the greedy packers: `pick` chooses the next job among those that fit."""

    kinds = (SELECT,)

    def __init__(self, window: int | None = None) -> None:
        if window is not None and window < 1:
            raise ConfigError(f"window must be at least 1, got {window}")
        self.window = window

    def act(self, decision: Decision) -> Action:
        obs = decision.observation
        queue = obs["queue"]
        n = len(queue["id"]) if self.window is None else min(self.window, len(queue["id"]))
        jobs = {name: np.asarray(queue[name][:n]) for name in ("id", "submit", "size", "requested", "estimate")}
        if "machine" in obs:
            fits, jobs["size"], jobs["alignment"] = node_fit(obs, n)
            fitting = np.flatnonzero(fits)
            picks = [self.pick(jobs, fitting, int(obs["free"]), int(obs["procs"]))] if len(fitting) else []
        else:
            picks = self.pack(jobs, int(obs["free"]), int(obs["procs"]))
        if not picks:
            # Nothing fits. The simulation cannot wait only when nothing runs, so then every job
            # fits; a job that does not is named alone, which reserves it (for completeness).
            return None if decision.can_wait else int(queue["id"][0])
        return [int(jobs["id"][i]) for i in picks]

    def pack(self, jobs: dict[str, np.ndarray], free: int, procs: int) -> list[int]:
        """Positions of the jobs to start, in the order they were chosen."""
        left = list(range(len(jobs["id"])))
        picks: list[int] = []
        size = jobs["size"]
        while True:
            fitting = [i for i in left if size[i] <= free]
            if not fitting:
                return picks
            i = self.pick(jobs, np.asarray(fitting), free, procs)
            picks.append(i)
            left.remove(i)
            free -= int(size[i])

    def pick(self, jobs: dict[str, np.ndarray], fitting: np.ndarray, free: int, procs: int) -> int:
        raise NotImplementedError  # pragma: no cover


def _best(scores: np.ndarray, jobs: dict[str, np.ndarray], fitting: np.ndarray) -> int:
    """The fitting job with the highest score; ties to the earlier submit, then the lower id."""
    order = np.lexsort((jobs["id"][fitting], jobs["submit"][fitting], -scores))
    return int(fitting[order[0]])


class BinPackingAgent(PackingAgent):
    """DRAS's BinPacking: repeatedly start the largest job that fits the free processors, until
    none fits. Equivalent to one first-fit scan of the window sorted by size (largest first),
    since the free processors only shrink. O(n log n) per decision for a window of n jobs."""

    def pick(self, jobs: dict[str, np.ndarray], fitting: np.ndarray, free: int, procs: int) -> int:
        return _best(jobs["size"][fitting].astype(np.float64), jobs, fitting)

    def pack(self, jobs: dict[str, np.ndarray], free: int, procs: int) -> list[int]:
        order = np.lexsort((jobs["id"], jobs["submit"], -jobs["size"]))
        picks = []
        for i in order.tolist():
            s = int(jobs["size"][i])
            if s <= free:
                picks.append(i)
                free -= s
        return picks


class RandomPackingAgent(PackingAgent):
    """DRAS's Random: repeatedly start a uniformly random job among those that fit: one seeded
    permutation of the window per decision, scanned first fit (the same distribution: a job
    skipped once never fits later in the same decision)."""

    def __init__(self, seed: int = 0, window: int | None = None) -> None:
        super().__init__(window)
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def pick(self, jobs: dict[str, np.ndarray], fitting: np.ndarray, free: int, procs: int) -> int:
        return int(fitting[self.rng.integers(len(fitting))])

    def pack(self, jobs: dict[str, np.ndarray], free: int, procs: int) -> list[int]:
        size = jobs["size"]
        if not (size <= free).any():
            return []
        picks = []
        for i in self.rng.permutation(len(size)).tolist():
            s = int(size[i])
            if s <= free:
                picks.append(i)
                free -= s
        return picks


def alignment(sizes: np.ndarray, free: int, procs: int) -> np.ndarray:
    """Tetris's alignment score with one resource: (n_j / N) * (F / N), the dot product of the
    job's demand and the free processors, both as fractions of the cluster."""
    return (np.asarray(sizes, dtype=np.float64) / procs) * (free / procs)


class TetrisStarAgent(PackingAgent):
    """Tetris*: repeatedly start the fitting job with the highest
    knob * a_j / max_i a_i + (1 - knob) * min_i r_i / r_j (a_j the alignment, r_j the requested
    time or, `time="estimate"`, the estimate): each term scaled so that its best job scores 1,
    so `knob` weighs packing against short jobs on one scale (DeepRM's Tetris*, Mao et al.,
    HotNets 2016, is unnormalised; RLSchert names the balance). O(n^2) per decision."""

    def __init__(self, knob: float = 0.5, time: str = "requested", window: int | None = None) -> None:
        super().__init__(window)
        if not 0.0 <= knob <= 1.0:
            raise ConfigError(f"knob must be within [0, 1], got {knob}")
        if time not in ("requested", "estimate"):
            raise ConfigError(f"time must be requested or estimate, got {time!r}")
        self.knob = float(knob)
        self.time = time

    def scores(self, jobs: dict[str, np.ndarray], fitting: np.ndarray, free: int, procs: int) -> np.ndarray:
        a = self.alignment(jobs, fitting, free, procs)
        times = np.maximum(np.asarray(jobs[self.time][fitting], dtype=np.float64), 1.0)
        return self.knob * a / a.max() + (1.0 - self.knob) * times.min() / times

    @staticmethod
    def alignment(jobs: dict[str, np.ndarray], fitting: np.ndarray, free: int, procs: int) -> np.ndarray:
        """One resource's (the pool), or every resource's on nodes (`node_fit`)."""
        return jobs["alignment"][fitting] if "alignment" in jobs else alignment(jobs["size"][fitting], free, procs)

    def pick(self, jobs: dict[str, np.ndarray], fitting: np.ndarray, free: int, procs: int) -> int:
        return _best(self.scores(jobs, fitting, free, procs), jobs, fitting)


class TetrisAgent(TetrisStarAgent):
    """Tetris (Grandl et al., SIGCOMM 2014, packing score only). On the pool the free term is
    common to all jobs, so it picks as BinPacking does; kept to name RLSchert's comparison set."""

    def __init__(self, window: int | None = None) -> None:
        super().__init__(knob=1.0, window=window)

    def scores(self, jobs: dict[str, np.ndarray], fitting: np.ndarray, free: int, procs: int) -> np.ndarray:
        return self.alignment(jobs, fitting, free, procs)
