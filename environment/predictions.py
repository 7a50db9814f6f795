"""Run-time predictions: what a scheduler believes a job will run, before it starts and while it runs, as
RLSchert (Wang et al. 2021) schedules with them; docs/semantics.md section 12 defines the predictors."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ConfigError
from .workload import Workload

PREDICTION_KINDS = ("none", "user_history", "learned", "running")
PREDICTION_SYNTAX = "none, user_history, learned:MODEL.json or running[:PRE,RUN,END[,PERIOD]][,share=S]"
#: The running model's defaults: the paper's mean absolute percentage errors (Table 5: about 40% before the run
#: and 10% while it runs; Fig. 6: a few percent near the end) and its 5-minute time step.
RUNNING_DEFAULTS = (0.4, 0.1, 0.03, 300)
#: The shortest revision period: a job makes run / PERIOD revision events, and an env serving others must not
#: be stalled by one reset; a minute is finer than any predictor's step.
MIN_PERIOD = 60


@dataclass(frozen=True)
class PredictionSpec:
    """Which predictor a simulation runs (`none`: no predictions at all)."""

    kind: str = "none"
    model: str = ""
    pre: float = RUNNING_DEFAULTS[0]
    run: float = RUNNING_DEFAULTS[1]
    end: float = RUNNING_DEFAULTS[2]
    period: int = RUNNING_DEFAULTS[3]
    share: float = 1.0

    @classmethod
    def parse(cls, text: str) -> PredictionSpec:
        kind, _, arg = str(text).strip().partition(":")
        if kind not in PREDICTION_KINDS:
            raise ConfigError(f"unknown prediction {text!r}: use {PREDICTION_SYNTAX}")
        if kind == "learned":
            if not arg:
                raise ConfigError("prediction learned needs its model file, e.g. learned:model.json (fit one with "
                                  "hpcgym predict fit)")
            return cls(kind, model=arg)
        if kind != "running":
            if arg:
                raise ConfigError(f"prediction {kind!r} takes no argument, got {text!r}")
            return cls(kind)
        parts = arg.split(",") if arg else []
        share = _share(text, [p for p in parts if p.strip().startswith("share=")])
        parts = [p for p in parts if not p.strip().startswith("share=")]
        if not parts:
            return cls(kind, share=share)
        try:
            values = [float(p) for p in parts[:3]]
            period = int(parts[3]) if len(parts) == 4 else RUNNING_DEFAULTS[3]
        except ValueError:
            values = []
        if len(values) != 3 or len(parts) > 4:
            raise ConfigError(f"prediction running takes PRE,RUN,END[,PERIOD][,share=S], e.g. running:0.4,0.1,0.03,300 "
                              f"or running:share=0.5; got {text!r}")
        pre, run, end = values
        if not (0 <= end <= run and 0 <= pre <= 10 and run <= 5):
            raise ConfigError(f"prediction running needs 0 <= END <= RUN <= 5 and 0 <= PRE <= 10, got {text!r}")
        if period < MIN_PERIOD:
            raise ConfigError(f"prediction running's PERIOD must be at least {MIN_PERIOD} s, got {period}")
        return cls(kind, pre=pre, run=run, end=end, period=period, share=share)

    def __str__(self) -> str:
        if self.kind == "learned":
            return f"learned:{self.model}"
        if self.kind == "running":
            share = f",share={self.share:g}" if self.share != 1 else ""  # as before shares existed
            return f"running:{self.pre:g},{self.run:g},{self.end:g},{self.period}{share}"
        return self.kind

    @property
    def on(self) -> bool:
        return self.kind != "none"


def _share(text: str, given: list[str]) -> float:
    """The S of `share=S` among `given` (1 when absent): a number in [0, 1], given once."""
    if not given:
        return 1.0
    try:
        share = float(given[0].strip()[len("share="):])
    except ValueError:
        share = math.nan
    if len(given) > 1 or not 0 <= share <= 1:
        raise ConfigError(f"prediction running's share must be one number in [0, 1] (the share of jobs whose "
                          f"prediction is revised while they run), e.g. running:share=0.5; got {text!r}")
    return share


def revised_jobs(n: int, share: float, seed: int) -> list[bool]:
    """Which of n jobs the running predictor revises: the first round(share * n) of a seeded
    permutation, so that shares nest and the error draws do not depend on the share."""
    chosen = np.random.default_rng([seed, 0x5A4E]).permutation(n)[:math.floor(share * n + 0.5)]
    mask = np.zeros(n, dtype=bool)
    mask[chosen] = True
    return mask.tolist()


def check_users(workload: Workload, spec: PredictionSpec) -> None:
    """`user_history` reads user ids: a trace without them (SWF field 12 all -1) cannot have it."""
    if spec.kind == "user_history" and len(workload) and not (workload.user >= 0).any():
        raise ConfigError(f"prediction user_history needs user ids, and {workload.name!r} has none (SWF field 12 "
                          "is -1 throughout); use prediction running or learned:MODEL")


class UserHistory:
    """Per user, the run times of their last two completed jobs."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[int, ...]] = {}

    def completed(self, user: int, run: int) -> None:
        self._last[user] = (*self._last.get(user, ())[-1:], run)

    def predict(self, user: int, requested: int) -> int:
        """The mean of the last two, rounded up, at most `requested`; `requested` without two."""
        last = self._last.get(user, ())
        return requested if user < 0 or len(last) < 2 else min(requested, (last[0] + last[1] + 1) // 2)


class RunningModel:
    """The running predictor's model: per job seeded draws z0 (before the run) and z1 (while it runs), mean
    absolute size 1, scaled by PRE and by m(f) (docs/semantics.md section 12)."""

    def __init__(self, spec: PredictionSpec, run: np.ndarray, seed: int) -> None:
        rng = np.random.default_rng([seed, 0x5C4E])
        n = len(run)
        signs = rng.choice([-1.0, 1.0], size=(2, n))
        z = signs * rng.exponential(1.0, size=(2, n))
        self.spec = spec
        self._z1 = z[1].tolist()
        self.prerun = np.maximum(1, np.rint(run * (1.0 + spec.pre * z[0]))).astype(np.int64)

    def at(self, i: int, run: int, elapsed: int) -> int:
        """Job i's prediction of its whole run after `elapsed` seconds of running (at least elapsed + 1)."""
        s = self.spec
        f = min(elapsed / run, 1.0)
        m = s.end + (2 * s.run - 2 * s.end) * (1.0 - f)
        return max(elapsed + 1, int(round(run * (1.0 + m * self._z1[i]))))


# ----------------------------------------------------------------- the learned pre-run predictor
MODEL_FORMAT = 2
#: The submit-time fields read as categories (one weight per common value), in weight order.
CATEGORIES = ("user", "group", "queue")
MIN_CATEGORY_JOBS = 5  #: A value gets its own weight when the training part has at least this many of its jobs.
RIDGE = 1.0
FIXED_WEIGHTS = 27  #: Weights besides the per-category ones: intercept, log request, log size, 24 hours.


def _hours(workload: Workload) -> np.ndarray:
    """Hour of day of each submit (the header's UnixStartTime, when given, sets the clock)."""
    try:
        offset = int(workload.header.get("UnixStartTime", "0").split()[0])
    except (ValueError, IndexError):
        offset = 0
    return ((workload.submit + offset) % 86400) // 3600


def _features(workload: Workload, known: dict[str, list[int]]) -> np.ndarray:
    n = len(workload)
    cols = [np.ones(n), np.log1p(workload.requested), np.log1p(workload.size),
            np.eye(24)[_hours(workload)].T]
    for field in CATEGORIES:
        values = known[field]
        position = {v: k for k, v in enumerate(values)}
        onehot = np.zeros((len(values), n))
        for row, v in enumerate(getattr(workload, field).tolist()):
            k = position.get(v)
            if k is not None:
                onehot[k, row] = 1.0
        cols.append(onehot)
    return np.vstack([np.atleast_2d(c) for c in cols]).T


@dataclass(frozen=True)
class PrerunModel:
    """Ridge regression of log(run time) on submit-time fields, capped by the request; `categories`: per field,
    the values that have a weight of their own."""

    categories: dict[str, list[int]]
    weights: list[float]

    def predict(self, workload: Workload) -> np.ndarray:
        log_run = _features(workload, self.categories) @ np.asarray(self.weights)
        guess = np.rint(np.exp(np.clip(log_run, 0.0, 30.0))).astype(np.int64)
        return np.clip(guess, 1, np.maximum(workload.requested, 1))

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps({"format": MODEL_FORMAT, "kind": "hpcgym-prerun-ridge",
                                          "categories": self.categories, "weights": self.weights}))


