"""Configuration layers: where each value comes from, and the adapter list.

Owns `Layers`, which looks a key up in the command-line overrides, then the
config file, then the environment, and records which one answered (for
``syncengine status``), and `adapter_specs`, which turns the enabled built-in
adapters and the file's ``[[adapter]]`` tables into placed `AdapterSpec`s (with the
``[secrets]`` table's patterns added, `add_secrets`).
Reads nothing itself: `syncengine.config` reads the files and the environment
and hands them over as mappings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from syncengine.config.adapterspec import (
    AdapterSpec,
    adapter_name,
    adapter_spec,
    bucket_paths,
    place,
)
from syncengine.config.migratespec import plain_text
from syncengine.config.numbers import check_number
from syncengine.config.s3location import S3Location
from syncengine.errors import ConfigError


@attrs.define
class Layers:
    """Looks a key up in overrides, then the config file, then the environment."""

    env: Mapping[str, str]
    raw: Mapping[str, Any]
    overrides: Mapping[str, Any]
    origin: str
    base_dir: Path | None = None  # relative paths in the config file are relative to this
    sources: dict[str, str] = attrs.field(factory=dict)
    layer: dict[str, str] = attrs.field(factory=dict)  # key -> flag, config, env or default

    def get(self, key: str, env_key: str | None, default: Any) -> Any:
        if self.overrides.get(key) is not None:
            self.sources[key] = f"flag --{key.replace('_', '-')}"
            self.layer[key] = "flag"
            return self.overrides[key]
        if key in self.raw:
            self.sources[key] = self.origin
            self.layer[key] = "config"
            return self.raw[key]
        if env_key and self.env.get(env_key):
            self.sources[key] = f"env ${env_key}"
            self.layer[key] = "env"
            return self.env[env_key]
        self.sources[key] = "default"
        self.layer[key] = "default"
        return default

    def has(self, key: str, env_key: str) -> bool:
        """Whether any layer sets `key` (recording "not set" as its source otherwise)."""
        if self.overrides.get(key) is not None or key in self.raw or self.env.get(env_key):
            return True
        self.sources[key] = f"not set (${env_key})"
        return False

    def table(self, key: str) -> dict[str, Any]:
        """A config-file table of adapter name -> value (``[live]``, ``[durable]``)."""
        value = self.raw.get(key, {})
        if not isinstance(value, dict):
            raise ConfigError(
                f"{self.origin}: {key} must be a table of adapter name = path ([{key}])"
            )
        return value

    def path(
        self, key: str, *, env_key: str | None = None, default: str | None = None, fix: str = ""
    ) -> Path:
        value = self.get(key, env_key, default)
        where = self.sources[key]
        if value is None:
            raise ConfigError(f"{key} is not set: {fix} (in the file given by --config)")
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: {key} must be a non-empty path string, not {value!r}")
        if "\x00" in value:
            raise ConfigError(f"{where}: {key} contains a NUL character: {value!r}")
        value = os.path.expanduser(value)
        if self.layer[key] == "config" and self.base_dir is not None:
            value = os.path.join(self.base_dir, value)  # an absolute value stays as it is
        return Path(os.path.abspath(value))

    def number(self, key: str, *, env_key: str | None = None, default: float) -> float:
        value = self.get(key, env_key, default)
        if self.layer[key] == "env":  # the only layer that holds text
            try:
                value = float(value.strip())
            except ValueError:
                raise ConfigError(
                    f"{self.sources[key]}: {key} must be a number of seconds, not {value!r}"
                ) from None
        return check_number(self.sources[key], key, value)


def _enabled_tables(layers: Layers, builtins: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The raw tables of the enabled adapters: the named built-ins, then ``[[adapter]]``."""
    enabled = layers.get("adapters", None, None)
    if enabled is None:
        enabled = list(builtins)
        layers.sources["adapters"] = "default (all built-in)"
    if not isinstance(enabled, list) or not all(isinstance(n, str) for n in enabled):
        raise ConfigError(f"{layers.sources['adapters']}: adapters must be a list of names")
    tables: list[dict[str, Any]] = []
    for name in enabled:
        if name not in builtins:
            raise ConfigError(
                f"{layers.sources['adapters']}: adapters: no built-in adapter {name!r}; "
                f"built-in adapters are {', '.join(builtins)} (define others with [[adapter]])"
            )
        tables.append(builtins[name])
    extra = layers.raw.get("adapter", [])
    if not isinstance(extra, list) or not all(isinstance(t, dict) for t in extra):
        raise ConfigError(f"{layers.origin}: adapter must be an array of tables ([[adapter]])")
    tables.extend({**t, "__origin__": layers.origin, "__builtin__": False} for t in extra)
    if not tables:
        raise ConfigError(
            f"{layers.sources['adapters']}: no adapter is enabled: name built-in "
            f"ones in adapters ({', '.join(builtins)}) or define one with "
            "[[adapter]]"
        )
    return tables


