"""Workload and simulation specifications, shared by the CLI, the protocol and checkpoints, so
that all accept the same keys and refuse bad ones with the same messages."""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from numbers import Integral
from pathlib import Path
from typing import Any

from . import sequences
from .config import PRESETS, SimConfig, expand_preset
from .errors import ConfigError, WorkloadError
from .fitted import WorkloadModel, fit_workload_model, generate_from_model
from .gpu_mixed import generate_gpu_mixed
from .lublin import LublinParams, generate_lublin
from .machine import on_machine, parse_machine
from .priorities import POLICIES
from .rewards import RewardSpec, get_reward
from .simulator import simulate
from .swf import read_swf
from .work import check as check_work, offload
from .workload import Workload

#: The workload used when no trace is given: the Lublin-Feitelson model with the parameter set
#: behind the RL papers' Lublin-256 trace, so a fresh machine needs no data file.
DEFAULT_JOBS = 10_000
DEFAULT_PROCS = 256
LUBLIN_MODELS = {"typeless": LublinParams.typeless, "batch": LublinParams.batch,
                 "interactive": LublinParams.interactive, "lublin2-standin": LublinParams.lublin2_standin}
DEFAULT_MODEL = "typeless"
#: The generated mixed CPU/GPU workload on its own machine (environment/gpu_mixed.py, docs/gpu.md).
GPU_MIXED = "gpu-mixed"
MODELS = (*LUBLIN_MODELS, GPU_MIXED)

def _key(help_text: str, types: type | tuple[type, ...]) -> Any:
    """A workload key: its help (for the CLI and PROTOCOL.md) and the value types it accepts."""
    return field(default=None, metadata={"help": help_text, "types": types})


@dataclass(frozen=True)
class WorkloadSpec:
    """Where an episode's jobs come from (source, cleaning, split, window), every key declared here once; a
    reset, the CLI and a checkpoint carry it as the map `to_dict` gives. None: the default."""

    trace: str | Path | None = _key("SWF file (absent: generated Lublin workload)", (str, Path))
    procs: int | None = _key("cluster size (default: the trace header)", int)
    strict: bool | None = _key("fail on jobs larger than the cluster", bool)
    skip_malformed: bool | None = _key("skip malformed SWF lines", bool)
    cleaning: str | None = _key("SWF cleaning rule: hpcgym (default) or rlbf-scw (cancelled jobs kept as 10 s jobs, "
                                "RL backfilling's code)", str)
    model: str | None = _key(f"generated workload: a Lublin parameter set or {GPU_MIXED} (mixed CPU/GPU jobs on CPU "
                             "and 8-GPU nodes, docs/gpu.md)", str)
    generate_jobs: int | None = _key("jobs in the generated workload", int)
    train_fraction: float | None = _key("split the trace: first fraction train, rest test", (float, int))
    part: str | None = _key("train or test", str)
    jobs: int | None = _key("window length", int)
    start: int | None = _key("window start", int)
    sample: int | bool | None = _key("seed of a random window (in a Gymnasium env or a training run, true: each "
                                     "episode's own seed)", int)
    first_jobs: int | None = _key("with sample: draw random windows from the first N jobs only (SchedInspector's "
                                  "code)", int)
    prefill: bool | None = _key("with a window: start with the jobs before it running, as RLScheduler's pre-filled "
                                "cluster", bool)
    sjf_range: list[float] | None = _key(
        "with sample: [LOW, HIGH], redraw random windows until SJF's mean bsld on it (preset rlscheduler) lies "
        "strictly between (RLScheduler's trajectory filtering: [10, 150])", (list, tuple))
    sampled_jobset: bool | None = _key("with sample: random jobs with Poisson arrivals (DRAS)", bool)
    synthetic: bool | None = _key("with sample: jobs generated from a model fitted to the trace (part) (DRAS)", bool)
    machine: str | None = _key("run on nodes (docs/semantics.md section 13): nodes (the trace header's, whole nodes), "
                               "nodes:shared, or a machine spec file (.json/.toml; over the protocol, a file in the "
                               "env's trace folders), each with an optional ,best_fit", str)

    def __post_init__(self) -> None:
        self.for_episode(0)  # checks every key as a reset's would be checked

    def for_episode(self, seed: int) -> dict[str, Any]:
        """The checked map of one episode: a per-episode sample (`true`) becomes `seed`."""
        spec = self.to_dict()
        if spec.get("sample") is True:
            spec["sample"] = seed
        check_workload_spec(spec)
        return spec

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> WorkloadSpec:
        """The spec of a workload map (a reset's, a checkpoint's), refused with the map's messages."""
        _check_keys(spec, WORKLOAD_KEYS, "workload")
        return cls(**spec)

    def to_dict(self) -> dict[str, Any]:
        """The keys set, as a reset's `workload` map holds them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def with_window(self, **window: Any) -> WorkloadSpec:
        """The same job source cut another way (`first_jobs` stays only under random windows, which it limits)."""
        _check_keys(window, WINDOW_KEYS, "window")
        kept = {k: v for k, v in self.to_dict().items() if k not in WINDOW_KEYS}
        if window.get("sample") is None:
            kept.pop("first_jobs", None)
        return WorkloadSpec.from_dict({**kept, **{k: v for k, v in window.items() if v is not None}})

    def changes_from(self, other: WorkloadSpec) -> str:
        """`key: old -> new` for each key that differs from `other`'s (what an evaluation overrode)."""
        old, new = ({**IMPLIED, **spec.to_dict()} for spec in (other, self))
        return ", ".join(f"{k}: {old.get(k, '(unset)')} -> {new.get(k, '(unset)')}"
                         for k in WORKLOAD_KEYS if old.get(k) != new.get(k))

    def load(self, seed: int = 0) -> Workload:
        """The job sequence of episode `seed` (the trace is read on this machine)."""
        return load_workload(self.for_episode(seed), seed)


