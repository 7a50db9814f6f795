"""Priority policies: one table of score functions (lowest runs first; ties to the earlier submit, then the lower id;
docs/semantics.md section 9) that the simulator's `select` default and `PriorityAgent` both serve."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .errors import ConfigError

Jobs = Mapping[str, np.ndarray]  #: Columns a score function reads: job id, submit, requested time, size (all arrays).
ScoreFn = Callable[[Jobs, int, int], np.ndarray]


@dataclass(frozen=True)
class PriorityPolicy:
    """A named priority order; `dynamic` ones depend on the time and are re-sorted at every pass."""

    name: str
    formula: str
    score: ScoreFn
    dynamic: bool = False
    seed: int = 0
    #: Per-job columns derived once from the whole workload (e.g. each user's share of its work).
    prepare: Callable[[Any], Jobs] | None = None
    #: Whether the score reads `usage`: the job's user's decayed recent usage, as a share of all users'.
    usage: bool = False

    @property
    def env_only(self) -> bool:
        """Whether it reads what only the simulation knows, so no agent can apply it to a window."""
        return self.usage or self.prepare is not None

    def scores(self, jobs: Jobs, now: int = 0) -> np.ndarray:
        """Scores of the given jobs at time `now` (lower runs first)."""
        return np.asarray(self.score(jobs, now, self.seed), dtype=np.float64)

    def order(self, jobs: Jobs, now: int = 0) -> np.ndarray:
        """Positions of `jobs` sorted best first; ties go to the earlier submit, then lower id."""
        scores = self.scores(jobs, now)
        return np.lexsort((np.asarray(jobs["id"]), np.asarray(jobs["submit"]), scores))

    def with_seed(self, seed: int) -> PriorityPolicy:
        return replace(self, seed=seed)


def _f(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def _log10_submit(jobs: Jobs) -> np.ndarray:
    # A submit time of 0 would give log10(0); the F-family treats it as 1 s.
    return np.log10(np.maximum(_f(jobs["submit"]), 1.0))


def _wait(jobs: Jobs, now: int) -> np.ndarray:
    return np.maximum(now - _f(jobs["submit"]), 0.0)


def _expansion(jobs: Jobs, now: int) -> np.ndarray:
    """SchedInspector's "expansion" score (sexp/lexp): (wait + requested time) per processor."""
    return (_wait(jobs, now) + _f(jobs["requested"])) / _f(jobs["size"])


def _mix64(values: np.ndarray, seed: int) -> np.ndarray:
    """A splitmix64 hash: a random but reproducible key per job id, wherever it is computed."""
    with np.errstate(over="ignore"):
        x = values.astype(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64)


#: Slurm's defaults: usage decays with a half-life of 7 days, the age factor saturates at 7 days.
USAGE_HALF_LIFE = 7 * 86400
MAX_AGE = 7 * 86400
#: The weights of the multifactor policy's four factors (SchedInspector section 4.5: all 1000).
MULTIFACTOR_WEIGHTS = (1000.0, 1000.0, 1000.0, 1000.0)


def _multifactor_columns(workload: Any) -> Jobs:
    """Each job's user's share of the workload's work, its queue's share scaled so the largest is 1 (partition
    factor), and 1 - requested / the longest request (job-attribute factor)."""
    work = workload.run.astype(np.float64) * workload.size
    total = work.sum() or 1.0
    _, by_user = np.unique(workload.user, return_inverse=True)
    user_share = np.bincount(by_user, weights=work) / total
    _, by_queue = np.unique(workload.queue, return_inverse=True)
    queue_share = np.bincount(by_queue, weights=work)
    partition = queue_share / (queue_share.max() or 1.0)
    longest = float(workload.requested.max()) if len(workload) else 1.0
    return {"user_share": np.maximum(user_share[by_user], 1e-12), "partition": partition[by_queue],
            "attribute": 1.0 - _f(workload.requested) / max(longest, 1.0)}


