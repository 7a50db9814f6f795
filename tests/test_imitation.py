"""Teacher-guided PPO (RLSchert's eq. 11): the imitation term, its labels and its schedule."""

from __future__ import annotations

import csv
import math
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from hpcgym.agents.base import PriorityAgent  # noqa: E402
from hpcgym.agents.rl.imitation import imitation_loss, teacher_labeller  # noqa: E402
from hpcgym.agents.rl.ppo import PPO, PPOConfig, ppo_update  # noqa: E402
from hpcgym.agents.rlschert import RuleKill  # noqa: E402
from hpcgym.gymbridge.cli import main  # noqa: E402


def test_imitation_loss_by_hand():
    """Uniform over 3 actions: -log(1/3) per labelled row; unlabelled rows (-1) add nothing; a row
    whose logits are (log 3, 0, 0) gives the teacher's action 0 the probability 3/5."""
    from hpcgym.agents.rl.policy import MaskedCategorical

    logits = torch.tensor([[0.0, 0, 0], [0, 0, 0], [math.log(3), 0, 0]])
    dist = MaskedCategorical(logits, torch.ones(3, 3, dtype=torch.bool))
    assert float(imitation_loss(dist, torch.tensor([2, -1, 0]))) == pytest.approx((math.log(3) - math.log(3 / 5)) / 2)
    assert float(imitation_loss(dist, torch.tensor([-1, -1, -1]))) == 0.0


def updated_teacher_probability(weight: float, advantage: float = 0.0, clone: bool = False) -> tuple[float, float]:
    """A 2-feature, 3-action policy updated on a batch of action 0 taken with `advantage` (0: the
    clipped term has no gradient), the teacher saying action 2 everywhere: P(2) averaged over the
    batch, before and after."""
    algo = PPO((2,), 3, {"hidden": [8], "lr": 0.05, "target_kl": None, "update_epochs": 20, "minibatch_size": 16,
                         "normalize_advantages": False}, seed=0)
    obs = torch.as_tensor(np.random.default_rng(0).uniform(size=(16, 2)), dtype=torch.float32)
    mask = torch.ones(16, 3, dtype=torch.bool)
    with torch.no_grad():
        dist = algo.model.distribution(obs, mask)
        before = float(dist.log_prob(torch.full((16,), 2)).exp().mean())
        batch = {"obs": obs, "mask": mask, "action": torch.zeros(16, dtype=torch.long),
                 "logp": dist.log_prob(torch.zeros(16, dtype=torch.long)), "teacher": torch.full((16,), 2)}
    advantages, zeros = torch.full((16,), advantage), torch.zeros(16)
    ppo_update(algo.model, algo.clip_and_step, batch, advantages, zeros, algo.config, np.random.default_rng(0), weight,
               clone)
    with torch.no_grad():
        return before, float(algo.model.distribution(obs, mask).log_prob(torch.full((16,), 2)).exp().mean())


def test_the_imitation_gradient_pushes_the_policy_toward_the_teacher():
    # d(-log p_a)/d logits = p - onehot(a): descending it raises the teacher's logit
    before, after = updated_teacher_probability(1.0)
    assert before < 0.5 and after > 0.9
    assert updated_teacher_probability(0.0) == pytest.approx((before, before), abs=1e-6)


def test_pretraining_follows_the_teacher_alone():
    """Action 0 taken with a large advantage: PPO moves towards 0, away from the teacher's 2;
    pretraining (`clone`) ignores the advantage and goes to 2."""
    before, ppo = updated_teacher_probability(0.0, advantage=5.0)
    _, cloned = updated_teacher_probability(1.0, advantage=5.0, clone=True)
    assert ppo < before < 0.5 and cloned > 0.9


def test_pretraining_comes_first_and_the_weight_is_counted_after_it():
    c = PPOConfig(imitation_coef=0.5, imitation_epochs=2, pretrain_epochs=3)
    assert [c.pretraining(t) for t in range(6)] == [True, True, True, False, False, False]
    assert [c.imitation_weight(t) for t in range(3, 7)] == [0.5, 0.25, 0.0, 0.0]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="pretrain_epochs"):
            PPOConfig(pretrain_epochs=bad)


def test_labels_name_the_teachers_slot_for_any_kind():
    """Kill (window 3): slot 0 kills nothing, slot k + 1 the k-th running job; select: slot k is
    the k-th candidate (SJF picks job 8, the second)."""
    running = {"id": [4, 6], "start": [900, 900], "submit": [0, 0], "prediction0": [100, 100],
               "prediction": [150, 3100], "size": [1, 1]}
    kill = SimpleNamespace(kind="kill", candidates=[4, 6], observation={"time": 1000, "running": running})
    label = teacher_labeller(RuleKill(), 3)
    assert label({"decision": kill, "action_mask": np.array([1, 1, 1, 0])}) == 2
    assert label({"decision": kill, "action_mask": np.array([1, 1, 0, 0])}) == -1   # not allowed: no label
    assert label({"decision": None, "action_mask": np.ones(4)}) == -1
    queue = {"id": [7, 8], "submit": [0, 1], "requested": [500, 100], "size": [1, 1]}
    select = SimpleNamespace(kind="select", candidates=[7, 8], time=5, can_wait=True, observation={"queue": queue})
    assert teacher_labeller(PriorityAgent("sjf"), 3)({"decision": select, "action_mask": np.ones(4)}) == 1
    assert label({"decision": select, "action_mask": np.ones(4)}) == -1   # RuleKill does not select


