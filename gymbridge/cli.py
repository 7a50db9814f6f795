"""The `hpcgym` command line: a user's mistake (bad option, missing or malformed file) is one line, exit status 2."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from ..environment.priorities import POLICIES
from ..environment.config import BACKFILL_MODES, OVERRUN_MODES, PRESETS, SimConfig
from ..environment.errors import HpcgymError
from ..environment.lublin import generate_lublin
from ..environment.machine import RESOURCES
from ..environment.predictions import PredictionSpec
from ..environment.simulator import simulate
from ..environment.spec import DEFAULT_JOBS, DEFAULT_MODEL, DEFAULT_PROCS, LUBLIN_MODELS, load_workload, resolve_trace
from ..environment.swf import trace_stats, write_swf
from ..environment.workload import Workload, describe_dropped
from .usage import (check_part, estimate_spec, given, jobs_option, procs_option, reading_options, recipe_option,
                    seed_option, trace_option, workload_keys, workload_option)

SUMMARY_LABELS = [("jobs", "jobs", "{:d}"), ("mean_wait", "mean wait (s)", "{:.1f}"),
                  ("max_wait", "max wait (s)", "{:d}"), ("mean_response", "mean response (s)", "{:.1f}"),
                  ("mean_slowdown", "mean slowdown", "{:.2f}"), ("mean_bsld", "mean bounded slowdown", "{:.2f}"),
                  ("max_bsld", "max bounded slowdown", "{:.2f}"), ("utilization", "utilization", "{:.4f}"),
                  ("makespan", "makespan (s)", "{:d}")]


#: Commands of other modules, imported only when they run (`hpcgym run` starts without that machinery).
LAZY_COMMANDS = {"protocol": ".protocol_commands:protocol", "train": ".training.command:train",
                 "compare": ".compare:compare", "record": ".compare.record:record", "distill": ".distill:distill",
                 "tree": ".distill:tree_command", "predict": ".predict:predict", "batsim": ".batsim:batsim",
                 "recipes": ".recipes_command:recipes"}


class HpcgymGroup(click.Group):
    """HpcgymError below becomes one line and status 2; a reader leaving early (`| head`) ends it with status 0."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, attribute = LAZY_COMMANDS[name].split(":")
            return getattr(importlib.import_module(module, __package__), attribute)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HpcgymError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except BrokenPipeError:  # the reader left early (`hpcgym run | head -1`): it had what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            sys.exit(0)


@click.group(cls=HpcgymGroup)
@click.version_option(package_name="hpcgym")
def main() -> None:
    """hpcgym: simulate HPC batch scheduling and compare policies on identical job sequences."""


def _rule_options(f):
    """The simulation rules of the papers' code (docs/semantics.md sections 4, 5), for run and env."""
    f = click.option("--preset", type=click.Choice(list(PRESETS)),
                     help="A paper code's simulation rules (environment/config.py PRESETS); the flags here win.")(f)
    f = click.option("--commit-pick", is_flag=True,
                     help="A pick that does not fit stays the pick until it starts: reservations persist "
                          "(SchedInspector's code; not with --backfill conservative).")(f)
    f = click.option("--exact-requests", is_flag=True,
                     help="Requested time = run time for every job (SchedInspector's code).")(f)
    return f


def _rules(ctx: click.Context, recipe: str | None = None, **values: Any) -> dict[str, Any]:
    """run's and env's simulation options: the defaults, the recipe's, the preset's, then the flags given."""
    from ..agents.recipes import recipe_episode  # only here: `hpcgym run` starts without the agents floor

    flags = {k: v for k, v in given(ctx, **values).items() if k != "preset"}
    defaults = {k: v for k, v in values.items() if k != "preset" and k not in flags}
    return {**defaults, **recipe_episode(recipe).get("options", {}), **PRESETS.get(values.get("preset") or "", {}),
            **flags}