def fit_prerun_model(workload: Workload, fields: tuple[str, ...] = CATEGORIES) -> PrerunModel:
    """Fit on `workload` (a trace's training part); the users, groups and queues of `fields` with at
    least MIN_CATEGORY_JOBS jobs get a weight each, the rest share the intercept."""
    if not len(workload):
        raise ConfigError("cannot fit a run-time predictor on no jobs; check the trace and --train-fraction")
    unknown = sorted(set(fields) - set(CATEGORIES))
    if unknown:
        raise ConfigError(f"unknown predictor field(s) {', '.join(unknown)}; choose among {', '.join(CATEGORIES)}")
    common: dict[str, list[int]] = {field: [] for field in CATEGORIES}
    for field in fields:
        values = getattr(workload, field)
        kept, counts = np.unique(values[values >= 0], return_counts=True)
        common[field] = kept[counts >= MIN_CATEGORY_JOBS].tolist()
    x = _features(workload, common)
    y = np.log(np.maximum(workload.run, 1))
    penalty = RIDGE * np.eye(x.shape[1])
    penalty[0, 0] = 0.0  # the intercept is not shrunk
    weights = np.linalg.solve(x.T @ x + penalty, x.T @ y)
    return PrerunModel(common, weights.tolist())


_LOADED: dict[tuple[str, int], PrerunModel] = {}


