"""Why a SchedInspector training run collapses into rejecting: the learner's view, epoch by epoch.

Trains the `schedinspector` preset (code rules, SJF base, SDSC-SP2 by default) and, before each
PPO update, reads the collected batch:

    accept / reject     share of decisions taking each action
    A(accept), A(rej)   mean raw advantage of each action (before normalisation), with the run's
                        lambda and with lambda = 1 (Monte Carlo: episode return minus V(s))
    V - G by rejections value error (value minus the episode's return) of states whose pick has
                        0, 1-4, 5-19 or 20+ rejections
    early adv           mean |advantage| of steps more than 1/(1 - lambda) decisions before the end,
                        against the mean |advantage| of the last ones: how much of the update the
                        value function writes rather than the reward
    length, at cap      decisions per episode; decisions whose pick reached the rejection cap

    .venv/bin/python benchmarks/advantage_probe.py --seed 11 --epochs 6
    .venv/bin/python benchmarks/advantage_probe.py --seed 11 --epochs 6 --set gae_lambda=1.0

The mechanism this shows (docs/schedinspector.md, "Why most seeds collapsed"): the reward comes only
at the end of episodes of hundreds of decisions, so with lambda < 1 an early step's advantage is
almost all V(later state) - V(state); the critic rates states whose pick was rejected more often
higher than their returns, so rejecting earns a positive advantage, and rejections feed themselves.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import numpy as np
import torch

from hpcgym.agents.encoders import InspectorEncoder
from hpcgym.agents.recipes import Recipe, get_recipe
from hpcgym.agents.rl.storage import gae
from hpcgym.environment.spec import resolve_trace
from hpcgym.gymbridge.provenance import provenance
from hpcgym.gymbridge.training.trainer import Trainer, TrainSettings

ACCEPT, REJECT = 0, 1
REJECTION_BINS = ((0, 0), (1, 4), (5, 19), (20, 10**9))


def training_workload(recipe: Recipe, trace: str) -> dict:
    """The workload keys of `hpcgym train --recipe RECIPE --trace TRACE`'s training episodes."""
    workload = {"trace": str(resolve_trace(trace)), "jobs": recipe.jobs, "sample": True, **recipe.workload}
    if recipe.first_jobs is not None:
        workload["first_jobs"] = recipe.first_jobs
    return workload


def settings_for(recipe: Recipe, trace: str, seed: int, epochs: int, overrides: dict) -> TrainSettings:
    """`hpcgym train --recipe RECIPE --trace TRACE --seed SEED` as settings."""
    return TrainSettings(algorithm=recipe.algorithm, kind=recipe.kind, workload=training_workload(recipe, trace),
                         options=recipe.reset_options(), reward=recipe.reward, encoder=recipe.encoder_for(),
                         config={**recipe.config, **overrides}, epochs=epochs, trajectories=recipe.trajectories,
                         seed=seed, eval_episodes=0)


