"""`hpcgym distill`: distil an agent into decision trees (IRL: DAgger with critical states), and
`hpcgym tree`: print a tree file's rules, draw its top levels (docs/irl.md: what they write)."""

from __future__ import annotations

import csv
import json
import math
import time
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

import click
import numpy as np

from ...environment.config import BACKFILL_MODES, SimConfig
from ...environment.errors import ConfigError, HpcgymError
from ..progress import progress as progress_bar
from ..provenance import provenance
from ..usage import recipe_option, seed_option, trace_option

if TYPE_CHECKING:
    from ...agents.runtime import AgentRef

METHODS = ("irl", "dagger")
#: A picture of more levels than this has unreadably small nodes.
MAX_PICTURE_LEVELS = 6
MODES = ("auto", "regression", "classification")


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise ConfigError(f"{what} takes positive integers separated by commas, e.g. 8,10,12; got {text!r}")
    return values


def _workloads(trace: Path, first: int, train_jobs: int, test_jobs: int, cleaning: str = "hpcgym"):
    from ...environment.spec import resolve_trace
    from ...environment.swf import read_swf

    workload = read_swf(resolve_trace(trace), cleaning=cleaning)
    if first + train_jobs + test_jobs > len(workload):
        raise ConfigError(f"{trace} has {len(workload)} jobs, fewer than --first {first} + --train-jobs {train_jobs}"
                          f" + --test-jobs {test_jobs}")
    train = workload.take(slice(first, first + train_jobs), name=f"{workload.name}[train]")
    test = workload.take(slice(first + train_jobs, first + train_jobs + test_jobs), name=f"{workload.name}[test]")
    return train, test


def _teacher_setup(ref: AgentRef, kinds: tuple[str, ...] | None, encoder: str | None, window: int, options: dict):
    """(teacher, kinds, encoder name, window, procs, env options) for a teacher."""
    from ...agents.distill import check_teacher_kinds, make_teacher
    from ...agents.runtime import load_agent

    spec = ref.spec
    if ref.source == "cmd":  # a program in any language, over the protocol
        from .program_teacher import ProgramTeacher

        kinds = kinds or ("select",)
        teacher = ProgramTeacher(ref.target, kinds, window)
        return teacher, kinds, encoder, window, None, {**options, "window": window}
    agent = load_agent(ref)
    teacher = make_teacher(agent, window)
    if teacher.has_scores:  # a checkpoint: its own encoder, window and training options
        ckpt = agent.checkpoint
        if kinds is not None and tuple(kinds) != teacher.kinds:
            check_teacher_kinds(teacher.kinds, kinds, spec)
            raise HpcgymError(f"teacher {spec} takes {'+'.join(teacher.kinds)} together; distil them together "
                              f"(--kind {'+'.join(teacher.kinds)})")
        trained = dict(ckpt.env.get("options", {}))
        # the tree may read other features than the teacher (which always reads its own): the slots are the same
        return (teacher, teacher.kinds, encoder or ckpt.encoder, teacher.window, ckpt.env.get("procs"),
                {**trained, **options})
    check_teacher_kinds(tuple(agent.kinds), kinds or tuple(agent.kinds), spec)
    agent.kinds = teacher.kinds = tuple(kinds or agent.kinds)
    return teacher, teacher.kinds, encoder, window, None, {**options, "window": window}


@click.command("distill")
@click.argument("teacher", required=False)
@click.option("--records", "records_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Fit on a decision records file (`hpcgym record`, any agent, any language) instead of a "
                   "TEACHER's decisions: behaviour cloning, one tree per depth, no DAgger iterations.")
@trace_option(required=True)
@click.option("--first", type=click.IntRange(min=0), default=0, show_default=True, help="First job used.")
@click.option("--train-jobs", type=click.IntRange(min=1), default=10_000, show_default=True)
@click.option("--test-jobs", type=click.IntRange(min=1), default=2_500, show_default=True)
@click.option("--kind", help="Decision kinds to distil: select, backfill, inspect or select+backfill "
              "(default: the teacher's).")
@click.option("--encoder", help="The tree's features (default: a checkpoint teacher's own encoder, else the kind's "
              "usual one); a checkpoint teacher always reads its own, over the same window slots.")
@click.option("--window", type=click.IntRange(min=1),
              help="Queue window (a checkpoint's own window wins) [default: the recipe's, else 128].")
