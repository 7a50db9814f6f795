"""Rollout workers (gymbridge/training/workers.py): episodes played in worker processes (or Ray
actors) train exactly as in process, a worker that dies or hangs stops the run with one line
and `--resume` goes on from the last checkpoint, and the bad-option lines of `hpcgym train`.

The trainings are tiny (a 30-job window of a small generated trace, 16-unit networks); every
test that starts worker processes is marked slow (each worker imports torch).
"""

from __future__ import annotations

import csv
import functools
import os
import signal
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from click.testing import CliRunner  # noqa: E402

from hpcgym.agents.rl.algorithms import get_algorithm  # noqa: E402
from hpcgym.agents.rl.checkpoint import load_checkpoint  # noqa: E402
from hpcgym.agents.rl.runner import Runner  # noqa: E402
from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings, make_env, train_seed  # noqa: E402
from hpcgym.gymbridge.training.workers import WorkerError  # noqa: E402

from .agents_for_tests import write_trace  # noqa: E402
from .test_rl import TwoSlots  # noqa: E402


def tiny(trace, **changes) -> TrainSettings:
    base = dict(algorithm="ppo", workload={"trace": str(trace), "jobs": 30, "sample": True},
                options={"window": 16}, config={"hidden": [16], "minibatch_size": 64}, epochs=2, trajectories=5,
                envs=3, seed=3, eval_episodes=0)
    return TrainSettings(**{**base, **changes})


def train(settings, out, **workers):
    trainer = Trainer(settings, out, device="cpu", progress=False, log=lambda m: None, **workers)
    trainer.train()
    return trainer


def curve(folder) -> list[dict[str, str]]:
    """curve.csv without its wall-clock column."""
    with open(folder / "curve.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(f)]


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "t.swf", jobs=120, procs=32, seed=4)


# ------------------------------------------------------------------------------------------ in process
def test_an_episode_samples_the_same_actions_whatever_runs_beside_it():
    """Episode j's actions come from its own stream (seed, j) and from a forward pass whose shape
    does not depend on the other envs: one env or three play episode j alike."""
    algo = get_algorithm("ppo")((2, 3), 2, {"hidden": [4]}, seed=0)

    def actions(envs: int) -> dict[int, list[int]]:
        runner = Runner([TwoSlots(mask_prob=0.0) for _ in range(envs)], lambda j: 100 + j, sampling_seed=5)
        played: dict[int, list[int]] = {}
        runner.run_epoch(12, algo.sample, lambda t: played.setdefault(runner.current[t.env].index, []).append(t.action))
        return played

    one, three = actions(1), actions(3)
    assert one == three and len(one) == 12
    assert len({tuple(a) for a in one.values()}) > 1   # the episodes' streams differ from each other


# ------------------------------------------------------------------------------------------ exactness
@pytest.mark.slow
@pytest.mark.parametrize("changes", [
    {},
    # imitation labels from the workers' teachers, episodes cut and thrown away, curriculum phases
    {"teacher": "sjf", "config": {"hidden": [16], "minibatch_size": 64, "imitation_coef": 1.0},
     "discard_after": 64, "curriculum": [["sampled", 5], ["real", 5]]},   # episodes of 30 jobs: ~64 decisions
    {"algorithm": "pg", "config": {"hidden": [16]}, "max_steps": 50},       # cut and bootstrapped
    # cut and thrown away at the same step (the cut marks its last step done, so the discard drops
    # none of its steps, in process too)
    {"max_steps": 64, "discard_after": 64},
], ids=["ppo", "ppo-teacher-discard-curriculum", "pg-max-steps", "ppo-cut-and-discarded"])
def test_workers_train_exactly_as_in_process(tmp_path, trace, changes):
    """The learning curve and the weights of 2 workers are those of the in-process runner, bit for
    bit; for plain PPO, so are 3 workers', and two runs with 2 workers are the same run."""
    settings = tiny(trace, **changes)
    runs = {"inproc": {}, "w2": {"workers": 2}}
    if not changes:
        runs.update({"w2-again": {"workers": 2}, "w3": {"workers": 3}})
    trainers = {name: train(settings, tmp_path / name, **kw) for name, kw in runs.items()}
    reference = curve(tmp_path / "inproc")
    assert len(reference) == 2 and reference[-1]["episodes_total"] >= "10"
    if "discard_after" in changes:
        assert sum(int(row["discarded"]) for row in reference) > 0   # the case is exercised
    for name in runs:
        assert curve(tmp_path / name) == reference, name
        weights = trainers[name].algo.weights()
        assert all(torch.equal(weights[m][k], trainers["inproc"].algo.weights()[m][k])
                   for m in weights for k in weights[m]), name


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["a2c", "dql"])
def test_algorithms_that_update_within_an_epoch_train_on_the_last_sync(tmp_path, trace, algorithm):
    """A2C and DQL with workers: the epochs' episodes are the seed's (the same count and the same
    episode indices as in process), and the learner updates from them."""
    settings = tiny(trace, algorithm=algorithm, config={"hidden": [16]} if algorithm == "a2c" else
                    {"hidden": [16], "learning_starts": 10, "batch_size": 16})
    trainer = train(settings, tmp_path / "w2", workers=2)
    rows = curve(tmp_path / "w2")
    assert [int(r["episodes_total"]) for r in rows] == [5, 10] and trainer.runner.next_episode == 10
    assert all(float(r["updates"]) > 0 for r in rows)


