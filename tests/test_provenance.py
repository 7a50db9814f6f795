"""Every result file the docs cite says how it was made (gymbridge/provenance.py): the commit,
the exact command, the settings and the checkpoints it read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hpcgym.gymbridge.provenance import command_line, provenance

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "docs" / "results").rglob("*.json"))
COMMIT = re.compile(r"[0-9a-f]{40}(-dirty)?")


def test_there_are_results_to_check():
    assert len(RESULTS) >= 30


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: str(p.relative_to(ROOT / "docs" / "results")))
def test_every_result_json_records_its_commit_and_command(path):
    block = json.loads(path.read_text()).get("provenance")
    assert isinstance(block, dict), f"{path} has no provenance block"
    assert COMMIT.fullmatch(block.get("commit") or ""), f"{path}: provenance.commit is not a git commit"
    assert isinstance(block.get("command"), str) and block["command"].strip(), f"{path}: no command"
    for name, digest in block.get("checkpoints", {}).items():
        assert re.fullmatch(r"[0-9a-f]{64}", digest), f"{path}: checkpoint {name} has no sha256"


def test_provenance_hashes_the_checkpoint_an_agent_spec_names_and_skips_built_in_names(tmp_path):
    model = tmp_path / "model.pt"
    model.write_bytes(b"abc")
    block = provenance({"seed": 3}, [f"model:{model}", "sjf"], argv=["hpcgym", "compare", "--seed", "3"])
    # sha256("abc"): the FIPS 180-2 test vector
    assert block["checkpoints"] == {str(model): "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}
    assert block["settings"] == {"seed": 3} and block["command"] == "hpcgym compare --seed 3"


def test_a_script_command_is_written_as_typed_again_with_quoting():
    line = command_line([str(ROOT / "benchmarks" / "rlbf_eval.py"), "--traces", "SDSC-SP2", "--out", "a b"])
    assert line == "python benchmarks/rlbf_eval.py --traces SDSC-SP2 --out 'a b'"


def test_provenance_names_the_versions_of_the_numeric_libraries_loaded():
    import platform

    import numpy

    versions = provenance()["versions"]
    assert versions["python"] == platform.python_version() and versions["numpy"] == numpy.__version__
    assert set(versions) <= {"python", "numpy", "torch", "sklearn", "numba"}
    assert all(type(v) is str for v in versions.values())   # torch's is a str subclass that weights_only refuses
