"""Workload specs as maps: the keys a protocol reset and the CLI share, and their refusals."""

from __future__ import annotations

import pytest

from hpcgym.environment.errors import ConfigError
from hpcgym.environment.spec import load_workload, sim_config
from hpcgym.environment.service import EnvService


@pytest.mark.parametrize("spec, words", [
    ({"trace": 5}, "'trace' has the wrong type"),
    ({"model": []}, "'model' has the wrong type"),
    ({"jobs": True}, "'jobs' has the wrong type"),
    ({"procs": 0}, "at least 1"),
    ({"generate_jobs": 10**9}, "generate_jobs"),
    ({"sample": 3}, "job count"),
    ({"jobs": 5, "start": 0, "sample": 1}, "either"),
    ({"colour": "red"}, "unknown workload key"),
    ({"model": "gaussian"}, "unknown workload model"),
])
def test_bad_workload_specs_are_refused_with_a_reason(spec, words):
    with pytest.raises(ConfigError, match=words):
        load_workload(spec)


def test_bad_options_are_refused_with_a_reason():
    with pytest.raises(ConfigError, match="unknown simulation option"):
        sim_config({"speed": "fast"})
    with pytest.raises(ConfigError, match="window must be an integer"):
        sim_config({"window": "wide"})


def test_a_bad_reset_is_a_bad_request_not_an_internal_error():
    svc = EnvService()
    svc.handle_message(b"a", {"type": "hello", "protocol": "1.0", "agent": "a", "kinds": []})
    (_, reply), = svc.handle_message(b"a", {"type": "reset", "workload": {"trace": 5}})
    assert reply["type"] == "error" and reply["code"] == "bad_request" and "trace" in reply["message"]


def test_generated_default_respects_procs_and_jobs():
    w = load_workload({"generate_jobs": 120, "procs": 32}, seed=4)
    assert len(w) == 120 and w.procs == 32


def test_workload_cache_cuts_the_same_sequences_and_rereads_a_changed_trace(tmp_path):
    from hpcgym.environment.spec import WorkloadCache
    from hpcgym.environment.swf import write_swf

    path = tmp_path / "t.swf"
    write_swf(path, load_workload({"generate_jobs": 200, "procs": 16}, seed=1))
    cache = WorkloadCache()
    for sample in (0, 1, 2):
        spec = {"trace": str(path), "jobs": 50, "sample": sample}
        assert cache.load(spec).submit.tolist() == load_workload(spec).submit.tolist()
    import os
    write_swf(path, load_workload({"generate_jobs": 120, "procs": 16}, seed=2))
    os.utime(path, ns=(10**18, 10**18))  # a new modification time, whatever the clock's resolution
    assert len(cache.load({"trace": str(path)})) == 120
    with pytest.raises(ConfigError, match="either"):
        cache.load({"trace": str(path), "jobs": 5, "start": 0, "sample": 1})


TINY_SWF = """; MaxProcs: 8
1 0 -1 10 4 -1 -1 4 20 -1 1 1 -1 -1 -1 -1 -1 -1
2 5 -1 30 8 -1 -1 8 40 -1 1 1 -1 -1 -1 -1 -1 -1
3 9 -1 5 2 -1 -1 2 10 -1 1 1 -1 -1 -1 -1 -1 -1
"""


@pytest.fixture
def trace_folders(tmp_path, monkeypatch):
    """Two HPCGYM_TRACES folders, the second holding tiny.swf; the working folder holds neither."""
    import os

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (second / "tiny.swf").write_text(TINY_SWF)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HPCGYM_TRACES", os.pathsep.join([str(first), str(second)]))
    return first, second


def test_bare_trace_names_resolve_through_hpcgym_traces(trace_folders):
    from hpcgym.environment.spec import WorkloadCache, resolve_trace

    first, second = trace_folders
    assert resolve_trace("tiny.swf") == second / "tiny.swf"
    assert len(load_workload({"trace": "tiny.swf"})) == 3
    assert len(WorkloadCache().load({"trace": "tiny.swf", "jobs": 2, "start": 1})) == 2
    (first / "tiny.swf").write_text(TINY_SWF)
    assert resolve_trace("tiny.swf") == first / "tiny.swf"  # the folders are searched in order
    (trace_folders[0].parent / "work" / "tiny.swf").write_text(TINY_SWF)
    assert str(resolve_trace("tiny.swf")) == "tiny.swf"  # an existing path wins over the folders


def test_the_env_service_resolves_a_bare_trace_name(trace_folders):
    svc = EnvService()
    svc.handle_message(b"a", {"type": "hello", "protocol": "1.0", "agent": "a", "kinds": []})
    (_, reply), = svc.handle_message(b"a", {"type": "reset", "workload": {"trace": "tiny.swf"}})
    assert reply["type"] == "episode_end" and reply["metrics"]["jobs"] == 3, reply
    (_, reply), = svc.handle_message(b"a", {"type": "reset", "workload": {"trace": "absent.swf"}})
    assert reply["type"] == "error" and reply["code"] == "bad_request" and "absent.swf" in reply["message"]


def test_a_missing_trace_names_the_file_and_the_folders_searched(trace_folders, monkeypatch):
    from hpcgym.environment.errors import WorkloadError
    from hpcgym.environment.spec import TraceNotFound, resolve_trace

    first, second = trace_folders
    with pytest.raises(TraceNotFound) as err:
        resolve_trace("absent.swf.gz")
    message = str(err.value)
    assert isinstance(err.value, WorkloadError)
    assert "absent.swf.gz" in message and str(first) in message and str(second) in message
    assert "HPCGYM_TRACES" in message and "pass the trace's path" in message
    with pytest.raises(TraceNotFound, match="HPCGYM_TRACES is not set"):
        monkeypatch.delenv("HPCGYM_TRACES")
        load_workload({"trace": "tiny.swf"})
    # a path with a folder part is taken as given, never looked up in the folders
    monkeypatch.setenv("HPCGYM_TRACES", str(second))
    with pytest.raises(TraceNotFound, match="check the path"):
        resolve_trace("sub/tiny.swf")
