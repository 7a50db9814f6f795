"""CPU microseconds per step of the SchedInspector env (`inspect` kind, the authors' code rules),
written against the `HpcEnv` arguments that turn 3's code (eaa80a8) also takes, so two checkouts
can be compared in one run (issue 46):

    for c in OLD NEW; do PYTHONPATH=$c-pkg python benchmarks/inspect_steps.py 4000; done   # alternate, repeat
    valgrind --tool=callgrind python benchmarks/inspect_steps.py 1000   # and 5000: instructions per
                                                                       # step = (I5000 - I1000) / 4000

A random accept/reject policy; SDSC-SP2 windows of 256 jobs among its first 10,000."""

import inspect
import sys
import time
from pathlib import Path

import numpy as np

from hpcgym.gymbridge.env import HpcEnv

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "SDSC-SP2-1998-4.2-cln.swf.gz"


def main(steps: int) -> float:
    extra = {"decision_info": False} if "decision_info" in inspect.signature(HpcEnv.__init__).parameters else {}
    env = HpcEnv("inspect", workload={"trace": str(TRACE), "jobs": 256, "first_jobs": 10_000, "sample": 0},
                 options={"preset": "schedinspector-code", "policy": "sjf"}, reward="relative:bsld:pct_max",
                 encoder="schedinspector", seed=0, **extra)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    for n in range(300 + steps):
        if n == 300:
            start = time.process_time()
        _, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        if terminated or truncated:
            env.reset()
    return (time.process_time() - start) / steps * 1e6


if __name__ == "__main__":
    print(f"{main(int(sys.argv[1]) if len(sys.argv) > 1 else 4000):.1f} us per step")
