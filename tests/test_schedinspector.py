"""SchedInspector's pieces: the 7-feature encoder (each feature by hand) and the trace-wide
scale it reads from the observation."""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.agents.encoders import InspectorEncoder, get_encoder
from hpcgym.environment.errors import ConfigError
from hpcgym.environment.spec import load_workload

HIGH, LOW = 1 - 1e-5, 1e-5


def observation(pick: int) -> dict:
    """A hand-made inspect observation: 128 processors, 32 free, three waiting jobs."""
    return {"time": 5000, "procs": 128, "free": 32, "queue_length": 3, "max_run": 100_000,
            "queue": {"id": [7, 9, 11], "submit": [0, 4900, 0], "size": [64, 1, 16],
                      "requested": [3600, 5, 20000], "estimate": [3600, 5, 20000], "wait": [21600, 100, 50000],
                      "rejections": [0, 3, 100], "user": [1, 2, 3]},
            "running": {"id": [], "start": [], "size": [], "requested": [], "estimated_end": []},
            "context": {"jobs": [pick], "rejections": 0, "max_rejections": 72}}


# queue delay: (10/3600 + 10/10 + 10/20000) / 128, whichever job is picked
DELAY = (10 / 3600 + 1.0 + 10 / 20000) / 128


@pytest.mark.parametrize("pick, expected", [
    # wait/12h, requested/max_run, size/procs, free/procs, fits now, rejections/72, delay
    (9, [100 / 43200, 5 / 100_000, 1 / 128, 32 / 128, HIGH, 3 / 72, DELAY]),
    (11, [HIGH, 0.2, 16 / 128, 0.25, HIGH, 1.0, DELAY]),       # waited past 12 h; 100 rejections
    (7, [0.5, 0.036, 0.5, 0.25, LOW, 0.0, DELAY]),             # 64 processors do not fit in 32
])
def test_each_feature_by_hand(pick, expected):
    got = get_encoder("schedinspector", 128, 128).encode(observation(pick))
    assert got.dtype == np.float32 and got.shape == (7,)
    np.testing.assert_allclose(got, np.float32(expected), rtol=1e-6)


def test_the_encoder_reads_inspect_decisions_only():
    pytest.importorskip("gymnasium")
    import hpcgym.gymbridge as gb

    with pytest.raises(ConfigError, match="inspect decisions only"):
        gb.make("select", workload={"generate_jobs": 64, "procs": 32}, encoder="schedinspector")
    env = gb.make("inspect", workload={"generate_jobs": 64, "procs": 32, "jobs": 32}, encoder="schedinspector")
    obs, info = env.reset(seed=0)
    assert obs.shape == (7,) and np.all((obs >= 0) & (obs <= 1)) and InspectorEncoder.kinds == ("inspect",)


def test_a_window_keeps_the_whole_trace_scale(traces_dir):
    """max_run of a 256-job window is SDSC-SP2's longest run time, not the window's."""
    trace = traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"
    whole = load_workload({"trace": str(trace)})
    window = load_workload({"trace": str(trace), "jobs": 256, "start": 1000})
    assert window.max_run == int(whole.run.max()) > int(window.run.max())
