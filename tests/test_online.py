"""Online adaptation of a served checkpoint (agents/rl/online.py, DRAS's "dynamic DRAS-PPO"):
the algorithms' `update(storage)` is exactly the second half of a training epoch; an online
agent updates after `every` decisions and not before, credits each reward to the decision
before it, is deterministic, refuses what it cannot adapt, and runs in `hpcgym compare`
(`online:PATH`) and over a real socket (`hpcgym agent --model ... --online`).

A tiny PPO checkpoint (one short epoch on generated 64-job Lublin workloads, window 8) serves
as the policy; PG and A2C checkpoints are untrained networks of the same shape.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gymnasium")
torch.set_num_threads(1)

from click.testing import CliRunner  # noqa: E402

from hpcgym.agents.rl.algorithms import get_algorithm  # noqa: E402
from hpcgym.agents.rl.checkpoint import load_checkpoint, make_checkpoint, save_checkpoint  # noqa: E402
from hpcgym.agents.rl.online import OnlineRLAgent  # noqa: E402
from hpcgym.agents.rl.runner import Runner  # noqa: E402
from hpcgym.agents.rl.serve import RLAgent  # noqa: E402
from hpcgym.environment.config import SimConfig  # noqa: E402
from hpcgym.environment.errors import HpcgymError  # noqa: E402
from hpcgym.environment.lublin import generate_lublin  # noqa: E402
from hpcgym.environment.simulator import simulate  # noqa: E402
from hpcgym.environment.spec import load_workload, sim_config  # noqa: E402
from hpcgym.environment.swf import write_swf  # noqa: E402

from .test_rl import TINY, TwoSlots  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_local = Path(sys.executable).parent / "hpcgym"
HPCGYM = str(_local) if _local.exists() else (shutil.which("hpcgym") or "hpcgym")
JOBS, WINDOW = 64, 8
CONFIG = SimConfig(window=WINDOW)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """ppo: trained one epoch of two episodes; pg, a2c: untrained, same shapes and env record."""
    from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings

    folder = tmp_path_factory.mktemp("online-models")
    settings = TrainSettings(algorithm="ppo", workload={"generate_jobs": JOBS}, options={"window": WINDOW},
                             encoder="jobs", config={"hidden": [8], "minibatch_size": 64, "update_epochs": 2},
                             epochs=1, trajectories=2, envs=1, seed=1, eval_episodes=0)
    Trainer(settings, folder / "ppo", device="cpu", progress=False, log=lambda m: None).train()
    out = {"ppo": folder / "ppo" / "model.pt"}
    ppo = load_checkpoint(out["ppo"])
    for name in ("pg", "a2c", "dql"):
        algo = get_algorithm(name)(ppo.obs_shape, ppo.n_actions, {"hidden": [8]}, seed=2)
        out[name] = save_checkpoint(folder / f"{name}.pt", make_checkpoint(algo, encoder=ppo.encoder, window=WINDOW,
                                                                           env=ppo.env))
    out["queue_wait"] = save_checkpoint(folder / "qw.pt", make_checkpoint(
        ppo.build(), encoder=ppo.encoder, window=WINDOW, env={**ppo.env, "reward": "queue_wait"}))
    return out


def workload(seed: int = 5):
    return load_workload({"generate_jobs": JOBS}, seed)


def weights(agent) -> dict[str, torch.Tensor]:
    return {f"{m}.{n}": t.clone() for m, sd in agent.algorithm.weights().items() for n, t in sd.items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def run_episode(agent, seed: int = 5, end: bool = True):
    result = simulate(workload(seed), CONFIG, agents={"select": agent})
    if end:
        agent.on_episode_end(dict(result.summary))
    return result


# ------------------------------------------------------------------------------------------ update()
@pytest.mark.parametrize("algorithm", ["pg", "a2c", "ppo"])
def test_train_epoch_is_collect_then_update(algorithm):
    """An epoch of train_epoch and, from the same seed, collect + update by hand: the same
    weights, optimizer state and statistics, bit for bit (A2C with one segment per epoch)."""
    config = {**TINY[algorithm], **({"n_steps": 10_000} if algorithm == "a2c" else {})}
    algos = [get_algorithm(algorithm)((2, 3), 2, config, seed=4) for _ in range(2)]
    runners = [Runner([TwoSlots(), TwoSlots()], lambda j: 50 + j) for _ in range(2)]
    stats = algos[0].train_epoch(runners[0], 12)
    storage, _ = algos[1].collect(runners[1], 12)
    by_hand = algos[1].update(storage)
    assert all(torch.equal(a, b) for a, b in zip(algos[0].model.parameters(), algos[1].model.parameters()))
    assert algos[0].updates == algos[1].updates > 0
    assert {k: v for k, v in stats.items() if k in by_hand and k != "updates"} == \
        {k: v for k, v in by_hand.items() if k != "updates"}
    assert not all(torch.equal(a, b) for a, b in zip(algos[0].model.parameters(),
                                                      get_algorithm(algorithm)((2, 3), 2, config, seed=4)
                                                      .model.parameters()))


# ------------------------------------------------------------------------------------------ the agent
class Recorder:
    """Forwards to an online agent, noting its weights after each decision."""

    kinds = ("select",)

    def __init__(self, agent: OnlineRLAgent) -> None:
        self.agent, self.after = agent, []

    def act(self, decision):
        action = self.agent.act(decision)
        self.after.append((weights(self.agent), self.agent.updates))
        return action


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["pg", "a2c", "ppo"])
def test_weights_change_after_every_decisions_and_not_before(models, algorithm, tmp_path):
    every = 10
    agent = OnlineRLAgent(models[algorithm], every=every, seed=1, save=tmp_path / "adapted.pt")
    original = weights(agent)
    recorder = Recorder(agent)
    result = run_episode(recorder, end=False)
    # decisions 1..every only record; decision every + 1 updates on those `every`, then acts
    assert all(same(w, original) and n == 0 for w, n in recorder.after[:every])
    assert not same(recorder.after[every][0], original) and recorder.after[every][1] == 1
    assert same(recorder.after[2 * every - 1][0], recorder.after[every][0])
    assert recorder.after[2 * every][1] == 2
    decisions = len(recorder.after)
    assert decisions > 4 * every and agent.decisions == decisions
    assert agent.updates == (decisions - 1) // every
    # the learning rate: the checkpoint's / 10 while serving; the saved file keeps the training one
    train_lr = load_checkpoint(models[algorithm]).config["lr"]
    assert agent.algorithm.optimizer.param_groups[0]["lr"] == pytest.approx(train_lr / 10)
    saved = load_checkpoint(tmp_path / "adapted.pt")
    assert saved.trainer["online"]["updates"] == agent.updates
    assert saved.state["optimizers"]["optimizer"]["param_groups"][0]["lr"] == train_lr
    assert same({f"{m}.{n}": t for m, sd in saved.build().weights().items() for n, t in sd.items()}, weights(agent))
    info = agent.describe()["online"]
    assert (info["decisions"], info["updates"], info["every"], info["reward"]) == (decisions, agent.updates, every,
                                                                                   "metrics")
    assert result.summary["jobs"] == JOBS


@pytest.mark.slow
def test_episode_end_updates_a_large_enough_tail_and_keeps_a_small_one(models, tmp_path):
    """At the end the last decision is terminal; the pending steps are updated when at least
    every // 2, else kept (complete) for the next segment. A cut episode (no metrics) is dropped."""
    probe = OnlineRLAgent(models["ppo"], every=10 ** 6, seed=1)
    run_episode(probe)
    decisions = probe.decisions
    steps = probe.storage.steps[0]
    assert probe.updates == 0 and len(probe.storage) == decisions
    assert steps["done"] == [False] * (decisions - 1) + [True]
    assert run_episode(probe, seed=6, end=False) is not None
    probe.on_episode_end({})                    # cut short: its decisions are not learnt from
    assert len(probe.storage) == decisions and probe.dropped > 0 and probe.updates == 0
    # every = 2 * decisions: the episode's end holds every // 2 of them, enough for an update
    agent = OnlineRLAgent(models["ppo"], every=2 * decisions, seed=1, save=tmp_path / "a.pt")
    original = weights(agent)
    run_episode(agent)
    assert agent.updates == 1 and len(agent.storage) == 0 and not same(weights(agent), original)
    assert (tmp_path / "a.pt").is_file()


