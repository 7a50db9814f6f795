"""RLSchert (Wang et al., 2021) on hpcgym's event simulator: a `kill` agent over running jobs whose run-time predictions
are refined while they run, trained by PPO guided at first by the rule-based kill (docs/rlschert.md)."""

from __future__ import annotations

from ..environment.decisions import KILL, SELECT_KILL, Action, Decision
from ..environment.errors import ConfigError
from .base import Agent, PriorityAgent
from .recipe import BASE, TEACHER, Recipe

SHORT = 50 * 60  #: The rule's 50-minute line (the paper's 10 time steps of 5 minutes).


class RuleKill(Agent):
    """The paper's rule-based kill (section 3.3): the first running job within its pre-run prediction, predicted under
    `short` seconds and now over it, whose prediction moved by more than `change` of the pre-run one."""

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
    """A teacher of the joint `select_kill` decision: the rule-based kill when it names a running job on
    offer, else the select teacher's pick (a priority policy), else wait."""

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


#: What `hpcgym train rlschert` sets unless a flag says otherwise: the paper's Table 4 and its MLP
#: of 64-64, the rule-based kill as teacher, and the departures docs/rlschert.md gives with their
#: reasons ("Settings of hpcgym train rlschert": the kill prior, episodes cut at 20,000 decisions,
#: the queue window seen by a kind that selects). Its one semantics, `event`: hpcgym's event
#: simulator with EASY reservations on the running predictor's predictions.
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
