"""Gymnasium ids of the hpcgym envs, so that `gymnasium.make("hpcgym/Select-v0", workload=...)`
works after `import hpcgym.gymbridge` (docs/gymnasium.md).

| id                         | the env's decision kinds                    |
|----------------------------|---------------------------------------------|
| `hpcgym/Select-v0`         | select                                      |
| `hpcgym/Backfill-v0`       | backfill                                    |
| `hpcgym/Inspect-v0`        | inspect                                     |
| `hpcgym/Kill-v0`           | kill                                        |
| `hpcgym/SelectBackfill-v0` | select and backfill (DRAS's two levels)     |

Each is `HpcEnv` (gymbridge/env.py) with that `kind`; the keywords of `gymnasium.make` go to its
constructor (workload, options, reward, encoder, seed, remote, ...).

Gymnasium registers an outside package's envs when that package is imported (it reads no entry
points since 1.0). Importing gymnasium takes about as long as starting the `hpcgym` command line,
which lives in this package too, so `import hpcgym.gymbridge` does not import it: it registers the
ids at once when gymnasium is already imported, and otherwise as soon as gymnasium is imported
(a one-shot import hook), whichever order a program imports the two in.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from typing import Any

#: Gymnasium id -> the `kind` argument of `HpcEnv`.
ENV_IDS: dict[str, Any] = {
    "hpcgym/Select-v0": "select",
    "hpcgym/Backfill-v0": "backfill",
    "hpcgym/Inspect-v0": "inspect",
    "hpcgym/Kill-v0": "kill",
    "hpcgym/SelectBackfill-v0": ("select", "backfill"),
}
ENTRY_POINT = "hpcgym.gymbridge.env:HpcEnv"


def register_envs() -> None:
    """Register `ENV_IDS` with Gymnasium (imports it); ids already registered are left alone."""
    import gymnasium

    for env_id, kind in ENV_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"kind": kind})


def register_when_gymnasium_is_imported() -> None:
    """`register_envs()` now if gymnasium is imported, else right after it is."""
    if sys.modules.get("gymnasium") is not None:
        _register_or_warn()
    elif "gymnasium" not in sys.modules and not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())


def _register_or_warn() -> None:
    # Done as a side effect of an import: a gymnasium this cannot register with must not make
    # `import hpcgym.gymbridge` (the command line) or `import gymnasium` fail.
    try:
        register_envs()
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"hpcgym could not register its Gymnasium ids ({type(exc).__name__}: {exc}); "
                      "use hpcgym.gymbridge.make(kind, ...) instead", RuntimeWarning, stacklevel=2)


class _RegisterAfterImport:
    """Finds nothing itself: when `gymnasium` is about to be imported, it takes itself off
    `sys.meta_path`, lets the other finders find gymnasium, and registers the ids once the
    module has run. A finder by duck typing: subclassing `importlib.abc.MetaPathFinder` would
    import `importlib.resources` into every start of the command line."""

    def find_spec(self, name, path=None, target=None):
        if name != "gymnasium":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module) -> None:
            run(module)
            _register_or_warn()

        spec.loader.exec_module = exec_module  # this spec's loader only
        return spec
