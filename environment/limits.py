"""What one agent may ask of an env: `check_reset_size` bounds a reset before any state is looked at, and
`Limits` applies `hpcgym env`'s operator options to it."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..protocol import messages as m
from .decisions import KINDS
from .errors import HpcgymError
from .predictions import PredictionSpec
from .spec import TraceNotFound, check_workload_spec

#: The longest path a reset may name, in characters and components (resolving it is quadratic in components).
MAX_PATH_CHARS = 4096
MAX_PATH_PARTS = 256
MAX_MAP_KEYS = 64  #: The most keys of a reset's `workload` or `options` map (each has about 20 known keys).
#: The largest learned prediction model a reset may name (one is a few kB per thousand users).
MAX_MODEL_BYTES = 16 << 20
MAX_MACHINE_BYTES = 1 << 20  #: The largest machine spec file a reset may name (a spec lists a few partitions).
#: The workload key `machine`'s values that name no file (environment/machine.py parse_machine).
HEADER_MACHINES = ("nodes", "nodes:shared")


@dataclass(frozen=True)
class Limits:
    """What one agent may ask of a shared env (`hpcgym env`'s operator options); None: no limit."""

    trace_dirs: tuple[Path, ...] | None = None  # traces only from inside these folders
    max_trace_bytes: int | None = None           # and only regular files up to this size
    max_trace_jobs: int | None = None            # and of up to this many job lines (counted while parsing)
    max_reset_cpu: float | None = None           # CPU seconds a reset's work may take (environment/work.py)
    max_jobs: int | None = None                  # `jobs` and `generate_jobs` of a workload
    idle_timeout: float | None = None            # agents silent this long (not in an episode) are forgotten
    max_sessions: int | None = None              # sessions at once
    max_agents: int | None = None                # agents (said hello, not yet gone) at once
    # learned prediction models only from inside these folders; None: from anywhere if trace_dirs is None too
    model_dirs: tuple[Path, ...] | None = None
    # the folders resolved once, when the limits are made
    _trace_dirs: tuple[Path, ...] | None = field(init=False, repr=False, compare=False)
    _model_dirs: tuple[Path, ...] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("trace_dirs", "model_dirs"):
            dirs = getattr(self, name)
            object.__setattr__(self, f"_{name}", None if dirs is None else tuple(d.resolve() for d in dirs))

    def workload(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The workload spec within these limits, its trace named by its real path."""
        check_workload_spec(spec)
        for key in ("jobs", "generate_jobs"):
            if self.max_jobs is not None and (spec.get(key) or 0) > self.max_jobs:
                raise HpcgymError(f"workload: {key} {spec[key]:,} is over this env's limit of {self.max_jobs:,} jobs; "
                                  "ask for fewer (the operator sets the limit with --max-jobs)")
        if self._trace_dirs is None and self.max_trace_bytes is None:
            return spec
        if spec.get("trace") is not None:
            spec = {**spec, "trace": str(_allowed_file(os.fspath(spec["trace"]), self._trace_dirs, self.max_trace_bytes,
                                                       "trace", "--trace-dir", "--max-trace-bytes"))}
        head, comma, placement = (spec.get("machine") or "nodes").partition(",")
        if head not in HEADER_MACHINES:  # a spec file: from the trace folders only, as a trace
            real = _allowed_file(head, self._trace_dirs, MAX_MACHINE_BYTES, "machine spec", "--trace-dir")
            spec = {**spec, "machine": f"{real}{comma}{placement}"}
        return spec

    def options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options with a learned predictor's model file named by its real path, if the operator allows it."""
        given = options.get("prediction")
        if not isinstance(given, str):
            return options  # absent, or a wrong type sim_config names
        spec = PredictionSpec.parse(given)
        if spec.kind != "learned" or (self._model_dirs is None and self._trace_dirs is None):
            return options
        if not self._model_dirs:
            raise HpcgymError("prediction learned: this env serves no prediction models (the operator adds folders "
                              "with --model-dir); use prediction running or user_history")
        real = _allowed_file(spec.model, self._model_dirs, MAX_MODEL_BYTES, "prediction model", "--model-dir")
        return {**options, "prediction": f"learned:{real}"}


def check_reset_size(msg: dict[str, Any]) -> None:
    """Refuse a reset whose maps or paths are too large to look at (before any state is touched)."""
    for key in ("workload", "options"):
        if len(msg.get(key, {})) > MAX_MAP_KEYS:
            raise m.ProtocolError(m.BAD_REQUEST, f"reset: {key} holds at most {MAX_MAP_KEYS} keys; got "
                                                 f"{len(msg[key]):,} (the known keys: section 4 of PROTOCOL.md)")
    if len(msg.get("require", [])) > len(KINDS):
        raise m.ProtocolError(m.BAD_REQUEST, f"reset: require names at most the {len(KINDS)} kinds; got "
                                             f"{len(msg['require']):,} entries")
    for where, value in (("workload trace", msg.get("workload", {}).get("trace")),
                         ("workload machine", msg.get("workload", {}).get("machine")),
                         ("option prediction", msg.get("options", {}).get("prediction"))):
        if isinstance(value, str) and (len(value) > MAX_PATH_CHARS or value.count("/") >= MAX_PATH_PARTS):
            raise m.ProtocolError(m.BAD_REQUEST, f"reset: the {where} is at most {MAX_PATH_CHARS} characters and "
                                                 f"{MAX_PATH_PARTS} path components; got {len(value):,} characters "
                                                 f"and {value.count('/') + 1:,} components")


def _allowed_file(given: str, dirs: tuple[Path, ...] | None, max_bytes: int | None, what: str, dir_flag: str,
                  size_flag: str = "") -> Path:
    """The file a reset names, if the operator allows it: inside one of `dirs` (None: anywhere; checked before the
    file is looked for, so a refusal does not say whether it exists), regular, and not over `max_bytes`."""
    if "\x00" in given:
        raise TraceNotFound(f"a {what} path cannot contain a NUL byte; check the path")
    name = Path(given).expanduser()
    if len(name.parts) == 1 and not name.is_absolute() and dirs is not None:
        found = [d / name for d in dirs if (d / name).is_file()]
        if not found:
            raise TraceNotFound(f"{given}: no such {what} in this env's {what} folders; ask the operator which "
                                f"{what}s it serves")
        name = found[0]
    real = Path(os.path.realpath(name))
    if dirs is not None and not any(real.is_relative_to(d) for d in dirs):
        raise TraceNotFound(f"{given}: this env serves {what}s only from its {what} folders (the operator adds "
                            f"folders with {dir_flag}); give a {what} there, by name")
    try:
        info = os.stat(real)
    except OSError:
        raise TraceNotFound(f"{given}: {what} file not found; check the path") from None
    if not stat.S_ISREG(info.st_mode):
        raise TraceNotFound(f"{given}: not a regular file; name a {what} file")
    if max_bytes is not None and info.st_size > max_bytes:
        raise TraceNotFound(f"{given}: {info.st_size:,} bytes is over this env's {what} size limit of {max_bytes:,}"
                            + (f" (the operator sets it with {size_flag})" if size_flag else ""))
    return real