@recipe_option
@click.option("--backfill", type=click.Choice(BACKFILL_MODES), help="Backfilling (default: a checkpoint's, else easy).")
@click.option("--policy", help="Priority policy ordering the queue (default: a checkpoint's, else fcfs).")
@click.option("--depth", "depths", default="8,10,12", show_default=True, help="Tree depths, e.g. 8,10,12.")
@click.option("--iterations", type=click.IntRange(min=1), default=5, show_default=True, help="DAgger iterations N.")
@click.option("--critical", type=click.IntRange(min=0), default=3, show_default=True,
              help="irl: fit on decisions whose queue is longer than this.")
@click.option("--methods", default="irl,dagger", show_default=True,
              help="irl (critical states only), dagger (all states), or both.")
@click.option("--mode", type=click.Choice(MODES), default="auto", show_default=True,
              help="regression on the teacher's scores, or classification on its choices (auto: regression when "
                   "the teacher has scores).")
@click.option("--relative/--no-relative", default=True, show_default=True,
              help="Add each job column's rank among the candidates (from the smallest and from the largest) to "
                   "the tree's features.")
@seed_option()
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="CPU threads for a checkpoint teacher's torch (it scores one decision at a time while it drives: "
                   "more threads only contend).")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True)
@click.option("--progress/--no-progress", default=None, help="A progress bar (default: when stderr is a terminal).")
def distill(teacher, records_path, trace, first, train_jobs, test_jobs, kind, encoder, window, recipe, backfill, policy,
            depths, iterations, critical, methods, mode, relative, seed, threads, out, progress) -> None:
    """Distil TEACHER (an agent in `hpcgym agent` syntax: sjf, module:Class, model:PATH, tree:PATH;
    or cmd:'PROGRAM {addr} ...', a program in any language asked over the protocol, taking the
    --kind decisions, default select) into decision trees by DAgger with critical states (IRL)
    and plain DAgger."""
    from ...agents.candidates import CandidateFeatures
    from ...agents.distill import Samples, dagger, rollout
    from ...agents.encoders import DEFAULT_ENCODERS, get_encoder

    if (teacher is None) == (records_path is None):
        raise click.UsageError("name a TEACHER or give --records FILE (one of the two)")
    from ...agents.runtime import NETWORK_SOURCES, resolve_agent

    teacher_ref = resolve_agent(teacher, programs=True) if teacher is not None else None
    depth_list = _ints(depths, "--depth")
    method_list = [m.strip() for m in methods.split(",") if m.strip()]
    if not method_list or set(method_list) - set(METHODS):
        raise ConfigError(f"--methods takes {' and/or '.join(METHODS)}, got {methods!r}")
    from ...agents.recipes import recipe_episode

    given = {k: v for k, v in (("backfill", backfill), ("policy", policy), ("window", window)) if v is not None}
    if recipe is None and teacher_ref is not None and teacher_ref.source in NETWORK_SOURCES:
        recipe = teacher_ref.target  # the teacher's own run: its rules and its trace cleaning
        click.echo(f"note: distilling on {Path(recipe).name}'s recorded rules and cleaning; --recipe NAME or the "
                   "flags here override them", err=True)
    episode = recipe_episode(recipe, kind=kind, encoder=encoder, options=given)
    kind, encoder, options = episode.get("kind"), episode.get("encoder"), episode.get("options", {})
    kinds, window = tuple(kind.split("+")) if isinstance(kind, str) else kind, options.pop("window", 128)
    train, test = _workloads(trace, first, train_jobs, test_jobs, episode.get("workload", {}).get("cleaning", "hpcgym"))
    if records_path is not None:
        _clone_records(records_path, train, test, kinds, depth_list, relative, seed, out, options)
        return
    t0 = time.perf_counter()
    if teacher_ref.source in NETWORK_SOURCES:
        import torch

        torch.set_num_threads(threads)
    teach, kinds, encoder, window, procs, options = _teacher_setup(teacher_ref, kinds, encoder, window, options)
    mode = ("regression" if teach.has_scores else "classification") if mode == "auto" else mode
    if mode == "regression" and not teach.has_scores:
        raise ConfigError(f"teacher {teacher} gives actions, not scores: use --mode classification")
    encoder = encoder or DEFAULT_ENCODERS[kinds[0]]
    # a tree reading its checkpoint teacher's own encoder reads it as the teacher does (e.g. DRAS's priority flag)
    same = teach.has_scores and teach.agent.checkpoint.encoder == encoder
    encoder_options = dict(teach.agent.checkpoint.env.get("encoder_options", {})) if same else {}
    try:
        features = CandidateFeatures(get_encoder(encoder, window, procs, **encoder_options), kinds, window, relative)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    priority = options.pop("policy", "fcfs")
    config = SimConfig(**{k: v for k, v in options.items() if k in SimConfig.__dataclass_fields__})
    meta = {"kinds": list(kinds), "encoder": encoder, "encoder_options": encoder_options, "window": window, "procs": procs,
            "features": features.names, "relative": relative, "teacher": teacher, "trace": str(trace),
            "train_jobs": [first, first + train_jobs]}
    from ...environment.simulator import simulate

    baseline = simulate(test, config, policy=priority).summary
    taught_train = rollout(train, config, priority, teach, features, mode)
    if not len(taught_train.samples):
        raise HpcgymError(f"teacher {teacher} took no {'+'.join(kinds)} decision on the training jobs: "
                          "nothing to learn from")
    taught_test = rollout(test, config, priority, teach, features, mode)
    setup_s = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    rows, trees = [], {}
    bar = progress_bar(len(depth_list) * len(method_list) * iterations, "iterations", "distill", progress)
    try:
        for method in method_list:
            for depth in depth_list:
                def tick(step) -> None:
                    r = step.row()
                    rows.append(r)
                    bar.set_postfix_str(f"{method} depth {depth} iteration {step.iteration}: {r['nodes']} nodes, "
                                        f"agreement {r['agreement']:.3f}, mean slowdown {r['mean_slowdown']:.2f}")
                    bar.update()

                start = Samples()
                start.extend(taught_train.samples)
                done = dagger(teach, features, train, test, config, priority, depth, iterations,
                              critical if method == "irl" else None, mode, meta, seed, start, tick)
                trees[(method, depth)] = done[-1].tree
    finally:
        bar.close()
    files, shown = _write_trees(trees, out), ("mean_wait", "mean_slowdown", "mean_bsld")
    teacher_row = {**{k: taught_test.summary[k] for k in shown},
                   "us_per_decision": 1e6 * taught_test.teacher_seconds / max(taught_test.decisions, 1)}
    with open(out / "iterations.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "distill.json").write_text(json.dumps(
        {"teacher": teacher, "kinds": list(kinds), "mode": mode, "critical": critical, "iterations": rows,
         "teacher_test": teacher_row, "base_policy": priority,
         "base_test": {k: baseline[k] for k in shown},
         "seconds": {"setup": setup_s, "total": time.perf_counter() - t0}, "trees": files,
         "provenance": provenance({"trace": str(trace), "first": first, "train_jobs": train_jobs, "test_jobs": test_jobs,
                                   "kinds": list(kinds), "encoder": encoder, "window": window, "options": options,
                                   "policy": priority, "depths": depth_list, "iterations": iterations,
                                   "critical": critical, "methods": method_list, "mode": mode, "relative": relative,
                                   "seed": seed, "threads": threads}, [teacher])},
        indent=1, default=float))
    _print_summary(rows, teacher_row, priority, baseline, iterations)
    click.echo(f"trees, rules and pictures in {out} ({time.perf_counter() - t0:.0f} s)")


