"""An env that serves one encoder gathers only the observation columns the encoder reads
(`Encoder.reads`, `Simulation(observed=...)`): every built-in encoder must encode that narrowed
observation exactly as it encodes the full one, or the narrowing would change what agents learn."""

from __future__ import annotations

import numpy as np
import pytest

from hpcgym.agents.encoders import ENCODERS, get_encoder
from hpcgym.environment.config import SimConfig
from hpcgym.environment.lublin import LublinParams, generate_lublin
from hpcgym.environment.simulator import Simulation

#: (encoder, the kind it is served on, simulation options it needs)
CASES = [("jobs+nodes", "select", {}), ("jobs+nodes", "inspect", {}), ("jobs+running+nodes", "select_kill", {}),
         ("running+nodes", "kill", {}), ("rlschert+nodes", "kill", {"prediction": "running", "estimate": "predicted"}),
         ("jobs+rlschert+nodes", "select_kill", {"prediction": "running", "estimate": "predicted"}),
         ("dras", "select", {}), ("schedinspector", "inspect", {}), ("rlbf", "backfill", {}), ("irl", "select", {}),
         ("irl_wait", "backfill", {})]


@pytest.mark.parametrize("name, kind, options", CASES, ids=[f"{n}-{k}" for n, k, _ in CASES])
def test_an_encoder_reads_the_same_from_its_narrowed_observation(name, kind, options):
    workload = generate_lublin(300, 64, seed=4, params=LublinParams.typeless())
    config = SimConfig(window=16, **options)
    encoder = get_encoder(name, 16, 64)
    assert encoder.reads is not None, f"{name} declares no columns: the env would gather all of them"
    full = Simulation(workload, config, external={kind})
    narrow = Simulation(workload, config, external={kind}, observed=encoder.reads)
    full.reset(), narrow.reset()
    decisions = 0
    while full.pending is not None:
        seen, thin = full.pending.observation, narrow.pending.observation
        assert len(thin["queue"]) < len(seen["queue"]) or len(thin["running"]) < len(seen["running"])
        assert np.array_equal(encoder.encode(seen), encoder.encode(thin)), (name, decisions)
        action = full.pending.default()
        full.step(action), narrow.step(action)
        decisions += 1
    assert narrow.pending is None and decisions > 20


def test_every_built_in_encoder_declares_what_it_reads():
    assert [name for name in ENCODERS if get_encoder(name, 8, 64).reads is None] == []
