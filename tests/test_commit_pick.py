"""`commit_pick` (SchedInspector's committed accept) and `exact_requests` (its oracle requests), on
schedules worked out by hand.

Four processors, SJF, no backfilling, requests = run times. J1 (3 procs, 100 s) and J2 (4 procs,
150 s) arrive at 0, J3 (4 procs, 5 s) at 10. At 0 SJF picks J1, which starts, then J2, which does
not fit (1 processor free).

- Without commit_pick every pass selects afresh: at 10 the shorter J3 heads the queue; at 100
  (J1 ends) J3 starts, 100-105, then J2, 105-255.
- With commit_pick J2 stays the pick from 0: at 100 J2 starts, 100-250; J3 follows, 250-255.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.agents.base import Agent
from hpcgym.environment.config import SimConfig
from hpcgym.environment.errors import ConfigError
from hpcgym.environment.simulator import simulate
from hpcgym.environment.spec import sim_config
from hpcgym.environment.workload import Workload


def jobs() -> Workload:
    run = np.array([100, 150, 5])
    return Workload(name="commit", procs=4, job_id=np.array([1, 2, 3]), submit=np.array([0, 0, 10]), run=run,
                    size=np.array([3, 4, 4]), requested=run, user=np.array([1, 1, 1]))


class CountingInspector(Agent):
    """Accepts every pick, noting (time, picked job)."""

    kinds = ("inspect",)

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def act(self, decision):
        self.seen.append((decision.time, decision.context["jobs"][0]))
        return True


def starts(commit: bool, agents=None) -> list[int]:
    result = simulate(jobs(), SimConfig(backfill="none", commit_pick=commit), policy="sjf", agents=agents)
    return [int(s) for s in result.jobs["start"]]


def test_every_pass_selects_afresh_by_default():
    assert starts(False) == [0, 105, 100]


def test_a_committed_pick_keeps_its_place_until_it_starts():
    assert starts(True) == [0, 100, 250]


def test_a_committed_pick_is_not_inspected_again():
    fresh, committed = CountingInspector(), CountingInspector()
    assert starts(False, {"inspect": fresh}) == [0, 105, 100]
    assert starts(True, {"inspect": committed}) == [0, 100, 250]
    # afresh: J3 is the pick at 10 and 100, J2 again at 100 and 105
    assert fresh.seen == [(0, 1), (0, 2), (10, 3), (100, 3), (100, 2), (105, 2)]
    # committed: J2 once, at 0; J3 once, when it becomes the pick at 100 (it starts at 250 unasked)
    assert committed.seen == [(0, 1), (0, 2), (100, 3)]


def test_the_option_reaches_the_protocol_map_and_is_checked():
    assert sim_config({"commit_pick": True}).commit_pick is True
    with pytest.raises(ConfigError, match="commit_pick must be true or false"):
        sim_config({"commit_pick": "yes"})


def test_exact_requests_let_sjf_sort_by_run_time():
    """One processor; J1 runs 10 s but requests 1000 s, J2 runs and requests 100 s; both at 0.
    SJF by request runs J2 first (J1 starts at 100); by run time J1 first (J2 starts at 10)."""
    w = Workload(name="exact", procs=1, job_id=np.array([1, 2]), submit=np.array([0, 0]), run=np.array([10, 100]),
                 size=np.array([1, 1]), requested=np.array([1000, 100]), user=np.array([1, 1]))
    by_request = simulate(w, SimConfig(), policy="sjf").jobs
    exact = simulate(w, SimConfig(exact_requests=True), policy="sjf").jobs
    assert by_request["start"].tolist() == [100, 0] and by_request["requested"].tolist() == [1000, 100]
    assert exact["start"].tolist() == [0, 10] and exact["requested"].tolist() == [10, 100]


def test_no_rejection_cap_asks_at_every_pass():
    """An inspector that always rejects J1 (one job, nothing else happens): with the default cap
    it is asked 72 times, then J1 starts unasked at 72 x 600 s; with no cap it is asked again at
    every wake-up (here until it gives in at its 100th look)."""
    class Stubborn(Agent):
        kinds = ("inspect",)

        def __init__(self, give_in: int) -> None:
            self.looks, self.give_in = 0, give_in

        def act(self, decision):
            self.looks += 1
            return self.looks >= self.give_in

    w = Workload(name="one", procs=1, job_id=np.array([1]), submit=np.array([0]), run=np.array([10]),
                 size=np.array([1]), requested=np.array([10]), user=np.array([1]))
    capped, uncapped = Stubborn(10 ** 9), Stubborn(100)
    assert simulate(w, SimConfig(), agents={"inspect": capped}).jobs["start"].tolist() == [72 * 600]
    assert capped.looks == 72
    free = simulate(w, SimConfig(max_rejections=None), agents={"inspect": uncapped})
    assert uncapped.looks == 100 and free.jobs["start"].tolist() == [99 * 600]
    assert sim_config({"max_rejections": None}).max_rejections is None


# ---------------------------------------------------------------- reservations that persist (EASY)
def test_with_easy_the_reserved_job_keeps_its_reservation():
    """The same jobs with EASY backfilling: nothing can backfill (J3 needs 4 processors), so the
    schedules are those above. Re-made at every pass, J2's reservation passes to the shorter J3
    at 10; kept, J2 holds it from 0 until it starts at 100."""
    def easy(commit: bool) -> list[int]:
        result = simulate(jobs(), SimConfig(backfill="easy", commit_pick=commit), policy="sjf")
        return [int(s) for s in result.jobs["start"]]

    assert easy(False) == [0, 105, 100]
    assert easy(True) == [0, 100, 250]


def test_an_agent_made_reservation_persists():
    """An external select agent that takes the shortest request of the window (SJF as an agent):
    at 0 it starts J1, then picks J2, which does not fit and is reserved. Re-made, it is asked
    again at 10 and picks the newly arrived J3 instead (J3 100-105, J2 105); kept, it is not
    asked while J2 waits (J2 100-250, then J3), only when the next pick is due."""
    class Shortest(Agent):
        kinds = ("select",)

        def __init__(self) -> None:
            self.asked: list[int] = []

        def act(self, decision):
            self.asked.append(decision.time)
            run = dict(zip(decision.observation["queue"]["id"], decision.observation["queue"]["requested"]))
            return [min(decision.candidates, key=lambda j: (run[j], j))]

    cases = ((False, [0, 105, 100], [0, 0, 10, 100, 100, 105]), (True, [0, 100, 250], [0, 0, 100]))
    for commit, starts_, asks in cases:
        agent = Shortest()
        result = simulate(jobs(), SimConfig(backfill="easy", commit_pick=commit), agents={"select": agent})
        assert [int(s) for s in result.jobs["start"]] == starts_
        assert agent.asked == asks