WORKLOAD_KEYS = {f.name: f.metadata["help"] for f in fields(WorkloadSpec)}
#: Value types of the workload keys (None is always allowed: it means "the default").
WORKLOAD_TYPES = {f.name: f.metadata["types"] for f in fields(WorkloadSpec)}
IMPLIED = {"cleaning": "hpcgym"}  #: What an unset key means where saying it or not makes no difference.
WINDOW_KEYS = ("jobs", "start", "sample", "sampled_jobset", "synthetic", "sjf_range", "prefill")
CONFIG_KEYS = ("preset", *(f.name for f in fields(SimConfig) if f.name != "seed"))
SJF_RANGE_DRAWS = 200  #: How many windows `sjf_range` draws at most per episode (each is simulated once with SJF).
MAX_GENERATED_JOBS = 10_000_000  #: The largest generated workload; larger ones would stall an env serving others.


#: Environment variable naming the folders (os.pathsep-separated) where bare trace names are found.
TRACES_ENV = "HPCGYM_TRACES"


class TraceNotFound(WorkloadError):
    """A trace given by path or bare name is not there."""


def resolve_trace(path: str | os.PathLike[str]) -> Path:
    """The file a trace argument names: the path itself when it exists; else, for a bare file name, the first
    folder of $HPCGYM_TRACES that holds it (every place that takes a trace comes here)."""
    if "\x00" in os.fspath(path):
        raise TraceNotFound(f"{os.fspath(path)!r}: a trace path cannot contain a NUL byte; check the path")
    given = Path(path).expanduser()
    if given.exists():
        return given
    if len(given.parts) != 1 or given.is_absolute():
        raise TraceNotFound(f"{given}: trace file not found; check the path")
    folders = [Path(f).expanduser() for f in os.environ.get(TRACES_ENV, "").split(os.pathsep) if f]
    for folder in folders:
        if (folder / given).exists():  # a folder too: reading it then says it is one, not "not found"
            return folder / given
    where = f"nor in the {TRACES_ENV} folder(s) {', '.join(map(str, folders))}" if folders else \
        f"and {TRACES_ENV} is not set"
    raise TraceNotFound(f"{given}: trace file not found in the current folder, {where}; pass the trace's path, "
                        f"or set {TRACES_ENV} to the folder(s) holding your traces ({os.pathsep}-separated)")


