"""`hpcgym train ALGO`: train PG, A2C, PPO or DQL, or a paper's recipe, on an hpcgym env (README,
"Reinforcement learning"); a recipe's settings under every flag given, `--set KEY=VALUE` for the rest."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ...environment.config import BACKFILL_MODES
from ...environment.decisions import KINDS
from ...environment.errors import ConfigError, HpcgymError
from ...environment.rewards import DELAY_SYNTAX, RELATIVE_SYNTAX, REWARDS, SCALE_SYNTAX, SUM_SYNTAX
from ..usage import jobs_option, procs_option, seed_option, trace_option, workload_option
from .settings import ALGORITHMS

KIND_CHOICES = (*KINDS, "select+backfill")


#: What a resumed run may change: how long, how often it writes, how it is evaluated and on what it runs.
RESUME_MAY_CHANGE = {"out", "resume", "epochs", "checkpoint_every", "eval_episodes", "workers", "executor", "address",
                     "worker_timeout", "device", "threads", "progress"}
#: What may change when `--recipe FILE` remakes a recorded run (the seed: the same run on another seed).
REMAKE_MAY_CHANGE = RESUME_MAY_CHANGE - {"resume"} | {"seed"}


@click.command("train")
@click.argument("algorithm", required=False, type=click.Choice(ALGORITHMS, case_sensitive=False))
@click.option("--recipe", metavar="NAME[:VARIANT]|FILE",
              help="A paper's run (`hpcgym recipes` lists them), e.g. rlbf:scw; the flags given here win over it. "
                   "Or a checkpoint (.pt) or eval.json of a run: that run remade (--seed and --epochs may change).")
@click.option("--kind", type=click.Choice(KIND_CHOICES), default="select", show_default=True,
              help="The decision kind the agent takes (the others use the built-in defaults); "
                   "select+backfill: both, as DRAS's two levels (the default of dras-ALGO).")
@trace_option(what="Job sequences are drawn from this ")
@procs_option(when_unset="the trace header, or 256")
@workload_option("model")
@workload_option("machine")
@jobs_option("Jobs per episode (a window of the workload).", default=256, show_default=True)
@workload_option("start", "Train on the one window starting here instead of a random window per episode.")
@workload_option("sampled_jobset", "Episodes are DRAS-style sampled jobsets, not windows.")
@workload_option("train_fraction", "Train on the first fraction of the trace, evaluate on the rest.")
@click.option("--sjf-range", metavar="LOW,HIGH",
              help="Train only on windows whose SJF mean bsld (RLScheduler's rules) lies strictly between LOW and "
                   "HIGH, redrawing the others (RLScheduler's trajectory filtering, 10,150); not the evaluation.")
@click.option("--prefill", is_flag=True,
              help="Start each training window with the jobs before it running (RLScheduler's pre-filled cluster).")
@click.option("--curriculum", help="Phases of training episodes, in order: sampled (random jobs, Poisson "
              "arrivals), real (windows of the trace), synthetic (from a model fitted to the training part), "
              "e.g. sampled,real,synthetic (even split) or sampled:9,real:9,synthetic:82 (episodes each; "
              "dras-ALGO with a trace: sampled,real,synthetic; 'none': off).")
@workload_option("cleaning", "SWF cleaning rule of --trace: hpcgym's (default), or rlbf-scw (cancelled jobs kept as 10 "
                             "s jobs, RL backfilling's code; docs/semantics.md); wins over the recipe's.")
@click.option("--backfill", type=click.Choice(BACKFILL_MODES), default="easy", show_default=True)
@click.option("--policy", default="fcfs", show_default=True, help="Priority policy ordering the queue window.")
@click.option("--base", help="schedinspector, rlbf: the base priority policy (sets --policy; default sjf for "
                             "schedinspector, fcfs for rlbf).")
@click.option("--semantics", metavar="VARIANT",
              help="The recipe's variant: schedinspector: code (the authors' code, default) or textbook "
                   "(docs/schedinspector.md); rlbf: public (the public code, default), scw (the code of the paper's "
                   "tables) or textbook (docs/rlbackfilling.md); rlschert: event (docs/rlschert.md).")
@click.option("--option", "env_options", multiple=True, metavar="KEY=VALUE",
              help="A simulation option of the training and evaluation episodes, as in a reset's options "
                   "(e.g. --option backfill_stop=true); repeat it; it wins over --semantics' preset.")
@click.option("--teacher", metavar="AGENT",
              help="ppo: an agent whose actions the imitation term (--set imitation_coef=A --set "
                   "imitation_epochs=N) pulls the policy towards: a built-in name (e.g. rlschert-rule, sjf), "
                   "module:Class or model:PATH (rlschert: rlschert-rule).")
@click.option("--init-from", type=click.Path(path_type=Path, exists=True, dir_okay=False), metavar="CHECKPOINT",
              help="Start from a trained checkpoint's weights (same observation and network); another kind's "
                   "output rows are matched by slot meaning, e.g. a select agent starts a select_kill one "
                   "(its kill rows start as its wait row, shifted by the kill prior).")
@click.option("--window", type=click.IntRange(min=1), default=128, show_default=True,
              help="Queue jobs the agent sees and chooses from.")
@click.option("--wait/--no-wait", "allow_wait", default=True, show_default=True,
              help="select: may the agent wait (the env's last action) while a job could start? "
                   "--no-wait picks a job at every decision, as the RL scheduling papers do.")
@click.option("--reward", default="bsld", show_default=True,
              help=f"Reward spec: {', '.join(REWARDS)}, or {RELATIVE_SYNTAX}, {DELAY_SYNTAX}, {SUM_SYNTAX}, "
                   f"{SCALE_SYNTAX} (environment/rewards.py; docs/gymnasium.md says when each arrives).")
@click.option("--encoder", help="Observation encoder (default: the env's, jobs+nodes for select).")
@click.option("--encoder-option", "encoder_options", multiple=True, metavar="KEY=VALUE",
              help="An option of the encoder, e.g. --encoder dras --encoder-option priority_size=26 (DRAS's "
                   "priority flag for jobs of 26 processors or more); repeat it.")
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
@click.option("--trajectories", type=click.IntRange(min=1), default=100, show_default=True, help="Episodes per epoch.")
@click.option("--envs", type=click.IntRange(min=1), default=8, show_default=True,
              help="Envs stepped together (one batched network call per round).")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Rollout worker processes, each with --envs envs and a CPU copy of the policy, playing whole "
                   "episodes while this process updates (1: all in this process).")
@click.option("--executor", type=click.Choice(("local", "ray")), default="local", show_default=True,
              help="Where the rollout workers run: local processes, or Ray actors (in the clone: pip install -e '.[ray]').")
@click.option("--address", help="Ray cluster address (with --executor ray; default: a local Ray instance).")
@click.option("--worker-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds a rollout worker may go without finishing an episode before the run stops (its start-up may take 300 s at least).")
@seed_option()
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Folder for the learning curve, checkpoints and evaluation.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --out (same settings; "
              "--epochs, --checkpoint-every and --eval-episodes may change).")
@click.option("--eval-episodes", type=click.IntRange(min=0), default=10, show_default=True,
              help="Held-out sequences the model is compared on at the end, as by hpcgym compare "
                   "(OUT/eval/, eval.json; 0: none).")
@click.option("--baseline", "baselines", multiple=True, metavar="POLICY",
              help="A policy of the held-out evaluation besides the model, in hpcgym compare's syntax "
                   "(repeat it; the first is the baseline of the paired differences; default fcfs and sjf).")
@click.option("--device", default="auto", show_default=True, help="auto (CUDA when present), cpu, cuda, cuda:1 ...")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="The learner's torch CPU threads at most: each epoch takes those on idle cores (with --workers, "
                   "the update's; each worker acts on one). A run repeats bit for bit only with the same count.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar (default: a bar when stderr is a terminal, else one line per epoch; "
                   "--no-progress: neither).")
@click.pass_context
def train(ctx, algorithm, recipe, **flags) -> None:
    """Train ALGORITHM (pg, a2c, ppo or dql), or a paper's recipe (dras, schedinspector, rlbf, rlschert,
    irl; also spelled dras-ALGO and irl-dqn; or --recipe NAME[:VARIANT]), and write curve.csv,
    curve.png, checkpoints and eval.json to OUT."""
    try:
        import gymnasium  # noqa: F401
        import torch
    except ImportError as exc:
        raise HpcgymError(f"training needs the rl extra (torch, gymnasium): {exc}") from None
    from ...agents.rl.algorithm import resolve_device
    from ...agents.rl.checkpoint import latest_checkpoint
    from ...agents.recipes import is_record, recorded_settings
    from .settings import resumed_settings, train_recipe, train_settings
    from .trainer import Trainer, TrainSettings
    from .workers import WorkerError

    workers, executor, address = flags["workers"], flags["executor"], flags["address"]
    if workers < 1:
        raise ConfigError(f"--workers takes 1 or more rollout workers, got {workers}")
    if address is not None and executor != "ray":
        raise ConfigError("--address is for --executor ray")
    given = {name for name in flags if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT}
    record = recorded_settings(recipe) if recipe is not None and is_record(recipe) else None
    chosen = train_recipe(algorithm or record["algorithm"], None, None, None) if record else \
        train_recipe(algorithm, recipe, flags["semantics"], flags["base"])
    label = (algorithm or (record or {}).get("name") or chosen.name).lower()
    out, epochs, eval_episodes = flags["out"], flags["epochs"], flags["eval_episodes"]
    torch.set_num_threads(flags["threads"])
    try:
        dev = resolve_device(flags["device"])
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError) as exc:
        raise ConfigError(f"device {flags['device']!r} is not usable here: {exc}") from None
    spelled = {param.name: param.opts[0] for param in ctx.command.params}
    if flags["resume"]:
        settings = resumed_settings(out, chosen.algorithm, epochs)
        if "checkpoint_every" in given:  # when to write, not what is learnt
            settings.checkpoint_every = flags["checkpoint_every"]
        kept = sorted(spelled[name] for name in given - RESUME_MAY_CHANGE)
        if kept:
            click.echo(f"note: --resume goes on with the settings saved in {out}, not with {', '.join(kept)} "
                       "given here (train into a new --out to change them)", err=True)
    elif record is not None:  # a run remade from its own record: another seed, more or fewer epochs
        settings = TrainSettings.from_json(record, **{k: flags[k] for k in REMAKE_MAY_CHANGE & given & {
            "epochs", "seed", "checkpoint_every"}})
        kept = sorted(spelled[name] for name in given - REMAKE_MAY_CHANGE)
        if kept:
            click.echo(f"note: --recipe {recipe} remakes the run it records, not with {', '.join(kept)} given here "
                       "(only --seed, --epochs and how it runs may change)", err=True)
    else:
        settings = train_settings(chosen, flags, given, label)  # checks every option before anything is written
    if not flags["resume"] and latest_checkpoint(out) is not None:
        raise HpcgymError(f"{out} already holds checkpoints: use --resume to go on, or another --out")
    settings.eval_episodes = eval_episodes
    if not flags["resume"] and flags["trace"] is not None and flags["train_fraction"] is None and eval_episodes:
        click.echo("note: without --train-fraction the held-out evaluation draws other windows of the same "
                   "trace, which may overlap the training ones; --train-fraction 0.8 trains on the first 80% "
                   "and evaluates on the rest (a chronological split)", err=True)
    trainer = Trainer(settings, out, device=str(dev), progress=flags["progress"], log=lambda m: click.echo(m, err=True),
                      workers=workers, executor=executor, address=address, worker_timeout=flags["worker_timeout"],
                      threads=flags["threads"])
    try:
        history = trainer.train(resume=flags["resume"])
    except ValueError as exc:  # bad algorithm options surface as ValueError from the config dataclasses
        raise ConfigError(str(exc)) from None
    except WorkerError as exc:  # not a bad input: the run failed (exit 1), its checkpoints stay
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted in epoch {trainer.epoch + 1}; `hpcgym train {label} --out {out} --resume --epochs "
                   f"{settings.epochs}` goes on from the last checkpoint in {out}", err=True)
        sys.exit(130)
    last = history[-1] if history else {}
    click.echo(f"{label} on {settings.kind}: {trainer.epoch} epochs, {trainer.runner.next_episode} episodes"
               + (f", last epoch mean return {last['return']:.3f}" if "return" in last else "")
               + f" ({dev}); checkpoints in {out}")
    _draw_curve(out, f"{label} on {settings.kind}")
    if settings.eval_episodes:
        result = trainer.evaluate()
        click.echo(f"held-out evaluation, {result['episodes']} sequences (greedy):")
        click.echo(evaluation_table(result))
        click.echo(f"  (paired differences with 95% CIs in {out / result['compare'] / 'summary.md'})")


def _draw_curve(out: Path, title: str) -> None:
    """curve.png beside curve.csv; without matplotlib (an optional extra) a note, not a failure."""
    from ..compare.report import write_curve_plot

    try:
        write_curve_plot(out / "curve.csv", out / "curve.png", title)
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        click.echo("note: curve.png skipped: matplotlib is not installed (pip install matplotlib)", err=True)


def evaluation_table(result: dict) -> str:
    """The held-out evaluation's main means, one policy a line, the name column as wide as the longest name."""
    width = max(len("policy"), *(len(name) for name in (*result["summary"], *result["failed"]))) + 2
    lines = [f"  {'policy':<{width}}{'mean bsld':>12}{'mean wait (s)':>16}{'utilization':>14}"]
    for name, m in result["summary"].items():
        lines.append(f"  {name:<{width}}{m['mean_bsld']:>12.2f}{m['mean_wait']:>16.1f}{m['utilization']:>14.4f}")
    for name, error in result["failed"].items():
        lines.append(f"  {name:<{width}}failed: {error}")
    return "\n".join(lines)
