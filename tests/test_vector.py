"""`make_vector`: envs in worker processes over shared memory give SyncVectorEnv's numbers and
infos bit for bit, for any worker count and autoreset mode; errors and dead workers surface as
one clear exception; close() leaves no process behind; SB3's MaskablePPO trains on it."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from hpcgym.environment.errors import ConfigError  # noqa: E402
from hpcgym.gymbridge import make  # noqa: E402
from hpcgym.gymbridge import vector  # noqa: E402
from hpcgym.gymbridge.vector import DEFAULT_SPIN_S, VectorEnvError, make_vector  # noqa: E402

WINDOW = 8
KWARGS = {"workload": {"jobs": 40, "sample": True, "generate_jobs": 600}, "options": {"window": WINDOW}}
HANG_GUARD_S = 60  # a call that has not returned by then is taken as hung


def _workers() -> list[multiprocessing.Process]:
    return [p for p in multiprocessing.active_children() if p.name.startswith("hpcgym-vector")]


def _run(envs, steps: int = 150, seed: int = 3) -> list:
    """Every reset and step of a masked random policy, recorded; in mode disabled the ended envs
    are reset by hand (`reset_mask`)."""
    disabled = envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.DISABLED
    rng = np.random.default_rng(0)
    obs, info = envs.reset(seed=seed)
    record, masks = [(obs, info)], info["action_mask"].copy()
    try:
        for _ in range(steps):
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            out = envs.step(actions)
            record.append(out)
            masks = out[4]["action_mask"].copy()
            if disabled and out[2].any():
                obs, info = envs.reset(options={"reset_mask": out[2].copy()})
                record.append((obs, info))
                masks[info["_action_mask"]] = info["action_mask"][info["_action_mask"]]
    finally:
        envs.close()
    return record


def _same(a, b, where: str = "") -> None:
    """Equal values of equal types and dtypes, recursively (infos, object arrays included)."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (where, sorted(a), sorted(b))
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{k}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype, a.shape, b.shape)
        if a.dtype == object:
            for k, (x, y) in enumerate(zip(a, b)):
                _same(x, y, f"{where}[{k}]")
        else:
            assert np.array_equal(a, b), where
    else:
        assert a == b, (where, a, b)


def _ended(record) -> int:
    return sum(int(out[2].sum()) for out in record if len(out) == 5)


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_same_run_as_sync_vector_env_for_any_worker_count(mode):
    sync = _run(make_vector(3, "select", seed=3, asynchronous=False, autoreset_mode=mode, **KWARGS))
    assert _ended(sync) >= 3  # episodes ended (and began again) along the way
    for workers in (1, 2, 3):
        for caller_share in (True, False):
            _same(_run(make_vector(3, "select", seed=3, workers=workers, caller_share=caller_share,
                                   autoreset_mode=mode, **KWARGS)), sync, f"workers={workers}, {caller_share}")
    for spin_s in (0.0, 0.01):  # hand-offs asleep on the semaphores, and spinning, whatever the cores
        _same(_run(make_vector(3, "select", seed=3, workers=3, caller_share=False, spin_s=spin_s,
                               autoreset_mode=mode, **KWARGS)), sync, f"spin_s={spin_s}")
    assert not _workers()


def test_spawned_workers_give_the_same_run():
    fork = _run(make_vector(2, "select", seed=3, context="fork", caller_share=False, **KWARGS), steps=60)
    _same(_run(make_vector(2, "select", seed=3, context="spawn", caller_share=False, **KWARGS), steps=60), fork)
    assert not np.array_equal(fork[0][0][0], fork[0][0][1])  # the two envs run different episodes


def _next_episode_start(i: int, n: int, seed: int):
    """Env i's second episode from a fresh single env: seed + i, then + n (the seeding scheme)."""
    env = make("select", seed=seed + i + n, **KWARGS)
    obs, info = env.reset()
    env.close()
    return obs, info


def _until_an_episode_ends(envs, seed: int):
    """Masked random steps from reset(seed) until an env terminates: (its index, obs, info)."""
    rng = np.random.default_rng(1)
    obs, info = envs.reset(seed=seed)
    while True:
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in info["action_mask"]])
        obs, rewards, terminated, truncated, info = envs.step(actions)
        if terminated.any():
            return int(np.flatnonzero(terminated)[0]), obs, info


