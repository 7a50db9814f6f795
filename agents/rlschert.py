"""RLSchert (Wang et al., "RLSchert: An HPC Job Scheduler Using Deep Reinforcement Learning and
Remaining Time Prediction", 2021) as a composition of the shared pieces, on hpcgym's event
simulator rather than the paper's discrete-time DeepRM one.

The scheduler sees run-time predictions that are refined while jobs run (the env's `prediction`,
docs/semantics.md section 12; reservations follow them with `estimate: predicted`) and takes the
`kill` decision: kill a running job mispredicted as short; it requeues with its current
prediction as its estimate. State: the `rlschert` encoder (`agents.encoders.
PredictionRunningEncoder`: pre-run and current prediction, elapsed, time since submit, relative
change, size of each running job). Training: PPO guided at first by the rule-based kill teacher
(`RuleKill`) through the imitation term of eq. (11), annealed to zero (`agents.rl.ppo`'s
`imitation_coef` and `imitation_decay`). docs/rlschert.md says what is built and what is a model.
"""

from __future__ import annotations

from ..environment.decisions import KILL, SELECT_KILL, Action, Decision
from ..environment.errors import ConfigError
from .base import Agent, PriorityAgent
from .recipe import BASE, TEACHER, Recipe

#: The rule's 50-minute line (the paper's 10 time steps of 5 minutes).
SHORT = 50 * 60


class RuleKill(Agent):
    """The paper's rule-based kill (section 3.3): kill the first running job (in the decision's
    order) that has run no longer than its pre-run prediction, was predicted under `short`
    seconds before it ran, is now predicted over `short`, and whose prediction changed by more
    than `change` (1.0: by more than 100%) of the pre-run one. Otherwise kill nothing."""

    kinds = (KILL,)

    def __init__(self, short: int = SHORT, change: float = 1.0) -> None:
        self.short, self.change = short, change

    def act(self, decision: Decision) -> Action:
        obs = decision.observation
        r = obs["running"]
        if "prediction" not in r:
            raise ConfigError("the rule-based kill reads run-time predictions: give the env a predictor "
                              "(option prediction, e.g. running)")
        now = obs["time"]
        for job, start, p0, p in zip(r["id"], r["start"], r["prediction0"], r["prediction"]):
            if now - start <= p0 and p0 < self.short < p and abs(p - p0) > self.change * p0:
                return job
        return None


class JointTeacher(Agent):
    """A teacher of the joint `select_kill` decision (the paper's single output over select and
    kill slots): the rule-based kill when it names a running job on offer, else the select
    teacher's pick among the queued ones (a priority policy; the paper's is a trained no-kill
    agent), else wait."""

    kinds = (SELECT_KILL,)

    def __init__(self, select: str = "sjf", short: int = SHORT, change: float = 1.0) -> None:
        self.select, self.kill = PriorityAgent(select), RuleKill(short, change)

    def act(self, decision: Decision) -> Action:
        queued = decision.context["queued"]
        offered = decision.candidates[queued:]
        victim = self.kill.act(decision) if offered else None
        if victim is not None and victim in offered:
            return victim
        return self.select.act(decision) if queued else None


#: What `hpcgym train rlschert` sets unless a flag says otherwise: the paper's Table 4 (PPO, clip
#: 0.2, value coefficient 0.25, imitation 0.5 annealed to 0, entropy 0.02, lr 1e-4, minibatch
#: 128, 5 epochs, lambda 0.95, gamma 0.99, KL target 0.01) and its MLP of 64-64; 16 sequences of
#: 200 jobs per epoch (its num_ex and simu_len); the kill decision over 8 running slots (its kill
#: outputs) with the rule-based kill as teacher. The paper anneals the imitation weight without
#: saying how: here it falls linearly to 0 over 20 update epochs (`imitation_epochs`). The teacher
#: depends on the kind: `select` alone is the paper's DeepRM baseline, plain PPO with no teacher.
#: Two departures (docs/rlschert.md, "Why the kill agents stalled"): the untrained policy kills at
#: about 1 in 1,000 kill decisions (`kill_rate`; the rule kills at about 1 in 2,000), not at 8 in 9,
#: and episodes are cut at 20,000 decisions, not the paper's 3,000 time steps of 5 minutes: the
#: kill decision comes at every event and prediction revision, and a policy that never kills
#: takes 1,600-8,900 decisions on SDSC-SP2's 200-job training windows. A kind that selects also sees
#: the queue window (the paper's waiting-job slots: wait, request, predicted length, size; `jobs`)
#: before the running jobs, so select slot k and queue row k line up, and `select` and `select_kill`
#: share one observation (a DeepRM select agent can start a joint one, `hpcgym train --init-from`).
#: Its one semantics, `event`: hpcgym's event simulator with EASY
#: reservations on the running predictor's predictions (the paper's own simulator, DeepRM's
#: discrete-time one, is not built).
#: Eq. (9): minus the sum over the jobs in the system of 1 / predicted length, per second.
RECIPE = Recipe(
    name="rlschert", summary="RLSchert (Wang et al.): a kill agent over running jobs with run-time predictions, "
                             "imitating its rule-based kill at first (docs/rlschert.md)",
    kind="kill", encoder="rlschert+nodes", policy="fcfs", jobs=200, trajectories=16, window=8, options={},
    encoders={"select": "jobs+rlschert+nodes", "select_kill": "jobs+rlschert+nodes"},
    teachers={"kill": "rlschert-rule", "select_kill": "rlschert-joint"}, max_steps=20_000, kill_rate=1e-3,
    config={"net": "mlp", "hidden": [64, 64], "activation": "tanh", "lr": 1e-4, "gamma": 0.99, "gae_lambda": 0.95,
            "clip": 0.2, "update_epochs": 5, "minibatch_size": 128, "target_kl": 0.01, "vf_coef": 0.25,
            "ent_coef": 0.02, "imitation_coef": 0.5, "imitation_epochs": 20},
    baselines=(BASE, TEACHER), variant="event",
    variants={"event": {"options": {"backfill": "easy", "prediction": "running", "estimate": "predicted"},
                        "reward": "system_slowdown_prediction", "first_jobs": None, "workload": {}}})
