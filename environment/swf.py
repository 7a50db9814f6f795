"""Read, clean and write Standard Workload Format (SWF) traces (docs/semantics.md section 1): plain
traces at numpy speed (swf_fast.py), anything unusual line by line so that an error names the line."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

import numpy as np

from hpcgym.environment import trace_cache
from hpcgym.environment.errors import ConfigError, WorkloadError
from hpcgym.environment.machine import machine_from_dict, machine_to_dict, on_machine
from hpcgym.environment.swf_fast import parse_plain
from hpcgym.environment.workload import Workload

__all__ = ["SWF_FIELDS", "DROP_REASONS", "CLEANINGS", "TooManyJobs", "read_swf", "write_swf", "trace_stats"]

#: The 18 SWF fields, in file order (1-based in the SWF definition, 0-based here).
SWF_FIELDS = ("job_number", "submit_time", "wait_time", "run_time", "allocated_procs", "avg_cpu_time", "used_memory",
              "requested_procs", "requested_time", "requested_memory", "status", "user_id", "group_id", "executable",
              "queue", "partition", "preceding_job", "think_time")
N_FIELDS = len(SWF_FIELDS)

# Column indices of the fields a Workload keeps, named below.
_KEPT = (0, 1, 3, 4, 7, 8, 11, 12, 14, 13, 9, 15)
_JOB, _SUBMIT, _RUN, _ALLOC, _REQ_PROCS, _REQ_TIME, _USER, _GROUP, _QUEUE, _EXECUTABLE, _MEMORY, _PARTITION = _KEPT

#: Why a job line was left out, checked in this order (a job is counted under the first that
#: applies, so the counts add up to the number of dropped lines).
DROP_REASONS = (
    "malformed",            # not 18 numeric fields (only with on_malformed="skip")
    "negative_submit",      # submit time < 0 (e.g. LLNL-Thunder's -1 records)
    "nonpositive_run",      # run time <= 0, including the missing value -1
    "nonpositive_size",     # neither allocated nor requested processors are positive
    "larger_than_cluster",  # needs more processors than the cluster has (error if strict)
)

_ON_MALFORMED = ("error", "skip")
# A file none of whose first job lines is an SWF line is not a trace with a few bad lines.
_SNIFF_LINES = 10
_GZIP_MAGIC = b"\x1f\x8b"
# Values beyond 2**53 lose integer precision as floats; no real trace comes near it.
_MAX_ABS = float(2**53)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")
# "; Key: value". Continuation lines of multi-line values are indented further and URLs contain
# "://", so neither is mistaken for a key.
_HEADER = re.compile(r";\s{0,2}([A-Za-z][A-Za-z0-9_]*)\s*:(?!//)\s*(.*)\Z")
_LEADING_INT = re.compile(r"\s*\+?(\d+)")


#: The longest line a trace may hold (job lines are about 100 bytes), refused before it is held whole.
MAX_LINE_BYTES = 64 << 10
#: Traces are parsed in pieces of about this many bytes (whole lines): memory follows the jobs, not the bytes.
PIECE_BYTES = 4 << 20


@contextmanager
def _opened(path: Path, unpack: bool = True) -> Iterator[BinaryIO]:
    """The trace's bytes as a stream, unpacked if gzipped (whatever the name) and `unpack`; errors: WorkloadError."""
    try:
        with open(path, "rb") as raw:
            gzipped = unpack and raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            if not gzipped:
                yield raw
                return
            with gzip.GzipFile(fileobj=raw) as unpacked:
                yield unpacked
    except FileNotFoundError:
        raise WorkloadError(f"{path}: trace file not found; check the path") from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory, not a trace file; give an .swf or .swf.gz file") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise WorkloadError(f"{path}: corrupt or truncated gzip data ({exc}); re-download or re-compress the "
                            "trace") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read trace file ({exc.strerror or exc}); check the "
                            "path and its permissions") from None


def _stored_key(path: Path) -> str:
    """The trace cache's key of the file: the sha256 of its bytes as stored, read in pieces."""
    digest = hashlib.sha256()
    with _opened(path, unpack=False) as stream:
        while piece := stream.read(PIECE_BYTES):
            digest.update(piece)
    return digest.hexdigest()