def _write_trees(trees: dict, out: Path) -> list[str]:
    """Each tree, its rules and (with matplotlib) its top two levels."""
    files = []
    for (method, depth), tree in trees.items():
        stem = out / f"{method}-d{depth}"
        tree.save(stem.with_suffix(".npz"))
        stem.with_suffix(".txt").write_text(tree.rules() + "\n")
        files.append(str(stem.with_suffix(".npz")))
        with suppress(ImportError):   # no matplotlib: no picture
            from .plot import draw_tree

            draw_tree(tree, stem.with_suffix(".png"), 2, f"{method}, depth {depth}: top two levels "
                                                          f"({tree.node_count} nodes)")
    return files


def _print_summary(rows: list[dict], teacher: dict, base_policy: str, base: dict, iterations: int) -> None:
    """The last iteration of each tree beside the teacher and the base policy alone (no agent)."""
    click.echo(f"{'method':<10}{'depth':>6}{'nodes':>8}{'agree':>8}{'agree2+':>9}{'R2':>8}{'wait (s)':>11}"
               f"{'slowdown':>10}")
    for name, row in ((base_policy[:9], base), ("teacher", teacher)):   # no tree columns
        click.echo(f"{name:<10}{'':>39}{row['mean_wait']:>11.0f}{row['mean_slowdown']:>10.2f}")
    for r in rows:
        if r["iteration"] == iterations:
            click.echo(f"{r['method']:<10}{r['depth']:>6}{r['nodes']:>8}{r['agreement']:>8.3f}"
                       f"{_cell(r['agreement_choice'], 9)}{_cell(r['r2'], 8)}{r['mean_wait']:>11.0f}"
                       f"{r['mean_slowdown']:>10.2f}")


