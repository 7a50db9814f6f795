"""A result file's `provenance`, so that it can be remade: the hpcgym commit, the exact command, the settings and
a hash of every checkpoint read (tests/test_provenance.py checks every JSON under docs/results/)."""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: Libraries whose version a result records when they are loaded (their kernels round sums their own way).
NUMERIC = ("numpy", "torch", "sklearn", "numba")
#: The checkout hpcgym runs from (the folder above gymbridge/); paths inside it are recorded relative to it.
SOURCE_ROOT = Path(__file__).resolve().parent.parent


def git_commit(folder: str | os.PathLike | None = None) -> str | None:
    """The hpcgym source's commit, `-dirty` when tracked files have local changes; None outside a checkout."""
    here = str(folder or SOURCE_ROOT)
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def sha256_file(path: str | os.PathLike, opener: Callable[..., Any] = open) -> str:
    h = hashlib.sha256()
    with opener(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def shown_path(path: str | os.PathLike) -> str:
    """`path` relative to the hpcgym checkout when inside it (a result names the committed file), else absolute."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(SOURCE_ROOT))
    except ValueError:
        return str(resolved)


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as typed again (`hpcgym ...` or `python benchmarks/X.py ...`), quoted for a POSIX shell."""
    argv = list(sys.argv if argv is None else argv)
    program = argv[0] if argv else "python"
    head = ["python", shown_path(program)] if program.endswith(".py") else [Path(program).name]
    return shlex.join(head + argv[1:])


def provenance(settings: Mapping[str, Any] | None = None, checkpoints: Iterable[str | os.PathLike] = (),
               argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The `provenance` block of a result file: commit, command, folder, settings, sha256 of each checkpoint
    named (a path or `model:PATH`), the versions of Python and of the numeric libraries loaded, and torch's thread
    count (float sums, hence greedy picks, depend on the last two)."""
    files = [f for f in map(_file_of, dict.fromkeys(map(str, checkpoints))) if f is not None]
    hashes = {shown_path(f): sha256_file(f) for f in files}
    block: dict[str, Any] = {"commit": git_commit(), "command": command_line(argv), "cwd": shown_path(os.getcwd()),
                             "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                             "settings": dict(settings or {}), "checkpoints": hashes}
    block["versions"] = {"python": platform.python_version(),
                         **{name: str(sys.modules[name].__version__) for name in NUMERIC if name in sys.modules}}
    torch = sys.modules.get("torch")
    if torch is not None:
        block["torch_threads"] = torch.get_num_threads()
    return block


def _file_of(spec: str) -> Path | None:
    """The file a checkpoint argument names (a path, `model:PATH`, `tree:PATH`); None for a built-in agent."""
    for candidate in (spec, spec.partition(":")[2]):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def provenance_markdown(block: Mapping[str, Any]) -> str:
    """One line for the head of a Markdown result: how to remake it and from which commit."""
    return f"Made by `{block['command']}` at hpcgym commit {block['commit'] or 'unknown'} ({block['made']})."