def _pieces(path: Path, max_bytes: int | None) -> Iterator[bytes]:
    """The trace's (unpacked) bytes in pieces of whole lines, refused once past `max_bytes` or a line too long."""
    total, carried, lines = 0, b"", 0
    with _opened(path) as stream:
        while True:
            read = stream.read(PIECE_BYTES)
            total += len(read)
            if max_bytes is not None and total > max_bytes:
                raise WorkloadError(f"{path}: unpacks to more than {max_bytes:,} bytes, over the trace size limit")
            data = carried + read
            cut = data.rfind(b"\n") + 1 if read else len(data)
            piece, carried = data[:cut], data[cut:]
            if len(carried) > MAX_LINE_BYTES or _longest_line(piece) > MAX_LINE_BYTES:
                raise WorkloadError(f"{path}: a line after line {lines:,} is longer than {MAX_LINE_BYTES:,} bytes; "
                                    "this is not an SWF trace (give a Standard Workload Format file)")
            if piece:
                yield piece
                lines += piece.count(b"\n")
            if not read:
                return


def _longest_line(piece: bytes) -> int:
    ends = np.flatnonzero(np.frombuffer(piece, dtype=np.uint8) == ord("\n"))
    return int(np.diff(ends, prepend=-1, append=len(piece)).max()) - 1 if piece else 0


def _check_unpacked_size(path: Path, limit: int) -> None:
    """Refuse a trace that unpacks to more than `limit` bytes, unpacking no more than that and keeping none."""
    size = 0
    with _opened(path) as stream:
        while size <= limit and (piece := stream.read(PIECE_BYTES)):
            size += len(piece)
    if size > limit:
        raise WorkloadError(f"{path}: unpacks to more than {limit:,} bytes, over the trace size limit")


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # header prose in old logs may be Latin-1; anything non-numeric in data lines is malformed anyway
        return data.decode("latin-1")


def _header(comment_lines: list[str]) -> dict[str, str]:
    """`; Key: value` lines as a dict; repeated keys (Queue, Partition, Note) keep every value, one per line."""
    header: dict[str, str] = {}
    for line in comment_lines:
        m = _HEADER.match(line.strip())
        if m is not None:
            key, value = m.group(1), m.group(2).strip()
            header[key] = f"{header[key]}\n{value}" if key in header else value
    return header


def _leading_int(value: str | None) -> int | None:
    """The integer a header value starts with ("338 (batch partition; 512 total)" -> 338)."""
    if value is None:
        return None
    m = _LEADING_INT.match(value)
    if m is None:
        return None
    n = int(m.group(1))
    return n if n > 0 else None


def _check_line(line: str) -> str | None:
    """Why a data line is not 18 finite numbers, or None when it is fine."""
    parts = line.split()
    if len(parts) != N_FIELDS:
        return f"expected {N_FIELDS} numeric fields, got {len(parts)}"
    for i, tok in enumerate(parts):
        if not _NUMBER.match(tok):
            return f"expected {N_FIELDS} numeric fields, got non-numeric field {i + 1} {tok!r}"
        if abs(float(tok)) >= _MAX_ABS:
            return f"field {i + 1} value {tok} is out of range"
    return None