def _cell(value: float, width: int) -> str:
    """A number, or "-" where undefined (R2 of classification; agreement beyond the first of one candidate)."""
    return f"{'-' if math.isnan(value) else format(value, '.3f'):>{width}}"


def _clone_records(path: Path, train, test, kinds, depths, relative, seed, out, options) -> None:
    """Trees fitted on a records file's decisions (classification on the recorded choices)."""
    from ...agents.candidates import CandidateFeatures
    from ...agents.distill import Samples, fit_tree
    from ...agents.encoders import get_encoder
    from ...agents.records import load_records
    from ...agents.tree import TreeAgent
    from ...environment.simulator import simulate

    columns, meta = load_records(path)
    if not len(columns["action"]):
        raise HpcgymError(f"{path} holds no decisions: record an episode with decisions of its kind first")
    if kinds is not None and tuple(kinds) != (meta["kind"],):
        raise HpcgymError(f"{path} records {meta['kind']} decisions, not {'+'.join(kinds)}")
    window = int(meta["window"])
    features = CandidateFeatures(get_encoder(meta["encoder"], window), (meta["kind"],), window, relative)
    samples = Samples()
    for vector, mask, action, queue in zip(columns["features"], columns["mask"], columns["action"],
                                           columns["queue_length"]):
        rows, allowed = features.from_vector(vector, mask)
        where = np.flatnonzero(allowed)
        if len(where):
            samples.add(rows[where], (where == action).astype(np.int64), int(queue))
    tree_meta = {"kinds": [meta["kind"]], "encoder": meta["encoder"], "window": window, "procs": None,
                 "features": features.names, "relative": relative, "records": str(path)}
    priority = options.pop("policy", "fcfs")
    config = SimConfig(**{**options, "window": window})
    trees = {}
    for depth in depths:
        tree = fit_tree(samples, depth, "classification", None, seed, {**tree_meta, "method": "clone"})
        trees[("clone", depth)] = tree
        summary = simulate(test, config, policy=priority, agents={meta["kind"]: TreeAgent(tree)}).summary
        click.echo(f"clone depth {depth}: {tree.node_count} nodes, test mean wait {summary['mean_wait']:.0f} s, "
                   f"mean slowdown {summary['mean_slowdown']:.2f}")
    out.mkdir(parents=True, exist_ok=True)
    _write_trees(trees, out)
    click.echo(f"trees, rules and pictures in {out}")


@click.command("tree")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--depth", "max_depth", type=click.IntRange(min=0), help="Print only this many levels.")
@click.option("--picture", type=click.Path(path_type=Path, dir_okay=False),
              help="Draw the top levels to this file (.png or .svg).")
@click.option("--levels", type=click.IntRange(min=1, max=MAX_PICTURE_LEVELS),
              help=f"Levels of splits the picture draws (default: --depth, at most {MAX_PICTURE_LEVELS}; "
                   "without --depth 2).")
def tree_command(path, max_depth, picture, levels) -> None:
    """Print the rules of a tree file (from `hpcgym distill`) and optionally draw its top levels."""
    from ...agents.tree import load_tree

    tree = load_tree(path)
    m = tree.meta
    click.echo(f"# {m.get('method', 'tree')} tree of {'+'.join(m.get('kinds', []))} decisions: depth {tree.depth}, "
               f"{tree.node_count} nodes, {m.get('mode')}; the allowed candidate of highest score is taken")
    click.echo(tree.rules(max_depth))
    if picture is not None:
        from .plot import draw_tree

        if levels is None:
            levels = min(max(max_depth, 1), MAX_PICTURE_LEVELS) if max_depth is not None else 2
        click.echo(f"picture: {draw_tree(tree, picture, levels)}")
