"""syncengine: checkpoint and restore coding-agent state on object-storage mounts.

The public API for embedding::

    from syncengine import Engine, load_config
    engine = Engine(load_config("/etc/syncengine.toml"))
    engine.restore()
    report = engine.checkpoint()
    assert report.ok, report.errors
"""

from syncengine.config import AdapterSpec, Config, config_from_dict, load_config
from syncengine.engine import Engine
from syncengine.errors import (
    ConfigError,
    DurableError,
    Incomplete,
    LockBusy,
    SourceError,
    SyncEngineError,
)
from syncengine.journal import Journal, Prompt
from syncengine.report import AdapterReport, PathError, Report
from syncengine.runner import Runner

__version__ = "0.1.0"

__all__ = [
    "AdapterReport",
    "AdapterSpec",
    "Config",
    "ConfigError",
    "DurableError",
    "Engine",
    "Incomplete",
    "Journal",
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
