"""The plan of a comparison: each job sequence cut once, written to `sequences/seq-NNN.swf` and
hashed, so that every unit (one policy on one sequence), wherever it runs, replays the same jobs."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...environment.errors import ConfigError, WorkloadError
from ...environment.spec import WorkloadSpec, cut_sequence, load_workload, resolve_trace
from ...environment.swf import read_swf, write_swf
from ...environment.workload import COLUMNS
from ..provenance import sha256_file
from .policy import PolicySpec


@dataclass(frozen=True)
class SequenceSpec:
    """How the job sequences are drawn from the source."""

    trace: str | None          # SWF path; None: a generated workload (`model`, Lublin's by default)
    procs: int | None = None
    strict: bool = False
    skip_malformed: bool = False
    samples: int = 1
    jobs: int | None = None    # None: the whole trace (or its train/test part)
    sampled_jobset: bool = False
    train_fraction: float | None = None
    part: str = "test"
    seed: int = 0
    first_jobs: int | None = None   # windows start within the first N jobs (the RL papers' code)
    cleaning: str = "hpcgym"        # SWF cleaning rule (environment.swf.CLEANINGS)
    start: int | None = None        # one fixed window of `jobs` jobs from this index (0-based), not random ones
    model: str | None = None        # the generated workload's model (environment.spec.MODELS) without a trace
    generate_jobs: int | None = None
    machine: str | None = None      # the workload key `machine`: the sequences run on nodes

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SequenceSpec:
        return cls(**data)

    def workload(self) -> WorkloadSpec:
        """The sequences as one workload spec (a sample per sequence), to set beside a checkpoint's."""
        return WorkloadSpec(trace=self.trace, procs=self.procs, cleaning=self.cleaning, jobs=self.jobs,
                            start=self.start, sample=None if self.jobs is None or self.start is not None else True,
                            sampled_jobset=self.sampled_jobset or None, train_fraction=self.train_fraction,
                            part=self.part if self.train_fraction is not None else None, first_jobs=self.first_jobs,
                            model=self.model, generate_jobs=self.generate_jobs, machine=self.machine)

    def check(self) -> None:
        if self.jobs is None and self.samples > 1:
            raise ConfigError("several samples need a sample length (--jobs M); without it the whole trace "
                              "is one sequence")
        if self.sampled_jobset and self.jobs is None:
            raise ConfigError("--sampled-jobset needs --jobs M")
        if self.first_jobs is not None and (self.jobs is None or self.sampled_jobset or self.first_jobs < self.jobs):
            raise ConfigError("--first-jobs N limits where random windows start: it needs --jobs M with M <= N "
                              "(and no --sampled-jobset)")
        if self.start is not None and (self.jobs is None or self.samples != 1 or self.sampled_jobset
                                       or self.first_jobs is not None):
            raise ConfigError("--start N is one fixed window of --jobs M jobs (jobs N+1 to N+M): it needs --jobs, "
                              "one sample, and no --sampled-jobset or --first-jobs")


def sample_seeds(spec: SequenceSpec) -> list[int]:
    """Seed of sample i: seed + i (also the episode seed for noisy estimates and random policies)."""
    return [spec.seed + i for i in range(spec.samples)]


def build_sequences(spec: SequenceSpec, folder: Path) -> list[dict[str, Any]]:
    """Cut the sequences, write them to `folder`, and describe each (file, seed, window, sha256)."""
    spec.check()
    cut = ("samples", "jobs", "sampled_jobset", "seed", "first_jobs", "start")  # how sequences are cut from it
    source = load_workload({**{k: v for k, v in spec.to_json().items() if k not in cut},
                            "part": spec.part if spec.train_fraction is not None else None}, spec.seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for index, seed in enumerate(sample_seeds(spec)):
        workload = cut_sequence(source, {"jobs": spec.jobs, "start": spec.start,
                                         "sample": seed if spec.start is None else None,
                                         "sampled_jobset": spec.sampled_jobset, "first_jobs": spec.first_jobs})
        found = re.search(r"-w(\d+)-\d+$", workload.name) if workload is not source else None
        start, path = int(found.group(1)) if found else None, folder / f"seq-{index:03d}.swf"
        write_swf(path, workload, comments=[f"hpcgym compare: sequence {index} of {source.name}, seed {seed}"
                                            + (f", jobs {start}..{start + len(workload) - 1}" if start is not None
                                               else "")])
        back = read_swf(path)
        if back.procs != workload.procs or back.machine != workload.machine or not all(
                np.array_equal(getattr(back, c), getattr(workload, c)) for c in COLUMNS):
            raise ConfigError(f"internal error: sequence {path} does not read back as written; please report this trace")
        out.append({"index": index, "seed": seed, "start": start, "jobs": len(workload), "procs": workload.procs,
                    "dropped_at_load": {k: v for k, v in source.dropped.items() if v},
                    "file": f"{folder.name}/{path.name}", "sha256": sha256_file(path),
                    "first_job": int(workload.job_id[0]) if len(workload) else None})
    return out


def trace_checksums(path: str | Path) -> dict[str, Any]:
    """sha256 of the trace file, and of its uncompressed text for a .gz (as the trace MANIFEST lists)."""
    path = resolve_trace(path)
    info: dict[str, Any] = {"path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path)}
    if path.name.lower().endswith(".gz"):
        try:
            info["sha256_uncompressed"] = sha256_file(path, gzip.open)
        except (OSError, EOFError, zlib.error) as exc:  # click would turn an EOFError into "Aborted!"
            raise WorkloadError(f"{path}: corrupt or truncated gzip data ({exc}); re-download or re-compress "
                                "the trace") from None
    return info


def unit_id(policy: PolicySpec, index: int) -> str:
    return f"{policy.slug}/seq-{index:03d}"


def fingerprint(policies: list[PolicySpec], trace_sha256: str | None, spec: SequenceSpec,
                options: dict[str, Any]) -> str:
    """What makes two comparisons the same: policies, source contents, how sequences are drawn, common options (not
    the trace's path, nor unset keys added later: a moved trace or an older comparison still resumes)."""
    later = ("start", "model", "generate_jobs", "machine")
    drawn = {k: v for k, v in spec.to_json().items() if k != "trace" and not (k in later and v is None)}
    data = {"policies": [p.to_json() for p in policies], "trace_sha256": trace_sha256, "sequences": drawn,
            "generated": spec.trace is None, "options": options}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
