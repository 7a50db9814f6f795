"""The floors of docs/architecture.md: imports only point down, and no module is part of a circle.

Every import counts, including those inside functions and under `if TYPE_CHECKING:` (a lazy or
type-only import still ties the floors together). The checker is tried first on a small tree
built to break each rule, so a checker that finds nothing cannot pass unnoticed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Bottom to top; a module may import its own floor and the floors below it.
FLOORS = ("protocol", "environment", "agents", "gymbridge")


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name (as installed under `hpcgym.`) -> file, for every floor's .py file."""
    modules = {}
    for floor in FLOORS:
        for path in sorted((root / floor).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(("hpcgym", *parts))] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The hpcgym modules `name` imports (a `from X import y` counts as X.y where y is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules else stem
                       for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def floor_of(module: str) -> int:
    return FLOORS.index(module.split(".")[1])


def violations(root: Path) -> tuple[list[str], list[list[str]]]:
    """(upward imports as 'a -> b' lines, circles as module lists)."""
    modules = module_files(root)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if floor_of(b) > floor_of(a))
    circles, state = [], dict.fromkeys(graph, 0)  # 0 unseen, 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state[nxt] == 1:
                circles.append(path[path.index(nxt):] + [nxt])
            elif state[nxt] == 0:
                visit(nxt, path)
        path.pop()
        state[node] = 2

    for name in sorted(graph):
        if state[name] == 0:
            visit(name, [])
    return upward, circles


def test_the_checker_finds_an_upward_import_and_a_circle(tmp_path):
    files = {
        "protocol/__init__.py": "",
        "protocol/codec.py": "def f():\n    from ..environment import sim  # upward, lazily\n",
        "environment/__init__.py": "",
        "environment/sim.py": "from .rules import x\n",
        "environment/rules.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import sim\n",
        "agents/__init__.py": "",
        "agents/base.py": "from hpcgym.environment.sim import y\nfrom ..protocol import codec\n",
        "gymbridge/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    upward, circles = violations(tmp_path)
    assert upward == ["hpcgym.protocol.codec -> hpcgym.environment.sim"]
    assert len(circles) == 1 and sorted(set(circles[0])) == ["hpcgym.environment.rules", "hpcgym.environment.sim"]


def test_imports_only_point_down():
    upward, _ = violations(ROOT)
    assert not upward, "upward imports (see docs/architecture.md):\n" + "\n".join(upward)


def test_no_module_is_part_of_a_circle():
    _, circles = violations(ROOT)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)
