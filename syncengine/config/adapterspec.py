"""Adapter descriptions: one harness's live tree, durable tree and rules, checked.

Owns the schema of an adapter table (``adapters/*.toml`` and ``[[adapter]]``
in a config file; its ``[[migrate]]`` steps: `migratespec`): every key has its TOML type,
every path is a non-empty string without NUL, and a bad table is a
`ConfigError` naming the adapter and the key.  Also owns where an adapter's
live and durable trees are (`place`): a flag, else the config file's
``[live]`` / ``[durable]`` table, else the first set environment variable the
adapter names (``live_env = ["CODEX_HOME"]``, ``"GEMINI_CLI_HOME/.gemini"``:
a variable plus a path below it), else its ``live`` / ``durable`` under the
roots.  And what a walk of an adapter's live tree leaves out
(`exclusion_patterns`, `skip_dirs`), which the engine and ``explain`` both
apply.  It reads no environment and no file: `syncengine.config` hands it
parsed tables, the environment mapping and the resolved roots.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from syncengine.config.migratespec import MigrateStep, migrate_steps, plain_text
from syncengine.config.s3location import S3Location, is_s3, virtual_path
from syncengine.errors import ConfigError
from syncengine.sqlite.files import database_patterns

# What a background restore (`run`) brings back before COMMAND starts (plan/order.py).
RESTORE_ORDER_KEYS = ("restore_first", "restore_newest", "restore_newest_count")
ADAPTER_KEYS = frozenset(
    {
        "name",
        "description",
        "live",
        "durable",
        "exclude",
        "sqlite",
        "segments",
        "secrets",
        "encrypt",
        "migrate",
        "live_env",
        "durable_env",
        *RESTORE_ORDER_KEYS,
    }
)
# An environment reference: a variable name, optionally followed by a path below it.
ENV_REF = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(/[^\x00]*)?\Z")
PLACEHOLDERS = ("{durable_root}", "{local_root}", "{durable}", "{live}", "{from}", "{home}")


@attrs.frozen
class AdapterSpec:
    """One harness: where its live tree is, where its checkpoint goes, what to skip."""

    name: str
    live: Path
    durable: Path
    exclude: tuple[str, ...] = ()
    sqlite: tuple[str, ...] = ()
    segments: tuple[str, ...] = ()  # append-only logs, stored as immutable segments
    secrets: tuple[str, ...] = ()  # sealed before they leave the machine (docs/SECRETS.md)
    encrypt: str = "secrets"  # "all": every file sealed (config.encryption.modes)
    migrate: tuple[MigrateStep, ...] = ()  # steps of `syncengine migrate`
    description: str = ""
    origin: str = ""
    live_env: tuple[str, ...] = ()  # environment references naming the live tree
    durable_env: tuple[str, ...] = ()
    builtin: bool = False  # shipped in adapters/*.toml
    restore_first: tuple[str, ...] = ()  # restored before COMMAND starts (patterns)
    restore_newest: tuple[str, ...] = ()  # of these, the newest `restore_newest_count` too
    restore_newest_count: int = 0

    def __str__(self) -> str:
        return f"{self.name}: {self.live} -> {self.durable}"


# A durable tree's own directory, never live state: the old rsync script's restore
# (after a rollback) copies it into the live tree, and published back it would land
# over the manifest and chains it is a copy of.
RESERVED = "/.syncengine/"


def exclusion_patterns(spec: AdapterSpec) -> tuple[str, ...]:
    """An adapter's exclusions: its own list plus its SQLite databases and companions,
    and `RESERVED`.

    A listed database is never copied as a file: its WAL and SHM are read at
    different transaction boundaries (the SQLite adapter snapshots it instead).
    """
    return spec.exclude + database_patterns(spec.sqlite) + (RESERVED,)


def skip_dirs(spec: AdapterSpec, state_dir: Path) -> frozenset[str]:
    """The directory a walk of the live tree never enters: the state directory, when it
    lies inside that tree."""
    if spec.live in state_dir.parents:
        return frozenset({state_dir.relative_to(spec.live).as_posix()})
    return frozenset()


def adapter_spec(
    table: Mapping[str, Any],
    local_root: Path,
    durable_root: Path,
    *,
    live: Path | None = None,
    durable: Path | None = None,
) -> AdapterSpec:
    """One adapter table, checked, with its paths resolved against the roots.

    `live` / `durable`: where `place` found the trees (default: the table's
    ``live`` / ``durable`` under the roots).
    """
    origin = str(table.get("__origin__", "config"))
    unknown = sorted(set(table) - ADAPTER_KEYS - {"__origin__", "__builtin__"})
    if unknown:
        raise ConfigError(
            f"{origin}: [[adapter]] unknown key {unknown[0]!r}: valid keys are "
            f"{', '.join(sorted(ADAPTER_KEYS))}"
        )
    name = adapter_name(table)
    for key in ("live", "durable"):
        if not plain_text(table.get(key)):
            raise ConfigError(f"{origin}: adapter {name!r}: {key} must be a non-empty path")
    lists = {}
    for key in ("exclude", "sqlite", "segments", "secrets", "restore_first", "restore_newest"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(plain_text(v) for v in value):
            raise ConfigError(
                f"{origin}: adapter {name!r}: {key} must be a list of non-empty strings"
            )
        lists[key] = tuple(value)
    if not isinstance(table.get("description", ""), str):
        raise ConfigError(f"{origin}: adapter {name!r}: description must be a string")
    return AdapterSpec(
        name=name,
        live=live or _under(local_root, table["live"]),
        durable=durable or _under(durable_root, table["durable"]),
        exclude=lists["exclude"],
        sqlite=lists["sqlite"],
        segments=lists["segments"],
        secrets=lists["secrets"],
        encrypt=table.get("encrypt", ""),
        migrate=migrate_steps(table.get("migrate", []), f"{origin}: adapter {name!r}"),
        description=str(table.get("description", "")),
        origin=origin,
        live_env=env_refs(table, "live_env"),
        durable_env=env_refs(table, "durable_env"),
        builtin=bool(table.get("__builtin__")),
        restore_first=lists["restore_first"],
        restore_newest=lists["restore_newest"],
        restore_newest_count=newest_count(table.get("restore_newest_count", 0), origin, name),
    )


def newest_count(value: Any, origin: str, name: str) -> int:
    """`restore_newest_count`: a whole number of files, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"{origin}: adapter {name!r}: restore_newest_count must be a whole number "
            f">= 0, not {value!r}"
        )
    return int(value)


