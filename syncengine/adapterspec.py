"""Adapter descriptions: one harness's live tree, durable tree and rules, checked.

Owns the schema of an adapter table (``adapters/*.toml`` and ``[[adapter]]``
in a config file) and its ``[[migrate]]`` steps: every key has its TOML type,
every path is a non-empty string without NUL, and a bad table is a
`ConfigError` naming the adapter and the key.  It reads no environment and
no file: `syncengine.config` hands it parsed tables and the resolved roots.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

import attrs

from syncengine.errors import ConfigError

ADAPTER_KEYS = frozenset(
    {"name", "description", "live", "durable", "exclude", "sqlite", "segments", "migrate"}
)
# [[migrate]] steps: action -> (required keys, optional keys)
MIGRATE_ACTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "unlink_symlink": (frozenset({"path"}), frozenset({"target"})),
    "copy_tree": (frozenset({"from"}), frozenset({"to", "rename_to", "if_symlink"})),
    "quarantine": (frozenset({"patterns", "to"}), frozenset()),
    "snapshot_open": (frozenset({"patterns"}), frozenset()),
}
PLACEHOLDERS = ("{durable_root}", "{local_root}", "{durable}", "{live}", "{from}")


@attrs.frozen
class MigrateStep:
    """One `[[migrate]]` step of an adapter (see README "Migrating from the rsync layout").

    Paths keep their ``{durable_root}``, ``{local_root}``, ``{durable}``,
    ``{live}`` and ``{from}`` placeholders; `syncengine.migrate` expands them.
    """

    action: str
    path: str = ""  # unlink_symlink: relative to the live tree
    target: str = ""  # unlink_symlink: only a link pointing here is removed ("" = any)
    source: str = ""  # copy_tree: the legacy directory ("from" in TOML)
    to: str = ""  # copy_tree: subdirectory of the checkpoint; quarantine: its directory
    rename_to: str = ""  # copy_tree: rename the source afterwards ("" = keep it in place)
    if_symlink: str = "skip"  # copy_tree: "skip" or "unlink" a symlink found at `from`
    patterns: tuple[str, ...] = ()  # quarantine, snapshot_open: name globs


@attrs.frozen
class AdapterSpec:
    """One harness: where its live tree is, where its checkpoint goes, what to skip."""

    name: str
    live: Path
    durable: Path
    exclude: tuple[str, ...] = ()
    sqlite: tuple[str, ...] = ()
    segments: tuple[str, ...] = ()  # append-only logs, stored as immutable segments
    migrate: tuple[MigrateStep, ...] = ()  # steps of `syncengine migrate`
    description: str = ""
    origin: str = ""

    def __str__(self) -> str:
        return f"{self.name}: {self.live} -> {self.durable}"


def plain_text(value: Any) -> TypeGuard[str]:
    """A non-empty string an OS call accepts (no NUL: Python raises ValueError on it)."""
    return isinstance(value, str) and bool(value) and "\x00" not in value


def migrate_steps(value: Any, where: str) -> tuple[MigrateStep, ...]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConfigError(f"{where}: migrate must be an array of tables ([[migrate]])")
    steps = []
    for n, table in enumerate(value, 1):
        action = table.get("action")
        if action not in MIGRATE_ACTIONS:
            raise ConfigError(f"{where}: migrate step {n}: action must be one of "
                              f"{', '.join(MIGRATE_ACTIONS)}, not {action!r}")
        required, optional = MIGRATE_ACTIONS[action]
        keys = set(table) - {"action"}
        if required - keys or keys - required - optional:
            bad = sorted(required - keys) or sorted(keys - required - optional)
            raise ConfigError(f"{where}: migrate step {n} ({action}): key {bad[0]!r} is "
                              f"{'missing' if required - keys else 'not valid here'}; keys: "
                              f"{', '.join(sorted(required | optional))}")
        for key, val in table.items():
            ok = (isinstance(val, list) and all(plain_text(v) for v in val)
                  if key == "patterns" else isinstance(val, str) and "\x00" not in val)
            if not ok:
                raise ConfigError(f"{where}: migrate step {n}: {key} has the wrong type")
        if table.get("if_symlink", "skip") not in ("skip", "unlink"):
            raise ConfigError(f"{where}: migrate step {n}: if_symlink is 'skip' or 'unlink'")
        steps.append(MigrateStep(
            action=action, path=table.get("path", ""), target=table.get("target", ""),
            source=table.get("from", ""), to=table.get("to", ""),
            rename_to=table.get("rename_to", ""), if_symlink=table.get("if_symlink", "skip"),
            patterns=tuple(table.get("patterns", ()))))
    return tuple(steps)


def adapter_spec(table: Mapping[str, Any], local_root: Path, durable_root: Path) -> AdapterSpec:
    """One adapter table, checked, with its paths resolved against the roots."""
    origin = str(table.get("__origin__", "config"))
    unknown = sorted(set(table) - ADAPTER_KEYS - {"__origin__"})
    if unknown:
        raise ConfigError(
            f"{origin}: [[adapter]] unknown key {unknown[0]!r}: valid keys are "
            f"{', '.join(sorted(ADAPTER_KEYS))}"
        )
    name = table.get("name")
    if not plain_text(name) or "/" in name or name.startswith("."):
        raise ConfigError(f"{origin}: [[adapter]] name must be a plain non-empty string")
    for key in ("live", "durable"):
        if not plain_text(table.get(key)):
            raise ConfigError(f"{origin}: adapter {name!r}: {key} must be a non-empty path")
    lists = {}
    for key in ("exclude", "sqlite", "segments"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(plain_text(v) for v in value):
            raise ConfigError(f"{origin}: adapter {name!r}: {key} must be a list of "
                              "non-empty strings")
        lists[key] = tuple(value)
    if not isinstance(table.get("description", ""), str):
        raise ConfigError(f"{origin}: adapter {name!r}: description must be a string")
    return AdapterSpec(
        name=name,
        live=Path(os.path.normpath(local_root / os.path.expanduser(table["live"]))),
        durable=Path(os.path.normpath(durable_root / os.path.expanduser(table["durable"]))),
        exclude=lists["exclude"],
        sqlite=lists["sqlite"],
        segments=lists["segments"],
        migrate=migrate_steps(table.get("migrate", []), f"{origin}: adapter {name!r}"),
        description=str(table.get("description", "")),
        origin=origin,
    )


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def check_overlaps(specs: tuple[AdapterSpec, ...], state_dir: Path) -> None:
    """Refuse live and durable trees inside each other, and a state dir on the durable side."""
    for a in specs:
        for b in specs:
            if _inside(a.live, b.durable) or _inside(b.durable, a.live):
                raise ConfigError(
                    f"{a.origin}: adapter {a.name!r}: live path {a.live} and the durable path "
                    f"{b.durable} of {b.name!r} overlap: keep checkpoints outside live trees"
                )
            if a is not b and _inside(a.durable, b.durable):
                raise ConfigError(
                    f"{a.origin}: adapters {a.name!r} and {b.name!r} share durable path "
                    f"{b.durable}: give each its own durable directory"
                )
        if _inside(state_dir, a.durable):
            raise ConfigError(
                f"state_dir {state_dir} is inside the durable path of {a.name!r}: "
                "the state directory must be on local disk"
            )