def test_masks_and_infos_after_next_step_autoreset():
    n, seed = 2, 3
    envs = make_vector(n, "select", seed=seed, **KWARGS)
    try:
        i, obs, info = _until_an_episode_ends(envs, seed)
        # the terminal step: zero observation, the mask of select's mask-free sample (slot 0, the
        # first candidate: HpcEnv's docstring), no kind, the episode's metrics (40 jobs)
        assert not obs[i].any() and info["action_mask"][i].tolist() == [1] + [0] * WINDOW
        assert info["kind"][i] is None and info["_metrics"][i] and info["metrics"]["jobs"][i] == 40
        obs, rewards, terminated, truncated, info = envs.step(np.zeros(n, np.int64))  # env i: ignored
        first_obs, first_info = _next_episode_start(i, n, seed)
        assert rewards[i] == 0.0 and not terminated[i]
        assert np.array_equal(obs[i], first_obs)
        assert np.array_equal(info["action_mask"][i], first_info["action_mask"])
        assert info["episode_seed"][i] == seed + i + n and info["_episode_seed"][i]
        assert info["kind"][i] == "select" and info["initial_reward"][i] == first_info["initial_reward"]
        assert not info["_episode_seed"][1 - i]  # the other env went on with its episode
    finally:
        envs.close()


def test_same_step_autoreset_gives_the_next_episode_at_once():
    n, seed = 2, 3
    envs = make_vector(n, "select", seed=seed, autoreset_mode="same_step", **KWARGS)
    try:
        i, obs, info = _until_an_episode_ends(envs, seed)
        first_obs, first_info = _next_episode_start(i, n, seed)
        assert np.array_equal(obs[i], first_obs) and info["episode_seed"][i] == seed + i + n
        assert np.array_equal(info["action_mask"][i], first_info["action_mask"])
        assert not info["final_obs"][i].any() and info["final_info"]["metrics"]["jobs"][i] == 40
        assert info["final_info"]["kind"][i] is None
    finally:
        envs.close()


def _call_with_guard(fn):
    """fn() in a thread; (its exception, whether it returned within HANG_GUARD_S)."""
    caught: list[BaseException] = []

    def target():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            caught.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    return (caught[0] if caught else None), not thread.is_alive()


@pytest.mark.parametrize("failing", [0, 2])  # env 0 is stepped in this process, env 2 in a worker
def test_an_error_in_a_sub_env_names_the_env_and_closes_the_vector(failing):
    envs = make_vector(3, "select", seed=3, workers=2, **KWARGS)
    obs, info = envs.reset(seed=3)
    actions = np.zeros(3, np.int64)  # slot 0: allowed at every select decision (HpcEnv's docstring)
    actions[failing] = int(np.flatnonzero(info["action_mask"][failing] == 0)[0])
    error, returned = _call_with_guard(lambda: envs.step(actions))
    assert returned, "the step hung"
    assert isinstance(error, VectorEnvError) and f"env {failing} raised MaskedActionError" in str(error)
    assert type(error.__cause__).__name__ == "MaskedActionError"
    assert envs.closed and not _workers()
    with pytest.raises(VectorEnvError, match="closed"):
        envs.step(np.zeros(3, np.int64))


def test_a_worker_that_dies_is_reported_and_reaped():
    envs = make_vector(4, "select", seed=3, workers=2, caller_share=False, **KWARGS)
    envs.reset(seed=3)
    first, second = sorted(_workers(), key=lambda p: p.name)
    os.kill(second.pid, signal.SIGKILL)
    second.join(HANG_GUARD_S)
    error, returned = _call_with_guard(lambda: envs.step(np.zeros(4, np.int64)))
    assert returned, "the step hung on a dead worker"
    assert isinstance(error, VectorEnvError)
    assert "worker process 1 (envs 2..3) died (exit code -9)" in str(error)
    assert not first.is_alive() and not _workers()


def test_close_leaves_no_process():
    envs = make_vector(3, "select", seed=3, workers=3, **KWARGS)
    envs.reset(seed=3)
    started = _workers()
    assert len(started) == 2  # three shares: this process's and two workers'
    envs.close()
    assert all(p.exitcode == 0 for p in started) and not _workers()
    envs.close()  # a second close is harmless


