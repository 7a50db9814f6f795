"""`hpcgym predict fit|score`: fit the learned pre-run predictor, measure predictors' errors (semantics.md 12)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..environment.config import SimConfig
from ..environment.predictions import CATEGORIES, fit_prerun_model, mape
from ..environment.simulator import Simulation
from ..environment.spec import load_workload
from .usage import seed_option, trace_option, workload_option

TRACE = trace_option(required=True)
FRACTION = workload_option("train_fraction", "The first fraction is the training part.", default=0.8)


@click.group()
def predict() -> None:
    """Run-time predictors (docs/semantics.md section 12)."""


@predict.command()
@TRACE
@FRACTION
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True, help="Model file (JSON).")
@click.option("--fields", default=",".join(CATEGORIES), show_default=True,
              help="The SWF fields read as categories (a weight per common value), comma-separated; "
                   "'' for none (request, size and hour of day only).")
def fit(trace, train_fraction, out, fields) -> None:
    """Fit the learned pre-run predictor on the training part; print its MAPE on both parts."""
    spec = {"trace": trace, "train_fraction": train_fraction}
    train, test = (load_workload({**spec, "part": part}) for part in ("train", "test"))
    model = fit_prerun_model(train, tuple(f.strip() for f in fields.split(",") if f.strip()))
    model.save(out)
    click.echo(json.dumps({"model": str(out), "train_jobs": len(train), "test_jobs": len(test),
                           "train_mape": round(mape(model.predict(train), train.run), 1),
                           "test_mape": round(mape(model.predict(test), test.run), 1)}))


@predict.command()
@TRACE
@FRACTION
@click.option("--prediction", required=True, help="user_history, learned:MODEL or running[:PRE,RUN,END[,PERIOD]][,share=S].")
@seed_option()
def score(trace, train_fraction, prediction, seed) -> None:
    """The MAPE of the pre-run predictions on the test part (replayed by FCFS + EASY: user
    history depends on which jobs have completed)."""
    test = load_workload({"trace": trace, "train_fraction": train_fraction, "part": "test"})
    sim = Simulation(test, SimConfig(prediction=prediction, seed=seed))
    sim.run()
    click.echo(json.dumps({"prediction": prediction, "test_jobs": len(test),
                           "prerun_mape": round(mape(sim.prerun_predictions(), sim.result().jobs["run"]), 1)}))
