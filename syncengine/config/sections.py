"""The configuration's smaller sections, each read from the layers and checked.

`[gc]` (`GcConfig`), the lease keys, ``metrics_address``, ``write_back`` and
``rclone_rc``, ``require_mount``, ``restore`` and ``[restore_order]``: one
function per section, each returning plain values or raising `ConfigError`
naming the key's layer and the fix.  Read by `syncengine.config.config_from_dict`
only.
"""

from __future__ import annotations

from typing import Any

import attrs

from syncengine.config.adapterspec import AdapterSpec, newest_count
from syncengine.config.layers import Layers
from syncengine.config.numbers import check_number
from syncengine.errors import ConfigError
from syncengine.patterns import compile_patterns

GC_KEYS = frozenset(
    {
        "absent_passes",
        "grace_seconds",
        "min_present_ratio",
        "staging_seconds",
        "pack_after_seconds",
        "pack_bytes",
        "pack_max_file_bytes",
        "pack_min_files",
    }
)
DEFAULT_LEASE_SECONDS = 60.0  # a holder that stops renewing loses the durable root after this
DEFAULT_LEASE_WAIT = 90.0  # a new instance waits this long for another holder's lease


@attrs.frozen
class GcConfig:
    """The `[gc]` table: when a deleted file becomes a tombstone and when it may go."""

    absent_passes: int = 3  # consecutive checkpoints a path must be missing locally
    grace_seconds: float = 604800.0  # then this long (7 days) before gc --apply deletes it
    min_present_ratio: float = 0.5  # refuse when fewer manifest paths than this exist locally
    staging_seconds: float = 3600.0  # staging temp files older than this are leftovers
    # Packs (syncengine.ops.packer): small files unchanged this long go into pack objects
    pack_after_seconds: float = 3600.0
    pack_bytes: int = 8 << 20  # a pack's size, about
    pack_max_file_bytes: int = 1 << 20  # larger files are never packed
    pack_min_files: int = 256  # pack only when at least this many qualify (0: never)


def require_mount(layers: Layers) -> bool:
    require_mount = layers.get("require_mount", None, False)
    if not isinstance(require_mount, bool):
        raise ConfigError(
            f"{layers.sources['require_mount']}: require_mount must be true or "
            f"false, not {require_mount!r}"
        )
    return require_mount


def lease(layers: Layers) -> dict[str, Any]:
    """The durable root's lease: `lease_seconds`, `lease_wait`, `lease_lost`
    (syncengine.engine.rootlease, daemon.supervisor)."""
    lost = layers.get("lease_lost", None, "stop")
    if lost not in ("stop", "keep"):
        raise ConfigError(
            f'{layers.sources["lease_lost"]}: lease_lost must be "stop" or "keep", not {lost!r}'
        )
    return {
        "lease_seconds": float(layers.number("lease_seconds", default=DEFAULT_LEASE_SECONDS)),
        "lease_wait": float(layers.number("lease_wait", default=DEFAULT_LEASE_WAIT)),
        "lease_lost": lost,
    }


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); port 0: the system picks."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f"metrics_address {address!r} is not HOST:PORT (e.g. 127.0.0.1:9108; "
            "port 0 lets the system choose)"
        )
    return host, int(port)


def metrics_address(layers: Layers) -> str | None:
    value = layers.get("metrics_address", None, None)
    if value is None or value == "":  # "": off, as when absent
        return None
    try:
        if not isinstance(value, str):
            raise ConfigError(f"metrics_address must be a string HOST:PORT, not {value!r}")
        split_address(value)
    except ConfigError as exc:
        raise ConfigError(f"{layers.sources['metrics_address']}: {exc}") from None
    return value


def write_back(layers: Layers) -> tuple[bool | None, str | None]:
    """`write_back` (true, false or "auto") and `rclone_rc` (host:port, no login)."""
    declared = layers.get("write_back", None, "auto")
    if declared not in (True, False, "auto"):
        raise ConfigError(
            f"{layers.sources['write_back']}: write_back must be true, false or "
            f'"auto" (detect from the mount), not {declared!r}'
        )
    rc = layers.get("rclone_rc", None, None)
    if rc is not None and (
        not isinstance(rc, str) or not rc.strip() or "@" in rc or any(c.isspace() for c in rc)
    ):
        raise ConfigError(
            f"{layers.sources['rclone_rc']}: rclone_rc must be the address of rclone's "
            'remote control, such as "127.0.0.1:5572", with no login in it (run rclone '
            "with --rc --rc-addr 127.0.0.1:5572 and no --rc-user: syncengine reads only "
            "vfs/stats, which needs none)"
        )
    return (None if declared == "auto" else bool(declared)), rc


def gc_config(table: Any, origin: str) -> GcConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"{origin}: gc must be a table ([gc])")
    unknown = sorted(set(table) - GC_KEYS)
    if unknown:
        raise ConfigError(
            f"{origin}: [gc] unknown key {unknown[0]!r}: valid keys are "
            f"{', '.join(sorted(GC_KEYS))}"
        )
    values: dict[str, Any] = {
        key: check_number(f"{origin}: [gc]", key, value) for key, value in table.items()
    }
    for key in ("pack_bytes", "pack_max_file_bytes", "pack_min_files"):
        if key in values:
            values[key] = int(values[key])
    return GcConfig(**values)


RESTORE_MODES = ("background", "all-first")
ORDER_KEYS = ("first", "newest", "newest_count")


def run_keys(layers: Layers) -> dict[str, Any]:
    """The keys of a long-running engine (`run`): the lease's, `metrics_address`, `restore`."""
    return {
        **lease(layers),
        "metrics_address": metrics_address(layers),
        "restore": restore_mode(layers),
    }


def restore_mode(layers: Layers) -> str:
    """`restore`: "background" (COMMAND starts after each adapter's first set, the rest
    follows) or "all-first" (the whole tree before COMMAND)."""
    mode = layers.get("restore", None, "background")
    if mode not in RESTORE_MODES:
        raise ConfigError(
            f'{layers.sources["restore"]}: restore must be "background" or "all-first", '
            f"not {mode!r}"
        )
    return str(mode)


def restore_order(layers: Layers, specs: tuple[AdapterSpec, ...]) -> tuple[AdapterSpec, ...]:
    """The adapters with ``[restore_order.NAME]`` (keys first, newest, newest_count) applied
    over their own ``restore_first`` / ``restore_newest`` / ``restore_newest_count``."""
    tables = layers.table("restore_order")
    names = {s.name for s in specs}
    out = []
    for spec in specs:
        table = tables.get(spec.name, {})
        where = f"{layers.origin}: [restore_order.{spec.name}]"
        if not isinstance(table, dict) or set(table) - set(ORDER_KEYS):
            raise ConfigError(f"{where}: a table of first, newest (pattern lists), newest_count")
        changes: dict[str, Any] = {}
        for key in ("first", "newest"):
            if key in table:
                value = table[key]
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ConfigError(f"{where}: {key} must be a list of patterns")
                changes[f"restore_{key}"] = tuple(value)
        if "newest_count" in table:
            changes["restore_newest_count"] = newest_count(table["newest_count"], where, spec.name)
        spec = attrs.evolve(spec, **changes)
        compile_patterns((*spec.restore_first, *spec.restore_newest), where=where)
        out.append(spec)
    unknown = sorted(set(tables) - names)
    if unknown:
        raise ConfigError(
            f"{layers.origin}: [restore_order.{unknown[0]}]: no such adapter is enabled"
        )
    return tuple(out)