@pytest.mark.slow
def test_same_seed_same_weights_and_schedule(models, tmp_path):
    def run(seed: int, name: str):
        agent = OnlineRLAgent(models["ppo"], every=16, seed=seed, save=tmp_path / f"{name}.pt")
        jobs = [run_episode(agent, s).jobs for s in (5, 6)]
        return agent, jobs

    (a, jobs_a), (b, jobs_b), (c, jobs_c) = run(3, "a"), run(3, "b"), run(4, "c")
    assert a.updates == b.updates > 4
    assert same(weights(a), weights(b)) and not same(weights(a), weights(c))
    for ja, jb in zip(jobs_a, jobs_b):
        assert ja.keys() == jb.keys() and all(np.array_equal(ja[k], jb[k]) for k in ja)
    assert any(not np.array_equal(ja["start"], jc["start"]) for ja, jc in zip(jobs_a, jobs_c))
    sa, sb = (load_checkpoint(tmp_path / f"{n}.pt") for n in "ab")
    assert all(torch.equal(sa.state["weights"]["model"][k], sb.state["weights"]["model"][k])
               for k in sa.state["weights"]["model"])
    # before its first update it samples exactly as the served checkpoint does with --sampling
    frozen = OnlineRLAgent(models["ppo"], every=10 ** 6, seed=3)
    sampled = simulate(workload(5), CONFIG, agents={"select": RLAgent(models["ppo"], greedy=False, seed=3)})
    assert np.array_equal(run_episode(frozen).jobs["start"], sampled.jobs["start"])


