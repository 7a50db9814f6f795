"""Generated workloads drawn ahead in a helper process (gymbridge/prefetch.py): the same episodes
as drawing them at reset, in a lone env and in a vector env, and nothing lost when the helper dies."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from hpcgym.environment.errors import ConfigError  # noqa: E402
from hpcgym.gymbridge import make  # noqa: E402
from hpcgym.gymbridge import vector  # noqa: E402
from hpcgym.gymbridge.vector import make_vector  # noqa: E402

KWARGS = {"workload": {"jobs": 40, "sample": True, "generate_jobs": 600}, "options": {"window": 8}}


def _episodes(env, episodes: int, rng: np.random.Generator, before_reset=lambda: None) -> list:
    """Every step's observation, reward and mask, and each episode's metrics, of `episodes`
    seedless episodes with random allowed actions."""
    seen = []
    for _ in range(episodes):
        before_reset()
        obs, info = env.reset()
        seen.append((info["episode_seed"], obs.copy()))
        done = False
        while not done:
            action = int(np.argmax(rng.random(info["action_mask"].shape) * info["action_mask"]))
            obs, reward, done, _, info = env.step(action)
            seen.append((obs.copy(), reward, info["action_mask"].copy()))
        seen.append(info["metrics"])
    return seen


def _same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, dict):
            assert x == y
        else:
            for u, v in zip(x, y):
                assert np.array_equal(u, v)


def _helpers() -> list:
    return [p for p in multiprocessing.active_children() if p.name == "hpcgym-prefetch"]


def test_a_lone_env_plays_the_same_episodes_with_workloads_drawn_ahead():
    plain = make("select", seed=5, seed_stride=3, **KWARGS)
    ahead = make("select", seed=5, seed_stride=3, prefetch=True, **KWARGS)
    try:
        client = ahead.unwrapped._prefetch
        expected = _episodes(plain, 6, np.random.default_rng(1))
        _same(_episodes(ahead, 6, np.random.default_rng(1), before_reset=lambda: client.wait(30)), expected)
        assert ahead.unwrapped.prefetched == 5  # every episode after the first
        # A reset with another seed than the one foreseen draws its own workload, the same one.
        plain.reset(seed=100)
        obs, info = ahead.reset(seed=100)
        assert info["episode_seed"] == 100 and ahead.unwrapped.prefetched == 5
        assert np.array_equal(obs, plain.reset(seed=100)[0])
    finally:
        plain.close()
        ahead.close()
    assert not _helpers()


def test_a_dead_helper_costs_only_the_prefetching():
    plain = make("select", seed=2, **KWARGS)
    ahead = make("select", seed=2, prefetch=True, **KWARGS)
    client = ahead.unwrapped._prefetch
    try:
        expected = _episodes(plain, 4, np.random.default_rng(3))
        rng = np.random.default_rng(3)
        seen = _episodes(ahead, 2, rng, before_reset=lambda: client.wait(30))
        assert ahead.unwrapped.prefetched == 1 and client.wait(30)  # the third episode's has come
        client._helper.kill()
        client._helper.join()
        with pytest.warns(RuntimeWarning, match="prefetch helper has stopped"):
            seen += _episodes(ahead, 2, rng)
        _same(seen, expected)
        assert not client.alive and not client.wait(0.1) and ahead.unwrapped.prefetched == 2
    finally:
        plain.close()
        ahead.close()


def _vector_run(envs, steps: int) -> list:
    rng = np.random.default_rng(0)
    obs, info = envs.reset()
    seen = [obs.copy()]
    for _ in range(steps):
        mask = info["action_mask"]
        obs, reward, terminated, _, info = envs.step(np.argmax(rng.random(mask.shape) * mask, axis=-1))
        seen.append((obs.copy(), reward.copy(), terminated.copy(), info["action_mask"].copy()))
    return seen


@pytest.mark.parametrize("caller_share", [True, False])
def test_a_vector_env_plays_the_same_episodes_with_workloads_drawn_ahead(caller_share):
    plain = make_vector(3, "select", seed=7, prefetch=False, **KWARGS)
    ahead = make_vector(3, "select", seed=7, prefetch=True, workers=2, caller_share=caller_share, **KWARGS)
    try:
        assert ahead.prefetch and not plain.prefetch and len(_helpers()) == 1
        expected = _vector_run(plain, 3000)
        _same(_vector_run(ahead, 3000), expected)
        # dozens of episodes an env: a helper that started at once drew most of them ahead
        assert sum(ahead.get_attr("prefetched")) > 0 and sum(plain.get_attr("prefetched")) == 0
    finally:
        plain.close()
        ahead.close()
    assert not _helpers()


def test_a_vector_draws_ahead_by_default_where_a_core_is_left(monkeypatch):
    made = []
    try:
        for cores, expected in ((4, True), (2, False)):
            monkeypatch.setattr(vector, "usable_cores", lambda: cores)
            made.append(make_vector(2, "select", **KWARGS))  # this process and one worker
            assert made[-1].prefetch is expected
        monkeypatch.setattr(vector, "usable_cores", lambda: 4)
        made.append(make_vector(2, "select", remote="ipc:///tmp/hpcgym-no-server.ipc", **KWARGS))
        assert made[-1].prefetch is False  # a core left, but remote envs draw nothing here
    finally:
        for envs in made:
            envs.close()


def test_prefetch_where_nothing_is_drawn_is_refused(tmp_path):
    trace = tmp_path / "tiny.swf"
    jobs = (f"{i} {i * 10} 0 100 4 -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n" for i in range(1, 60))
    trace.write_text("; MaxProcs: 64\n" + "".join(jobs))
    for make_it in (lambda: make("select", workload={"trace": str(trace), "jobs": 20, "sample": True}, prefetch=True),
                    lambda: make("select", remote=f"ipc://{tmp_path}/env.ipc", prefetch=True, **KWARGS)):
        with pytest.raises(ConfigError, match="prefetch draws generated workloads ahead"):
            make_it()
    with pytest.raises(ValueError, match="prefetch draws generated workloads ahead: it needs in-process HpcEnvs"):
        make_vector(2, "select", workload={"trace": str(trace), "jobs": 20, "sample": True}, prefetch=True)
    with pytest.raises(ValueError, match="apply to asynchronous vector envs only"):
        make_vector(2, "select", asynchronous=False, prefetch=True, **KWARGS)
    assert not _helpers()


def test_a_lone_env_in_a_daemonic_worker_is_told_to_use_the_vector():
    """A daemonic process (Gymnasium's AsyncVectorEnv workers are) may not start the helper."""
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()

    def build() -> None:
        try:
            make("select", prefetch=True, **KWARGS)
            there.send("made")
        except Exception as exc:
            there.send(f"{type(exc).__name__}: {exc}")

    worker = ctx.Process(target=build, daemon=True)
    worker.start()
    said = here.recv() if here.poll(60) else "no answer"
    worker.join(10)
    assert said.startswith("ConfigError: prefetch starts a helper process") and "make_vector" in said
