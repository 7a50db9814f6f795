"""Recipes (agents/recipes.py): the papers' runs as data, resolved by one function for every entry
point. The training settings a recipe gives must be the ones `hpcgym train` gave before recipes
existed: tests/data/train_settings_before_recipes.json holds what the old command built (commit
59ea029, captured without training), checked by hand against the papers' modules, e.g. rlbf:scw =
agents/rlbf.py's RECIPE config (conv actor 32-16-8, MLP critic, lr 3e-4, vf_lr 1e-3,
80 + 80 iterations, target_kl 0.015), preset rlbf-scw, cleaning rlbf-scw and training windows from
the first 10,000 jobs (its `scw` variant), reward bsld; rlschert: Table 4's PPO (lr 1e-4, clip
0.2, vf_coef 0.25, ent_coef 0.02, imitation 0.5 over 20 epochs), window 8, 3,000 steps, teacher
rlschert-rule, baselines fcfs and the teacher; irl-dqn: DQL, window 20, conv 32-16-8, gamma 0.99,
eps_decay 0.995, train_freq 10, first_jobs 10,000. One deliberate change since: SchedInspector's
preset takes GAE lambda 1 instead of the code's 0.97 (main, commit f4fc542), so its two entries
say 1.0; and RLSchert's episodes are cut at 20,000 decisions instead of 3,000, with a kill prior on
its kill kinds (initial_bias: kill slots at ln(0.001 / 0.999 / 8) = -8.986, the rest 0; docs/rlschert.md,
"Why the kill agents stalled"); and the DQL recipes (dras:dql, irl) name n_step 1, the one-step
DQN rule they always had, since plain DQL's default became Monte Carlo targets; and RLSchert's
select and select_kill runs see the queue window too (encoder jobs+rlschert+nodes: with
rlschert+nodes they chose queue slots without seeing the jobs in them). A change to a preset
shows up here and is made on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcgym.agents.recipes import RECIPES, get_recipe
from hpcgym.environment.errors import ConfigError
from hpcgym.gymbridge.cli import main

from .agents_for_tests import write_trace

BEFORE = json.loads((Path(__file__).parent / "data" / "train_settings_before_recipes.json").read_text())
#: The command lines the settings were captured from (all with --epochs 4 --trajectories 5).
CASES = {
    "rlbf-scw": ["rlbf", "--semantics", "scw"],
    "rlbf-public": ["rlbf"],
    "rlbf-textbook-sjf": ["rlbf", "--semantics", "textbook", "--base", "sjf"],
    "rlbf-scw-split": ["rlbf", "--semantics", "scw", "--train-fraction", "0.8"],
    "schedinspector-code": ["schedinspector"],
    "schedinspector-textbook": ["schedinspector", "--semantics", "textbook", "--backfill", "easy"],
    "rlschert": ["rlschert"],
    "rlschert-select": ["rlschert", "--kind", "select"],
    "rlschert-select_kill": ["rlschert", "--kind", "select_kill"],
    "dras-ppo": ["dras-ppo"],
    "dras-dql": ["dras-dql", "--set", "eps_decay=0.9"],
    "dras-pg-flags": ["dras-pg", "--lr", "0.01", "--window", "30", "--reward", "bsld", "--start", "5", "--jobs", "50"],
    "irl-dqn": ["irl-dqn"],
    "irl-dqn-split": ["irl-dqn", "--train-fraction", "0.5", "--window", "10"],
    "ppo": ["ppo", "--hidden", "8,8", "--set", "clip=0.1", "--option", "backfill_stop=true"],
    "a2c-notrace": ["a2c"],
}


class Captured(Exception):
    """Raised by the stand-in trainer with the settings `hpcgym train` built."""


@pytest.fixture
def settings_of(tmp_path, monkeypatch):
    """`hpcgym train ARGS` up to the trainer: the TrainSettings it would train with, as JSON."""
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    import hpcgym.gymbridge.training.trainer as trainer_module

    def stand_in(settings, out, **kwargs):
        raise Captured(settings)

    monkeypatch.setattr(trainer_module, "Trainer", stand_in)
    trace = write_trace(tmp_path / "t.swf", jobs=600, procs=64, seed=2).resolve()

    def run(args: list[str], with_trace: bool = True) -> dict:
        argv = ["train", *args, "--out", str(tmp_path / "run"), "--epochs", "4", "--trajectories", "5",
                "--device", "cpu", "--no-progress", *(["--trace", str(trace)] if with_trace else [])]
        result = CliRunner().invoke(main, argv)
        assert isinstance(result.exception, Captured), result.output
        return json.loads(json.dumps(result.exception.args[0].to_json()).replace(str(trace), "TRACE"))
    return run


#: The recipe each case follows (None: a plain algorithm).
RECIPE_OF = {"rlbf-scw": "rlbf:scw", "rlbf-public": "rlbf:public", "rlbf-textbook-sjf": "rlbf:textbook",
             "rlbf-scw-split": "rlbf:scw", "schedinspector-code": "schedinspector:code",
             "schedinspector-textbook": "schedinspector:textbook", "rlschert": "rlschert:event",
             "rlschert-select": "rlschert:event", "rlschert-select_kill": "rlschert:event", "dras-ppo": "dras:ppo",
             "dras-dql": "dras:dql", "dras-pg-flags": "dras:pg", "irl-dqn": "irl", "irl-dqn-split": "irl",
             "ppo": None, "a2c-notrace": None}


@pytest.mark.parametrize("case", list(CASES))
def test_recipes_train_with_the_settings_the_presets_gave(settings_of, case):
    settings = settings_of(CASES[case], with_trace=case != "a2c-notrace")
    assert settings.pop("recipe") == RECIPE_OF[case]
    assert settings.pop("encoder_options") == {}   # added later; empty is the encoders' defaults
    assert settings.pop("init_from") is None        # added later; None: a fresh start
    before = dict(BEFORE[case])
    if case in ("rlschert-select", "rlschert-select_kill"):  # the queue window joined their observation
        assert before["encoder"] == "rlschert+nodes" and settings["encoder"] == "jobs+rlschert+nodes"
        before["encoder"] = settings["encoder"]
    assert settings == before


def test_cleaning_and_encoder_options_reach_the_settings(settings_of, tmp_path):
    """--cleaning wins over the recipe's rule, for the training and the evaluation windows alike;
    --encoder-option lands in the settings the checkpoint keeps."""
    plain = settings_of(["schedinspector"])
    kept = settings_of(["schedinspector", "--cleaning", "rlbf-scw"])
    assert "cleaning" not in plain["workload"] and "cleaning" not in plain["eval_workload"]
    assert kept["workload"]["cleaning"] == kept["eval_workload"]["cleaning"] == "rlbf-scw"
    assert {**kept, "workload": plain["workload"], "eval_workload": plain["eval_workload"]} == plain
    assert settings_of(["rlbf", "--semantics", "scw", "--cleaning", "hpcgym"])["workload"]["cleaning"] == "hpcgym"
    assert settings_of(["dras-ppo", "--encoder-option", "priority_size=26"])["encoder_options"] == {"priority_size": 26}
    result = CliRunner().invoke(main, ["train", "ppo", "--cleaning", "rlbf-scw", "--out", str(tmp_path / "x"),
                                       "--no-progress"])
    assert result.exit_code == 2 and "--cleaning is a rule for cleaning an SWF trace: give --trace" in result.output


def test_recipe_option_is_the_same_run_as_the_older_spelling(settings_of):
    assert settings_of(["--recipe", "rlbf:scw"]) == settings_of(["rlbf", "--semantics", "scw"])
    assert settings_of(["--recipe", "dras:dql"]) == {**settings_of(["dras-dql"]), "name": "dras"}


@pytest.mark.parametrize("args, words", [
    (["ppo", "--base", "sjf"], "belong to the recipes"),
    (["dql", "--recipe", "rlbf"], "trains with ppo, not dql"),
    (["rlbf", "--recipe", "schedinspector"], "name two recipes"),
    (["rlbf", "--semantics", "nope"], "no variant 'nope'; its variants: public, scw, textbook"),
    (["--recipe", "nothing"], "unknown recipe 'nothing'"),
    ([], "name what to train"),
])
def test_bad_recipe_requests_are_one_line(tmp_path, args, words):
    pytest.importorskip("torch")
    result = CliRunner().invoke(main, ["train", *args, "--out", str(tmp_path / "run"), "--no-progress"])
    assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output


def test_get_recipe_applies_the_variant_and_names_it():
    scw = get_recipe("rlbf:scw")
    assert (scw.full_name, scw.options, scw.workload, scw.first_jobs, scw.reward) == (
        "rlbf:scw", {"preset": "rlbf-scw"}, {"cleaning": "rlbf-scw"}, 10_000, "bsld")
    assert get_recipe("rlbf").full_name == "rlbf:public" and get_recipe("dras-dql").algorithm == "dql"
    assert get_recipe("IRL-DQN").full_name == "irl"
    with pytest.raises(ConfigError, match="recipes: dras, schedinspector, rlbf, rlschert, irl"):
        get_recipe("deeprm")


def test_hpcgym_recipes_lists_the_five_papers_and_shows_one_resolved():
    listed = CliRunner().invoke(main, ["recipes"])
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.output.splitlines()] == list(RECIPES) == [
        "dras", "schedinspector", "rlbf", "rlschert", "irl"]
    shown = CliRunner().invoke(main, ["recipes", "show", "rlbf:scw", "--json"])
    data = json.loads(shown.output)
    assert data["recipe"] == "rlbf:scw" and data["options"] == {"preset": "rlbf-scw"}
    assert data["baselines"] == ["fcfs"]   # the base policy; rlbf has no teacher
    text = CliRunner().invoke(main, ["recipes", "show", "rlschert"]).output
    assert "baselines:    [\"fcfs\", \"kill:rlschert-rule,fcfs\"]" in text


def _served(trace: Path, ipc_dir: Path, env_flags: list[str], agent_flags: list[str]) -> dict:
    """One `hpcgym agent sjf` episode (60 jobs, sample 1) against a real `hpcgym env` over ipc://."""
    import subprocess
    import sys

    hpcgym = str(Path(sys.executable).parent / "hpcgym")
    bind = f"ipc://{ipc_dir / 'env.ipc'}"
    env = subprocess.Popen([hpcgym, "env", "--bind", bind, "--trace", str(trace), *env_flags],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        served = subprocess.run([hpcgym, "agent", "sjf", "--connect", bind, "--jobs", "60", "--sample", "1",
                                 "--json", "--timeout", "30", *agent_flags], capture_output=True, text=True,
                                timeout=120)
        assert served.returncode == 0, served.stderr
        return json.loads(served.stdout.strip().splitlines()[-1])
    finally:
        env.kill()
        env.wait(timeout=10)


def test_env_and_agent_take_a_recipes_rules(tmp_path, ipc_dir):
    """SchedInspector's code rules (preset schedinspector-code: exact requests, committed picks) come
    with --recipe schedinspector on either side: the served SJF episode is `hpcgym run --preset
    schedinspector-code` job for job, and not the plain SJF one."""
    trace = write_trace(tmp_path / "t.swf", jobs=120, procs=32, seed=4)
    run = ["run", "--trace", str(trace), "--jobs", "60", "--sample", "1", "--policy", "sjf", "--json"]
    coded = json.loads(CliRunner().invoke(main, [*run, "--preset", "schedinspector-code"]).output)
    plain = json.loads(CliRunner().invoke(main, run).output)
    assert coded["mean_bsld"] != plain["mean_bsld"]   # the rules change this schedule
    for env_flags, agent_flags in ((["--recipe", "schedinspector"], []), ([], ["--recipe", "schedinspector:code"])):
        served = _served(trace, ipc_dir, env_flags, agent_flags)
        assert (served["mean_bsld"], served["mean_wait"]) == (coded["mean_bsld"], coded["mean_wait"])


def test_compare_and_record_take_a_recipes_rules_and_cleaning(tmp_path):
    trace = write_trace(tmp_path / "t.swf", jobs=120, procs=32, seed=4)
    out = tmp_path / "cmp"
    r = CliRunner().invoke(main, ["compare", "--trace", str(trace), "--jobs", "30", "--samples", "1", "--inproc",
                                  "--workers", "1", "--no-plots", "--bootstrap", "100", "--recipe", "rlbf:scw",
                                  "--policy", "fcfs", "--out", str(out)])
    assert r.exit_code == 0, r.output
    run = json.loads((out / "run.json").read_text())
    from hpcgym.environment.config import PRESETS

    # the scw rules spelled out (an env's own defaults would win over a bare preset name), its window, its cleaning
    assert run["options"] == {**PRESETS["rlbf-scw"], "window": 128} and run["sequence_spec"]["cleaning"] == "rlbf-scw"
    assert "--recipe" in run["command"]
    from hpcgym.agents.records import load_records

    r = CliRunner().invoke(main, ["record", "backfill:tests.test_invariants:FirstCandidate,fcfs", "--recipe", "rlbf:scw",
                                  "--trace", str(trace), "--jobs", "30", "--samples", "1", "--out", str(tmp_path / "r.npz")])
    assert r.exit_code == 0, r.output
    columns, meta = load_records(tmp_path / "r.npz")
    assert meta["kind"] == "backfill" and columns["features"].shape[1] == 128 * 6   # rlbf: 6 features per slot


def test_make_takes_a_recipe():
    """gymbridge.make(recipe=...) is the paper's episode: rlbf's backfill decisions with its 6
    features per window slot (6 x 128 = 768), DRAS's two kinds; arguments given win."""
    pytest.importorskip("gymnasium")
    import hpcgym.gymbridge as gb

    env = gb.make(recipe="rlbf:scw", workload={"jobs": 50, "sample": True})
    obs, _ = env.reset(seed=0)
    assert env.kind == "backfill" and obs.shape == (768,)
    assert gb.make(recipe="dras").kind == ("select", "backfill")
    assert gb.make("select", recipe="rlbf", encoder="jobs").kind == "select"


E120 = Path(__file__).resolve().parents[1] / "docs" / "results" / "rlbf" / "scw-unguarded-relative" / "e120" / "s0"


def test_a_recorded_run_is_a_recipe_of_its_own_rules():
    """The e120 agents were trained with `--semantics scw --option backfill_candidates=unguarded
    --reward 'relative:bsld:pct:fcfs+delay_penalty:1e-4'` (their folder's README): their checkpoint
    as --recipe gives those rules, that reward and scw's cleaning, not a window or a trace."""
    pytest.importorskip("torch")
    from hpcgym.agents.recipes import recipe_episode

    scw = get_recipe("rlbf:scw").episode()
    episode = recipe_episode(str(E120 / "model.pt"))
    assert episode["reward"] == "relative:bsld:pct:fcfs+delay_penalty:1e-4" and episode["kind"] == "backfill"
    assert episode["options"]["backfill_candidates"] == "unguarded"
    assert episode["options"]["preset"] == "rlbf-scw" and episode["workload"] == scw["workload"] == {"cleaning": "rlbf-scw"}
    assert recipe_episode(str(E120 / "model.pt"), reward="bsld")["reward"] == "bsld"  # a flag given still wins


def test_train_remakes_a_recorded_run_on_another_seed(settings_of):
    pytest.importorskip("torch")
    from hpcgym.agents.rl.checkpoint import load_checkpoint

    recorded = load_checkpoint(E120 / "model.pt").trainer["settings"]
    remade = settings_of(["--recipe", str(E120 / "model.pt"), "--seed", "3"], with_trace=False)
    assert remade == {**recorded, "seed": 3, "epochs": 4, "eval_episodes": 10}



def test_a_run_recorded_before_a_config_field_existed_is_remade_as_it_was_trained(settings_of):
    """The SDSC-DS IRL teacher was trained before DQL had `n_step`, with one-step targets (the only
    rule DQL had then); its remake and its rebuilt algorithm must use them, not today's default
    (None, Monte Carlo returns), which a remake took before."""
    pytest.importorskip("torch")
    from hpcgym.agents.rl.checkpoint import load_checkpoint

    teacher = Path(__file__).resolve().parents[1] / "docs/results/irl/sdsc-ds/teacher/model.pt"
    assert "n_step" not in load_checkpoint(teacher).trainer["settings"]["config"]  # the record predates it
    assert load_checkpoint(teacher).build().config.n_step == 1
    assert settings_of(["--recipe", str(teacher), "--seed", "1"], with_trace=False)["config"]["n_step"] == 1


def test_a_run_started_today_records_the_default_an_older_record_lacks(tmp_path):
    """A record without `n_step` is remade with the one-step rule of its time (above); so a plain DQL run
    started today must record its own default, Monte Carlo returns (None), or its remake would train with
    one-step targets (it did, before issue 46's review)."""
    pytest.importorskip("torch")
    from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings

    assert TrainSettings.from_json(TrainSettings(algorithm="dql").to_json()).config == {"n_step": 1}
    today = Trainer(TrainSettings(algorithm="dql", config={"lr": 0.01}), tmp_path).settings
    assert TrainSettings.from_json(today.to_json()).config == {"n_step": None, "lr": 0.01}
    assert Trainer(TrainSettings(algorithm="dql", config={"n_step": 3}), tmp_path).settings.config == {"n_step": 3}

@pytest.mark.parametrize("content, words", [(None, "no such file"), ("[1, 2]", "records no training run"),
                                            ("{not json", "not a JSON results file")])
def test_a_recipe_file_that_records_no_run_is_one_line(tmp_path, content, words):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(main, ["compare", "--recipe", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and words in result.output, result.output
