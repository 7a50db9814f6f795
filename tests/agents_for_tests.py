"""Small agents for the protocol tests, importable by `hpcgym agent tests.agents_for_tests:NAME`
(run with the repository root as working directory).

Environment variables let a test observe or steer an agent that runs in another process:
HPCGYM_TEST_MARKER (a file touched once the agent is mid-episode), HPCGYM_TEST_LOG (a file the
inspector writes the job ids it rejected to, one per line, at the episode's end).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from hpcgym.agents.base import Agent, PriorityAgent
from hpcgym.agents.rlschert import RuleKill
from hpcgym.environment.decisions import INSPECT, Decision


def _touch_marker() -> None:
    marker = os.environ.get("HPCGYM_TEST_MARKER")
    if marker:
        Path(marker).touch()


class HalfClusterInspector(Agent):
    """Rejects a pick holding a job larger than half the cluster the first time it sees that job;
    accepts everything else. Deterministic, so an in-process run predicts a remote one."""

    kinds = (INSPECT,)

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.rejected: list[int] = []   # job ids, once per rejection of a pick holding them

    def act(self, decision: Decision) -> bool:
        obs = decision.observation
        size = dict(zip(obs["queue"]["id"], obs["queue"]["size"]))
        picks = [int(j) for j in decision.context["jobs"]]
        big = [j for j in picks if 2 * size[j] > obs["procs"] and j not in self.seen]
        self.seen.update(picks)
        if big:
            self.rejected.extend(picks)
            return False
        return True

    def on_episode_end(self, metrics: dict[str, Any]) -> None:
        log = os.environ.get("HPCGYM_TEST_LOG")
        if log:
            Path(log).write_text("".join(f"{j}\n" for j in self.rejected))


class StuckInspector(HalfClusterInspector):
    """Answers three decisions, then touches the marker and hangs (until the test kills it)."""

    def act(self, decision: Decision) -> bool:
        if len(self.seen) >= 3:
            _touch_marker()
            time.sleep(3600)
        return super().act(decision)


class SlowSJF(PriorityAgent):
    """SJF taking 50 ms per decision; touches the marker at its first decision."""

    def __init__(self) -> None:
        super().__init__("sjf")

    def act(self, decision: Decision) -> Any:
        _touch_marker()
        time.sleep(0.05)
        return super().act(decision)


class PredictionLog(RuleKill):
    """The rule-based kill, writing what it saw of the predictions (per decision: time, running
    ids, pre-run and current predictions, the queue's predictions) as JSON to HPCGYM_TEST_LOG at
    the episode's end, so a test compares what a remote agent saw with an in-process run."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[Any]] = []

    def act(self, decision: Decision) -> Any:
        obs = decision.observation
        r = obs["running"]
        self.seen.append([decision.time, r["id"], r["prediction0"], r["prediction"], obs["queue"]["prediction"]])
        return super().act(decision)

    def on_episode_end(self, metrics: dict[str, Any]) -> None:
        log = os.environ.get("HPCGYM_TEST_LOG")
        if log:
            Path(log).write_text(json.dumps(self.seen))


def write_trace(path: Path, jobs: int = 60, procs: int = 32, seed: int = 1, longest: int = 3000) -> Path:
    """A small random SWF trace where many jobs exceed half the cluster and SJF differs from FCFS
    (run times 10 s to `longest`)."""
    import random

    rng = random.Random(seed)
    lines, t = [f"; MaxProcs: {procs}"], 0
    for job in range(1, jobs + 1):
        t += rng.choice([0, 0, 5, 30, 120, 400])
        run = rng.randint(10, longest)
        requested = run + rng.choice([0, 60, 600, 3000])
        size = rng.choice([1, 2, 4, 8, 12, 16, 20, 24, 32])
        size = min(size, procs)
        lines.append(f"{job} {t} -1 {run} {size} -1 -1 {size} {requested} -1 1 {rng.randint(1, 5)} 1 1 1 1 -1 -1")
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)