def test_waiting_spins_only_for_in_process_envs_with_a_core_each(monkeypatch, tmp_path):
    """A remote env waits on its server, which may share this machine's cores: no spinning there
    (made, not reset, so no server is needed)."""
    monkeypatch.setattr(vector, "usable_cores", lambda: 4)
    on_server = make_vector(2, "select", remote=f"ipc://{tmp_path}/env.ipc", **KWARGS)
    in_process = make_vector(2, "select", **KWARGS)
    apart = make_vector(2, "select", workers=2, caller_share=False, **KWARGS)
    monkeypatch.setattr(vector, "usable_cores", lambda: 2)
    crowded = make_vector(2, "select", workers=2, caller_share=False, **KWARGS)  # 3 processes, 2 cores
    try:
        assert (in_process._spin_s, apart._spin_s) == (DEFAULT_SPIN_S, DEFAULT_SPIN_S)
        assert (on_server._spin_s, crowded._spin_s) == (0.0, 0.0)
    finally:
        for envs in (on_server, in_process, apart, crowded):
            envs.close()


def test_attributes_and_calls_reach_every_env():
    envs = make_vector(3, "select", seed=3, workers=2, **KWARGS)
    try:
        obs, info = envs.reset(seed=3)
        assert envs.get_attr("window") == (WINDOW,) * 3
        masks = envs.call("action_masks")
        assert all(np.array_equal(m, row) for m, row in zip(masks, info["action_mask"]))
        envs.set_attr("remote_timeout", [1.0, 2.0, 3.0])
        assert envs.get_attr("remote_timeout") == (1.0, 2.0, 3.0)
        assert envs.single_observation_space == make("select", **KWARGS).observation_space
        assert envs.action_space == gym.spaces.MultiDiscrete([WINDOW + 1] * 3)
    finally:
        envs.close()


def test_bad_arguments_are_refused_in_one_line():
    for workers in (0, 4, 1.5):
        with pytest.raises(ValueError, match="workers must be an integer from 1 to the number of envs"):
            make_vector(3, "select", workers=workers, **KWARGS)
    with pytest.raises(ValueError, match="spin_s is the seconds a waiting side spins"):
        make_vector(2, "select", spin_s=-1, **KWARGS)
    for extra in ({"workers": 1}, {"caller_share": False}, {"context": "spawn"}, {"spin_s": 0.0}):
        with pytest.raises(ValueError, match="apply to asynchronous vector envs only"):
            make_vector(2, "select", asynchronous=False, **extra, **KWARGS)
    with pytest.raises(ValueError, match="unknown autoreset_mode 'later'"):
        make_vector(2, "select", autoreset_mode="later", **KWARGS)
    with pytest.raises(ConfigError, match="unknown decision kind"):
        make_vector(2, "choose", **KWARGS)
    assert not _workers()


@pytest.mark.slow
def test_maskable_ppo_trains_on_make_vector():
    """sb3-contrib's MaskablePPO, unchanged, on make_vector(2) through SB3VecEnv: it samples only
    allowed actions (a masked one would raise), and episodes end and begin again."""
    sb3_contrib = pytest.importorskip("sb3_contrib")
    import torch
    from stable_baselines3.common.vec_env import VecMonitor

    from hpcgym.gymbridge.sb3 import SB3VecEnv

    torch.set_num_threads(1)
    envs = VecMonitor(SB3VecEnv(make_vector(2, "select", seed=0, autoreset_mode="same_step", **KWARGS)))
    try:
        model = sb3_contrib.MaskablePPO("MlpPolicy", envs, n_steps=64, batch_size=64, n_epochs=2, seed=0,
                                        device="cpu")
        model.learn(384)
        assert model.num_timesteps == 384
        assert len(model.ep_info_buffer) >= 1  # an episode ended, and its env went on (SB3 would fail else)
        assert all(np.isfinite(e["r"]) and e["l"] >= 1 for e in model.ep_info_buffer)
    finally:
        envs.close()
    assert not _workers()


def test_sb3_adapter_needs_same_step_autoreset():
    pytest.importorskip("stable_baselines3")
    from hpcgym.gymbridge.sb3 import SB3VecEnv

    envs = make_vector(2, "select", seed=0, **KWARGS)
    try:
        with pytest.raises(ValueError, match="autoreset_mode='same_step'"):
            SB3VecEnv(envs)
    finally:
        envs.close()
