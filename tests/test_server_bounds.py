"""The env server's third hardening round (issue 42): what one request may cost is bounded by
what costs (jobs parsed per trace, the trace cache's disk, CPU time per reset), work ends with
its agent, and a session left to the built-ins holds up no other session."""

from __future__ import annotations

import gzip
import os

import numpy as np

from hpcgym.environment import trace_cache
from hpcgym.environment.service import Limits
from hpcgym.environment.swf import read_swf

from .test_service import Net, hello

# One short job line (18 fields): a small .gz of such lines unpacks to millions of jobs.
SHORT_JOB = b"1 0 -1 1 1 -1 -1 1 1 -1 1 1 1 1 1 -1 -1 -1\n"


# ------------------------------------------------------------------------------------------ jobs per trace
def test_a_trace_of_more_jobs_than_the_limit_is_refused_while_parsed_and_never_cached(tmp_path, monkeypatch):
    """The probe's 4.7 MB .gz of 24.9 M one-line jobs took the env to 5.1 GB and left a 2.39 GB
    cache entry. Here 300,000 jobs over a limit of 100,000: refused naming the limit and its
    option, and nothing of it is written to the cache; an entry an unbounded reader left is
    refused by its size alone."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HPCGYM_CACHE", str(cache))
    traces = tmp_path / "traces"
    traces.mkdir()
    many = traces / "many.swf.gz"
    with gzip.open(many, "wb", compresslevel=1) as out:
        out.write(b"; MaxProcs: 4\n" + SHORT_JOB * 300_000)
    net = Net(limits=Limits(trace_dirs=(traces,), max_trace_jobs=100_000))
    assert net.request(b"a", hello("a", []))["type"] == "welcome"
    for attempt in ("parsed", "cached by an unbounded reader"):
        err = net.request(b"a", {"type": "reset", "workload": {"trace": "many.swf.gz"}})
        assert err["type"] == "error" and err["code"] == "bad_request", (attempt, err)
        assert "more than 100,000 jobs" in err["message"] and "--max-trace-jobs" in err["message"], err
        assert not list(cache.glob("swf*")) if attempt == "parsed" else len(list(cache.glob("swf*"))) == 1
        assert len(read_swf(many)) == 300_000  # without a bound it is a trace like any other (and is cached)


def test_the_trace_cache_stays_within_its_bound_evicting_the_least_recently_used(tmp_path, monkeypatch):
    """The cache had no bound: one refused trace left 2.39 GB on disk."""
    monkeypatch.setenv("HPCGYM_CACHE", str(tmp_path))
    columns, lines = np.zeros((1000, 12), dtype=np.int64), np.arange(1000, dtype=np.int64)
    entry = columns.nbytes + lines.nbytes + 2048  # the arrays, their headers and the zip's records
    monkeypatch.setenv("HPCGYM_CACHE_BYTES", str(2 * entry))
    assert trace_cache.store("a", {}, columns, lines) and trace_cache.store("b", {}, columns, lines)
    for age, key in enumerate("ab"):  # a stored before b (file times may tie within a few ms)
        os.utime(tmp_path / f"swf{trace_cache.FORMAT}-{key}.npz", (1000 + age, 1000 + age))
    assert trace_cache.load("a") is not None  # now a is the recently used one
    assert trace_cache.store("c", {}, columns, lines)
    assert trace_cache.load("b") is None and trace_cache.load("a") is not None and trace_cache.jobs("c") == 1000
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 2 * entry
    huge = np.zeros((3000, 12), dtype=np.int64)  # larger than the whole bound: not written at all
    assert not trace_cache.store("huge", {}, huge, np.arange(3000))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"swf{trace_cache.FORMAT}-{k}.npz" for k in "ac"]