def adapter_name(table: Mapping[str, Any]) -> str:
    name = table.get("name")
    if not plain_text(name) or "/" in name or name.startswith("."):
        raise ConfigError(
            f"{table.get('__origin__', 'config')}: [[adapter]] name must be a "
            "plain non-empty string"
        )
    return name


def _under(root: Path, value: str) -> Path:
    return Path(os.path.normpath(root / os.path.expanduser(value)))


def env_refs(table: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """The adapter's `live_env` / `durable_env`, checked: ``NAME`` or ``NAME/path``."""
    value = table.get(key, [])
    if not isinstance(value, list) or not all(
        isinstance(v, str) and ENV_REF.match(v) for v in value
    ):
        raise ConfigError(
            f"{table.get('__origin__', 'config')}: adapter "
            f"{table.get('name')!r}: {key} must be a list of environment "
            'variable names, each optionally followed by a path ("NAME" or '
            '"NAME/sub/dir")'
        )
    return tuple(value)


@attrs.frozen
class Placed:
    """Where one of an adapter's trees is, and which layer said so."""

    path: Path
    source: str  # "flag --live", "config <file>", "env $CODEX_HOME", "default"

    @property
    def explicit(self) -> bool:
        return not self.source.startswith("default")


def place(
    table: Mapping[str, Any],
    key: str,
    *,
    env: Mapping[str, str],
    from_file: Mapping[str, Any],
    file_origin: str,
    file_dir: Path | None,
    from_flag: Mapping[str, str],
    in_bucket: Callable[[str, str], Path] | None = None,
) -> Placed | None:
    """Where the `key` ("live" or "durable") tree of the adapter `table` is.

    Precedence: a flag (``--live NAME=DIR``), the config file's ``[live]`` /
    ``[durable]`` table (relative to the file's folder), the adapter's
    environment references in order (the first variable that is set and not
    empty), else None: the table's own value under its root (`adapter_spec`).
    `in_bucket` (`bucket_paths`, an s3:// durable root's durable trees) places
    each value found instead, given the value and where it came from.
    """
    name = str(table.get("name"))
    if from_flag.get(name):
        given = from_flag[name]
        if in_bucket is not None:
            return Placed(in_bucket(given, f"flag --{key} {name}={given}"), f"flag --{key}")
        return Placed(_absolute(given, None), f"flag --{key}")
    if name in from_file:
        value = from_file[name]
        if not plain_text(value):
            raise ConfigError(
                f"{file_origin}: [{key}] {name} must be a non-empty path string, not {value!r}"
            )
        if in_bucket is not None:
            return Placed(in_bucket(value, f"{file_origin}: [{key}] {name}"), file_origin)
        return Placed(_absolute(value, file_dir), file_origin)
    for ref in env_refs(table, f"{key}_env"):
        match = ENV_REF.match(ref)
        assert match is not None
        value = env.get(match[1])
        if value:
            if "\x00" in value:
                raise ConfigError(f"env ${match[1]}: contains a NUL character")
            below = (match[2] or "").lstrip("/")
            path = os.path.join(value, below) if below else value
            if in_bucket is not None:
                return Placed(in_bucket(path, f"env ${match[1]}"), f"env ${ref}")
            return Placed(_absolute(path, None), f"env ${ref}")
    return None


def bucket_paths(s3: S3Location, durable_root: Path) -> Callable[[str, str], Path]:
    """How `place` puts an adapter's durable tree when the durable root is the bucket `s3`
    (`durable_root`: the path standing for it): a relative name is under the root, as
    ``[[adapter]] durable`` is (not under the current directory or the config file's
    folder: there is no local directory to be relative to); an ``s3://`` URL names keys
    in the same bucket; a local path is refused, with the fix."""

    def resolve(value: str, where: str) -> Path:
        if is_s3(value):
            try:
                return virtual_path(value, s3)
            except ValueError:
                raise ConfigError(
                    f"{where}: {value} is not in the bucket of durable_root {s3.url()}: "
                    f"name a prefix in s3://{s3.bucket}/ (or a name relative to the root)"
                ) from None
        if os.path.isabs(os.path.expanduser(value)):
            raise ConfigError(
                f"{where}: {value} is a local path, but durable_root is the bucket "
                f"{s3.url()}: name the durable tree relative to it (state/NAME) or as "
                f"an s3:// URL in that bucket"
            )
        return _under(durable_root, value)

    return resolve


def _absolute(value: str, base: Path | None) -> Path:
    value = os.path.expanduser(value)
    if base is not None:
        value = os.path.join(base, value)  # an absolute value stays as it is
    return Path(os.path.abspath(value))


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def check_overlaps(
    specs: tuple[AdapterSpec, ...], state_dir: Path, show: Callable[[Path], str] = str
) -> None:
    """Refuse live and durable trees inside each other, and a state dir on the durable side
    (`show`: how a durable path is written, `s3location.display`)."""
    for a in specs:
        for b in specs:
            if _inside(a.live, b.durable) or _inside(b.durable, a.live):
                raise ConfigError(
                    f"{a.origin}: adapter {a.name!r}: live path {a.live} and the durable path "
                    f"{show(b.durable)} of {b.name!r} overlap: keep checkpoints outside live trees"
                )
            if a is not b and _inside(a.durable, b.durable):
                raise ConfigError(
                    f"{a.origin}: adapters {a.name!r} and {b.name!r} share durable path "
                    f"{show(b.durable)}: give each its own durable directory"
                )
        if _inside(state_dir, a.durable):
            raise ConfigError(
                f"state_dir {state_dir} is inside the durable path of {a.name!r}: "
                "the state directory must be on local disk"
            )
