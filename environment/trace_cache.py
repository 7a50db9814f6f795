"""Parsed SWF traces kept on disk (docs/performance.md), so each trace file is parsed once per machine: keyed by the
sha256 of the stored bytes, so an entry is never stale."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

FORMAT = 5  #: Bumped whenever what an entry holds changes, so old entries are never misread.
#: The most bytes the entries take together by default (the largest archive traces take about 50 MB each).
DEFAULT_MAX_BYTES = 2 << 30


def cache_dir() -> Path | None:
    """Where entries live, or None when caching is off."""
    configured = os.environ.get("HPCGYM_CACHE")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hpcgym"


def max_bytes() -> int:
    """The bound on the entries' bytes together: HPCGYM_CACHE_BYTES, else `DEFAULT_MAX_BYTES`."""
    configured = os.environ.get("HPCGYM_CACHE_BYTES", "")
    return int(configured) if configured.isdigit() else DEFAULT_MAX_BYTES


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
            loaded = json.loads(str(stored["header"])), stored["columns"], stored["lines"]
        os.utime(entry)  # recently used: evicted last
        return loaded
    except (OSError, ValueError, KeyError):
        return None  # unreadable or half-written by an older run: parse again


def jobs(key: str) -> int | None:
    """How many job lines the entry of this key holds, if cached, from its array header alone (not loading it)."""
    entry = _entry(key)
    if entry is None or not entry.is_file():
        return None
    try:
        with zipfile.ZipFile(entry) as archive, archive.open("lines.npy") as stored:
            version = np.lib.format.read_magic(stored)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            return int(read(stored)[0][0])
    except (OSError, ValueError, KeyError, IndexError, zipfile.BadZipFile):
        return None


def store(key: str, header: dict[str, str], columns: np.ndarray, lines: np.ndarray) -> bool:
    """Keep a parsed trace (best effort, renamed into place), evicting the least recently used entries to stay
    within `max_bytes()`; whether it was kept."""
    import tempfile  # only when an entry is written: it pulls shutil and random into every start-up

    entry, bound = _entry(key), max_bytes()
    if entry is None or columns.nbytes + lines.nbytes > bound:
        return False
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=entry.parent, suffix=".npz", delete=False) as handle:
            np.savez(handle, header=np.array(json.dumps(header)), columns=columns, lines=lines)
        if os.path.getsize(handle.name) > bound:
            os.unlink(handle.name)
            return False
        os.replace(handle.name, entry)
        _evict(entry.parent, bound, keep=entry)
    except OSError:
        return False
    return True


def _evict(folder: Path, bound: int, keep: Path) -> None:
    """Remove the least recently used entries (`load` touches an entry) until at most `bound` bytes stay, `keep` too."""
    entries = []
    for path in folder.glob("swf*-*.npz"):
        try:
            info = path.stat()
        except OSError:
            continue  # removed meanwhile by another process
        entries.append((info.st_mtime_ns, info.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries, key=lambda e: e[0]):
        if total <= bound:
            return
        if path != keep:
            path.unlink(missing_ok=True)
            total -= size
