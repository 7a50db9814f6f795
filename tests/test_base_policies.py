"""SchedInspector's other base policies (largest, laf, lrf, sexp, lexp), ordered by hand.

Definitions from SchedInspector's public code (DIR-LAB/SchedInspector, HPCSimSkip.py:
`largest_score` = -n, `laf_score` = -r * n, `lrf_score` = -r / n, `sexp_score` = (w + r) / n,
`lexp_score` = -(w + r) / n; lowest score first), with hpcgym's wait w = now - s (the code reads
a queued job's wait as -1 - s: docs/semantics.md section 9).
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hpcgym.environment.config import SimConfig
from hpcgym.environment.priorities import get_policy
from hpcgym.environment.simulator import simulate
from hpcgym.environment.workload import Workload
from hpcgym.gymbridge.cli import main

# J1..J4: submit s, requested r, size n
QUEUE = {"id": np.array([1, 2, 3, 4]), "submit": np.array([0, 10, 20, 30]),
         "requested": np.array([100, 50, 400, 30]), "size": np.array([1, 4, 2, 2])}


@pytest.mark.parametrize("policy, now, expected", [
    # -n: J2 (4); J3 and J4 (2 each) tie, the earlier submit first; J1 (1)
    ("largest", 100, [2, 3, 4, 1]),
    # r * n = 100, 200, 800, 60: the largest area first
    ("laf", 100, [3, 2, 1, 4]),
    # r / n = 100, 12.5, 200, 15: the largest ratio first
    ("lrf", 100, [3, 1, 4, 2]),
    # at 100, w = 100, 90, 80, 70: (w + r) / n = 200, 35, 240, 50
    ("sexp", 100, [2, 4, 1, 3]),
    ("lexp", 100, [3, 1, 4, 2]),
    # at 1,000, w = 1000, 990, 980, 970: (w + r) / n = 1100, 260, 690, 500 (J1 and J3 swap)
    ("sexp", 1000, [2, 4, 3, 1]),
    ("lexp", 1000, [1, 3, 4, 2]),
])
def test_order_of_a_four_job_queue(policy, now, expected):
    order = get_policy(policy).order(QUEUE, now)
    assert QUEUE["id"][order].tolist() == expected


def test_sexp_is_re_sorted_at_every_pass():
    """Four processors, no backfilling. J0 (4 procs, 100 s) runs from 0; J1..J4 above (run =
    request) wait. At 100, sexp ranks J2 first (35): it takes all 4 processors until 150. At 150,
    w = 150, 140, 130, 120: (w + r) / n = 250 (J1), 265 (J3), 75 (J4): J4 (2 procs, to 180) and J1
    (1 proc) start; J3 needs 2 with 1 free: it starts when J4 ends, at 180. A static order ranked at
    100 would have started J1 before J4 (200 > 50 holds too) but J3 last either way; the
    time-dependent part shows in the order test above."""
    w = Workload(name="sexp", procs=4, job_id=np.array([0, 1, 2, 3, 4]), submit=np.array([0, 0, 10, 20, 30]),
                 run=np.array([100, 100, 50, 400, 30]), size=np.array([4, 1, 4, 2, 2]),
                 requested=np.array([100, 100, 50, 400, 30]), user=np.zeros(5))
    starts = simulate(w, SimConfig(backfill="none"), policy="sexp").jobs["start"].tolist()
    assert starts == [0, 150, 100, 180, 150]


def test_run_help_lists_the_base_policies():
    out = CliRunner().invoke(main, ["run", "--help"]).output
    for name in ("largest", "laf", "sexp", "lexp", "lrf"):
        assert name in out
