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
    ({"model": "gaussian"}, "unknown Lublin model"),
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