def _parse_rows(lines: list[str], numbers: list[int], path: Path, on_malformed: str,
                before: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """Data lines -> (n, 18) float array, their line numbers and how many were skipped: numpy's C reader, else
    a Python scan that names the offending line."""
    line_no = np.asarray(numbers, dtype=np.int64)
    if not lines:
        return np.empty((0, N_FIELDS)), line_no, 0
    with suppress(ValueError):
        rows = np.loadtxt(lines, dtype=np.float64, comments=None, ndmin=2)
        if rows.shape[1] == N_FIELDS and bool(np.all(np.abs(rows) < _MAX_ABS)):
            return rows, line_no, 0
    keep: list[int] = []
    for idx, line in enumerate(lines):
        problem = _check_line(line)
        if problem is None:
            keep.append(idx)
        elif on_malformed == "error":
            raise WorkloadError(f"{path}:{before + numbers[idx]}: {problem}; fix the line or pass --skip-malformed "
                                "to leave such lines out")
    good = [lines[i] for i in keep]
    rows = np.loadtxt(good, dtype=np.float64, comments=None, ndmin=2) if good else np.empty((0, N_FIELDS))
    return rows, line_no[keep], len(lines) - len(keep)


def _parse(path: Path, on_malformed: str, max_bytes: int | None,
           max_jobs: int | None = None) -> tuple[dict[str, str], np.ndarray, np.ndarray, int, bool]:
    """(header, kept columns, job line numbers, lines skipped, whether every piece was plain), piece by piece;
    refused as soon as the job lines pass `max_jobs`."""
    comments: list[bytes] = []
    columns, numbers = [], []
    n_malformed, lines, plain, sniffed, jobs = 0, 0, True, False, 0
    for piece in _pieces(path, max_bytes):
        parsed = parse_plain(piece, _KEPT)
        if parsed is None:
            plain = False
            parsed = _parse_exact(piece, path, on_malformed, lines, sniff=not sniffed)
            n_malformed += parsed[3]
        jobs += len(parsed[1])
        if max_jobs is not None and jobs > max_jobs:
            raise TooManyJobs(path, max_jobs)
        comments += parsed[0]
        columns.append(parsed[1])
        numbers.append(parsed[2] + lines)
        sniffed = sniffed or len(parsed[1]) > 0
        lines += piece.count(b"\n")
    if not sniffed and not n_malformed:
        raise WorkloadError(f"{path}: no job lines found (only comments or empty); is this an SWF trace?")
    header = _header(_decode(b"\n".join(comments)).split("\n"))
    return header, np.concatenate(columns), np.concatenate(numbers), n_malformed, plain


class TooManyJobs(WorkloadError):
    """A trace with more job lines than its reader allows (`read_swf`'s `max_jobs`)."""

    def __init__(self, path: Path, limit: int, setting: str = "") -> None:
        self.path, self.limit = path, limit
        super().__init__(f"{path}: holds more than {limit:,} jobs, over the limit of jobs per trace"
                         + (f" ({setting})" if setting else "") + "; give a shorter trace (or one cut to the jobs "
                         "you need)")


def _parse_exact(piece: bytes, path: Path, on_malformed: str, before: int,
                 sniff: bool) -> tuple[list[bytes], np.ndarray, np.ndarray, int]:
    """A piece line by line (after `before` lines); with `sniff`, refused if none of its first job lines is SWF."""
    comment_lines: list[bytes] = []
    data_lines: list[str] = []
    data_numbers: list[int] = []
    for number, raw in enumerate(_decode(piece).split("\n"), 1):
        line = raw.strip()
        if line:
            if line[0] == ";":
                comment_lines.append(line.encode("utf-8"))
            else:
                data_lines.append(line)
                data_numbers.append(number)
    problems = [_check_line(line) for line in data_lines[:_SNIFF_LINES]]
    if sniff and data_lines and on_malformed == "error" and all(problems):
        raise WorkloadError(f"{path}:{before + data_numbers[0]}: {problems[0]}; this is not an SWF file (none of its "
                            "first job lines holds 18 numbers): give a Standard Workload Format trace (.swf or .swf.gz)")
    rows, line_no, n_malformed = _parse_rows(data_lines, data_numbers, path, on_malformed, before)
    return comment_lines, np.rint(rows[:, _KEPT]).astype(np.int64), line_no, n_malformed


def _workload_name(path: Path) -> str:
    """Trace name without .gz / .swf suffixes ("SDSC-SP2-1998-4.2-cln")."""
    return re.sub(r"(\.swf)?(\.gz)?\Z", "", path.name, flags=re.IGNORECASE) or path.name


#: Cleaning rules: hpcgym's own (below), or that of RL backfilling's SC-W code, whose Table 4
#: keeps cancelled jobs (run time -1) as 10 s jobs that keep their request (docs/fidelity.md, L2).
CLEANINGS = ("hpcgym", "rlbf-scw")


def read_swf(path: str | os.PathLike[str], procs: int | None = None, *, strict: bool = False,
             on_malformed: str = "error", cleaning: str = "hpcgym", max_bytes: int | None = None,
             max_jobs: int | None = None) -> Workload:
    """Load and clean an SWF trace (plain or gzip) into a `Workload` sorted by submit time, dropped jobs counted by
    `DROP_REASONS` (docs/semantics.md section 1); `max_bytes` and `max_jobs` refuse a trace as soon as parsing passes
    them."""
    if cleaning not in CLEANINGS:
        raise WorkloadError(f"unknown cleaning {cleaning!r}; use one of {', '.join(CLEANINGS)}")
    path = Path(path)
    if on_malformed not in _ON_MALFORMED:
        raise WorkloadError(f"on_malformed must be one of {', '.join(_ON_MALFORMED)}, got {on_malformed!r}")
    if procs is not None and (isinstance(procs, bool) or not isinstance(procs, (int, np.integer)) or procs <= 0):
        raise WorkloadError(f"{path}: cluster size (--procs) must be a positive integer, got {procs!r}")
    key = _stored_key(path)
    stored_jobs = trace_cache.jobs(key) if max_jobs is not None else None
    if stored_jobs is not None and stored_jobs > max_jobs:
        raise TooManyJobs(path, max_jobs)
    cached = trace_cache.load(key)
    if cached is not None:
        if max_bytes is not None:
            _check_unpacked_size(path, max_bytes)
        (header, ints, line_no), n_malformed = cached, 0
    else:
        header, ints, line_no, n_malformed, plain = _parse(path, on_malformed, max_bytes, max_jobs)
        if plain:
            trace_cache.store(key, header, ints, line_no)

    if procs is None:
        procs = _leading_int(header.get("MaxProcs")) or _leading_int(header.get("MaxNodes"))
        if procs is None:
            raise WorkloadError(f"{path}: the header gives no usable MaxProcs or MaxNodes, so the cluster size is "
                                "unknown; give it (--procs N on the command line)")
    procs = int(procs)

    job_id, submit, run, alloc, req_procs, req_time, user, group, queue, executable, memory, partition = ints.T
    size = np.where(alloc > 0, alloc, req_procs)
    requested = np.where(req_time > 0, req_time, run)
    if cleaning == "rlbf-scw":
        recorded = run
        run = np.where(recorded < 0, 10, recorded)
        size = np.maximum(alloc, req_procs)
        held = np.where(req_time == -1, recorded, req_time)
        requested = np.where(held > 0, held, run)

    dropped = {reason: 0 for reason in DROP_REASONS}
    dropped["malformed"] = n_malformed
    keep = np.ones(len(ints), dtype=bool)
    for reason, bad in (("negative_submit", submit < 0), ("nonpositive_run", run <= 0),
                        ("nonpositive_size", size <= 0), ("larger_than_cluster", size > procs)):
        hit = bad & keep
        if reason == "larger_than_cluster" and strict and hit.any():
            i = int(np.flatnonzero(hit)[0])
            raise WorkloadError(f"{path}:{line_no[i]}: job {job_id[i]} needs {size[i]} processors but the cluster has "
                                f"{procs} ({int(hit.sum())} such job(s)); pass a larger --procs, or leave strict mode "
                                "off to drop them")
        dropped[reason] = int(hit.sum())
        keep &= ~bad

    order = np.flatnonzero(keep)
    if cleaning == "rlbf-scw":
        order = order[np.argsort(job_id[order], kind="stable")]
    order = order[np.argsort(submit[order], kind="stable")]
    if len(order) == 0:
        detail = ", ".join(f"{k}={v}" for k, v in dropped.items() if v)
        raise WorkloadError(f"{path}: no job is left after cleaning ({detail}); check the trace and the cluster size")
    gpus, exclusive = _job_extras(path, header, job_id[order])
    workload = Workload(name=_workload_name(path), procs=procs, job_id=job_id[order],
                        submit=submit[order], run=run[order], size=size[order],
                        requested=requested[order], user=user[order], queue=queue[order], group=group[order],
                        executable=executable[order], memory=memory[order], partition=partition[order], gpus=gpus,
                        exclusive=exclusive, dropped=dropped, header=header,
                        source_max_run=_leading_int(header.get(SOURCE_MAX_RUN)))
    if MACHINE_KEY not in header:
        return workload
    try:
        machine = machine_from_dict(json.loads(header[MACHINE_KEY]), workload.name)
    except (ValueError, ConfigError) as exc:
        raise WorkloadError(f"{path}: its {MACHINE_KEY} header is not a machine spec ({exc})") from None
    return on_machine(workload, machine)


def _job_extras(path: Path, header: dict[str, str], job_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each job's GPUs and whole-node flag from the `JOB_KEY` header lines (0 where none names it)."""
    gpus, exclusive = np.zeros(len(job_id), dtype=np.int64), np.zeros(len(job_id), dtype=np.int64)
    text = header.get(JOB_KEY)
    if not text:
        return gpus, exclusive
    try:
        rows = np.array(text.split(), dtype=np.int64).reshape(-1, 3)
    except ValueError:
        raise WorkloadError(f"{path}: a {JOB_KEY} header line is not three integers (job, GPUs, whole nodes 0/1)") from None
    order = np.argsort(job_id, kind="stable")
    pos = np.minimum(np.searchsorted(job_id[order], rows[:, 0]), len(job_id) - 1)
    hit = job_id[order][pos] == rows[:, 0]  # jobs cleaning dropped are not there
    gpus[order[pos[hit]]], exclusive[order[pos[hit]]] = rows[hit, 1], rows[hit, 2]
    return gpus, exclusive


#: hpcgym's header key for the longest run time of the workload a written sequence was cut from
#: (`Workload.max_run`), so that encoders normalising by it see the same scale when it is read back.
SOURCE_MAX_RUN = "HpcgymSourceMaxRun"
#: hpcgym's header keys for what SWF has no field for, so a written sequence reads back whole: the
#: machine (its spec as JSON) and, one line per job that asks for any, "JOB GPUS EXCLUSIVE".
MACHINE_KEY = "HpcgymMachine"
JOB_KEY = "HpcgymJob"


def write_swf(path: str | os.PathLike[str], workload: Workload,
              comments: list[str] | None = None) -> None:
    """Write `workload` as an SWF file (gzip if named .gz) that `read_swf` reads back identical (missing fields
    -1, the machine and GPU requests in hpcgym's header lines)."""
    path, n, m = Path(path), len(workload), workload.machine
    head = ["; Version: 2.2", f"; Computer: hpcgym workload {workload.name}",
            f"; MaxJobs: {n}", f"; MaxRecords: {n}",
            f"; MaxNodes: {workload.procs if m is None else sum(p.nodes for p in m.partitions)}",
            f"; MaxProcs: {workload.procs}"]
    if workload.source_max_run is not None:  # a window keeps the scale of the trace it was cut from
        head.append(f"; {SOURCE_MAX_RUN}: {workload.source_max_run}")
    if m is not None:
        head.append(f"; {MACHINE_KEY}: {json.dumps(machine_to_dict(m))}")
    extras = np.flatnonzero((workload.gpus != 0) | (workload.exclusive != 0))
    head += [f"; {JOB_KEY}: {workload.job_id[i]} {workload.gpus[i]} {workload.exclusive[i]}" for i in extras.tolist()]
    for comment in comments or []:
        head.extend(f"; {part}".rstrip() for part in str(comment).splitlines() or [""])
    table = np.full((n, N_FIELDS), -1, dtype=np.int64)
    for column, name in ((_JOB, "job_id"), (_SUBMIT, "submit"), (_RUN, "run"), (_ALLOC, "size"),
                         (_REQ_TIME, "requested"), (_USER, "user"), (_QUEUE, "queue"), (_GROUP, "group"),
                         (_EXECUTABLE, "executable"), (_MEMORY, "memory"), (_PARTITION, "partition")):
        table[:, column] = getattr(workload, name)
    fmt = " ".join(["%d"] * N_FIELDS)
    body = "\n".join(fmt % tuple(row) for row in table.tolist())
    text = "\n".join(head) + "\n" + (body + "\n" if n else "")
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as fh:
                fh.write(text)
        else:
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot write trace ({exc.strerror or exc}); check that the folder exists "
                            "and is writable") from None


def trace_stats(workload: Workload) -> dict[str, float | int | str]:
    """The columns of the RL papers' trace tables, plus what cleaning dropped; NaN where undefined."""
    n, nan = len(workload), math.nan
    span = int(workload.submit[-1] - workload.submit[0]) if n else 0
    stats: dict[str, float | int | str] = {
        "name": workload.name, "jobs": n, "procs": workload.procs,
        "mean_interarrival_s": span / (n - 1) if n > 1 else nan,
        **{f"mean_{name}": float(getattr(workload, column).mean()) if n else nan
           for name, column in (("requested_s", "requested"), ("run_s", "run"), ("size", "size"))},
        "span_s": span, "span_days": span / 86400.0}
    reasons = list(DROP_REASONS) + sorted(set(workload.dropped) - set(DROP_REASONS))
    for reason in reasons:
        stats[f"dropped_{reason}"] = int(workload.dropped.get(reason, 0))
    stats["dropped_total"] = int(sum(workload.dropped.values()))
    return stats