def multifactor_score(weights: tuple[float, float, float, float] = MULTIFACTOR_WEIGHTS) -> ScoreFn:
    """Slurm's multifactor priority as SchedInspector's section 4.5 sets it up (docs/semantics.md section 9):
    age, fair share 2^(-usage / share), job attribute and partition; the highest priority runs first."""
    w_age, w_fair, w_attr, w_part = weights

    def score(jobs: Jobs, now: int, seed: int) -> np.ndarray:
        age = np.minimum(_wait(jobs, now) / MAX_AGE, 1.0)
        fair = np.exp2(-_f(jobs["usage"]) / _f(jobs["user_share"]))
        return -(w_age * age + w_fair * fair + w_attr * _f(jobs["attribute"]) + w_part * _f(jobs["partition"]))

    return score


POLICIES: dict[str, PriorityPolicy] = {
    p.name: p
    for p in (
        PriorityPolicy("fcfs", "s", lambda j, now, seed: _f(j["submit"])),
        PriorityPolicy("lcfs", "-s", lambda j, now, seed: -_f(j["submit"])),
        PriorityPolicy("sjf", "r", lambda j, now, seed: _f(j["requested"])),
        PriorityPolicy("ljf", "-r", lambda j, now, seed: -_f(j["requested"])),
        PriorityPolicy("sqf", "n", lambda j, now, seed: _f(j["size"])),
        PriorityPolicy("saf", "r * n", lambda j, now, seed: _f(j["requested"]) * _f(j["size"])),
        PriorityPolicy("srf", "r / n", lambda j, now, seed: _f(j["requested"]) / _f(j["size"])),
        PriorityPolicy("largest", "-n", lambda j, now, seed: -_f(j["size"])),
        PriorityPolicy("laf", "-r * n", lambda j, now, seed: -_f(j["requested"]) * _f(j["size"])),
        PriorityPolicy("lrf", "-r / n", lambda j, now, seed: -_f(j["requested"]) / _f(j["size"])),
        PriorityPolicy("sexp", "(w + r) / n", lambda j, now, seed: _expansion(j, now), dynamic=True),
        PriorityPolicy("lexp", "-(w + r) / n", lambda j, now, seed: -_expansion(j, now), dynamic=True),
        PriorityPolicy("wfp3", "-(w / r)^3 * n",
                       lambda j, now, seed: -((_wait(j, now) / _f(j["requested"])) ** 3) * _f(j["size"]), dynamic=True),
        PriorityPolicy("unicef", "-w / (log2(max(n, 2)) * r)", lambda j, now, seed: -_wait(j, now)
                       / (np.log2(np.maximum(_f(j["size"]), 2.0)) * _f(j["requested"])), dynamic=True),
        PriorityPolicy("f1", "log10(r) * n + 870 * log10(s)",
                       lambda j, now, seed: np.log10(_f(j["requested"])) * _f(j["size"]) + 870 * _log10_submit(j)),
        PriorityPolicy("f2", "sqrt(r) * n + 25600 * log10(s)",
                       lambda j, now, seed: np.sqrt(_f(j["requested"])) * _f(j["size"]) + 25600 * _log10_submit(j)),
        PriorityPolicy("f3", "r * n + 6860000 * log10(s)",
                       lambda j, now, seed: _f(j["requested"]) * _f(j["size"]) + 6860000 * _log10_submit(j)),
        PriorityPolicy("f4", "r * sqrt(n) + 530000 * log10(s)",
                       lambda j, now, seed: _f(j["requested"]) * np.sqrt(_f(j["size"])) + 530000 * _log10_submit(j)),
        PriorityPolicy("random", "hash(seed, job id)", lambda j, now, seed: _mix64(j["id"], seed)),
        PriorityPolicy("multifactor", "-1000 * (age + fairshare + attribute + partition) (Slurm)",
                       multifactor_score(), dynamic=True, prepare=_multifactor_columns, usage=True),
    )
}


def get_policy(name: str, seed: int = 0) -> PriorityPolicy:
    """The priority policy called `name` (case-insensitive), seeded where it draws."""
    try:
        return POLICIES[name.lower()].with_seed(seed)
    except KeyError:
        raise ConfigError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}") from None
