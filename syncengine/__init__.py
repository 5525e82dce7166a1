"""syncengine: checkpoint and restore coding-agent state on object-storage mounts.

The public API for embedding::

    from syncengine import Engine, load_config
    engine = Engine(load_config("/etc/syncengine.toml"))
    engine.restore()
    report = engine.checkpoint()
    assert report.ok, report.errors
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from syncengine.__about__ import __version__

if TYPE_CHECKING:
    from syncengine.config import AdapterSpec, Config, config_from_dict, load_config
    from syncengine.daemon.runner import Runner
    from syncengine.engine import Engine
    from syncengine.errors import (
        ConfigError,
        DurableError,
        Incomplete,
        LeaseHeld,
        LeaseLost,
        LockBusy,
        SourceError,
        SyncEngineError,
    )
    from syncengine.ops.journal import Journal, Prompt
    from syncengine.report import AdapterReport, PathError, Report

# Public names, imported on first use (PEP 562): a one-shot `syncengine checkpoint`
# then never loads the watcher, the journal or the maintenance commands.
_EXPORTS = {
    "AdapterSpec": "config",
    "Config": "config",
    "config_from_dict": "config",
    "load_config": "config",
    "Engine": "engine",
    "ConfigError": "errors",
    "DurableError": "errors",
    "Incomplete": "errors",
    "LeaseHeld": "errors",
    "LeaseLost": "errors",
    "LockBusy": "errors",
    "SourceError": "errors",
    "SyncEngineError": "errors",
    "Journal": "ops.journal",
    "Prompt": "ops.journal",
    "AdapterReport": "report",
    "PathError": "report",
    "Report": "report",
    "Runner": "daemon.runner",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'syncengine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"syncengine.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AdapterReport",
    "AdapterSpec",
    "Config",
    "ConfigError",
    "DurableError",
    "Engine",
    "Incomplete",
    "Journal",
    "LeaseHeld",
    "LeaseLost",
    "LockBusy",
    "PathError",
    "Prompt",
    "Report",
    "Runner",
    "SourceError",
    "SyncEngineError",
    "__version__",
    "config_from_dict",
    "load_config",
]