@main.command()
@trace_option(f"a generated Lublin workload of {DEFAULT_JOBS} jobs")
@reading_options
@workload_option("cleaning", default="hpcgym")
@click.option("--policy", type=click.Choice(list(POLICIES), case_sensitive=False), default="fcfs", show_default=True,
              help="Priority policy that orders the queue.")
@click.option("--backfill", type=click.Choice(BACKFILL_MODES), default="easy", show_default=True)
@click.option("--estimate", default="requested", show_default=True, callback=estimate_spec,
              help="Run-time estimate for reservations: requested, actual, predicted (the --prediction's) or "
                   "noisy:E (e.g. noisy:0.2).")
@click.option("--prediction", default="none", show_default=True,
              help="Run-time predictor: none, user_history, learned:MODEL.json (hpcgym predict fit) or "
                   "running[:PRE,RUN,END[,PERIOD]][,share=S] (docs/semantics.md section 12).")
@click.option("--overrun", type=click.Choice(OVERRUN_MODES), default="run", show_default=True,
              help="A job past its requested time: run to its recorded end, or kill it at its walltime.")
@workload_option("machine")
@workload_option("model")
@_rule_options
@jobs_option("Simulate only this many jobs (a window).")
@workload_option("start", "First job of the window (with --jobs).")
@workload_option("sample", "Seed of a random window start (with --jobs).")
@workload_option("sampled_jobset")
@workload_option("train_fraction")
@workload_option("part", "Which part of the split to draw from (with --train-fraction).", default="test")
@seed_option("Seed of the generated workload, noisy estimates and the random policy.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--jobs-out", type=click.Path(path_type=Path, dir_okay=False), help="Write per-job records as CSV.")
@click.option("--report", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the schedule as an HTML page (Gantt chart, busy processors, queue, waits; opens "
                   "offline; plotly: pip install -e '.[compare]').")
@click.pass_context
def run(ctx, policy, prediction, seed, as_json, jobs_out, report, **spec) -> None:
    """Replay a trace (or the generated default workload) with a policy and print its metrics."""
    check_part(ctx, spec["train_fraction"])
    rules = {k: spec.pop(k) for k in ("backfill", "estimate", "overrun", "exact_requests", "commit_pick", "preset")}
    workload = load_workload(workload_keys(spec), seed)
    config = SimConfig(seed=seed, prediction=prediction, **_rules(ctx, **rules))
    backfill, estimate = config.backfill, rules["estimate"]
    from tqdm import tqdm

    with tqdm(total=len(workload), unit="job", disable=None if len(workload) > 50_000 else True, leave=False,
              file=sys.stderr) as bar:  # a bar for a long trace only
        result = simulate(workload, config, policy=policy, progress=lambda done: bar.update(done - bar.n))
    if jobs_out is not None:
        result.write_jobs_csv(jobs_out)
    if report is not None:
        _write_report(report, workload, result, f"{policy.upper()} + {backfill} backfill")
    summary = dict(result.summary)
    if as_json:
        summary.update(workload=workload.name, procs=workload.procs, policy=policy, **config.to_options(),
                       dropped=dict(workload.dropped))
        click.echo(json.dumps(summary))
        return
    where = f"{workload.procs} processors" if workload.machine is None else workload.machine.describe()
    click.echo(f"{workload.name}: {len(workload)} jobs on {where}, "
               f"{policy.upper()} + {backfill} backfill ({estimate} estimates)")
    if any(workload.dropped.values()):
        click.echo(f"  left out when read: {describe_dropped(workload.dropped)}; docs/semantics.md sections 1, 13")
    for key, label, fmt in SUMMARY_LABELS:
        click.echo(f"  {label:<24}{fmt.format(summary[key])}")
    for resource in RESOURCES:
        if f"utilization_{resource}" in summary:
            click.echo(f"  {'utilization, ' + resource + ' held':<24}{summary[f'utilization_{resource}']:.3f}")


def _write_report(path: Path, workload: Workload, result: Any, policy: str) -> None:
    from .compare.schedule_report import Schedule, write_report

    window = f"{workload.name}: {len(workload)} jobs on {workload.procs} processors"
    try:
        write_report(path, [Schedule(policy, window, result.jobs, result.procs, result.reservation_breaks)],
                     f"hpcgym run: {window}")
    except ModuleNotFoundError as exc:
        if exc.name != "plotly":
            raise
        raise HpcgymError("--report draws with plotly, which is not installed: pip install -e '.[compare]' "
                          "(in the clone)") from None
    except OSError as exc:
        raise HpcgymError(f"cannot write {path}: {exc.strerror or exc}") from None


@main.group()
def trace() -> None:
    """Inspect or generate workload traces (Standard Workload Format)."""


@trace.command()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@reading_options
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as one JSON object.")
def info(file, as_json, **spec) -> None:
    """Statistics of an SWF trace (a path, or a file name found in $HPCGYM_TRACES): the columns of the RL
    papers' trace tables."""
    stats = trace_stats(load_workload({"trace": file, **spec}))
    if as_json:
        click.echo(json.dumps(stats))
        return
    for key, value in stats.items():
        click.echo(f"{key:<28}{value:.2f}" if isinstance(value, float) else f"{key:<28}{value}")


@trace.command()
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
@jobs_option("Jobs in the generated trace.", default=DEFAULT_JOBS, show_default=True)
@procs_option(DEFAULT_PROCS)
@seed_option()
@click.option("--model", type=click.Choice(list(LUBLIN_MODELS)), default=DEFAULT_MODEL, show_default=True,
              help="Parameter set of the model (see docs/lublin.md).")
def generate(out, n_jobs, procs, seed, model) -> None:
    """Write a synthetic Lublin-Feitelson workload as SWF (gzip if OUT ends in .gz)."""
    workload = generate_lublin(n_jobs, procs, seed=seed, params=LUBLIN_MODELS[model]())
    write_swf(out, workload, comments=[f"Generated by hpcgym: Lublin-Feitelson model ({model}), seed {seed}"])
    click.echo(f"wrote {len(workload)} jobs on {procs} processors to {out}")


@main.command("env")
@click.option("--bind", default="tcp://127.0.0.1:5555", show_default=True,
              help="ZeroMQ address to listen on (tcp://HOST:PORT or ipc://PATH).")
@trace_option(what="Default trace for episodes: ")
@procs_option()
@workload_option("machine")
@click.option("--policy", type=click.Choice(list(POLICIES), case_sensitive=False), default="fcfs", show_default=True)
@click.option("--backfill", type=click.Choice(BACKFILL_MODES), default="easy", show_default=True)
@_rule_options
@recipe_option
@click.option("--reward", default="none", show_default=True, help="Default reward spec.")
@click.option("--decision-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds an agent may take to answer a decision.")
@click.option("--on-agent-lost", type=click.Choice(["fallback", "end"]), default="fallback", show_default=True,
              help="When an agent stops answering: its kinds fall back to the built-in defaults, or the episode ends.")
@click.option("--trace-dir", "trace_dirs", type=click.Path(path_type=Path, file_okay=False, exists=True),
              multiple=True, help="A folder agents may name traces from (besides --trace's folder and "
                                  "$HPCGYM_TRACES); no other file is opened.")
@click.option("--max-trace-bytes", type=click.IntRange(min=1), default=1 << 30, show_default=True,
              help="Largest trace file a reset may name, on disk and unpacked.")
@click.option("--max-trace-jobs", type=click.IntRange(min=1), default=2_000_000, show_default=True,
              help="Most job lines in a trace a reset may name, counted while it is parsed (the largest archive "
                   "traces hold about 500,000; a small .gz of short lines can hold tens of millions).")
@click.option("--max-reset-cpu", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="CPU seconds a reset's work may take (sjf_range's windows, the simulation up to the first "
                   "decision); a reset over it is refused, and one whose agent leaves is stopped.")
@click.option("--prediction", help="Default run-time predictor of episodes (none, user_history, learned:MODEL.json, "
                                   "running[:PRE,RUN,END[,PERIOD]][,share=S]; docs/semantics.md section 12).")
@click.option("--model-dir", "model_dirs", type=click.Path(path_type=Path, file_okay=False, exists=True),
              multiple=True, help="A folder agents may name learned prediction models from (prediction "
                                  "learned:NAME.json; besides --prediction's model's folder); without one, no "
                                  "model is opened for a reset.")
@click.option("--max-jobs", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Most jobs a reset may ask for (jobs, generate_jobs).")
@click.option("--idle-timeout", type=click.FloatRange(min=1), default=3600.0, show_default=True,
              help="Seconds after which a silent agent outside an episode is forgotten (and its empty session).")
@click.option("--max-sessions", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Most sessions at once (a hello that would start another is refused until one ends).")
@click.option("--max-agents", type=click.IntRange(min=1), default=4000, show_default=True,
              help="Most agents at once (said hello, not yet gone).")
@click.option("--max-connections", type=click.IntRange(min=1),
              help="Most client connections at once [default: 1000]; one more is refused and closed. Counted from a "
                   "connection's first request (silent ones, such as those without CURVE keys, are held apart). The "
                   "env raises its open-file limit as far as the system lets it, and serves fewer if files would "
                   "run out first.")
@click.option("--max-connections-per-peer", "per_peer", type=click.IntRange(min=1),
              help="Most of those connections from one host (IP address) at once [default: half of "
                   "--max-connections], so one host cannot take them all.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes the sessions are spread over (a session lives in one; docs/server.md says "
                   "how many to start).")
@click.option("--redirect/--no-redirect", default=True, show_default=True,
              help="With --workers: send agents of protocol 1.6 and later to their worker's own address (a free port "
                   "on the same host, or an ipc path beside --bind), so their messages skip the front's hop; "
                   "--no-redirect forwards every message, where only the env's own port is reachable.")
@click.option("--open-sessions", is_flag=True,
              help="Let any agent join any session by name (agents that do not know session tokens, protocol "
                   "< 1.3); by default joining a session that has agents takes its token.")
@click.option("--allow-remote", is_flag=True, help="Allow binding an address other hosts can reach.")
@click.option("--insecure", is_flag=True, help="With --allow-remote: listen without CURVE authentication.")
@click.option("--curve-secret", type=click.Path(path_type=Path, dir_okay=False),
              help="Server secret key file (from `hpcgym keys`): turns on CURVE authentication.")
@click.option("--curve-allow", type=click.Path(path_type=Path, exists=True), multiple=True,
              help="Public key file, or folder of them, of agents allowed to connect.")
@click.pass_context
def env_command(ctx, bind, trace, procs, machine, policy, backfill, exact_requests, commit_pick, preset, recipe, reward,
                decision_timeout, on_agent_lost, trace_dirs, prediction, model_dirs, max_connections, per_peer, workers,
                redirect, open_sessions, allow_remote, insecure, curve_secret, curve_allow, **limits) -> None:
    """Serve simulations to agents over ZeroMQ (see protocol/PROTOCOL.md and docs/server.md)."""
    from ..environment.server import (DEFAULT_MAX_CONNECTIONS, check_listening, raise_open_files,
                                      room_for_connections, serve)
    from ..environment.limits import Limits
    from ..environment.service import EnvService
    from ..environment.spec import TRACES_ENV

    curve = _server_curve(curve_secret, curve_allow)
    check_listening(bind, curve is not None, allow_remote, insecure)  # before saying "listening"
    workload = {k: v for k, v in (("trace", str(resolve_trace(trace)) if trace else None), ("procs", procs),
                                  ("machine", machine)) if v is not None}
    options = _rules(ctx, recipe, backfill=backfill, exact_requests=exact_requests, commit_pick=commit_pick,
                     preset=preset, policy=policy)
    policy = options.pop("policy")
    from ..agents.recipes import recipe_episode

    episode = recipe_episode(recipe, workload=workload, **given(ctx, reward=reward))
    workload, reward = episode.get("workload", {}), episode.get("reward", reward)
    models = list(model_dirs)
    if prediction is not None:
        spec = PredictionSpec.parse(prediction)
        if spec.kind == "learned":
            model = Path(spec.model).expanduser().resolve()
            models.append(model.parent)
            prediction = f"learned:{model}"
        options["prediction"] = prediction
    folders = [*([Path(workload["trace"]).parent] if trace else []), *trace_dirs,
               *(Path(f) for f in os.environ.get(TRACES_ENV, "").split(os.pathsep) if f)]
    limits = Limits(trace_dirs=tuple(folders), model_dirs=tuple(models), **limits)  # the --max-* options
    settings = {"defaults": {"workload": workload, "options": options, "policy": policy, "reward": reward},
                "decision_timeout": decision_timeout, "on_agent_lost": on_agent_lost, "limits": limits,
                "private": not open_sessions}
    service = EnvService(**settings)
    service.check_defaults()  # a missing, truncated or non-SWF trace, bad options or reward: exit 2 now
    max_connections = max_connections or DEFAULT_MAX_CONNECTIONS
    before, files = raise_open_files()
    if files != before:
        click.echo(f"hpcgym env: open-file limit raised from {before:,} to {files:,}", err=True)
    connections = room_for_connections(max_connections, files)
    if connections < max_connections:
        click.echo(f"hpcgym env: serving at most {connections:,} connections, not {max_connections:,}: this process "
                   f"may open {files:,} files (ulimit -n; the hard limit is the most it can raise it to), and keeps "
                   "room for its own and for silent and refused connections", err=True)
    per_peer = min(per_peer or max(1, connections // 2), connections)

    def say_listening() -> None:
        spread = f" with {workers} workers{', redirecting agents of protocol 1.6' if redirect else ''}"
        click.echo(f"hpcgym env listening on {bind}{' with CURVE' if curve else ''}{spread if workers > 1 else ''}",
                   err=True)

    if workers == 1:
        serve(service, bind, curve=curve, allow_remote=allow_remote, insecure=insecure, max_connections=connections,
              per_peer=per_peer, on_bound=say_listening)
        return
    from ..environment.workers import serve_workers, worker_limits

    serve_workers({**settings, "limits": worker_limits(limits, workers)}, workers, bind, curve=curve,
                  max_connections=connections, per_peer=per_peer, on_bound=say_listening, redirect=redirect)


class _AgentCommand(click.Command):
    """`hpcgym agent`, its help ending with every built-in agent (read only when the help is shown)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from ..agents.runtime import builtin_agents

        rows = builtin_agents()
        groups = [
            ("Priority policies (select: start, or reserve, the window's job of lowest score; s submit time, "
             "r requested time, n size, w wait; ties: earlier submit, lower id)",
             [(n, t) for n, k, t in rows if n in POLICIES]),
            ("Other select agents (docs/agents.md; they start sets of jobs that fit and never reserve: "
             "run the env with --backfill none)",
             [(n, t) for n, k, t in rows if n not in POLICIES and k == ("select",)]),
            ("Inspect agents (agents/inspectors.py; serve one with --join while the agent that resets "
             "asks for it with --require inspect)",
             [(n, t) for n, k, t in rows if k == ("inspect",)]),
            ("Kill agents (agents/rlschert.py; they read run-time predictions: reset with --prediction "
             "running, docs/rlschert.md)",
             [(n, t) for n, k, t in rows if k == ("kill",)]),
            ("Joint select and kill agents (agents/rlschert.py; take select_kill, with --prediction running)",
             [(n, t) for n, k, t in rows if k == ("select_kill",)]),
        ]
        with formatter.section("Built-in agents (AGENT)"):
            for title, items in groups:
                formatter.write_text(title + ":")
                with formatter.indentation():
                    formatter.write_dl(items)
        super().format_epilog(ctx, formatter)


@main.command("agent", cls=_AgentCommand)
@click.argument("agent", required=False)
@click.option("--model", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Serve a trained checkpoint (from `hpcgym train`) or a tree file (from `hpcgym distill`) "
                   "instead of AGENT.")
@click.option("--greedy/--sampling", default=True, show_default=True,
              help="With --model: take the best action, or sample from the policy.")
@click.option("--sampling-seed", type=int, default=0, show_default=True, help="Seed of --sampling (and of --online).")
@click.option("--online", is_flag=True,
              help="With --model: keep updating the policy while it serves (DRAS's dynamic mode; on-policy "
                   "checkpoints: pg, a2c, ppo). It samples its actions (on-policy data).")
@click.option("--online-every", type=click.IntRange(min=1), help="With --online: decisions per update [default: 1000].")
@click.option("--online-lr", type=click.FloatRange(min=0, min_open=True),
              help="With --online: learning rate of the updates [default: the checkpoint's / 10].")
@click.option("--online-save", type=click.Path(path_type=Path, dir_okay=False),
              help="With --online: write the adapted checkpoint here after each update and episode.")
@click.option("--online-reward", type=click.Choice(["auto", "env", "metrics"]), default="auto", show_default=True,
              help="With --online: the rewards the env reports (env), the checkpoint's end reward scored from "
                   "the episode's metrics (metrics), or metrics for an end-reward checkpoint, else env (auto).")
@click.option("--connect", default="tcp://127.0.0.1:5555", show_default=True, help="Address of the env.")
@click.option("--reset/--join", "controls", default=True, show_default=True,
              help="Start the episodes (reset) or join the ones another agent starts.")
@click.option("--episodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--session", default="default", show_default=True)
@click.option("--token", envvar="HPCGYM_SESSION_TOKEN",
              help="The session's token: the first agent creates the session with it, the others join with it "
                   "(an env's sessions are private unless it runs with --open-sessions) [env: HPCGYM_SESSION_TOKEN].")
@seed_option("Episode seed sent with reset (and the random policy's seed).", default=None)
@click.option("--policy", "env_policy", type=click.Choice(list(POLICIES), case_sensitive=False),
              help="The env's priority policy for the episodes this agent resets: it orders the queue window and "
                   "the built-in backfill scan [default: AGENT when it is a priority policy, else the env's].")
@click.option("--prediction", help="Run-time predictor of the episodes this agent resets (e.g. running; a kill "
                                   "agent such as rlschert-rule reads predictions) [default: the env's].")
@click.option("--estimate", help="Run-time estimate of reservations in the episodes this agent resets (e.g. "
                                 "predicted) [default: the env's].")
@jobs_option("Window length sent with reset.")
@workload_option("sample", "Random window seed sent with reset.")
@recipe_option
@click.option("--require", multiple=True, help="Kinds the episode must wait for (with --reset).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds to wait for any reply before giving up.")
@click.option("--curve-server", type=click.Path(path_type=Path, dir_okay=False), help="The env's public key file.")
@click.option("--curve-secret", type=click.Path(path_type=Path, dir_okay=False), help="This agent's secret key file.")
@click.option("--json", "as_json", is_flag=True, help="Print each episode's metrics as one JSON line.")
@click.option("--progress-every", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Progress (decisions served, simulated time, elapsed time): a bar when stderr is a "
                   "terminal, else a line every this many seconds; 0: none.")
@click.option("--orders/--no-orders", default=True, show_default=True,
              help="A static priority agent sends standing orders (protocol 1.4): the env answers its select "
                   "decisions by its ranking until a job it has not ranked arrives. --no-orders: asked at every "
                   "decision (the same schedule, more messages).")
def agent_command(agent, model, greedy, sampling_seed, online, online_every, online_lr, online_save, online_reward,
                  connect, controls, episodes, session, token, seed, env_policy, prediction, estimate, n_jobs, sample,
                  recipe, require, timeout, curve_server, curve_secret, as_json, progress_every, orders) -> None:
    """Serve AGENT (a built-in name such as sjf, or module:Class), or a checkpoint (--model), to an env;
    with --online the checkpoint keeps learning while it serves."""
    from ..agents.runtime import agent_name, episode_policy, load_agent, run_agent, serve_on_one_thread

    if (agent is None) == (model is None):
        raise click.UsageError("name an AGENT or give --model CHECKPOINT (one of the two)")
    ctx = click.get_current_context()
    if not online:
        named = given(ctx, online_every=0, online_lr=0, online_save=0, online_reward=0)
        if named:
            raise click.UsageError(f"{', '.join('--' + n.replace('_', '-') for n in named)} only apply with --online")
    elif model is None:
        raise click.UsageError("--online adapts a trained checkpoint: give --model CHECKPOINT")
    elif greedy and given(ctx, greedy=greedy):
        raise click.UsageError("--online samples its actions (on-policy data for its updates): drop --greedy")
    from ..agents.tree import TreeAgent, is_tree_file

    if model is not None and is_tree_file(model):  # a tree of `hpcgym distill`: numpy only, no torch
        if online:
            raise click.UsageError(f"{model} is a tree file; --online adapts a trained checkpoint")
        policy, name = TreeAgent(model), agent_name(f"tree-{model.stem}")
    elif model is not None:
        try:
            import torch
        except ImportError:
            raise HpcgymError("--model needs PyTorch, which is not installed: pip install torch==2.13.0 (the CPU "
                              "build; see the README) and, in the clone, pip install -e '.[rl]'") from None

        serve_on_one_thread()
        if online:
            from ..agents.rl.online import DEFAULT_EVERY, OnlineRLAgent

            policy = OnlineRLAgent(model, every=online_every or DEFAULT_EVERY, lr=online_lr, save=online_save,
                                   seed=sampling_seed, reward=online_reward)
            name = agent_name(f"rl-online-{model.stem}")
        else:
            from ..agents.rl.serve import RLAgent

            policy, name = RLAgent(model, greedy=greedy, seed=sampling_seed), agent_name(f"rl-{model.stem}")
    else:  # a priority policy is seeded as the env seeds its own, by the episode seed
        policy = load_agent(agent, **({"seed": seed or 0} if agent.lower() in POLICIES else {}))
        name = agent_name(agent)

    for flag, value in (("--policy", env_policy), ("--prediction", prediction), ("--estimate", estimate),
                        ("--recipe", recipe)):
        if value is not None and not controls:
            raise click.UsageError(f"{flag} sets the env's options for the episodes this agent resets: not with --join")
    reset = None
    if controls:
        from ..agents.recipes import recipe_episode

        if recipe is None and model is not None and not is_tree_file(model):  # the checkpoint's own rules
            recipe = str(model)
            click.echo(f"note: the episodes this agent resets take {model.name}'s recorded rules, reward and "
                       "cleaning; --recipe NAME or the flags here override them", err=True)
        workload = {k: v for k, v in (("jobs", n_jobs), ("sample", sample)) if v is not None}
        order = episode_policy(None if model is not None else agent, env_policy)
        options = {k: v for k, v in (("policy", order), ("prediction", prediction), ("estimate", estimate)) if v}
        episode = recipe_episode(recipe, workload=workload, options=options)
        reset = {k: v for k, v in (("seed", seed), ("workload", episode["workload"] or None),
                                   ("require", list(require) or None), ("options", episode["options"] or None),
                                   ("reward", episode.get("reward"))) if v is not None}
    progress = _AgentProgress(progress_every) if progress_every else None
    try:
        run = run_agent(policy, connect, name=name, session=session, reset=reset, episodes=episodes, timeout=timeout,
                        curve=_client_curve(curve_server, curve_secret), progress=progress, token=token, orders=orders)
    finally:
        if progress is not None:
            progress.close()
    if online:
        info = policy.describe()["online"]
        click.echo(f"online: {info['updates']} update(s) over {info['decisions']} decisions "
                   f"(every {info['every']}, lr {info['lr']:g}, reward from {info['reward']})"
                   + (f"; adapted checkpoint in {online_save}" if online_save else ""), err=True)
    for end in run.episodes:
        if as_json:
            click.echo(json.dumps({"episode": end["episode"], "reason": end["reason"], **end["metrics"]}))
        else:
            bsld = end["metrics"].get("mean_bsld")
            click.echo(f"episode {end['episode']}: {end['reason']}"
                       + (f", mean bounded slowdown {bsld:.2f}" if bsld is not None else ""))
    if any(end["reason"] != "completed" for end in run.episodes):
        sys.exit(1)


class _AgentProgress:
    """`hpcgym agent`'s progress: a tqdm counter of decisions on a terminal, else a line every `every` s."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.began = self.last = time.monotonic()
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(unit=" decisions", file=sys.stderr, leave=False, dynamic_ncols=True)

    def __call__(self, run, decision) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if run.decisions % 100 == 1:
                self.bar.set_postfix_str(f"simulated time {decision.time / 86400:.1f} days", refresh=False)
            return
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            click.echo(f"agent: {run.decisions} decisions, {len(run.episodes)} episode(s) done, simulated time "
                       f"{decision.time / 86400:.1f} days, {now - self.began:.1f} s elapsed", err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@main.command("keys")
@click.argument("name")
@click.option("--dir", "folder", type=click.Path(path_type=Path, file_okay=False), default=".", show_default=True)
def keys_command(name, folder) -> None:
    """Make a CURVE key pair NAME.key (public, share it) and NAME.key_secret (keep it)."""
    import zmq.auth

    folder.mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(folder), name)
    os.chmod(secret, 0o600)  # a secret key is for its owner's eyes only
    click.echo(f"wrote {public} and {secret} (readable by you only)")


def _load_key(path: Path, secret: bool) -> tuple[bytes, bytes | None]:
    import zmq.auth

    try:
        public, secret_key = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise HpcgymError(f"cannot read CURVE key {path}: {exc}") from None
    if secret and secret_key is None:
        raise HpcgymError(f"{path} holds no secret key; pass the NAME.key_secret file")
    return public, secret_key


def _server_curve(secret_file: Path | None, allow: tuple[Path, ...]):
    from ..environment.server import CurveKeys

    if secret_file is None:
        if allow:
            raise HpcgymError("--curve-allow needs --curve-secret (the server's key pair)")
        return None
    public, secret = _load_key(secret_file, secret=True)
    files = [f for p in allow for f in (sorted(p.glob("*.key")) if p.is_dir() else [p])]
    if not files:
        raise HpcgymError("with CURVE on, list the agents allowed to connect with --curve-allow")
    return CurveKeys(public, secret, [_load_key(f, secret=False)[0] for f in files])


def _client_curve(server_file: Path | None, secret_file: Path | None):
    if server_file is None and secret_file is None:
        return None
    if server_file is None or secret_file is None:
        raise HpcgymError("CURVE needs both --curve-server (env public key) and --curve-secret (agent key pair)")
    server_public, _ = _load_key(server_file, secret=False)
    public, secret = _load_key(secret_file, secret=True)
    return server_public, public, secret