def _check_keys(spec: dict[str, Any], allowed, what: str) -> None:
    unknown = sorted(set(spec) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown {what} key(s) {', '.join(unknown)}; known: {', '.join(allowed)}")


def load_workload(spec: dict[str, Any], seed: int = 0) -> Workload:
    """Build the job sequence a spec describes (the trace is read on this machine)."""
    check_workload_spec(spec)
    return cut_sequence(load_source(spec, seed), spec)


def check_workload_spec(spec: dict[str, Any]) -> None:
    """Refuse unknown keys, wrong types and contradictory window keys, naming the problem."""
    _check_keys(spec, WORKLOAD_KEYS, "workload")
    for key, value in spec.items():
        wanted = WORKLOAD_TYPES[key]
        if value is not None and (not isinstance(value, wanted) or (isinstance(value, bool) and wanted is int)):
            raise ConfigError(f"workload key {key!r} has the wrong type: {value!r}")
    for key, least in (("procs", 1), ("jobs", 1), ("start", 0), ("first_jobs", 1)):
        if spec.get(key) is not None and spec[key] < least:
            raise ConfigError(f"{key} must be at least {least}, got {spec[key]}")
    if not 1 <= (spec.get("generate_jobs") or 1) <= MAX_GENERATED_JOBS:
        raise ConfigError(f"generate_jobs must be within 1..{MAX_GENERATED_JOBS:,}")
    start, sample, jobs = spec.get("start"), spec.get("sample"), spec.get("jobs")
    if (start is not None or sample is not None) and jobs is None:
        raise ConfigError("a window start or sample seed needs a job count ('jobs', --jobs N)")
    if start is not None and sample is not None:
        raise ConfigError("use either a window start or a sample seed, not both")
    if spec.get("first_jobs") is not None:
        if sample is None or spec.get("sampled_jobset") or spec.get("synthetic"):
            raise ConfigError("first_jobs limits where random windows start: it needs a sample seed and "
                              "plain windows (not a sampled jobset or a synthetic workload)")
        if spec["first_jobs"] < (jobs or 1):
            raise ConfigError(f"first_jobs ({spec['first_jobs']}) must hold at least one window of {jobs} jobs")
    for key in ("sampled_jobset", "synthetic"):
        if spec.get(key) and sample is None:
            raise ConfigError(f"a {key.replace('_', ' ')} workload needs a sample seed (--sample SEED)")
    if spec.get("sampled_jobset") and spec.get("synthetic"):
        raise ConfigError("sampled_jobset and synthetic exclude each other: pick one kind of episode")
    if spec.get("synthetic") and (spec.get("machine") is not None or spec.get("model") == GPU_MIXED):
        raise ConfigError("a synthetic workload is fitted to sizes and times only: it keeps no GPUs, partitions or "
                          "machine; drop synthetic or machine")
    if spec.get("model") == GPU_MIXED and (spec.get("procs") is not None or spec.get("trace") is not None):
        raise ConfigError(f"the {GPU_MIXED} model brings its machine and jobs: drop procs and trace (to run it on "
                          "another machine, give machine)")
    if spec.get("prefill") and (jobs is None or spec.get("sampled_jobset") or spec.get("synthetic")):
        raise ConfigError("prefill starts a window with the jobs before it running: it needs a window (jobs, with "
                          "start or sample), not a whole workload, a sampled jobset or a synthetic workload")
    if spec.get("sjf_range") is not None:
        bounds = spec["sjf_range"]
        if len(bounds) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds) \
                or not 0 <= bounds[0] < bounds[1] < float("inf"):
            raise ConfigError(f"sjf_range takes two numbers LOW < HIGH (SJF's mean bsld), e.g. [10, 150]; got {bounds!r}")
        if sample is None or spec.get("sampled_jobset") or spec.get("synthetic"):
            raise ConfigError("sjf_range filters random windows: it needs a sample seed and plain windows "
                              "(not a sampled jobset or a synthetic workload)")


