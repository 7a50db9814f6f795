"""HpcEnv's render modes (gymbridge/render.py): the pending decision as text, the schedule so far
as an image, both as Gymnasium's checker and tools expect them."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from hpcgym import gymbridge  # noqa: E402
from hpcgym.environment.errors import ConfigError  # noqa: E402

from .test_gymbridge import env_server  # noqa: E402, F401  (a fixture)

WORKLOAD = {"jobs": 120}


def play(env, steps: int) -> dict:
    """Reset, then take up to `steps` masked random actions; the last info."""
    _, info = env.reset(seed=1)
    for _ in range(steps):
        _, _, terminated, _, info = env.step(env.action_space.sample(mask=info["action_mask"]))
        if terminated:
            break
    return info


def queue_ids(info: dict) -> list[int]:
    return list(info["decision"].observation["queue"]["id"])


@pytest.mark.parametrize("kind", ["select", "backfill"])
def test_ansi_shows_the_pending_decision_and_its_queue(kind):
    env = gymbridge.make(kind, workload=WORKLOAD, render_mode="ansi")
    assert env.render() is None  # before the first reset
    for steps in (0, 5):
        info = play(env, steps)
        text = env.render()
        decision = info["decision"]
        assert isinstance(text, str) and f"{kind} decision" in text
        assert f"t={decision.time} s" in text and f"of {decision.observation['procs']}" in text
        ids = queue_ids(info)
        assert ids
        rows = [line.split() for line in text.splitlines()]
        listed = [int(r[1]) for r in rows if len(r) == 5 and r[0].isdigit()]  # slot, job, size, requested, wait
        assert listed == ids
        if kind == "backfill":
            assert f"reserved={decision.context['reserved']}" in text


def test_ansi_at_the_end_gives_the_metrics():
    env = gymbridge.make("select", workload={"jobs": 20}, render_mode="ansi")
    play(env, 10_000)
    assert env.render().startswith("episode ended: jobs 20, mean_bsld ")


def bar_pixels(frame: np.ndarray) -> int:
    """Pixels in one of the kinds-of-start colours (the bars)."""
    from hpcgym.gymbridge.compare.schedule_report import KIND_COLOURS

    colours = [tuple(int(c[k:k + 2], 16) for k in (1, 3, 5)) for c in KIND_COLOURS]
    return int(sum((frame == np.array(c, np.uint8)).all(axis=-1).sum() for c in colours))


def test_rgb_array_draws_the_jobs_started_so_far():
    pytest.importorskip("matplotlib")
    env = gymbridge.make("select", workload=WORKLOAD, render_mode="rgb_array")
    play(env, 0)
    first = env.render()
    assert first.dtype == np.uint8 and first.ndim == 3 and first.shape[2] == 3
    play(env, 40)
    later = env.render()
    assert later.shape == first.shape
    assert bar_pixels(later) > 1000  # bars, not a blank frame
    assert not np.array_equal(later, first)


@pytest.mark.filterwarnings("error::UserWarning")  # the checker's complaints are warnings
@pytest.mark.parametrize("mode", ["ansi", "rgb_array"])
def test_check_env_renders_every_mode(mode):
    pytest.importorskip("matplotlib")
    env = gym.make("hpcgym/Select-v0", workload={"jobs": 30}, render_mode=mode, disable_env_checker=True)
    check_env(env.unwrapped)  # the render check too, and each declared mode through the spec


def test_an_unknown_render_mode_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="render_mode 'human' is not offered: use one of ansi, rgb_array") as e:
        gymbridge.make("select", workload=WORKLOAD, render_mode="human")
    assert "\n" not in str(e.value)


def test_a_remote_env_renders_ansi_only(env_server):  # noqa: F811
    with pytest.raises(ConfigError, match="a remote env renders 'ansi' only") as e:
        gymbridge.make("select", workload=WORKLOAD, remote=env_server, render_mode="rgb_array")
    assert "\n" not in str(e.value)
    env = gymbridge.make("select", workload=WORKLOAD, remote=env_server, render_mode="ansi")
    try:
        info = play(env, 3)
        assert "select decision" in env.render() and str(queue_ids(info)[0]) in env.render()
    finally:
        env.close()
