"""RLScheduler's trajectory filtering (workload key `sjf_range`, `hpcgym train --sjf-range`): only
windows whose SJF mean bsld lies strictly inside the range are drawn. Bsld worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.environment.errors import ConfigError, WorkloadError
from hpcgym.environment.spec import check_workload_spec, cut_sequence
from hpcgym.environment.workload import Workload

# One processor, 10 s jobs unless said. Windows of two jobs, SJF under RLScheduler's rules:
# [J0, J1]: both submitted at 0, J1 waits 10 s: bsld 1 and 2, mean 1.5;
# [J1, J2]: J2 comes at 100 to a free processor: mean 1;
# [J2, J3]: J3 (30 s) arrives with J2 at 100 and waits 10 s: bsld 40 / 30, mean 7 / 6 = 1.1667.
JOBS = Workload(name="filter", procs=1, job_id=np.arange(4), submit=np.array([0, 0, 100, 100]),
                run=np.array([10, 10, 10, 30]), size=np.ones(4), requested=np.array([10, 10, 10, 30]),
                user=np.zeros(4))


@pytest.mark.parametrize("bounds, first", [([1.4, 2], 0), ([1.1, 1.2], 2), ([0.5, 1.01], 1)])
def test_only_windows_inside_the_range_are_drawn(bounds, first):
    for seed in range(10):
        w = cut_sequence(JOBS, {"jobs": 2, "sample": seed, "sjf_range": bounds})
        assert w.job_id.tolist() == [first, first + 1]


def test_the_range_is_open_and_a_range_no_window_meets_is_an_error():
    with pytest.raises(WorkloadError, match="none of 200 windows"):
        cut_sequence(JOBS, {"jobs": 2, "sample": 0, "sjf_range": [1.5, 2]})  # 1.5 itself is outside


@pytest.mark.parametrize("spec, message", [
    ({"jobs": 2, "sample": 0, "sjf_range": [150, 10]}, "LOW < HIGH"),
    ({"jobs": 2, "sample": 0, "sjf_range": [10]}, "two numbers"),
    ({"jobs": 2, "start": 0, "sjf_range": [10, 150]}, "needs a sample seed"),
])
def test_a_bad_range_is_refused_in_one_line(spec, message):
    with pytest.raises(ConfigError, match=message):
        check_workload_spec(spec)


def test_train_refuses_a_reversed_range_before_training(tmp_path):
    from click.testing import CliRunner

    from hpcgym.gymbridge.cli import main

    result = CliRunner().invoke(main, ["train", "ppo", "--sjf-range", "150,10", "--epochs", "1", "--out",
                                       str(tmp_path / "run"), "--eval-episodes", "0"])
    assert result.exit_code == 2 and "sjf_range takes two numbers LOW < HIGH" in result.output
    assert not (tmp_path / "run" / "epoch_000001.pt").exists()