def load_source(spec: dict[str, Any], seed: int = 0, max_bytes: int | None = None,
                max_jobs: int | None = None) -> Workload:
    """The whole (split) workload a checked spec draws its windows from (`cut_sequence`): the trace, within
    `max_bytes` and `max_jobs`, or the generated workload for `seed`."""
    model = spec.get("model") or DEFAULT_MODEL
    if spec.get("trace") is None and model == GPU_MIXED:
        workload = generate_gpu_mixed(spec.get("generate_jobs") or DEFAULT_JOBS, seed)
    elif spec.get("trace") is None:
        if model not in LUBLIN_MODELS:
            raise ConfigError(f"unknown workload model {model!r}; use one of {', '.join(MODELS)}")
        procs = spec.get("procs")
        workload = generate_lublin(spec.get("generate_jobs") or DEFAULT_JOBS, DEFAULT_PROCS if procs is None else procs,
                                   seed=seed, params=LUBLIN_MODELS[model]())
    else:
        workload = read_swf(resolve_trace(spec["trace"]), spec.get("procs"), strict=bool(spec.get("strict")),
                            on_malformed="skip" if spec.get("skip_malformed") else "error",
                            cleaning=spec.get("cleaning") or "hpcgym", max_bytes=max_bytes, max_jobs=max_jobs)
    if spec.get("machine") is not None:  # before the split and windows: they keep the machine
        workload = on_machine(workload, parse_machine(spec["machine"], workload.header))
    if spec.get("train_fraction") is not None:
        part = spec.get("part", "test")
        if part not in ("train", "test"):
            raise ConfigError(f"part must be train or test, got {part!r}")
        workload = sequences.split(workload, spec["train_fraction"])[0 if part == "train" else 1]
    return workload


def cut_sequence(workload: Workload, spec: dict[str, Any]) -> Workload:
    """The part of a loaded (and split) workload the spec's window keys select (all of it without `jobs`);
    callers that cache the loaded trace call it per episode."""
    jobs, sample = spec.get("jobs"), spec.get("sample")
    if jobs is None:
        return workload
    if sample is None:
        start = spec.get("start") or 0
        return sequences.prefilled(workload, jobs, start, start) if spec.get("prefill") else \
            sequences.window(workload, jobs, start)
    if spec.get("sampled_jobset"):
        return sequences.sampled_jobset(workload, jobs, sample)
    if spec.get("synthetic"):
        return generate_from_model(_fitted(workload), jobs, sample)
    if spec.get("first_jobs") is not None:
        workload = workload.take(slice(0, spec["first_jobs"]))
    if spec.get("sjf_range") is not None:  # up to SJF_RANGE_DRAWS simulations: a shared env runs them apart
        start = offload(_sjf_start, workload, jobs, sample, *spec["sjf_range"])
    else:
        start = sequences.random_start(workload, jobs, sample)
    return sequences.prefilled(workload, jobs, start, sample) if spec.get("prefill") else \
        sequences.window(workload, jobs, start)


def _sjf_start(workload: Workload, jobs: int, sample: int, low: float, high: float) -> int:
    """The first of `sample`'s random windows on which SJF's mean bsld (RLScheduler's rules) lies in (low, high)."""
    config = SimConfig(**PRESETS["rlscheduler"])

    def within(window: Workload) -> bool:
        check_work()  # bounded in CPU time, and cancelled with its request (environment/work.py)
        return low < simulate(window, config, policy="sjf").summary["mean_bsld"] < high
    return sequences.random_start(workload, jobs, sample, within, SJF_RANGE_DRAWS)


#: Models fitted to loaded workloads, so a synthetic episode cut from a cached source does not refit it.
_MODELS: weakref.WeakKeyDictionary[Workload, WorkloadModel] = weakref.WeakKeyDictionary()