@pytest.mark.slow
def test_a_reward_is_credited_to_the_decision_before_it(models):
    """Hand-made rewards, as `run_agent` reports them: before decision k (k >= 1) come the
    rewards earned since decision k - 1 (none, one or two calls); the last ones come at the end.
    A reward before the first decision belongs to no decision of the agent."""

    class Driver:
        kinds = ("select",)

        def __init__(self, agent):
            self.agent, self.k = agent, 0

        def act(self, decision):
            if self.k == 0:
                self.agent.on_reward(99.0)
            for r in ([] if self.k % 3 == 0 else [float(self.k)] if self.k % 3 == 1 else [self.k / 2, self.k / 2]):
                self.agent.on_reward(r)
            self.k += 1
            return self.agent.act(decision)

    agent = OnlineRLAgent(models["ppo"], every=10 ** 6, seed=0, reward="env")
    driver = Driver(agent)
    result = run_episode(driver, end=False)
    agent.on_reward(-7.0)
    agent.on_episode_end(dict(result.summary))
    n = driver.k
    expected = [0.0 if (k + 1) % 3 == 0 else float(k + 1) for k in range(n - 1)] + [-7.0]
    assert agent.storage.steps[0]["reward"] == expected
    assert agent.storage.steps[0]["done"] == [False] * (n - 1) + [True]
    # scored from the metrics: the env's rewards are ignored, the end reward is minus the mean bsld
    scored = OnlineRLAgent(models["ppo"], every=10 ** 6, seed=0)
    result = run_episode(Driver(scored), end=False)
    scored.on_reward(-7.0)
    scored.on_episode_end(dict(result.summary))
    assert scored.storage.steps[0]["reward"] == [0.0] * (n - 1) + [-result.summary["mean_bsld"]]


@pytest.mark.slow
def test_what_cannot_adapt_is_refused_in_one_line(models, tmp_path):
    from hpcgym.gymbridge.cli import main

    with pytest.raises(HpcgymError, match="pg, a2c, ppo"):
        OnlineRLAgent(models["dql"])
    with pytest.raises(HpcgymError, match="queue_wait"):
        OnlineRLAgent(models["queue_wait"], reward="metrics")
    assert OnlineRLAgent(models["queue_wait"]).reward_source == "env"   # a per-decision reward: the env's
    cases = [
        (["agent", "sjf", "--online"], "--model"),
        (["agent", "--model", str(models["dql"]), "--online"], "pg, a2c, ppo"),
        (["agent", "--model", str(models["ppo"]), "--online-every", "5"], "--online"),
        (["agent", "--model", str(models["ppo"]), "--online", "--greedy"], "samples"),
        (["agent", "--model", str(models["ppo"]), "--online", "--online-every", "0"], "--online-every"),
    ]
    for args, needle in cases:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and needle in result.output, (args, result.output)