def read_batch(storage, gamma: float, lam: float) -> dict[str, float]:
    """The statistics above for one epoch's steps."""
    actions, adv_run, adv_mc, errors, rejections, early, late = [], [], [], [], [], [], []
    horizon = 1.0 / max(1e-9, 1.0 - lam)
    for env, s in enumerate(storage.steps):
        if not s["action"]:
            continue
        a_run, _ = gae(s["reward"], s["value"], s["done"], storage.last_values[env], gamma, lam)
        a_mc, g = gae(s["reward"], s["value"], s["done"], storage.last_values[env], gamma, 1.0)
        actions.append(np.asarray(s["action"]))
        adv_run.append(a_run)
        adv_mc.append(a_mc)
        errors.append(np.asarray(s["value"]) - g)
        rejections.append(np.rint(np.stack(s["obs"])[:, 5] * InspectorEncoder.REJECTION_SCALE))
        ends = np.flatnonzero(np.asarray(s["done"]))
        to_end = np.empty(len(a_run))
        start = 0
        for end in ends:
            to_end[start:end + 1] = np.arange(end - start, -1, -1)
            start = end + 1
        to_end[start:] = np.inf
        early.append(np.abs(a_run[to_end > horizon]))
        late.append(np.abs(a_run[to_end <= horizon]))
    actions, adv_run, adv_mc = map(np.concatenate, (actions, adv_run, adv_mc))
    errors, rejections = np.concatenate(errors), np.concatenate(rejections)
    out = {"reject": float((actions == REJECT).mean())}
    for name, adv in (("run", adv_run), ("mc", adv_mc)):
        for label, a in (("accept", ACCEPT), ("reject", REJECT)):
            picked = actions == a
            out[f"A_{name}_{label}"] = float(adv[picked].mean()) if picked.any() else float("nan")
    for lo, hi in REJECTION_BINS:
        inside = (rejections >= lo) & (rejections <= hi)
        out[f"err_{lo}"] = float(errors[inside].mean()) if inside.any() else float("nan")
        out[f"n_{lo}"] = int(inside.sum())
    early, late = np.concatenate(early), np.concatenate(late)
    out["early_abs_adv"] = float(early.mean()) if len(early) else 0.0
    out["late_abs_adv"] = float(late.mean()) if len(late) else 0.0
    out["early_share"] = float(len(early) / (len(early) + len(late)))
    out["at_cap"] = int((rejections >= InspectorEncoder.REJECTION_SCALE).sum())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="SDSC-SP2-1998-4.2-cln.swf.gz")
    parser.add_argument("--recipe", default="schedinspector:code", help="a SchedInspector recipe (hpcgym recipes)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a PPO config override, e.g. gae_lambda=1.0")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    overrides = {k: json.loads(v) for k, _, v in (item.partition("=") for item in args.set)}
    settings = settings_for(get_recipe(args.recipe), args.trace, args.seed, args.epochs, overrides)
    rows = []
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(settings, out, device="cpu", progress=False, log=lambda m: None)
        trainer.setup()
        algo, update = trainer.algo, trainer.algo.update
        lam = algo.config.gae_lambda

        def probed_update(storage):
            rows.append(read_batch(storage, algo.config.gamma, lam))
            return update(storage)

        algo.update = probed_update
        print(f"{args.recipe}, seed {args.seed}, lambda {lam}, {args.trace}")
        header = (f"{'ep':>3} {'return':>7} {'length':>7} {'reject':>6} {'A_acc':>7} {'A_rej':>7} "
                  f"{'MC_acc':>7} {'MC_rej':>7} {'V-G r0':>7} {'r1-4':>7} {'r5-19':>7} {'r20+':>7} "
                  f"{'early%':>6} {'|A|early':>8} {'|A|late':>8} {'at_cap':>6}")
        print(header)
        for epoch in range(1, args.epochs + 1):
            stats = algo.train_epoch(trainer.runner, settings.trajectories)
            r = rows[-1]
            r.update(epoch=epoch, ret=stats["return"], length=stats["length"])
            print(f"{epoch:>3} {r['ret']:>7.3f} {r['length']:>7.0f} {r['reject']:>6.2f} {r['A_run_accept']:>7.3f} "
                  f"{r['A_run_reject']:>7.3f} {r['A_mc_accept']:>7.3f} {r['A_mc_reject']:>7.3f} "
                  f"{r['err_0']:>7.3f} {r['err_1']:>7.3f} {r['err_5']:>7.3f} {r['err_20']:>7.3f} "
                  f"{100 * r['early_share']:>6.1f} {r['early_abs_adv']:>8.4f} {r['late_abs_adv']:>8.4f} "
                  f"{r['at_cap']:>6}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "lambda": lam, "recipe": args.recipe, "rows": rows,
                       "provenance": provenance(vars(args))}, f, indent=1)


if __name__ == "__main__":
    main()