# ------------------------------------------------------------------------------------------ shared memory
@pytest.mark.slow
def test_answers_come_through_shared_memory_and_stay_the_learners():
    """What a worker packs, the learner unpacks equal; the arrays are the learner's own copies (the
    worker's next answer, written over the same block, leaves them be), and when an answer outgrows
    the block the worker makes a larger one and the learner removes the old."""
    from multiprocessing import shared_memory

    from hpcgym.gymbridge.training.workers import SharedArrays

    worker, learner = SharedArrays(), SharedArrays()
    try:
        first = {"obs": np.arange(12, dtype=np.float32).reshape(3, 4), "mask": np.array([True, False]), "n": 7}
        got = learner.unpack(worker.pack(first))
        name = learner.block.name
        assert got["n"] == 7 and np.array_equal(got["obs"], first["obs"]) and np.array_equal(got["mask"], first["mask"])
        learner.unpack(worker.pack({"obs": np.full((3, 4), -1, dtype=np.float32)}))   # same size: same block
        assert learner.block.name == name and np.array_equal(got["obs"], first["obs"])
        big = np.ones(10_000)
        assert np.array_equal(learner.unpack(worker.pack([big]))[0], big) and learner.block.name != name
        with pytest.raises(FileNotFoundError):
            shared_memory.SharedMemory(name)
        assert learner.unpack(worker.pack((False, "failed: no arrays"))) == (False, "failed: no arrays")
    finally:
        learner.close()
        worker.block.close()


# ------------------------------------------------------------------------------------------ faults
def faulty_env(settings: TrainSettings, fatal_seed: int, how: str, index: int):
    """The training env, except that resetting it with `fatal_seed` kills or hangs its process."""
    return Fatal(make_env(settings), fatal_seed, how)


class Fatal(gym.Wrapper):
    def __init__(self, env, fatal_seed: int, how: str) -> None:
        super().__init__(env)
        self.fatal_seed, self.how = fatal_seed, how

    def reset(self, *, seed=None, options=None):
        if seed == self.fatal_seed:
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)
        return self.env.reset(seed=seed, options=options)


@pytest.mark.slow
def test_a_killed_worker_stops_the_run_and_resume_goes_on(tmp_path, trace):
    """Killing the worker that starts episode 7 (epoch 2 of 5-episode epochs) stops the run with
    one line naming that worker and the episodes it held, 7 among them; epoch 1's checkpoint is
    intact, and --resume from it ends where an uninterrupted run ends."""
    settings = tiny(trace, epochs=3)
    out = tmp_path / "killed"
    env_fn = functools.partial(faulty_env, settings, train_seed(settings.seed, 7), "kill")
    trainer = Trainer(settings, out, device="cpu", progress=False, log=lambda m: None, env_fn=env_fn, workers=2)
    with pytest.raises(WorkerError, match=r"^rollout worker \d \(pid \d+\) died \(exit status -9\) while playing "
                                          r"episodes [0-9, ]*(and )?7\b") as error:
        trainer.train()
    assert "\n" not in str(error.value)
    assert [row["epoch"] for row in curve(out)] == ["1"] and load_checkpoint(out / "epoch_000001.pt").epoch == 1
    assert not any(p.is_alive() for p in trainer.runner.workers.procs)   # no worker left behind
    Trainer(settings, out, device="cpu", progress=False, log=lambda m: None, workers=2).train(resume=True)
    train(settings, tmp_path / "whole")
    assert curve(out) == curve(tmp_path / "whole")


@pytest.mark.slow
def test_a_hung_worker_stops_the_run_after_the_timeout(tmp_path, trace):
    settings = tiny(trace, epochs=1)
    env_fn = functools.partial(faulty_env, settings, train_seed(settings.seed, 2), "hang")
    trainer = Trainer(settings, tmp_path / "hung", device="cpu", progress=False, log=lambda m: None, env_fn=env_fn,
                      workers=2, worker_timeout=3)
    with pytest.raises(WorkerError, match=r"rollout worker \d \(pid \d+\) sent nothing for 3 s \(hung\?\) while "
                                          r"playing episodes [0-9, ]*(and )?2\b"):
        trainer.train()
    assert not any(p.is_alive() for p in trainer.runner.workers.procs)


# ------------------------------------------------------------------------------------------ Ray
@pytest.mark.slow
def test_two_ray_actors_train_as_in_process(tmp_path, trace):
    ray = pytest.importorskip("ray")
    settings = tiny(trace, epochs=1)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        train(settings, tmp_path / "ray", workers=2, executor="ray")
    finally:
        ray.shutdown()
    train(settings, tmp_path / "inproc")
    assert curve(tmp_path / "ray") == curve(tmp_path / "inproc")


# ------------------------------------------------------------------------------------------ bad options
@pytest.mark.parametrize("args, line", [
    (["--workers", "0"], "--workers takes 1 or more rollout workers, got 0"),
    (["--address", "ray://head:10001"], "--address is for --executor ray"),
    (["--executor", "ray"], "--executor ray needs Ray"),
])
def test_bad_worker_options_are_one_line_and_exit_2(tmp_path, monkeypatch, args, line):
    from hpcgym.gymbridge.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)   # as if Ray were not installed
    result = CliRunner().invoke(main, ["train", "ppo", "--out", str(tmp_path / "x"), "--no-progress", *args])
    assert result.exit_code == 2 and result.output.strip().startswith(f"error: {line}"), result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