def _fitted(workload: Workload) -> WorkloadModel:
    model = _MODELS.get(workload)
    if model is None:
        model = _MODELS[workload] = fit_workload_model(workload)
    return model


#: Workload keys that name a job source: a reset's workload with one of them takes none of the env's default
#: workload keys (PROTOCOL.md section 4), or it would get another trace's `procs`.
SOURCE_KEYS = ("trace", "generate_jobs", "model")


def reset_workload(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The workload a reset asks for: its own keys over the env's defaults, or alone if it names its source."""
    return dict(given) if any(given.get(k) is not None for k in SOURCE_KEYS) else {**defaults, **given}


class WorkloadCache:
    """`load_workload` keeping the last few sources, so a trace is read once (again if it changes on disk)."""

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self._sources: OrderedDict[Any, Workload] = OrderedDict()
        self._lock = threading.Lock()  # sessions load on threads of their own

    def load(self, spec: dict[str, Any], seed: int = 0, max_bytes: int | None = None,
             max_jobs: int | None = None) -> Workload:
        check_workload_spec(spec)
        trace = spec.get("trace")
        if trace is not None:  # a bare name is keyed (and its stamp taken) by the file it resolves to
            trace = resolve_trace(trace).resolve()
            spec = {**spec, "trace": trace}
        base = sorted((k, str(v)) for k, v in spec.items() if k not in WINDOW_KEYS)
        stamp = os.stat(trace).st_mtime_ns if trace is not None and os.path.exists(trace) else None
        key = (tuple(base), stamp, seed if trace is None else None)
        with self._lock:
            source = self._sources.get(key)
        if source is None:
            source = load_source(spec, seed, max_bytes, max_jobs)
            with self._lock:
                self._sources[key] = source
                while len(self._sources) > self.size:
                    self._sources.popitem(last=False)
        return cut_sequence(source, spec)


def sim_config(options: dict[str, Any], seed: int = 0) -> SimConfig:
    """SimConfig from a map of option names (`policy` is known, but not part of it) and a seed."""
    _check_keys(options, ("policy", *CONFIG_KEYS), "simulation option")
    try:
        return SimConfig(seed=seed, **expand_preset({k: v for k, v in options.items() if k != "policy"}))
    except TypeError as exc:
        raise ConfigError(f"bad simulation option: {exc}") from None


@dataclass(frozen=True)
class EpisodeSpec:
    """An episode as one checked value (jobs, rules with the seed, priority policy, reward), as a reset carries
    it: the service and the Gymnasium env both build one, so both refuse bad input alike."""

    workload: WorkloadSpec
    config: SimConfig
    policy: str = "fcfs"
    reward: str = "bsld"

    @classmethod
    def from_reset(cls, workload: Mapping[str, Any] | WorkloadSpec, options: Mapping[str, Any], reward: str,
                   seed: Any) -> EpisodeSpec:
        """From a reset's parts: `options` are `sim_config`'s names plus `policy`."""
        if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
        seed, options = int(seed), dict(options)
        policy = options.pop("policy", "fcfs")
        if not isinstance(policy, str) or policy not in POLICIES:
            raise ConfigError(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
        config = sim_config(options, seed)
        get_reward(reward).check(config)
        spec = workload if isinstance(workload, WorkloadSpec) else WorkloadSpec.from_dict(workload)
        return cls(spec, config, policy, reward)

    @property
    def seed(self) -> int:
        return self.config.seed

    def reward_spec(self) -> RewardSpec:
        return get_reward(self.reward)

    def reset_message(self) -> dict[str, Any]:
        """The protocol reset's fields for this episode (the seed is the config's)."""
        return {"workload": self.workload.for_episode(self.seed), "options": self.options(), "reward": self.reward,
                "seed": self.seed}

    def options(self) -> dict[str, Any]:
        """Every rule as a reset's `options` map, with the policy."""
        return {**self.config.to_options(), "policy": self.policy}