def compared_both_ways(checkpoint: Path, tmp_path: Path, monkeypatch, *policies: str):
    """`hpcgym compare` of `policies` on one 64-job sequence, in process and over the protocol,
    with `checkpoint` as m.pt in the working directory; returns schedule(mode, policy), the
    policy's jobs CSV in that mode."""
    from hpcgym.gymbridge.cli import main

    shutil.copy(checkpoint, tmp_path / "m.pt")
    write_swf(tmp_path / "t.swf", generate_lublin(JOBS, 64, seed=9))
    monkeypatch.chdir(tmp_path)
    common = ["compare", "--trace", "t.swf", "--seed", "3", "--bootstrap", "100", "--no-plots", "--workers", "1",
              *(arg for policy in policies for arg in ("--policy", policy))]
    for mode in ("inproc", "protocol"):
        result = CliRunner().invoke(main, [*common, "--out", mode, *(["--inproc"] if mode == "inproc" else [])],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
    return lambda mode, policy: (tmp_path / mode / "jobs" / policy / "seq-000.csv").read_bytes()


@pytest.mark.slow
def test_online_policy_spec_in_compare(models, tmp_path, monkeypatch):
    """`online:PATH` parses like `model:PATH` and runs in process and over the protocol alike
    (episodes of 64 jobs are shorter than the default 1000 decisions: no update within them)."""
    from hpcgym.gymbridge.compare.policy import parse_policy

    spec = parse_policy("o=online:runs/m.pt,sjf")
    (agent,) = spec.agents
    assert (agent.kinds, agent.source, agent.target, agent.agent) == ((), "online", "runs/m.pt", "online:runs/m.pt")
    assert parse_policy("select:online:m.pt,backfill:none").agents[0].label == "select:online:m.pt"
    with pytest.raises(HpcgymError, match="online: needs a checkpoint path"):
        parse_policy("online:")

    schedule = compared_both_ways(models["ppo"], tmp_path, monkeypatch, "fcfs", "o=online:m.pt,window:8")
    assert schedule("inproc", "o") == schedule("protocol", "o") != schedule("inproc", "fcfs")


@pytest.mark.slow
def test_sampled_policy_spec_samples_alike_in_process_and_over_the_protocol(models, tmp_path, monkeypatch):
    """`sampled:PATH` serves the checkpoint sampling its actions from a generator seeded with 0 in
    each unit: the same schedule in process and over the protocol, and another than the greedy
    `model:PATH` (an untrained PG network, whose policy is near uniform)."""
    schedule = compared_both_ways(models["pg"], tmp_path, monkeypatch, "g=model:m.pt,window:8",
                                  "s=sampled:m.pt,window:8")
    assert schedule("inproc", "s") == schedule("protocol", "s") != schedule("inproc", "g")
    assert schedule("inproc", "g") == schedule("protocol", "g")


# ------------------------------------------------------------------------------------------ over a socket
@pytest.mark.slow
def test_served_online_over_a_socket_adapts_and_saves(models, tmp_path, ipc_dir):
    """`hpcgym env --reward bsld` + `hpcgym agent --model --online --online-reward env`: the
    episode completes, the adapted checkpoint is written and differs from the original, and it
    equals, bit for bit, the same adaptation in process (scoring the episode from its metrics)."""
    trace = tmp_path / "t.swf"
    write_swf(trace, generate_lublin(JOBS, 64, seed=9))
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    saved = tmp_path / "adapted" / "m.pt"
    env = None
    try:
        with open(tmp_path / "env.err", "wb") as err:
            env = subprocess.Popen([HPCGYM, "env", "--bind", bind, "--trace", str(trace), "--reward", "bsld"],
                                   cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        t0 = time.monotonic()
        agent = subprocess.run([HPCGYM, "agent", "--model", str(models["ppo"]), "--online", "--online-every", "16",
                                "--online-save", str(saved), "--online-reward", "env", "--sampling-seed", "4",
                                "--connect", bind, "--seed", "2", "--json", "--timeout", "30"],
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert agent.returncode == 0, agent.stderr + (tmp_path / "env.err").read_text()
        assert time.monotonic() - t0 < 60
    finally:
        if env is not None:
            env.kill()
            env.wait(timeout=10)
    end = json.loads(agent.stdout.strip().splitlines()[-1])
    assert end["reason"] == "completed"
    assert "online:" in agent.stderr and str(saved) in agent.stderr
    adapted = load_checkpoint(saved)
    assert adapted.trainer["online"]["updates"] >= 4 and adapted.trainer["online"]["reward"] == "env"
    original = load_checkpoint(models["ppo"]).state["weights"]["model"]
    assert not all(torch.equal(original[k], adapted.state["weights"]["model"][k]) for k in original)

    here = OnlineRLAgent(models["ppo"], every=16, seed=4)
    # the agent resets with the rules it was trained under (its window), as `agent --model` does
    result = simulate(load_workload({"trace": str(trace)}, 2), sim_config({"window": WINDOW}, 2), agents={"select": here})
    here.on_episode_end(dict(result.summary))
    assert {k: v for k, v in end.items() if k not in ("episode", "reason")} == dict(result.summary)
    assert here.updates == adapted.trainer["online"]["updates"]
    assert all(torch.equal(here.algorithm.weights()["model"][k], adapted.state["weights"]["model"][k])
               for k in original)