def adapter_specs(
    layers: Layers,
    builtins: Mapping[str, dict[str, Any]],
    local_root: Path,
    durable_root: Path,
    s3: S3Location | None = None,
) -> tuple[AdapterSpec, ...]:
    """The enabled adapters, built-in (`builtins`, by name) and ``[[adapter]]``, placed
    (`s3`: the durable root is that bucket, and durable trees are placed in it)."""
    in_bucket = bucket_paths(s3, durable_root) if s3 is not None else None
    tables = _enabled_tables(layers, builtins)
    specs: list[AdapterSpec] = []
    seen: set[str] = set()
    placed = {
        key: (layers.table(key), dict(layers.overrides.get(key) or {}))
        for key in ("live", "durable")
    }
    for table in tables:
        name = adapter_name(table)
        if name in seen:
            raise ConfigError(
                f"{table.get('__origin__')}: adapter name {name!r} is used twice: rename one "
                "or remove it from `adapters`"
            )
        seen.add(name)
        paths: dict[str, Path | None] = {}
        for key in ("live", "durable"):
            from_file, from_flag = placed[key]
            found = place(
                table,
                key,
                env=layers.env,
                from_file=from_file,
                file_origin=layers.origin,
                file_dir=layers.base_dir,
                from_flag=from_flag,
                in_bucket=in_bucket if key == "durable" else None,
            )
            paths[key] = found.path if found else None
            layers.sources[f"{key}.{name}"] = (
                found.source
                if found
                else ("default" if table.get("__builtin__") else str(table.get("__origin__")))
            )
        specs.append(
            adapter_spec(
                table, local_root, durable_root, live=paths["live"], durable=paths["durable"]
            )
        )
    for key, (from_file, from_flag) in placed.items():
        for name in [*from_file, *from_flag]:
            if name not in seen:
                where = f"flag --{key}" if name in from_flag else f"{layers.origin}: [{key}]"
                raise ConfigError(
                    f"{where}: no enabled adapter {name!r}: enabled adapters "
                    f"are {', '.join(sorted(seen))}"
                )
    return add_secrets(layers, tuple(specs))


def add_secrets(layers: Layers, specs: tuple[AdapterSpec, ...]) -> tuple[AdapterSpec, ...]:
    """`specs` with the ``[secrets]`` table's patterns added to each named adapter's."""
    table = layers.table("secrets")
    names = {s.name for s in specs}
    for name, patterns in table.items():
        if name not in names:
            raise ConfigError(
                f"{layers.origin}: [secrets] no enabled adapter {name!r}: enabled adapters "
                f"are {', '.join(sorted(names))}"
            )
        if not isinstance(patterns, list) or not all(plain_text(p) for p in patterns):
            raise ConfigError(
                f"{layers.origin}: [secrets] {name} must be a list of non-empty patterns"
            )
    return tuple(attrs.evolve(s, secrets=s.secrets + tuple(table.get(s.name, ()))) for s in specs)
