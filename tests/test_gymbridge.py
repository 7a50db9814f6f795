"""The Gymnasium bridge: HpcEnv per kind, in process and over ipc:// (identical trajectories),
action masks, and the feature encoders (vector envs: test_vector.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

import msgpack  # noqa: E402
import zmq  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

from hpcgym.agents.base import Agent, PriorityAgent  # noqa: E402
from hpcgym.agents.encoders import (  # noqa: E402
    HORIZONS,
    JobTableEncoder,
    NodeAvailabilityEncoder,
    RunningJobEncoder,
    get_encoder,
)
from hpcgym.environment.decisions import SELECT  # noqa: E402
from hpcgym.environment.errors import ConfigError, InvalidAction  # noqa: E402
from hpcgym.environment.simulator import simulate  # noqa: E402
from hpcgym.environment.spec import load_workload, sim_config  # noqa: E402
from hpcgym.gymbridge import HpcEnv, make  # noqa: E402
from hpcgym.gymbridge.env import DecisionSnapshot, MaskedActionError  # noqa: E402

from .agents_for_tests import write_trace  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_local = Path(sys.executable).parent / "hpcgym"
HPCGYM = str(_local) if _local.exists() else (shutil.which("hpcgym") or "hpcgym")
SMALL = {"jobs": 40, "sample": True, "generate_jobs": 600}
WINDOW = 8
KINDS = ("select", "inspect", "backfill", "kill")


def small_env(kind: str, **kwargs) -> HpcEnv:
    kwargs.setdefault("workload", SMALL)
    kwargs.setdefault("options", {"window": WINDOW})
    return make(kind, **kwargs)


def rollout(env: HpcEnv, seed: int | None, rng: np.random.Generator, *, first_reset=True):
    """A masked random episode; every transition recorded."""
    obs, info = env.reset(seed=seed)
    steps = [(obs, info["initial_reward"], False, info["action_mask"], info.get("decision"))]
    actions = []
    while True:
        a = int(rng.choice(np.flatnonzero(info["action_mask"])))
        actions.append(a)
        obs, reward, terminated, truncated, info = env.step(a)
        assert not truncated
        steps.append((obs, reward, terminated, info["action_mask"], info.get("decision")))
        if terminated:
            return steps, actions, info["metrics"]


def same_steps(a, b) -> None:
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b)):
        assert np.array_equal(x[0], y[0]), k
        assert x[0].dtype == y[0].dtype == np.float32
        assert x[1] == y[1] and type(x[1]) is type(y[1]) is float, (k, x[1], y[1])
        assert x[2] == y[2] and np.array_equal(x[3], y[3]), k
        assert x[4] == y[4], k
        if x[4] is not None:
            assert x[4].observation == y[4].observation, k


# ------------------------------------------------------------------------------------------ gymnasium API
@pytest.mark.parametrize("kind", KINDS)
def test_check_env_passes_for_every_kind(kind):
    env = small_env(kind)
    check_env(env, skip_render_check=True)
    assert env.observation_space.dtype == np.float32
    assert env.action_space.n == (2 if kind == "inspect" else WINDOW + 1)
    env.close()


def test_make_and_lazy_package_import():
    assert isinstance(make("select", workload=SMALL), HpcEnv)
    # the `hpcgym` command line lives in the package: importing it must not need gymnasium
    code = "import sys, hpcgym.gymbridge, hpcgym.gymbridge.cli; assert 'gymnasium' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ConfigError, match="decision kind"):
        make("pick")
    with pytest.raises(ConfigError, match="policy"):
        make("select", workload=SMALL, options={"policy": "nope"})
    with pytest.raises(ConfigError, match="simulation option"):
        make("select", workload=SMALL, options={"windw": 4})
    with pytest.raises(ConfigError, match="conservative"):
        make("select", workload=SMALL, options={"backfill": "conservative"})
    with pytest.raises(ConfigError, match="others"):
        make("select", workload=SMALL, others={"select": PriorityAgent()})
    with pytest.raises(ConfigError, match="unknown encoder"):
        make("select", workload=SMALL, encoder="pixels")
    with pytest.raises(ConfigError, match="unknown encoder option.*priority_size"):
        make("select", workload=SMALL, encoder="dras", encoder_options={"priority_sise": 4})
    with pytest.raises(ConfigError, match="priority_size is a processor count"):
        make("select", workload=SMALL, encoder="dras", encoder_options={"priority_size": 0})


def test_prefetch_says_it_was_removed():
    from hpcgym.gymbridge.vector import make_vector

    for make_it in (lambda: make("select", workload=SMALL, prefetch=True),
                    lambda: make_vector(2, "select", workload=SMALL, prefetch=False)):
        with pytest.raises(TypeError, match="prefetch was removed in issue 41.*draws its workloads in process"):
            make_it()


# ------------------------------------------------------------------------------------------ masks
def test_select_mask_and_invalid_actions():
    env = small_env("select", options={"window": WINDOW, "policy": "sjf"})
    obs, info = env.reset(seed=4)
    rng = np.random.default_rng(1)
    saw_full = False
    for _ in range(400):
        d, mask = info["decision"], info["action_mask"]
        assert mask.dtype == np.int8 and mask.shape == (WINDOW + 1,)
        n = len(d.candidates)
        assert d.candidates == d.observation["queue"]["id"]
        assert mask[:n].all() and not mask[n:WINDOW].any() and mask[WINDOW] == d.can_wait
        saw_full |= n == WINDOW
        if n < WINDOW:
            with pytest.raises(MaskedActionError, match=f"slot {n} is empty"):
                env.step(n)
        for bad in (-1, WINDOW + 1, 1.5, "0", None):
            with pytest.raises(InvalidAction):
                env.step(bad)
        # nothing changed: the same decision is still pending
        assert env.action_masks().tolist() == mask.tolist()
        # wait often (when allowed) so that the queue fills the window
        a = WINDOW if mask[WINDOW] and rng.random() < 0.6 else rng.choice(np.flatnonzero(mask))
        obs, r, term, _, info = env.step(np.int64(a))
        if term:
            break
    assert term and saw_full
    with pytest.raises(InvalidAction, match="reset"):
        env.step(0)


def test_backfill_and_kill_masks_follow_the_candidates():
    env = small_env("backfill", workload={"jobs": 80, "sample": True, "generate_jobs": 600},
                    options={"window": 16})
    obs, info = env.reset(seed=2)
    for _ in range(200):
        d, mask = info["decision"], info["action_mask"]
        ids = d.observation["queue"]["id"]
        assert mask[16] == 1  # stop is always allowed
        expected = [int(j in d.candidates) for j in ids] + [0] * (16 - len(ids))
        assert mask[:16].tolist() == expected
        assert d.context["reserved"] in ids and not mask[ids.index(d.context["reserved"])]
        bad = next(k for k in range(16) if not mask[k])
        with pytest.raises(MaskedActionError, match="not allowed for this backfill decision"):
            env.step(bad)
        slot = int(np.flatnonzero(mask[:16])[0])
        obs, r, term, _, info = env.step(slot)  # backfill the first candidate: EASY's first fit
        if term:
            break
    assert term

    env = small_env("kill")
    obs, info = env.reset(seed=2)
    d, mask = info["decision"], info["action_mask"]
    n = min(len(d.candidates), WINDOW)
    assert d.candidates == d.observation["running"]["id"]
    assert mask[:n + 1].all() and not mask[n + 1:].any()
    victim, now = d.candidates[0], d.time
    obs, r, term, _, info = env.step(1)  # kill the running job that ends first by estimate
    after = info["decision"].observation
    assert victim in after["queue"]["id"] or after["running"]["start"][after["running"]["id"].index(victim)] == now
    while not term:
        obs, r, term, _, info = env.step(0)
    assert info["metrics"]["kills"] == 1


def test_inspect_actions_accept_and_reject():
    env = small_env("inspect")
    obs, info = env.reset(seed=3)
    assert info["action_mask"].tolist() == [1, 1]
    d = info["decision"]
    picked = d.context["jobs"]
    table = obs[:WINDOW * 8].reshape(WINDOW, 8)
    ids = d.observation["queue"]["id"]
    assert [bool(table[k, 7]) for k in range(len(ids))] == [j in picked for j in ids]
    obs, r, term, _, info = env.step(1)  # reject: the pick waits and is asked about again
    d2 = info["decision"]
    assert d2.context["rejections"] >= 1 or d2.context["jobs"] != picked


def test_mask_free_samples_are_always_allowed():
    for kind in KINDS:
        env = small_env(kind)
        obs, info = env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(50):
            a = env.action_space.sample()
            assert info["action_mask"][a], kind
            obs, r, term, _, info = env.step(a)
            if term:
                break


# ------------------------------------------------------------------------------------------ episodes
class Replay(Agent):
    """Replays recorded select actions (job ids) in a plain simulation."""

    kinds = (SELECT,)

    def __init__(self, actions):
        self.actions = list(actions)

    def act(self, decision):
        return self.actions.pop(0)


def test_random_masked_rollout_matches_simulate():
    spec = {"jobs": 60, "sample": True, "generate_jobs": 800}
    env = make("select", workload=spec, options={"window": WINDOW, "policy": "wfp3"}, reward="bsld")
    obs, info = env.reset(seed=11)
    assert info["episode_seed"] == 11
    rng = np.random.default_rng(0)
    job_actions, total = [], 0.0
    while True:
        d, mask = info["decision"], info["action_mask"]
        a = int(rng.choice(np.flatnonzero(mask)))
        job_actions.append(None if a == WINDOW else d.candidates[a])
        obs, r, term, _, info = env.step(a)
        total += r
        if term:
            break
    assert not obs.any() and info["decision"] is None
    metrics = info["metrics"]
    assert metrics["jobs"] == 60
    assert total == -metrics["mean_bsld"]
    workload = load_workload({**spec, "sample": 11}, 11)
    expected = simulate(workload, sim_config({"window": WINDOW}, 11), policy="wfp3",
                        agents={"select": Replay(job_actions)})
    assert metrics == expected.summary


def test_dense_reward_adds_up_to_the_queue_area():
    env = small_env("select", reward="queue_wait")
    obs, info = env.reset(seed=5)
    total = info["initial_reward"]
    while True:
        obs, r, term, _, info = env.step(0)
        total += r
        if term:
            break
    waits = info["metrics"]["mean_wait"] * info["metrics"]["jobs"]
    assert total == pytest.approx(-waits / 3600.0)


def test_episode_seeds_and_job_sequences():
    env = small_env("select")
    seeds = [env.reset(seed=7)[1]["episode_seed"], env.reset()[1]["episode_seed"], env.reset()[1]["episode_seed"]]
    assert seeds == [7, 8, 9]
    first = env.reset(seed=7)[1]["decision"]
    again = small_env("select", seed=7).reset()[1]["decision"]
    assert first == again and first.observation == again.observation
    assert env.reset(seed=8)[1]["decision"] != first
    strided = small_env("select", seed=3, seed_stride=4)
    assert [strided.reset()[1]["episode_seed"] for _ in range(3)] == [3, 7, 11]
    with pytest.raises(ValueError, match="options"):
        env.reset(options={"jobs": 3})


def test_workload_cache_gives_what_load_workload_gives(tmp_path):
    trace = str(write_trace(tmp_path / "t.swf", jobs=150, procs=32, seed=3))
    for spec in ({"trace": trace, "jobs": 30, "sample": True}, {"trace": trace, "jobs": 30, "start": 17},
                 {"trace": trace, "jobs": 30, "sample": 0, "sampled_jobset": True},
                 {"trace": trace, "train_fraction": 0.5, "part": "train"}, SMALL):
        env = make("select", workload=spec)
        for seed in (3, 4, 3):
            episode = env._episode(seed).workload.to_dict()   # the spec of episode `seed`, its window drawn by it
            got, want = env._workloads.load(episode, seed), load_workload(episode, seed)
            for col in ("job_id", "submit", "run", "size", "requested"):
                assert np.array_equal(getattr(got, col), getattr(want, col)), (spec, seed, col)


def test_make_resolves_a_bare_trace_name_through_hpcgym_traces(tmp_path, monkeypatch):
    write_trace(tmp_path / "t.swf", jobs=150, procs=32, seed=3)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("HPCGYM_TRACES", str(tmp_path))
    env = make("select", workload={"trace": "t.swf", "jobs": 30, "sample": True})
    env.reset(seed=0)
    assert len(env._episodes.episode.sim.workload) == 30
    from hpcgym.environment.errors import WorkloadError

    with pytest.raises(WorkloadError, match="HPCGYM_TRACES"):
        make("select", workload={"trace": "absent.swf", "jobs": 30, "sample": True})


def test_episode_without_a_decision_of_the_kind():
    # one job on an empty cluster: no reservation, so never a backfill decision
    env = make("backfill", workload={"jobs": 1, "start": 0, "generate_jobs": 20}, options={"window": 4})
    obs, info = env.reset(seed=0)
    assert not obs.any() and info["decision"] is None and info["action_mask"].tolist() == [0, 0, 0, 0, 1]
    with pytest.raises(MaskedActionError):
        env.step(0)
    obs, r, term, _, info = env.step(4)
    assert term and info["metrics"]["jobs"] == 1 and r == -info["metrics"]["mean_bsld"]


# ------------------------------------------------------------------------------------------ remote
@pytest.fixture
def env_server(tmp_path):
    """`hpcgym env` on ipc:// in tmp_path (or a shorter folder if tmp_path is too long for an
    ipc path); killed at the end whatever happens."""
    short = len(str(tmp_path / "env.ipc")) < 90
    folder = tmp_path if short else Path(tempfile.mkdtemp(prefix="hpcgym-g-", dir="/tmp"))
    address = f"ipc://{folder / 'env.ipc'}"
    err = open(tmp_path / "env.err", "wb")
    proc = subprocess.Popen([HPCGYM, "env", "--bind", address], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                            stdin=subprocess.DEVNULL)
    try:
        _wait_until_serving(address, proc)
        yield address
    finally:
        proc.kill()
        proc.wait(timeout=10)
        err.close()
        if not short:
            shutil.rmtree(folder, ignore_errors=True)


def _wait_until_serving(address: str, proc: subprocess.Popen, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, f"hpcgym env exited early with {proc.returncode}"
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        try:
            sock.send_multipart([b"", msgpack.packb({"type": "hello", "protocol": "1.0", "agent": "probe",
                                                     "kinds": []})])
            if sock.poll(500):
                sock.recv_multipart()
                sock.send_multipart([b"", msgpack.packb({"type": "bye"})])
                sock.poll(500)
                return
        finally:
            sock.close()
    raise AssertionError(f"hpcgym env did not answer at {address} within {deadline_s} s")


@pytest.mark.parametrize("kind,reward,others", [
    ("select", "queue_wait", None),
    ("backfill", "bsld", None),
    ("inspect", "queue_wait", {"select": PriorityAgent("sjf")}),
    ("kill", "wait", None),
])
def test_remote_trajectories_equal_in_process(env_server, kind, reward, others):
    kwargs = {"workload": SMALL, "options": {"window": WINDOW, "policy": "f1"}, "reward": reward, "others": others}
    local, remote = make(kind, **kwargs), make(kind, remote=env_server, **kwargs)
    try:
        for episode, seed in enumerate((5, None)):  # the second: reset() without a seed
            a = rollout(local, seed, np.random.default_rng(episode))
            b_steps, b_actions, b_metrics = _replay(remote, seed, a[1])
            same_steps(a[0], b_steps)
            assert a[2] == b_metrics
            assert isinstance(b_steps[1][4], DecisionSnapshot) or b_steps[1][4] is None
    finally:
        remote.close()
        local.close()


def test_remote_select_kill_with_predictions_equals_in_process(env_server):
    """The joint kind with the running predictor (protocol 1.4): the same observations, masks,
    rewards and metrics over the protocol as in process, random allowed actions (kills too)."""
    kwargs = {"workload": SMALL, "reward": "system_slowdown_prediction",
              "options": {"window": WINDOW, "policy": "f1", "prediction": "running", "estimate": "predicted"}}
    local, remote = make("select_kill", **kwargs), make("select_kill", remote=env_server, **kwargs)
    try:
        # start the first queued job; else, at every 5th decision and 3 times at most, kill the
        # last running job offered; else wait (random kills would make the episode endless)
        obs, info = local.reset(seed=3)
        steps = [(obs, info["initial_reward"], False, info["action_mask"], info.get("decision"))]
        actions, terminated = [], False
        while not terminated:
            mask = info["action_mask"]
            kills = np.flatnonzero(mask[WINDOW:2 * WINDOW])
            killed = sum(WINDOW <= a < 2 * WINDOW for a in actions)
            a = (0 if mask[0] else WINDOW + int(kills[-1]) if len(kills) and len(actions) % 5 == 0 and killed < 3
                 else 2 * WINDOW)
            actions.append(a)
            obs, reward, terminated, _, info = local.step(a)
            steps.append((obs, reward, terminated, info["action_mask"], info.get("decision")))
            assert len(actions) < 20_000
        metrics = info["metrics"]
        assert metrics["kills"] == 3
        b_steps, _, b_metrics = _replay(remote, 3, actions)
        same_steps(steps, b_steps)
        assert metrics == b_metrics
    finally:
        remote.close()
        local.close()


def _replay(env, seed, actions):
    obs, info = env.reset(seed=seed)
    steps = [(obs, info["initial_reward"], False, info["action_mask"], info.get("decision"))]
    for a in actions:
        obs, reward, terminated, _, info = env.step(a)
        steps.append((obs, reward, terminated, info["action_mask"], info.get("decision")))
    assert terminated
    return steps, actions, info["metrics"]


def test_remote_env_passes_check_env_and_reports_refusals(env_server):
    env = make("select", workload=SMALL, options={"window": WINDOW}, remote=env_server)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()
    bad = make("select", workload={"jobs": 10, "sample": True, "trace": "/nonexistent.swf"}, remote=env_server)
    try:
        with pytest.raises(Exception, match="refused: bad_request"):
            bad.reset()
    finally:
        bad.close()


# ------------------------------------------------------------------------------------------ encoders
def _observation(queue_rows, running_rows, *, now=1000, free=10, procs=64, context=None):
    q = {"id": [], "submit": [], "size": [], "requested": [], "estimate": [], "wait": [], "rejections": [], "user": []}
    for i, (size, wait, req, rej) in enumerate(queue_rows):
        for key, value in (("id", 100 + i), ("submit", now - wait), ("size", size), ("requested", req),
                           ("estimate", req), ("wait", wait), ("rejections", rej), ("user", 1)):
            q[key].append(value)
    r = {"id": [], "start": [], "size": [], "requested": [], "estimated_end": []}
    for i, (size, start, end) in enumerate(running_rows):
        for key, value in (("id", 200 + i), ("start", start), ("size", size), ("requested", end - start),
                           ("estimated_end", end)):
            r[key].append(value)
    return {"time": now, "procs": procs, "free": free, "queue_length": len(queue_rows), "queue": q,
            "running": r, "context": context or {}}


def test_job_table_encoder_columns():
    enc = JobTableEncoder(4, procs=64, max_rejections=10)
    obs = _observation([(8, 0, 60, 0), (32, 3600, 7 * 86400, 5), (64, 10**9, 10**9, 50)], [(54, 0, 5000)],
                       context={"jobs": [101], "rejections": 5, "max_rejections": 10})
    assert enc.observation_space(4, 64).shape == (32,)
    table = enc.encode(obs).reshape(4, 8)
    assert table.dtype == np.float32 and ((0 <= table) & (table <= 1)).all()
    assert table[:, 0].tolist() == [1, 1, 1, 0] and not table[3].any()
    assert table[0, 1] == 0.0 and table[1, 1] == pytest.approx(np.log1p(3600) / np.log1p(7 * 86400))
    assert table[1, 2] == pytest.approx(1.0) and table[2, 1] == 1.0 and table[2, 2] == 1.0
    assert table[:3, 4].tolist() == [0.125, 0.5, 1.0]
    assert table[:3, 5].tolist() == [0.0, 0.5, 1.0]
    assert table[:3, 6].tolist() == [1.0, 0.0, 0.0]  # free 10
    assert table[:3, 7].tolist() == [0.0, 1.0, 0.0]  # the inspected pick
    backfill = _observation([(8, 0, 60, 0), (4, 0, 60, 0)], [], context={"reserved": 100, "shadow_time": 5,
                                                                          "extra": 0})
    assert enc.encode(backfill).reshape(4, 8)[:2, 7].tolist() == [1.0, 0.0]
    # a longer queue than the window shows its first rows only
    many = _observation([(1, k, 60, 0) for k in range(9)], [])
    assert enc.encode(many).reshape(4, 8)[:, 0].tolist() == [1, 1, 1, 1]


def test_node_and_running_encoders():
    obs = _observation([], [(16, 0, 500), (8, 0, 1000 + 600), (32, 0, 1000 + 86400)], free=8, procs=64)
    nodes = NodeAvailabilityEncoder(64)
    v = nodes.encode(obs)
    assert v.shape == (len(HORIZONS),) and v.dtype == np.float32
    # now: 8 free; the overdue job (16) counts from 5 minutes; +8 by 15 minutes; +32 within 1 day
    assert v[0] == 8 / 64 and v[1] == 24 / 64 and v[2] == 32 / 64
    assert v[HORIZONS.index(86400)] == 1.0 and (np.diff(v) >= 0).all()
    empty = _observation([], [], free=64)
    assert nodes.encode(empty).tolist() == [1.0] * len(HORIZONS)
    running = RunningJobEncoder(4, 64).encode(obs).reshape(4, 6)
    assert running[:, 0].tolist() == [1, 1, 1, 0]
    assert running[:3, 5].tolist() == [1.0, 0.0, 0.0]  # overdue
    assert running[0, 3] == 0.0 and running[:3, 4].tolist() == [0.25, 0.125, 0.5]
    assert ((0 <= running) & (running <= 1)).all()


def test_get_encoder_registry():
    both = get_encoder("jobs+nodes", 16, 128)
    assert both.size == 16 * 8 + len(HORIZONS)
    assert [(n, off, shape) for n, off, shape in both.parts] == [("jobs", 0, (16, 8)),
                                                                ("nodes", 128, (len(HORIZONS),))]
    space = both.observation_space(16, 128)
    assert space.shape == (both.size,) and space.dtype == np.float32
    with pytest.raises(ValueError):
        both.observation_space(32, 128)
    assert get_encoder("running+nodes", 4).size == 4 * 6 + len(HORIZONS)
    with pytest.raises(ValueError, match="unknown encoder"):
        get_encoder("jobs+pixels", 4, 8)
    # in an env, every observation lies in the space
    env = small_env("select", encoder="jobs")
    obs, info = env.reset(seed=1)
    assert obs.shape == (WINDOW * 8,) and obs in env.observation_space


def test_snapshots_pickle_and_compare():
    import pickle

    env = small_env("inspect", others={"select": PriorityAgent("sjf")})
    _, info = env.reset(seed=2)
    d = info["decision"]
    back = pickle.loads(pickle.dumps(d))
    assert back == d and back.observation == d.observation


# ------------------------------------------------------------------------------------------ select + backfill
TWO = ("select", "backfill")


def test_two_kind_env_passes_check_env_and_flags_the_kind():
    env = small_env(TWO)
    check_env(env, skip_render_check=True)
    single = small_env("select")
    assert env.action_space.n == WINDOW + 1 and env.kinds == TWO and env.kind == TWO
    assert env.observation_space.shape == (single.observation_space.shape[0] + 2,)
    assert small_env(("backfill", "select")).kinds == TWO
    with pytest.raises(ConfigError, match="select and backfill"):
        make(("select", "inspect"), workload=SMALL)
    with pytest.raises(ConfigError, match="select and backfill"):
        make(("select", "select"), workload=SMALL)
    with pytest.raises(ConfigError, match="others"):
        make(TWO, workload=SMALL, others={"backfill": PriorityAgent()})
    obs, info = env.reset(seed=3)
    env.action_space.seed(0)
    seen = set()
    for _ in range(400):
        kind = info["kind"]
        seen.add(kind)
        assert obs[-2:].tolist() == ([1.0, 0.0] if kind == "select" else [0.0, 1.0])
        assert info["decision"].kind == kind
        a = env.action_space.sample()  # mask-free: the current kind's safe action
        assert info["action_mask"][a]
        assert a == (0 if kind == "select" else WINDOW)
        if kind == "select":  # the select part matches a select-only env's encoding
            assert np.array_equal(obs[:-2], single.encoder.encode(info["decision"].observation))
        obs, r, term, _, info = env.step(a)
        if term:
            assert info["kind"] is None and not obs.any()
            break
    assert seen == set(TWO)
    env.close()
    single.close()


def test_two_kind_remote_trajectories_equal_in_process(env_server):
    kwargs = {"workload": SMALL, "options": {"window": WINDOW}, "reward": "bsld"}
    local, remote = make(TWO, **kwargs), make(TWO, remote=env_server, **kwargs)
    try:
        a = rollout(local, 7, np.random.default_rng(1))
        assert {d.kind for *_, d in a[0] if d is not None} == set(TWO)
        b_steps, _, b_metrics = _replay(remote, 7, a[1])
        same_steps(a[0], b_steps)
        assert a[2] == b_metrics
    finally:
        remote.close()
        local.close()


def test_two_kind_backfill_never_delays_the_reservation():
    """Exact estimates, random masked actions (select keeps to a pending reservation): every
    backfill slot the mask allows fits now and ends by the shadow time or fits in the extra
    processors, and the reserved job starts by the shadow time recorded at each backfill decision."""
    env = make(TWO, workload={"jobs": 80, "sample": True, "generate_jobs": 800},
               options={"window": WINDOW, "estimate": "actual"})
    rng = np.random.default_rng(0)
    deadlines: dict[int, int] = {}  # reserved job -> earliest shadow time recorded for it
    backfills = 0
    obs, info = env.reset(seed=2)
    while True:
        d, mask = info["decision"], info["action_mask"]
        raw = d.observation
        q = raw["queue"]
        if info["kind"] == "backfill":
            ctx = raw["context"]
            reserved, shadow, extra = ctx["reserved"], ctx["shadow_time"], ctx["extra"]
            deadlines[reserved] = min(shadow, deadlines.get(reserved, shadow))
            assert mask[WINDOW] == 1
            for k in np.flatnonzero(mask[:WINDOW]):
                assert q["id"][k] != reserved and q["size"][k] <= raw["free"]
                assert raw["time"] + q["estimate"][k] <= shadow or q["size"][k] <= extra
            backfills += int(mask[:WINDOW].sum() > 0)
            a = int(rng.choice(np.flatnonzero(mask)))
        else:
            pending = [j for j in deadlines if j in q["id"]]
            a = q["id"].index(pending[0]) if pending else int(rng.choice(np.flatnonzero(mask)))
        obs, r, term, _, info = env.step(a)
        if term:
            break
    assert info["metrics"]["jobs"] == 80 and backfills > 0 and deadlines
    jobs = env._episodes.episode.sim.result().jobs
    start = dict(zip(jobs["job_id"].tolist(), jobs["start"].tolist()))
    for job, shadow in deadlines.items():
        assert start[job] <= shadow, (job, start[job], shadow)
    env.close()


# ------------------------------------------------------------------------------------------ gymnasium ids
GYM_IDS = {"hpcgym/Select-v0": ("select",), "hpcgym/Backfill-v0": ("backfill",), "hpcgym/Inspect-v0": ("inspect",),
           "hpcgym/Kill-v0": ("kill",), "hpcgym/SelectBackfill-v0": ("select", "backfill")}


@pytest.mark.parametrize("env_id", list(GYM_IDS))
def test_gymnasium_make_by_id_is_the_env_of_that_kind(env_id):
    """gymnasium.make(id, **keywords) builds HpcEnv for the id's kinds (under Gymnasium's own
    wrappers and passive checker), and plays exactly the episode hpcgym.gymbridge.make does."""
    kinds = GYM_IDS[env_id]
    env = gym.make(env_id, workload=SMALL, options={"window": WINDOW}, reward="queue_wait")
    assert env.spec.id == env_id and env.unwrapped.kinds == kinds
    assert env.action_space.n == (2 if kinds == ("inspect",) else WINDOW + 1)
    direct = make(kinds[0] if len(kinds) == 1 else kinds, workload=SMALL, options={"window": WINDOW},
                  reward="queue_wait")
    made, _, made_metrics = rollout(env, 3, np.random.default_rng(1))
    ref, _, ref_metrics = rollout(direct, 3, np.random.default_rng(1))
    same_steps(made, ref)
    assert made_metrics == ref_metrics and len(made) > 2
    env.close()
    direct.close()


REGISTRATION_SCRIPT = """
import sys
import numpy as np
{first}
assert "gymnasium" {check} sys.modules
import gymnasium as gym
for env_id in {ids!r}:
    env = gym.make({prefix!r} + env_id, workload={{"jobs": 20, "sample": True, "generate_jobs": 200}},
                   options={{"window": 4}})
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
    print(env_id, env.unwrapped.kinds)
"""


@pytest.mark.parametrize("first, check, prefix", [
    ("import hpcgym.gymbridge.cli", "not in", ""),           # the command line starts without gymnasium
    ("import gymnasium", "in", "hpcgym.gymbridge:"),         # gymnasium's "module:id" form
])
def test_the_ids_are_registered_whichever_is_imported_first(first, check, prefix):
    script = REGISTRATION_SCRIPT.format(first=first, check=check, prefix=prefix, ids=list(GYM_IDS))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd="/")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"{i} {k}" for i, k in GYM_IDS.items()]
