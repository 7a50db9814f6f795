"""Parsed SWF traces kept on disk, so that each trace file is parsed once per machine.

An entry is keyed by the sha256 of the file's bytes as stored (gzip or not): a changed file has
another key, so nothing is ever stale. It holds what parsing gives before cleaning (the header,
the kept columns, the job lines' numbers); cleaning, which depends on the caller's options, runs
every time. The folder is $HPCGYM_CACHE, else $XDG_CACHE_HOME/hpcgym, else ~/.cache/hpcgym;
HPCGYM_CACHE set to an empty string turns the cache off. A folder that cannot be written only
means no caching.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

#: Bumped whenever what an entry holds changes, so old entries are never misread.
FORMAT = 5


def cache_dir() -> Path | None:
    """Where entries live, or None when caching is off."""
    configured = os.environ.get("HPCGYM_CACHE")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hpcgym"


def _entry(key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / f"swf{FORMAT}-{key}.npz"


def load(key: str) -> tuple[dict[str, str], np.ndarray, np.ndarray] | None:
    """(header, kept columns, job line numbers) of the file with this key, if cached."""
    entry = _entry(key)
    if entry is None or not entry.is_file():
        return None
    try:
        with np.load(entry) as stored:
            return json.loads(str(stored["header"])), stored["columns"], stored["lines"]
    except (OSError, ValueError, KeyError):
        return None  # unreadable or half-written by an older run: parse again


def store(key: str, header: dict[str, str], columns: np.ndarray, lines: np.ndarray) -> None:
    """Keep a parsed trace (best effort; an atomic rename, so readers never see half an entry)."""
    import tempfile  # only when an entry is written: it pulls shutil and random into every start-up

    entry = _entry(key)
    if entry is None:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=entry.parent, suffix=".npz", delete=False) as handle:
            np.savez(handle, header=np.array(json.dumps(header)), columns=columns, lines=lines)
        os.replace(handle.name, entry)
    except OSError:
        pass
