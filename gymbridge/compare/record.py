"""`hpcgym record`: one policy's decisions of one kind over job sequences, as one records file (run
as `hpcgym compare` runs the policy; agents/records.py describes the columns)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import click

from ...environment.errors import ConfigError, HpcgymError
from ...environment.spec import resolve_trace
from ..usage import jobs_option, recipe_option, seed_option, trace_option, workload_keys, workload_option
from .command import record_settings
from .plan import unit_id
from .policy import parse_policy


@click.command("record")
@click.argument("spec")
@click.option("--kind", help="The decision kind to record: select, inspect, backfill or kill (default: the recipe's).")
@click.option("--encoder", help="Features of each decision (default: the recipe's, else the kind's usual encoder).")
@recipe_option
@trace_option()
@jobs_option("Jobs per sequence (absent: the whole trace is one sequence).")
@click.option("--samples", type=click.IntRange(min=1), help="Sequences (default 10 with --jobs, else 1).")
@workload_option("train_fraction", "Split the trace chronologically; draw from one part (--part).")
@workload_option("part", default="test")
@workload_option("machine")
@workload_option("model")
@seed_option("Sample i uses seed SEED+i.")
@click.option("--window", type=click.IntRange(min=1),
              help="Window slots of the mask and the features (the policy's window) [default: the recipe's, else 128].")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Parallel sequences.")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True, help="The records file (.npz).")
def record(spec, kind, encoder, recipe, samples, window, workers, out, **drawn) -> None:
    """Record SPEC's decisions of one kind (a policy in hpcgym compare's syntax) to OUT; with --recipe,
    in that paper's episodes (its rules, window, cleaning; its kind and encoder unless given)."""
    from ...agents.recipes import recipe_episode
    from ...agents.records import load_records, merge_records, save_records
    from .plan import SequenceSpec
    from .runner import Comparison, run_comparison

    if drawn["trace"] is not None:  # a bare name is looked up in $HPCGYM_TRACES
        drawn["trace"] = str(resolve_trace(drawn["trace"]).resolve())
    episode = recipe_episode(recipe, kind=kind, encoder=encoder, options={"window": window} if window else None)
    kind, options = episode.get("kind"), {k: v for k, v in episode.get("options", {"window": 128}).items()
                                          if k != "policy"}
    if not isinstance(kind, str):
        raise ConfigError("give --kind: the decision kind to record" + (f" (recipe {recipe} takes {'+'.join(kind)})"
                                                                      if kind else ""))
    settings = record_settings(kind, episode.get("encoder"), window=options["window"], what="--kind/--encoder")
    policy = parse_policy(f"recorded={spec}")
    if not any(kind in agent.kinds for agent in policy.agents) and not any(not a.kinds for a in policy.agents):
        raise ConfigError(f"policy {spec!r} has no agent taking {kind} decisions: nothing would be recorded")
    sequences = SequenceSpec(**workload_keys(drawn), samples=samples or (10 if drawn["n_jobs"] else 1),
                             cleaning=episode.get("workload", {}).get("cleaning", "hpcgym"))
    folder = Path(tempfile.mkdtemp(prefix="hpcgym-record-"))
    try:
        comparison = Comparison([policy], sequences, folder / "run", options=options, mode="inproc",
                                workers=workers, plots=False, record=settings, argv=["hpcgym", "record", spec])
        outcome = run_comparison(comparison)
        if outcome.failed:
            errors = outcome.table.split("\n## Errors\n")
            raise HpcgymError(f"the policy failed: {errors[1].strip() if len(errors) > 1 else 'see the log'}")
        run = json.loads((folder / "run" / "run.json").read_text())
        units = [folder / "run" / "units" / f"{unit_id(policy, s['index'])}" for s in run["sequences"]]
        parts = [load_records(u.with_name(u.name + ".records.npz")) for u in units]
        merged = merge_records(parts)
        metrics = [json.loads(u.with_name(u.name + ".json").read_text())["summary"] for u in units]
        meta = {**parts[0][1], "episodes": sum(m["episodes"] for _, m in parts), "spec": spec,
                "sequence_seeds": [s["seed"] for s in run["sequences"]], "metrics": metrics}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_records(out, merged, meta)
    click.echo(f"recorded {len(merged['action'])} {kind} decisions over {meta['episodes']} sequence(s) to {out}")

