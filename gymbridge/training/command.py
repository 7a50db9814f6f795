"""`hpcgym train ALGO`: train a policy gradient, A2C, PPO or DQL agent on an hpcgym env.

    hpcgym train ppo --kind select --trace SDSC-SP2.swf.gz --jobs 256 --epochs 50 --seed 0 --out runs/ppo
    hpcgym train ppo --out runs/ppo --epochs 80 --resume      # go on where it stopped
    hpcgym train rlbf --trace SDSC-SP2.swf.gz --workers 4 --out runs/rlbf    # 4 rollout worker processes
    hpcgym agent --model runs/ppo/model.pt --connect tcp://127.0.0.1:5555

Each epoch collects `--trajectories` episodes, each a window of `--jobs` jobs drawn at random
from the trace (or from a generated Lublin workload) with the episode's seed, then updates the
policy. The output folder gets the learning curve (curve.csv), checkpoints and, at the end, an
evaluation on held-out sequences (seeds never trained on) through the same path as `hpcgym
compare`: the model (`model:OUT/model.pt`, greedy) next to FCFS and SJF with the training's
simulation options, the comparison's folder in OUT/eval/ and its main metrics in OUT/eval.json.
Options of the algorithms' configs not covered by a flag are set with `--set KEY=VALUE`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import click

from ...environment.config import BACKFILL_MODES
from ...environment.decisions import KINDS
from ...environment.errors import ConfigError, HpcgymError
from ...environment.spec import resolve_trace, sim_config

BASE_ALGORITHMS = ("pg", "a2c", "ppo", "dql")
#: dras-ALGO: ALGO with DRAS's defaults (`agents.dras.TRAINING_DEFAULTS`); schedinspector, rlbf and
#: rlschert: PPO with SchedInspector's, RL backfilling's and RLSchert's (`agents.schedinspector`,
#: `agents.rlbf`, `agents.rlschert`; RLSchert's with its rule-based kill as teacher); irl-dqn: DQL
#: with IRL's teacher's (`agents.irl.TRAINING_DEFAULTS`). Flags still win.
#: Papers' agents trained by PPO with their module's TRAINING_DEFAULTS and SEMANTICS (agents/NAME.py).
PAPER_AGENTS = ("schedinspector", "rlbf", "rlschert")
ALGORITHMS = (*BASE_ALGORITHMS, *(f"dras-{a}" for a in BASE_ALGORITHMS), *PAPER_AGENTS, "irl-dqn")
SEMANTICS = ("code", "public", "scw", "textbook", "event")
KIND_CHOICES = (*KINDS, "select+backfill")


def _parse_value(text: str):
    """A --set value: JSON when it parses (numbers, true/false, null, lists), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parse_range(text: str) -> list[float]:
    """--sjf-range LOW,HIGH as two numbers (the workload key checks LOW < HIGH)."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--sjf-range takes LOW,HIGH such as 10,150; got {text!r}") from None
    return [low, high]


def _algorithm_config(algorithm: str, net: str | None, hidden: str | None, lr: float | None,
                      gamma: float | None, sets: tuple[str, ...]) -> dict:
    from ...agents.rl.algorithms import get_algorithm

    config = {}
    if net is not None:
        config["net"] = net
    if hidden is not None:
        try:
            config["hidden"] = [int(h) for h in hidden.split(",") if h.strip()]
        except ValueError:
            raise ConfigError(f"--hidden takes layer widths like 64,64; got {hidden!r}") from None
    if lr is not None:
        config["lr"] = lr
    if gamma is not None:
        config["gamma"] = gamma
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set takes KEY=VALUE, got {item!r}")
        config[key.strip()] = _parse_value(value.strip())
    fields = get_algorithm(algorithm).Config.__dataclass_fields__
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise ConfigError(f"unknown {algorithm} option(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    return config


@click.command("train")
@click.argument("algorithm", type=click.Choice(ALGORITHMS, case_sensitive=False))
@click.option("--kind", type=click.Choice(KIND_CHOICES), default="select", show_default=True,
              help="The decision kind the agent takes (the others use the built-in defaults); "
                   "select+backfill: both, as DRAS's two levels (the default of dras-ALGO).")
@click.option("--trace", type=click.Path(path_type=Path, dir_okay=False),
              help="SWF trace (path, or a file name found in $HPCGYM_TRACES) to draw job sequences from "
                   "(default: a generated Lublin workload).")
@click.option("--procs", type=click.IntRange(min=1), help="Cluster size (default: the trace header, or 256).")
@click.option("--jobs", "n_jobs", type=click.IntRange(min=1), default=256, show_default=True,
              help="Jobs per episode (a window of the workload).")
@click.option("--start", type=click.IntRange(min=0),
              help="Train on the one window starting here instead of a random window per episode.")
@click.option("--sampled-jobset", is_flag=True, help="Episodes are DRAS-style sampled jobsets, not windows.")
@click.option("--train-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Train on the first fraction of the trace, evaluate on the rest.")
@click.option("--sjf-range", metavar="LOW,HIGH",
              help="Train only on windows whose SJF mean bsld (RLScheduler's rules) lies strictly between LOW and "
                   "HIGH, redrawing the others (RLScheduler's trajectory filtering, 10,150); not the evaluation.")
@click.option("--prefill", is_flag=True,
              help="Start each training window with the jobs before it running (RLScheduler's pre-filled cluster).")
@click.option("--curriculum", help="Phases of training episodes, in order: sampled (random jobs, Poisson "
              "arrivals), real (windows of the trace), synthetic (from a model fitted to the training part), "
              "e.g. sampled,real,synthetic (even split) or sampled:9,real:9,synthetic:82 (episodes each; "
              "dras-ALGO with a trace: sampled,real,synthetic; 'none': off).")
@click.option("--backfill", type=click.Choice(BACKFILL_MODES), default="easy", show_default=True)
@click.option("--policy", default="fcfs", show_default=True, help="Priority policy ordering the queue window.")
@click.option("--base", help="schedinspector, rlbf: the base priority policy (sets --policy; default sjf for "
                             "schedinspector, fcfs for rlbf).")
@click.option("--semantics", type=click.Choice(SEMANTICS),
              help="schedinspector: code (the authors' code, default) or textbook (docs/schedinspector.md); "
                   "rlbf: public (the public code, default), scw (the code of the paper's tables) or textbook "
                   "(docs/rlbackfilling.md); rlschert: event (hpcgym's event simulator, docs/rlschert.md).")
@click.option("--option", "env_options", multiple=True, metavar="KEY=VALUE",
              help="A simulation option of the training and evaluation episodes, as in a reset's options "
                   "(e.g. --option backfill_stop=true); repeat it; it wins over --semantics' preset.")
@click.option("--teacher", metavar="AGENT",
              help="ppo: an agent whose actions the imitation term (--set imitation_coef=A --set "
                   "imitation_epochs=N) pulls the policy towards: a built-in name (e.g. rlschert-rule, sjf), "
                   "module:Class or model:PATH (rlschert: rlschert-rule).")
@click.option("--window", type=click.IntRange(min=1), default=128, show_default=True,
              help="Queue jobs the agent sees and chooses from.")
@click.option("--wait/--no-wait", "allow_wait", default=True, show_default=True,
              help="select: may the agent wait (the env's last action) while a job could start? "
                   "--no-wait picks a job at every decision, as the RL scheduling papers do.")
@click.option("--reward", default="bsld", show_default=True,
              help="Reward spec (bsld, wait, utilization, queue_wait, system_slowdown, ...; `hpcgym env` lists all).")
@click.option("--encoder", help="Observation encoder (default: the env's, jobs+nodes for select).")
@click.option("--net", type=click.Choice(["mlp", "conv", "dras"]),
              help="Network (default mlp; dras: DRAS's network, needs --encoder dras).")
@click.option("--hidden", help="Hidden layer widths, e.g. 64,64.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), help="Learning rate.")
@click.option("--gamma", type=click.FloatRange(0, 1), help="Discount factor (default 1: whole episodes).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Any other option of the algorithm's config (e.g. --set clip=0.1 --set target_kl=null).")
@click.option("--max-steps", type=click.IntRange(min=1),
              help="Cut an episode after this many decisions (e.g. for kill agents that may never finish).")
@click.option("--discard-after", type=click.IntRange(min=1),
              help="Throw an episode away (not learned from, not counted) once it reaches this many decisions "
                   "(SchedInspector's code: 10 per job; pg and ppo).")
@click.option("--epochs", type=click.IntRange(min=1), default=10, show_default=True,
              help="Train until this many epochs are done (with --resume: in all).")
@click.option("--trajectories", type=click.IntRange(min=1), default=100, show_default=True,
              help="Episodes per epoch.")
@click.option("--envs", type=click.IntRange(min=1), default=8, show_default=True,
              help="Envs stepped together (one batched network call per round).")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Rollout worker processes, each with --envs envs and a CPU copy of the policy, playing whole "
                   "episodes while this process updates (1: all in this process).")
@click.option("--executor", type=click.Choice(("local", "ray")), default="local", show_default=True,
              help="Where the rollout workers run: local processes, or Ray actors (pip install 'hpcgym[ray]').")
@click.option("--address", help="Ray cluster address (with --executor ray; default: a local Ray instance).")
@click.option("--worker-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds a rollout worker may go without finishing an episode before the run stops.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Folder for the learning curve, checkpoints and evaluation.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --out (same settings).")
@click.option("--eval-episodes", type=click.IntRange(min=0), default=10, show_default=True,
              help="Held-out sequences the model is compared on at the end, as by hpcgym compare "
                   "(OUT/eval/, eval.json; 0: none).")
@click.option("--baseline", "baselines", multiple=True, metavar="POLICY",
              help="A policy of the held-out evaluation besides the model, in hpcgym compare's syntax "
                   "(repeat it; the first is the baseline of the paired differences; default fcfs and sjf).")
@click.option("--device", default="auto", show_default=True, help="auto (CUDA when present), cpu, cuda, cuda:1 ...")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="CPU threads for torch (small networks run best on one).")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar (default: a bar when stderr is a terminal, else one line per epoch; "
                   "--no-progress: neither).")
@click.pass_context
def train(ctx, algorithm, kind, trace, procs, n_jobs, start, sampled_jobset, train_fraction, sjf_range, prefill,
          curriculum, backfill, policy, base, semantics, env_options, teacher, window, allow_wait, reward, encoder, net,
          hidden, lr, gamma, sets, max_steps, discard_after, epochs, trajectories, envs, workers, executor, address,
          worker_timeout, seed, out, checkpoint_every, resume, eval_episodes, baselines, device, threads,
          progress) -> None:
    """Train ALGORITHM (pg, a2c, ppo or dql; dras-pg, dras-a2c, dras-ppo or dras-dql: the same with
    DRAS's defaults; schedinspector, rlbf, rlschert: PPO with SchedInspector's, RL backfilling's or
    RLSchert's; irl-dqn: DQL with IRL's teacher's) and write curve.csv, checkpoints and eval.json to OUT."""
    try:
        import gymnasium  # noqa: F401
        import torch
    except ImportError as exc:
        raise HpcgymError(f"training needs the rl extra (torch, gymnasium): {exc}") from None
    from ...agents.rl.algorithm import resolve_device
    from ...agents.rl.checkpoint import latest_checkpoint, load_checkpoint
    from .trainer import Trainer, TrainSettings, parse_curriculum
    from .workers import WorkerError

    algorithm = asked = algorithm.lower()
    if workers < 1:
        raise ConfigError(f"--workers takes 1 or more rollout workers, got {workers}")
    if address is not None and executor != "ray":
        raise ConfigError("--address is for --executor ray")
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError("--executor ray needs Ray: pip install 'hpcgym[ray]' (or pip install ray)")

    def unset(name: str) -> bool:
        return ctx.get_parameter_source(name) == click.core.ParameterSource.DEFAULT

    if algorithm.startswith("dras-"):  # DRAS's defaults for every flag the command line leaves at its default
        from ...agents.dras import TRAINING_DEFAULTS as D

        algorithm = algorithm[len("dras-"):]
        kind = D["kind"] if unset("kind") else kind
        encoder = encoder or D["encoder"]
        window = D["window"] if unset("window") else window
        allow_wait = not D["no_wait"] if unset("allow_wait") else allow_wait
        reward = D["reward"] if unset("reward") else reward
        net = net or D["config"]["net"]
        lr = lr if lr is not None else D["config"]["lr"]
        gamma = gamma if gamma is not None else D["config"]["gamma"]
        if algorithm == "dql":
            sets = (*(f"{k}={v}" for k, v in D["dql_config"].items()), *sets)
        if curriculum is None and trace is not None and start is None and not sampled_jobset:
            curriculum = D["curriculum"]
    options, first_jobs, workload_keys = {"backfill": backfill}, None, {}
    if algorithm == "irl-dqn":
        from ...agents.irl import TRAINING_DEFAULTS as I

        algorithm = "dql"
        kind, window, reward = (I[k] if unset(k) else v for k, v in (("kind", kind), ("window", window),
                                                                       ("reward", reward)))
        encoder, net = encoder or I["encoder"], net or I["config"]["net"]
        allow_wait = not I["no_wait"] if unset("allow_wait") else allow_wait
        hidden = hidden or ",".join(map(str, I["config"]["hidden"]))
        gamma = I["config"]["gamma"] if gamma is None else gamma
        sets = (*(f"{k}={v}" for k, v in I["dql_config"].items()), f"activation={I['config']['activation']}", *sets)
        if trace is not None and train_fraction is None and start is None:
            first_jobs = I["first_jobs"]
    if algorithm in PAPER_AGENTS:  # a paper's agent: PPO with its defaults, in the chosen semantics
        paper = importlib.import_module(f"...agents.{algorithm}", __package__)
        S = paper.TRAINING_DEFAULTS
        semantics = semantics or S["semantics"]
        if semantics not in paper.SEMANTICS:
            raise ConfigError(f"--semantics {semantics} is not one of {algorithm}'s: {', '.join(paper.SEMANTICS)}")
        algorithm = "ppo"
        kind = S["kind"] if unset("kind") else kind
        encoder = encoder or S["encoder"]
        policy = base or (S["policy"] if unset("policy") else policy)
        n_jobs = S["jobs"] if unset("n_jobs") else n_jobs
        window = S.get("window", window) if unset("window") else window
        trajectories = S["trajectories"] if unset("trajectories") else trajectories
        reward = paper.SEMANTICS_REWARD[semantics] if unset("reward") else reward
        teacher = teacher or S.get("teacher", {}).get(kind)  # a preset's teacher is per kind
        max_steps = max_steps or S.get("max_steps")
        options = dict(paper.SEMANTICS[semantics])
        workload_keys = dict(paper.SEMANTICS_WORKLOAD[semantics])
        first_jobs = workload_keys.pop("first_jobs", None)
        if train_fraction is not None or start is not None:
            first_jobs = None
        if not unset("backfill"):
            options["backfill"] = backfill
        config = dict(S["config"])
        if teacher is None and config.get("imitation_coef"):
            config["imitation_coef"] = 0.0  # nothing to imitate on this kind (the preset's teacher takes another)
        preset = {k: config.pop(k) for k in ("net", "hidden", "lr", "gamma")}
        net = net or preset["net"]
        hidden = hidden or ",".join(map(str, preset["hidden"]))
        lr = preset["lr"] if lr is None else lr
        gamma = preset["gamma"] if gamma is None else gamma
        sets = (*(f"{k}={json.dumps(v)}" for k, v in config.items()), *sets)  # the user's --set come last
        # the teacher (with the same base policy) is a baseline too: what did learning add to it?
        baselines = baselines or ((policy, f"{kind}:{teacher},{policy}") if teacher else (policy,))
    elif base is not None or semantics is not None:
        raise ConfigError(f"--base and --semantics belong to {' and '.join(PAPER_AGENTS)}")
    for item in env_options:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option takes KEY=VALUE (a simulation option, e.g. backfill_stop=true), got {item!r}")
        options[key.strip()] = _parse_value(value.strip())
    sim_config({**options, "window": window, "policy": policy}, seed)  # a bad option fails here, not mid-training
    torch.set_num_threads(threads)
    try:
        dev = resolve_device(device)
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError) as exc:
        raise ConfigError(f"device {device!r} is not usable here: {exc}") from None
    if resume:
        last = latest_checkpoint(out)
        if last is None:
            raise HpcgymError(f"nothing to resume: no epoch_*.pt checkpoint in {out}")
        saved = load_checkpoint(last).trainer.get("settings")
        if not saved:
            raise HpcgymError(f"{last} has no training settings to resume with")
        settings = TrainSettings.from_json(saved, epochs=epochs)
        if settings.algorithm != algorithm:
            raise HpcgymError(f"{out} holds a {settings.algorithm} run, not {algorithm}")
    else:
        if latest_checkpoint(out) is not None:
            raise HpcgymError(f"{out} already holds checkpoints: use --resume to go on, or another --out")
        if sampled_jobset and start is not None:
            raise ConfigError("--start (one fixed window) and --sampled-jobset exclude each other")
        if trace is not None:  # saved with the settings: the file itself, not a name to look up again
            trace = resolve_trace(trace).resolve()
        workload = {"trace": str(trace) if trace else None, "procs": procs, "jobs": n_jobs,
                    "start": start, "sample": None if start is not None else True,
                    "sampled_jobset": sampled_jobset or None}
        eval_workload = None
        if train_fraction is not None:
            workload["train_fraction"] = train_fraction
            eval_workload = {k: v for k, v in {**workload, "part": "test"}.items() if v is not None}
            workload["part"] = "train"
        workload = {k: v for k, v in workload.items() if v is not None}
        workload.update(workload_keys)
        if eval_workload is not None:
            eval_workload.update(workload_keys)
        if first_jobs is not None:  # train on the trace's first jobs, evaluate on windows of all of it
            eval_workload = dict(workload)
            workload["first_jobs"] = first_jobs
        if sjf_range is not None or prefill:  # the training windows only
            eval_workload = eval_workload or dict(workload)
            if sjf_range is not None:
                workload["sjf_range"] = _parse_range(sjf_range)
            if prefill:
                workload["prefill"] = True
        phases = None
        if curriculum is not None and curriculum.strip().lower() != "none":
            if trace is None:
                raise ConfigError("--curriculum draws its phases from a trace: give --trace (and --train-fraction)")
            if sampled_jobset or start is not None:
                raise ConfigError("--curriculum sets each phase's episodes itself: drop --sampled-jobset / --start")
            phases = parse_curriculum(curriculum, epochs * trajectories)
        settings = TrainSettings(
            algorithm=algorithm, kind=kind, workload=workload, eval_workload=eval_workload,
            options={**options, "window": window, "policy": policy}, reward=reward, encoder=encoder,
            config=_algorithm_config(algorithm, net, hidden, lr, gamma, sets), epochs=epochs,
            trajectories=trajectories, envs=envs, seed=seed, checkpoint_every=checkpoint_every,
            eval_episodes=eval_episodes, no_wait=not allow_wait, max_steps=max_steps, discard_after=discard_after,
            curriculum=phases, teacher=teacher,
            baselines=tuple(baselines) or ("fcfs", "sjf"))
    settings.eval_episodes = eval_episodes
    if not resume and trace is not None and train_fraction is None and eval_episodes:
        click.echo("note: without --train-fraction the held-out evaluation draws other windows of the same "
                   "trace, which may overlap the training ones; --train-fraction 0.8 trains on the first 80% "
                   "and evaluates on the rest (a chronological split)", err=True)
    trainer = Trainer(settings, out, device=str(dev), progress=progress, log=lambda m: click.echo(m, err=True),
                      workers=workers, executor=executor, address=address, worker_timeout=worker_timeout)
    try:
        history = trainer.train(resume=resume)
    except ValueError as exc:  # bad algorithm options surface as ValueError from the config dataclasses
        raise ConfigError(str(exc)) from None
    except WorkerError as exc:  # not a bad input: the run failed (exit 1), its checkpoints stay
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    last = history[-1] if history else {}
    click.echo(f"{asked} on {settings.kind}: {trainer.epoch} epochs, {trainer.runner.next_episode} episodes"
               + (f", last epoch mean return {last['return']:.3f}" if "return" in last else "")
               + f" ({dev}); checkpoints in {out}")
    if settings.eval_episodes:
        result = trainer.evaluate()
        click.echo(f"held-out evaluation, {result['episodes']} sequences (greedy):")
        click.echo(f"  {'policy':<10}{'mean bsld':>12}{'mean wait (s)':>16}{'utilization':>14}")
        for name, m in result["summary"].items():
            click.echo(f"  {name:<10}{m['mean_bsld']:>12.2f}{m['mean_wait']:>16.1f}{m['utilization']:>14.4f}")
        for name, error in result["failed"].items():
            click.echo(f"  {name:<10}failed: {error}")
        click.echo(f"  (paired differences with 95% CIs in {out / result['compare'] / 'summary.md'})")
