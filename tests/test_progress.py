"""Progress off a terminal (issue 45, friction 8): a line at the start and a heartbeat while nothing
ends, and a percentage of the whole run (train said 100% with an epoch's update still to come)."""

from __future__ import annotations

import time

import pytest
from hpcgym.gymbridge import progress


def test_plain_lines_start_at_once_and_beat_while_nothing_ends(capsys):
    lines = progress.ProgressLines(40, "units", "compare", every=0.1)
    time.sleep(0.35)
    lines.close()
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("compare: 0/40 units (0%), 00:00 elapsed")  # before any unit ends
    assert len(said) >= 3 and all(line.startswith("compare: 0/40 units (0%)") for line in said), said
    time.sleep(0.25)
    assert capsys.readouterr().err == ""  # closed: no more beats


def test_train_says_100_percent_only_when_its_last_epoch_is_done(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings

    from .test_rl import TINY, TwoSlots

    monkeypatch.setattr(progress, "EVERY", 0.0)  # a line at every episode
    settings = TrainSettings(algorithm="pg", config=TINY["pg"], epochs=2, trajectories=4, envs=2, seed=0,
                             eval_episodes=0)
    Trainer(settings, tmp_path / "run", device="cpu", env_fn=lambda i: TwoSlots(), progress=None,
            log=lambda m: None).train()
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("train: ")]
    counts = [line.split(" episodes")[0].removeprefix("train: ") for line in said]
    assert counts == ["0/8", "1/8", "2/8", "3/8", "4/8", "5/8", "6/8", "7/8", "8/8"], said
    assert "epoch 1/2" in said[4] and "epoch 2/2" in said[-1], said  # 4/8 once epoch 1 is trained