def load_prerun_model(path: str | os.PathLike[str]) -> PrerunModel:
    """The model saved at `path` (read once per file version)."""
    try:
        key = (str(Path(path).resolve()), os.stat(path).st_mtime_ns)
    except OSError:
        raise ConfigError(f"prediction model {os.fspath(path)!r} not found; fit one with hpcgym predict fit") from None
    if key not in _LOADED:
        try:
            data = json.loads(Path(path).read_text())
            if data.get("kind") != "hpcgym-prerun-ridge":
                raise ValueError
            if data.get("format") != MODEL_FORMAT:
                raise ConfigError(f"{os.fspath(path)} is a run-time model of format {data.get('format')!r}; this "
                                  f"hpcgym reads format {MODEL_FORMAT}: fit it again with hpcgym predict fit")
            categories = {field: [int(v) for v in data["categories"][field]] for field in CATEGORIES}
            model = PrerunModel(categories, [float(w) for w in data["weights"]])
            if len(model.weights) != FIXED_WEIGHTS + sum(map(len, categories.values())) \
                    or not all(math.isfinite(w) for w in model.weights):
                raise ValueError
            _LOADED[key] = model
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(f"{os.fspath(path)} is not an hpcgym run-time model; fit one with hpcgym predict "
                              "fit") from None
    return _LOADED[key]


def mape(predicted: np.ndarray, actual: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    actual = np.maximum(np.asarray(actual, np.float64), 1.0)
    return float(np.mean(np.abs(np.asarray(predicted, np.float64) - actual) / actual) * 100.0) if len(actual) \
        else math.nan