def test_a_kill_is_labelled_once_per_run_of_a_job():
    """The rule fires on job 6 (as above) at three decisions in a row while it keeps running
    (elapsed 50, 80, 100 s, within its pre-run prediction of 100 s):
    labelled kill (slot 2) the first time, unlabelled after (the student that did not kill it
    would otherwise learn the rule's request once per decision); job 4, spared, is "kill
    nothing" (slot 0) every time; after 6 restarts (start 2,000) its new run is labelled again."""
    def kill(start_of_6, now):
        running = {"id": [4, 6], "start": [900, start_of_6], "submit": [0, 0], "prediction0": [100, 100],
                   "prediction": [150, 3100], "size": [1, 1]}
        return {"decision": SimpleNamespace(kind="kill", candidates=[4, 6],
                                            observation={"time": now, "running": running}),
                "action_mask": np.array([1, 1, 1, 0])}

    label = teacher_labeller(RuleKill(), 3)
    assert [label(kill(900, t)) for t in (950, 980, 1000)] == [2, -1, -1]
    assert label(kill(2000, 2050)) == 2
    spare = kill(900, 1000)
    spare["decision"].observation["running"]["prediction"] = [150, 150]   # the rule fires on none
    assert [label(spare), label(spare)] == [0, 0]


def test_the_joint_teacher_kills_by_the_rule_else_selects_by_sjf():
    """select_kill over queued 7, 8 (SJF: 8, the shorter request) and running 4, 6 (the rule fires
    on 6 only, as in the kill case above). Window 3: queued row k is slot k, running row k slot 3 + k,
    wait slot 6."""
    from hpcgym.agents.rlschert import JointTeacher

    running = {"id": [4, 6], "start": [900, 900], "submit": [0, 0], "prediction0": [100, 100],
               "prediction": [150, 3100], "size": [1, 1]}
    queue = {"id": [7, 8], "submit": [0, 1], "requested": [500, 100], "size": [1, 1]}

    def joint(candidates, queued):
        return SimpleNamespace(kind="select_kill", candidates=candidates, time=1000, can_wait=True,
                               context={"queued": queued},
                               observation={"time": 1000, "running": running, "queue": queue})

    teacher, mask = JointTeacher(), np.ones(7)
    assert teacher.act(joint([7, 8, 4, 6], 2)) == 6
    assert teacher_labeller(teacher, 3)({"decision": joint([7, 8, 4, 6], 2), "action_mask": mask}) == 4
    assert teacher.act(joint([7, 8], 2)) == 8   # no running job offered (one was killed this instant)
    assert teacher_labeller(teacher, 3)({"decision": joint([7, 8], 2), "action_mask": mask}) == 1
    assert teacher.act(joint([4], 0)) is None   # the rule spares 4 and nothing is queued: wait


def test_the_imitation_weight_falls_to_zero_and_bad_schedules_are_refused():
    c = PPOConfig(imitation_coef=0.5, imitation_epochs=4)
    assert [c.imitation_weight(t) for t in range(6)] == [0.5, 0.375, 0.25, 0.125, 0.0, 0.0]
    for bad in ({"imitation_epochs": 0}, {"imitation_epochs": 2.5}, {"imitation_coef": -1},
                {"imitation_coef": float("inf")}, {"imitation_coef": "high"}):
        with pytest.raises(ValueError, match="imitation"):
            PPOConfig(**bad)


@pytest.mark.slow
def test_train_rlschert_briefly(tmp_path):
    """Three epochs of two 64-job episodes (cut at 60 decisions), the first a pretraining one: the
    curve shows the imitation alone (weight 1), then PPO with the weight 0.5 and 0.5 * (1 - 1/20)
    = 0.475, and a labelled imitation loss."""
    out = tmp_path / "rls"
    result = CliRunner().invoke(main, ["train", "rlschert", "--jobs", "64", "--trajectories", "2", "--epochs", "3",
                                       "--envs", "1", "--max-steps", "60", "--eval-episodes", "0", "--out", str(out),
                                       "--no-progress", "--set", "pretrain_epochs=1"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(open(out / "curve.csv")))
    assert [float(r["pretraining"]) for r in rows] == [1.0, 0.0, 0.0]
    assert [float(r["imitation_weight"]) for r in rows] == [1.0, 0.5, 0.475]
    assert all(float(r["imitation_loss"]) > 0 for r in rows)
    assert (out / "model.pt").is_file()


@pytest.mark.parametrize("args, message", [
    (["--set", "imitation_coef=0.5"], "imitates a teacher: name one"),
    (["--set", "pretrain_epochs=2"], "imitates a teacher: name one"),
    (["--teacher", "sjf", "--set", "pretrain_epochs=-1"], "pretrain_epochs"),
    (["--teacher", "rlschert-rule", "--set", "imitation_coef=0.5", "--set", "imitation_epochs=0"],
     "imitation_epochs"),
    (["--teacher", "sjf", "--set", "imitation_coef=0.5"], "teacher sjf takes select decisions, the agent learns kill"),
])
def test_bad_imitation_settings_are_one_line(tmp_path, args, message):
    result = CliRunner().invoke(main, ["train", "ppo", "--kind", "kill", "--jobs", "16", "--epochs", "1",
                                       "--trajectories", "1", "--envs", "1", "--eval-episodes", "0",
                                       "--out", str(tmp_path / "x"), *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
