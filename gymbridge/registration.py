"""Gymnasium ids of the hpcgym envs (`ENV_IDS`), registered by `import hpcgym.gymbridge` without importing
gymnasium (as costly as starting the CLI): at once if it is imported, else by a one-shot import hook."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from typing import Any

#: Gymnasium id -> the `kind` argument of `HpcEnv`.
ENV_IDS: dict[str, Any] = {"hpcgym/Select-v0": "select", "hpcgym/Backfill-v0": "backfill",
                           "hpcgym/Inspect-v0": "inspect", "hpcgym/Kill-v0": "kill",
                           "hpcgym/SelectBackfill-v0": ("select", "backfill")}
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
    # a side effect of an import: a failure here must not make `import gymnasium` or the CLI fail
    try:
        register_envs()
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"hpcgym could not register its Gymnasium ids ({type(exc).__name__}: {exc}); "
                      "use hpcgym.gymbridge.make(kind, ...) instead", RuntimeWarning, stacklevel=2)


class _RegisterAfterImport:
    """Steps off `sys.meta_path` when `gymnasium` is imported and registers the ids once it has run (a finder
    by duck typing: `importlib.abc.MetaPathFinder` would import `importlib.resources` into every CLI start)."""

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
