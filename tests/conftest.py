"""Shared fixtures: where the real SWF traces live (optional; tests using them skip without)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest


def locate_traces() -> Path | None:
    """The trace folder: $HPCGYM_TRACES, else ../shared/traces next to the repository."""
    env = os.environ.get("HPCGYM_TRACES")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[1].parent / "shared" / "traces")
    for folder in candidates:
        if folder.is_dir():
            return folder
    return None


@pytest.fixture(scope="session", autouse=True)
def private_trace_cache():
    """Parsed traces are cached on disk (environment/trace_cache.py): the tests, and the
    processes they start, keep theirs in a folder of their own, removed at the end."""
    folder = tempfile.mkdtemp(prefix="hpcgym-cache-")
    before = os.environ.get("HPCGYM_CACHE")
    os.environ["HPCGYM_CACHE"] = folder
    yield Path(folder)
    if before is None:
        del os.environ["HPCGYM_CACHE"]
    else:
        os.environ["HPCGYM_CACHE"] = before
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The real-trace folder, or skip the test with the places that were looked in."""
    folder = locate_traces()
    if folder is None:
        pytest.skip("real SWF traces not found: set HPCGYM_TRACES or put them in "
                    "../shared/traces relative to the repository root")
    return folder


@pytest.fixture
def ipc_dir(tmp_path):
    """A folder for ipc:// files short enough for the ~107-byte socket path limit."""
    if len(str(tmp_path / "env.ipc")) < 90:
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="hpcgym-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    """The quick loop (`-m "not slow"`) searches a quarter of the property examples of
    tests/test_invariants.py (HPCGYM_PROP_SCALE, unless set); the full run, CI's, searches all."""
    if "not slow" in (config.getoption("markexpr") or "") and "HPCGYM_PROP_SCALE" not in os.environ:
        os.environ["HPCGYM_PROP_SCALE"] = "0.25"
