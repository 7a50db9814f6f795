"""RLSchert's predictions and rule-based kill on a trace's test part replayed as one episode
(FCFS + EASY): mean bsld and wait, kills, lost work, and the speed of the kill decisions with
predictions off and on (docs/rlschert.md, "Measured"). One run per row, no confidence intervals:
the comparison through `hpcgym compare` with CIs is benchmarks/rlschert_eval.py.

    python benchmarks/rlschert_replay.py                                  # SDSC-SP2, last 20%
    python benchmarks/rlschert_replay.py --trace HPC2N-2002-2.2-cln.swf.gz
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from hpcgym.agents.base import Agent
from hpcgym.agents.rlschert import RuleKill
from hpcgym.environment.config import SimConfig
from hpcgym.environment.predictions import fit_prerun_model
from hpcgym.environment.simulator import Simulation
from hpcgym.environment.spec import load_workload

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


class NeverKill(Agent):
    kinds = ("kill",)

    def act(self, decision):
        return None


def replay(workload, options: dict, agent: Agent) -> list:
    sim = Simulation(workload, SimConfig(**options), external=["kill"])
    t = time.perf_counter()
    decision, n = sim.reset(), 0
    while decision is not None:
        n += 1
        decision = sim.step(agent.act(decision))
    seconds = time.perf_counter() - t
    jobs, summary = sim.result().jobs, sim.result().summary
    return [f"{summary['mean_bsld']:.2f}", f"{summary['mean_wait']:,.0f}", int(jobs["kills"].sum()),
            f"{int(jobs['lost_work'].sum()):,}", f"{n:,}", f"{n / seconds:,.0f}"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default=str(TRACES / "SDSC-SP2-1998-4.2-cln.swf.gz"))
    p.add_argument("--train-fraction", type=float, default=0.8)
    args = p.parse_args()
    spec = {"trace": args.trace, "train_fraction": args.train_fraction}
    test = load_workload({**spec, "part": "test"})
    model = Path(tempfile.mkdtemp()) / "prerun.json"
    fit_prerun_model(load_workload({**spec, "part": "train"})).save(model)
    predicted = {"estimate": "predicted"}
    rows = [("none", "requests", "never", {}, NeverKill()),
            ("running", "requests", "never", {"prediction": "running"}, NeverKill()),
            ("running", "predictions", "never", {"prediction": "running", **predicted}, NeverKill()),
            ("running", "predictions", "rule", {"prediction": "running", **predicted}, RuleKill()),
            ("user_history", "predictions", "never", {"prediction": "user_history", **predicted}, NeverKill()),
            ("learned", "predictions", "never", {"prediction": f"learned:{model}", **predicted}, NeverKill()),
            ("learned", "predictions", "rule", {"prediction": f"learned:{model}", **predicted}, RuleKill())]
    print(f"{Path(args.trace).name}, test part ({len(test):,} jobs), FCFS + EASY, seed 0\n")
    print("| predictor | reservations on | kill | mean bsld | mean wait (s) | kills | lost work (proc-s) "
          "| kill decisions | decisions/s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for predictor, on, kill, options, agent in rows:
        print("| " + " | ".join(map(str, [predictor, on, kill, *replay(test, options, agent)])) + " |", flush=True)


if __name__ == "__main__":
    main()
