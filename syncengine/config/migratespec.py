"""The ``[[migrate]]`` steps of an adapter table, checked (docs/MIGRATING.md).

Owns the schema of a migrate step (`MIGRATE_ACTIONS`: each action's required and
optional keys), its checked form (`MigrateStep`, read by `syncengine.ops.migrate`)
and `plain_text`, the rule every configured path follows.  Read by
`syncengine.config.adapterspec` only.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import attrs

from syncengine.errors import ConfigError

# [[migrate]] steps: action -> (required keys, optional keys)
MIGRATE_ACTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "unlink_symlink": (frozenset({"path"}), frozenset({"target"})),
    "copy_tree": (frozenset({"from"}), frozenset({"to", "rename_to", "if_symlink", "link_to"})),
    "quarantine": (frozenset({"patterns", "to"}), frozenset()),
    "snapshot_open": (frozenset({"patterns"}), frozenset()),
}


@attrs.frozen
class MigrateStep:
    """One `[[migrate]]` step of an adapter (see docs/MIGRATING.md).

    Paths keep their ``{durable_root}``, ``{local_root}``, ``{durable}``,
    ``{live}``, ``{home}`` and ``{from}`` placeholders; `syncengine.ops.migrate`
    expands them.
    """

    action: str
    path: str = ""  # unlink_symlink: relative to the live tree
    target: str = ""  # unlink_symlink: only a link pointing here is removed ("" = any)
    source: str = ""  # copy_tree: the legacy directory ("from" in TOML)
    to: str = ""  # copy_tree: subdirectory of the checkpoint; quarantine: its directory
    rename_to: str = ""  # copy_tree: rename the source afterwards ("" = keep it in place)
    if_symlink: str = "skip"  # copy_tree: "skip" or "unlink" a symlink found at `from`
    link_to: str = ""  # copy_tree: then make `from` a symlink to this (`ln -sfn`)
    patterns: tuple[str, ...] = ()  # quarantine, snapshot_open: name globs


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
            raise ConfigError(
                f"{where}: migrate step {n}: action must be one of "
                f"{', '.join(MIGRATE_ACTIONS)}, not {action!r}"
            )
        required, optional = MIGRATE_ACTIONS[action]
        keys = set(table) - {"action"}
        if required - keys or keys - required - optional:
            bad = sorted(required - keys) or sorted(keys - required - optional)
            raise ConfigError(
                f"{where}: migrate step {n} ({action}): key {bad[0]!r} is "
                f"{'missing' if required - keys else 'not valid here'}; keys: "
                f"{', '.join(sorted(required | optional))}"
            )
        for key, val in table.items():
            ok = (
                isinstance(val, list) and all(plain_text(v) for v in val)
                if key == "patterns"
                else isinstance(val, str) and "\x00" not in val
            )
            if not ok:
                raise ConfigError(f"{where}: migrate step {n}: {key} has the wrong type")
        if table.get("if_symlink", "skip") not in ("skip", "unlink"):
            raise ConfigError(f"{where}: migrate step {n}: if_symlink is 'skip' or 'unlink'")
        if table.get("link_to") and not table.get("rename_to"):
            raise ConfigError(
                f"{where}: migrate step {n}: link_to needs rename_to (a real "
                "directory at `from` is renamed before the link replaces it)"
            )
        steps.append(
            MigrateStep(
                action=action,
                path=table.get("path", ""),
                target=table.get("target", ""),
                source=table.get("from", ""),
                to=table.get("to", ""),
                rename_to=table.get("rename_to", ""),
                if_symlink=table.get("if_symlink", "skip"),
                link_to=table.get("link_to", ""),
                patterns=tuple(table.get("patterns", ())),
            )
        )
    return tuple(steps)
