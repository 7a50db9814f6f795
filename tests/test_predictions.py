"""Run-time predictions (docs/semantics.md section 12), on schedules worked out by hand.

Moved reservation (two processors, FCFS, EASY, estimate `predicted`, a predictor that says 200 s
for J1 before it runs and the truth from its first revision, at 100 s of running):
  J1 (1 proc, runs 1000 s, requests 5000 s) submitted 0; J2 (2 procs, 100 s) at 10; J3 (1 proc,
  300 s) at 150.
  t=0 J1 starts, predicted end 200. t=10 J2 does not fit: reserved, shadow 200.
  t=100 J1's prediction becomes 1000: the pass re-plans, shadow 1000.
  t=150 J3 arrives, 150 + 300 <= 1000: backfilled, runs 150-450.
  t=1000 J1 ends, J2 runs 1000-1100.
  Without the revision the shadow stays 200 (then "now", J1 being past its predicted end): J3
  never ends by it and waits for J2: J2 1000-1100, J3 1100-1400.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from hpcgym.environment import simulator
from hpcgym.environment.config import SimConfig
from hpcgym.environment.errors import ConfigError
from hpcgym.environment.predictions import (PredictionSpec, RunningModel, UserHistory, fit_prerun_model,
                                            load_prerun_model, mape, revised_jobs)
from hpcgym.environment.simulator import Simulation, simulate
from hpcgym.environment.spec import sim_config
from hpcgym.environment.swf import read_swf
from hpcgym.environment.workload import Workload


def jobs(submit, run, size, requested, procs=2, user=None) -> Workload:
    n = len(submit)
    return Workload(name="hand", procs=procs, job_id=np.arange(1, n + 1), submit=np.array(submit),
                    run=np.array(run), size=np.array(size), requested=np.array(requested),
                    user=np.array(user if user is not None else [1] * n))


class Stepped:
    """A predictor for the test: `before` before the run, from the first revision on the truth
    (or `before` again, when `revise` is off)."""

    def __init__(self, before: list[int], revise: bool, period: int = 100) -> None:
        self.spec = PredictionSpec("running", period=period)
        self.prerun = np.array(before)
        self.revise = revise

    def at(self, i: int, run: int, elapsed: int) -> int:
        return run if self.revise else int(self.prerun[i])


def moved(revise: bool, monkeypatch, prediction: str = "running", seed: int = 0) -> dict[int, int]:
    monkeypatch.setattr(simulator, "RunningModel", lambda spec, run, seed: Stepped([200, 100, 300], revise))
    w = jobs([0, 10, 150], [1000, 100, 300], [1, 2, 1], [5000, 100, 300])
    starts = simulate(w, SimConfig(prediction=prediction, estimate="predicted", seed=seed)).jobs["start"]
    return dict(zip([1, 2, 3], starts.tolist()))


def test_a_revised_prediction_moves_the_reservation(monkeypatch):
    assert moved(True, monkeypatch) == {1: 0, 2: 1000, 3: 150}
    assert moved(False, monkeypatch) == {1: 0, 2: 1000, 3: 1100}


def test_a_share_of_revised_jobs_moves_only_their_reservations(monkeypatch):
    """The moved reservation above, with `share`: only J1's revision (200 -> 1000 at 100 s) moves
    anything (J2 and J3 are predicted exactly from the start). Share 0 revises no job: the
    schedule of the pre-run predictions (J3 1100); share 1 is today's running predictor (J3 150).
    Share 1/3 revises round(3 / 3) = 1 job, the first of the seed's permutation of (J1, J2, J3):
    J1 with seed 0, J3 with seed 2 (asserted below), so J3 backfills at 150 only with seed 0."""
    pre_run, revised = {1: 0, 2: 1000, 3: 1100}, {1: 0, 2: 1000, 3: 150}
    assert moved(True, monkeypatch, "running:share=0") == pre_run
    assert moved(True, monkeypatch, "running:share=1") == revised == moved(True, monkeypatch)
    assert revised_jobs(3, 1 / 3, 0) == [True, False, False] and revised_jobs(3, 1 / 3, 2) == [False, False, True]
    assert moved(True, monkeypatch, "running:share=0.3333", seed=0) == revised
    assert moved(True, monkeypatch, "running:share=0.3333", seed=2) == pre_run


def test_a_share_changes_exactly_the_chosen_jobs_predictions(monkeypatch):
    """Four one-processor jobs on four processors, all submitted at 0 and running 1000 s,
    predicted 200, 300, 400, 500 s before the run and 1000 s from the first revision (100 s).
    Share 0.5 with seed 1 revises round(0.5 * 4) = 2 jobs, J1 and J3 (asserted): at 100 s their
    current prediction is 1000 and J2's and J4's stay 300 and 500; the pre-run ones never change."""
    monkeypatch.setattr(simulator, "RunningModel", lambda spec, run, seed: Stepped([200, 300, 400, 500], True))
    w = jobs([0] * 4, [1000] * 4, [1] * 4, [5000] * 4, procs=4)
    assert revised_jobs(4, 0.5, 1) == [True, False, True, False]
    sim = Simulation(w, SimConfig(prediction="running:share=0.5", estimate="predicted", seed=1), external=["kill"])
    seen = {}
    decision = sim.reset()
    while decision is not None:
        r = decision.observation["running"]
        seen[decision.time] = dict(zip(r["id"], zip(r["prediction0"], r["prediction"])))
        decision = sim.step(None)
    assert seen == {0: {1: (200, 200), 2: (300, 300), 3: (400, 400), 4: (500, 500)},
                    100: {1: (200, 1000), 2: (300, 300), 3: (400, 1000), 4: (500, 500)}}


def test_revised_shares_are_exact_nested_and_seeded():
    """round(S * n) jobs: 0.5 and 0.8 of 10 are 5 and 8 jobs, the 5 among the 8; another seed
    draws other jobs."""
    half, most = np.array(revised_jobs(10, 0.5, 7)), np.array(revised_jobs(10, 0.8, 7))
    assert half.sum() == 5 and most.sum() == 8 and np.all(most[half])
    assert revised_jobs(10, 0.5, 7) == half.tolist() != revised_jobs(10, 0.5, 8)
    assert revised_jobs(10, 0.0, 7) == [False] * 10 and revised_jobs(10, 1.0, 7) == [True] * 10


def test_share_zero_is_the_schedule_of_the_pre_run_predictions():
    """With the real model on 200 jobs: share 0 schedules as FCFS + EASY on requests set to the
    model's pre-run predictions (nothing is revised, so nothing else differs), share 1 as
    `running`, and share 0.5 like neither."""
    w = busy()
    prerun = RunningModel(PredictionSpec.parse("running"), w.run, seed=1).prerun
    as_requests = simulate(dataclasses.replace(w, requested=prerun), SimConfig()).jobs["start"].tolist()
    starts = {share: simulate(w, SimConfig(prediction=f"running:share={share}", estimate="predicted", seed=1))
              .jobs["start"].tolist() for share in (0, 0.5, 1)}
    full = simulate(w, SimConfig(prediction="running", estimate="predicted", seed=1)).jobs["start"].tolist()
    assert starts[0] == as_requests and starts[1] == full
    assert starts[0.5] != starts[0] and starts[0.5] != starts[1]


def test_running_jobs_show_both_predictions(monkeypatch):
    monkeypatch.setattr(simulator, "RunningModel", lambda spec, run, seed: Stepped([200, 100, 300], True))
    w = jobs([0, 10, 150], [1000, 100, 300], [1, 2, 1], [5000, 100, 300])
    sim = Simulation(w, SimConfig(prediction="running", estimate="predicted"), external=["kill"])
    seen = {}
    decision = sim.reset()
    while decision is not None:
        r = decision.observation["running"]
        seen[decision.time] = dict(zip(r["id"], zip(r["prediction0"], r["prediction"], r["submit"])))
        decision = sim.step(None)
    assert seen[10] == {1: (200, 200, 0)}
    assert seen[100] == {1: (200, 1000, 0)}
    assert seen[150] == {1: (200, 1000, 0), 3: (300, 300, 150)}
    assert 200 not in seen  # the revision at 200 changed nothing: no decision


def test_user_history_by_hand():
    """One processor, user 7: J1 100 s, J2 300 s (requests 1000), then J3 (request 1000) and J4
    (request 150), both submitted after J1 and J2 ended, and J5 of user 8. J1, J2: no history,
    their requests; J3: (100 + 300) / 2 = 200; J4: capped at 150; J5: user 8 has none: 1000."""
    w = jobs([0, 0, 500, 500, 500], [100, 300, 50, 50, 50], [1] * 5, [1000, 1000, 1000, 150, 1000], procs=1,
             user=[7, 7, 7, 7, 8])
    sim = Simulation(w, SimConfig(prediction="user_history", estimate="predicted"))
    sim.run()
    assert sim.prerun_predictions() == [1000, 1000, 200, 150, 1000]


def test_user_history_rounds_the_mean_up():
    h = UserHistory()
    h.completed(3, 10)
    assert h.predict(3, 100) == 100
    h.completed(3, 11)
    h.completed(3, 20)   # the last two: 11 and 20
    assert h.predict(3, 100) == 16


def test_running_model_is_calibrated():
    run = np.full(20_000, 3600)
    model = RunningModel(PredictionSpec.parse("running"), run, seed=3)
    assert 36 < mape(model.prerun, run) < 42
    progress = [0.05 + 0.1 * k for k in range(10)]
    during = np.mean([mape([model.at(i, 3600, int(f * 3600)) for i in range(2000)], run[:2000]) for f in progress])
    assert 8 < during < 11.5
    # at 99%: m = 0.03 + 0.14 * 0.01 = 3.1% for the jobs predicted long; the others are predicted
    # at least elapsed + 1 = 3565 s, so mostly just 1% short: about 2% in all
    near_end = mape([model.at(i, 3600, 3564) for i in range(20_000)], run)
    assert 1.5 < near_end < 2.6


def busy() -> Workload:
    """200 jobs of 50 to 949 s and 1 to 3 processors every 20 s on 4 processors: a queue forms."""
    return jobs(list(range(0, 4000, 20)), [(37 * k) % 900 + 50 for k in range(200)],
                [(k % 3) + 1 for k in range(200)], [1000] * 200, procs=4)


def test_running_predictions_are_deterministic():
    w = busy()
    a, b, c = (simulate(w, SimConfig(prediction="running", estimate="predicted", seed=s)).jobs["start"]
               for s in (1, 1, 2))
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()


def test_learned_predictor_learns_a_users_run_times(tmp_path):
    """User 1's jobs run 100 s, user 2's 10,000 s, all requesting 20,000 s: the fitted model tells
    them apart, and is read back from its file."""
    n = 40
    w = jobs(list(range(n)), [100 if k % 2 else 10_000 for k in range(n)], [1] * n, [20_000] * n,
             user=[1 if k % 2 else 2 for k in range(n)])
    model = fit_prerun_model(w)
    model.save(tmp_path / "m.json")
    guess = load_prerun_model(tmp_path / "m.json").predict(w)
    assert np.all(np.abs(guess - w.run) / w.run < 0.25)


def test_learned_predictor_reads_the_group_field_from_swf(tmp_path):
    """Everything but SWF's group field (13) is the same for all jobs: group 5's jobs run 100 s,
    group 6's 10,000 s. Written to SWF and read back, the model tells the groups apart, which it
    can only do through the group column."""
    n = 40
    line = "{job} {submit} -1 {run} 1 -1 -1 1 20000 -1 1 3 {group} -1 1 -1 -1 -1"
    body = [line.format(job=k + 1, submit=k, run=100 if k % 2 else 10_000, group=5 if k % 2 else 6) for k in range(n)]
    path = tmp_path / "groups.swf"
    path.write_text("; MaxProcs: 2\n" + "\n".join(body) + "\n")
    w = read_swf(path)
    assert w.group.tolist() == [6, 5] * (n // 2)
    model = fit_prerun_model(w)
    assert model.categories == {"user": [3], "group": [5, 6], "queue": [1]}
    assert np.all(np.abs(model.predict(w) - w.run) / w.run < 0.25)


def test_a_model_of_the_former_format_is_refused_with_what_to_do(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": 1, "kind": "hpcgym-prerun-ridge", "users": [7], "queues": [],
                                "weights": [0.0] * 28}))
    with pytest.raises(ConfigError, match="of format 1; this hpcgym reads format 2: fit it again"):
        load_prerun_model(path)


def test_options_and_bad_input():
    assert str(PredictionSpec.parse("running:0.5,0.2,0.05,600")) == "running:0.5,0.2,0.05,600"
    w = jobs([0], [10], [1], [10], user=[-1])
    with pytest.raises(ConfigError, match="user_history needs user ids"):
        Simulation(w, SimConfig(prediction="user_history"))
    with pytest.raises(ConfigError, match="estimate predicted needs a predictor"):
        SimConfig(estimate="predicted")
    assert sim_config({"prediction": "running"}).prediction.kind == "running"
    for bad in ("running:1,2", "learned", "user_history:3", "oracle"):
        with pytest.raises(ConfigError):
            PredictionSpec.parse(bad)
    with pytest.raises(ConfigError, match="PERIOD must be at least 60 s, got 59"):
        PredictionSpec.parse("running:0.4,0.1,0.03,59")
    assert str(PredictionSpec.parse("running:0.5,0.2,0.05,share=0.8")) == "running:0.5,0.2,0.05,300,share=0.8"
    assert PredictionSpec.parse("running:share=1") == PredictionSpec.parse("running")
    for bad in ("running:share=1.5", "running:share=-0.1", "running:share=half", "running:share=nan",
                "running:share=", "running:share=0.5,share=0.6", "running:0.4,0.1,0.03,share=2"):
        with pytest.raises(ConfigError, match=r"share must be one number in \[0, 1\]") as refused:
            PredictionSpec.parse(bad)
        assert "\n" not in str(refused.value)


def test_a_model_file_of_the_wrong_shape_is_refused(tmp_path):
    """A model whose weights do not match its categories (27 fixed weights + 1 user + 0 groups + 0
    queues = 28, here 27) would fail inside numpy at the first prediction: refused when read."""
    path = tmp_path / "bad.json"
    categories = {"user": [7], "group": [], "queue": []}
    path.write_text(json.dumps({"format": 2, "kind": "hpcgym-prerun-ridge", "categories": categories,
                                "weights": [0.0] * 27}))
    with pytest.raises(ConfigError, match="is not an hpcgym run-time model"):
        load_prerun_model(path)
    path.write_text(json.dumps({"format": 2, "kind": "hpcgym-prerun-ridge", "categories": categories,
                                "weights": [0.0] * 28}))
    assert load_prerun_model(path).categories == categories


def test_a_trace_without_user_ids_is_one_line_on_the_command_line():
    from click.testing import CliRunner

    from hpcgym.gymbridge.cli import main

    result = CliRunner().invoke(main, ["run", "--jobs", "50", "--prediction", "user_history"])  # Lublin: no users
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert "user_history needs user ids" in result.output
