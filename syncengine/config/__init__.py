"""Configuration: this package's face, and the only module that reads the environment and TOML.

Turns built-in adapter descriptions (``adapters/*.toml``), environment
variables, an optional config file and command-line overrides into one frozen
`Config`, remembering where each value came from so ``syncengine status`` can
show it.  Precedence: environment < config file < command-line flag.  Nothing
else in the package may read ``os.environ``.

Every value is checked before anything runs, so a bad one is one line naming
the key and the fix (`ConfigError`, exit 2): a TOML value must have its TOML
type (``jobs = "8"`` is refused; only environment variables are text, parsed
here), numbers must be finite and in range (`numbers.RANGES`), and a relative path in
a config file is taken relative to that file's folder.  Adapter tables are
checked, and each adapter's live and durable trees placed (the design's
``CODEX_HOME``, ``CODEX_DURABLE``, ... named in the adapter files), by
`syncengine.config.adapterspec`; this module hands it the environment.  ``HOME``
(config key ``home``) is where `syncengine migrate` finds the old layout's
home directories.

The package below it reads nothing itself: `layers` (which layer each value
came from, and the adapter list), `numbers` (what each number may be),
`adapterspec` (an adapter table, checked and placed; an adapter's exclusions)
and `s3location` (an ``s3://`` durable root as plain values).
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from syncengine.config import encryption, sections
from syncengine.config import s3location as s3_location
from syncengine.config.adapterspec import (
    AdapterSpec,
    check_overlaps,
)
from syncengine.config.layers import Layers, adapter_specs
from syncengine.config.migratespec import MigrateStep
from syncengine.config.numbers import check_number
from syncengine.config.s3location import S3Location
from syncengine.config.sections import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_LEASE_WAIT,
    GC_KEYS,
    GcConfig,
    split_address,
)
from syncengine.crypt.keys import Keyring
from syncengine.errors import ConfigError

TOP_KEYS = frozenset(
    {
        "local_root",
        "durable_root",
        "state_dir",
        "interval",
        "adapters",
        "adapter",
        "jobs",
        "journal_dir",
        "sqlite_busy_timeout",
        "rescan_interval",
        "gc",
        "require_mount",
        "write_back",
        "rclone_rc",
        "confirm_timeout",
        "home",
        "live",
        "durable",
        "plain_after",
        "lease_seconds",
        "lease_wait",
        "lease_lost",
        "metrics_address",
        "key_file",
        "secrets",
        "restore",
        "restore_order",
        "encrypt",
    }
)
DEFAULT_INTERVAL = 15.0
DEFAULT_JOBS = 8
DEFAULT_SQLITE_BUSY_TIMEOUT = 2.0
DEFAULT_RESCAN_INTERVAL = 600.0
DEFAULT_CONFIRM_TIMEOUT = 60.0  # seconds a pass waits for a write-back mount's uploads
DEFAULT_PLAIN_AFTER = 180.0  # a transcript quiet this long is published whole at its path


@attrs.frozen
class Config:
    """Everything the engine needs, resolved to absolute paths."""

    local_root: Path
    durable_root: Path
    state_dir: Path
    adapters: tuple[AdapterSpec, ...]
    interval: float = DEFAULT_INTERVAL
    jobs: int = DEFAULT_JOBS
    sqlite_busy_timeout: float = DEFAULT_SQLITE_BUSY_TIMEOUT  # wait for a locked database (s)
    rescan_interval: float = DEFAULT_RESCAN_INTERVAL  # daemon: full walk even with events
    require_mount: bool = False
    sources: Mapping[str, str] = attrs.field(factory=dict)
    journal_dir: Path | None = None  # None: <durable_root>/journal
    gc: GcConfig = attrs.field(factory=GcConfig)
    write_back: bool | None = None  # None: detect (writeback.CLIENTS); else as declared
    rclone_rc: str | None = None  # None: from the mount's command line
    confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT
    home: Path | None = None  # $HOME: the old layout's home directories (migrate)
    plain_after: float = DEFAULT_PLAIN_AFTER  # seconds without an append (segments.py)
    s3: S3Location | None = None  # durable_root = "s3://...": the bucket (durable/s3/)
    lease_seconds: float = DEFAULT_LEASE_SECONDS  # the durable root's lease (leaseholder.py)
    lease_wait: float = DEFAULT_LEASE_WAIT
    lease_lost: str = "stop"  # run, once fenced: "stop" COMMAND and exit 76, or "keep" it
    metrics_address: str | None = None  # run: serve Prometheus metrics on HOST:PORT
    keys: Keyring | None = None  # secret files are sealed with keys[0] (docs/SECRETS.md)
    key_file: Path | None = None  # where `keys` came from (None: $SYNCENGINE_KEY or no key)
    restore: str = "background"  # run: "background" (first set, COMMAND, the rest) or "all-first"

    @property
    def durable_id(self) -> str:
        """The durable root as one store: its path, or the bucket's URL and endpoint (a
        state dir whose indexes were another store's starts over, `leasefile.load`)."""
        return self.s3.identity() if self.s3 is not None else str(self.durable_root)

    def adapter(self, name: str) -> AdapterSpec:
        for spec in self.adapters:
            if spec.name == name:
                return spec
        known = ", ".join(s.name for s in self.adapters) or "none"
        raise ConfigError(f"unknown adapter {name!r}: enabled adapters are {known}")

    def select(
        self, names: Sequence[str] | None, *, publish: bool = False
    ) -> tuple[AdapterSpec, ...]:
        """The adapters named (all enabled ones when `names` is empty); `publish`: refuse
        (`ConfigError`) when one of them is to be sealed whole and no key is configured."""
        specs = tuple(self.adapter(n) for n in names) if names else self.adapters
        if publish:
            encryption.require_key(specs, self.keys, self.sources.get("encrypt", "default"))
        return specs


def builtin_adapter_dir() -> Path:
    """Where the shipped adapters/*.toml live: inside the wheel, or the source tree."""
    here = Path(__file__).resolve().parent.parent  # the package root, above config/
    for candidate in (here / "_adapters", here.parent / "adapters"):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"built-in adapters not found next to {here}: reinstall syncengine")


def builtin_adapters() -> dict[str, dict[str, Any]]:
    """Raw tables of the built-in adapters, keyed by name, in name order."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(builtin_adapter_dir().glob("*.toml")):
        raw = _read_toml(path)
        raw.setdefault("name", path.stem)
        raw["__origin__"] = f"built-in {path.name}"
        raw["__builtin__"] = True
        out[str(raw["name"])] = raw
    return out


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist: check --config") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path}: not UTF-8 text (byte {exc.start} cannot be "
            "decoded): save it as UTF-8"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: invalid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read: {exc.strerror}") from exc


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build a Config from the environment, an optional TOML file and overrides.

    `path` defaults to ``$SYNCENGINE_CONFIG``; `overrides` are command-line
    values (key -> value) and win over everything.  A relative path in the
    file is taken relative to the file's own folder.
    """
    env = os.environ if env is None else env
    origin = "config"
    raw: dict[str, Any] = {}
    base_dir = None
    if path is None and env.get("SYNCENGINE_CONFIG"):
        path = env["SYNCENGINE_CONFIG"]
        origin = "config $SYNCENGINE_CONFIG"
    if path is not None:
        if "\x00" in os.fspath(path):
            raise ConfigError("config file name contains a NUL character: check --config")
        raw = _read_toml(Path(path))
        origin = f"config {path}"
        base_dir = Path(os.path.abspath(path)).parent
    return config_from_dict(raw, env=env, overrides=overrides, origin=origin, base_dir=base_dir)


def config_from_dict(
    raw: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    origin: str = "config",
    base_dir: str | os.PathLike[str] | None = None,
) -> Config:
    """Build a Config from an already-parsed mapping with the config-file schema.

    Values in `raw` must have their TOML types (a number is not a string);
    relative paths in it are taken relative to `base_dir` (default: the
    current directory).
    """
    env = os.environ if env is None else env
    layers = _layers(raw, env, overrides, origin, base_dir)
    local_root = layers.path("local_root", env_key="AM_LOCAL", fix="set AM_LOCAL or local_root")
    durable_root, s3 = _durable_root(layers, env)
    state_dir = layers.path("state_dir", default=str(local_root / ".syncengine"))
    interval = layers.number(
        "interval", env_key="AGENT_STATE_CHECKPOINT_SECONDS", default=DEFAULT_INTERVAL
    )
    jobs = int(layers.number("jobs", default=DEFAULT_JOBS))
    rescan = layers.number("rescan_interval", default=DEFAULT_RESCAN_INTERVAL)
    journal_dir = layers.path("journal_dir", default=str(durable_root / "journal"))
    busy = layers.number("sqlite_busy_timeout", default=DEFAULT_SQLITE_BUSY_TIMEOUT)
    plain_after = layers.number("plain_after", default=DEFAULT_PLAIN_AFTER)
    home = _home(layers, s3) if layers.has("home", "HOME") else None
    require_mount = sections.require_mount(layers)
    specs = adapter_specs(layers, builtin_adapters(), local_root, durable_root, s3)
    specs = sections.restore_order(layers, specs)
    specs = encryption.modes(layers, specs)
    check_overlaps(specs, state_dir, functools.partial(s3_location.display, s3))
    write_back, rclone_rc = sections.write_back(layers)
    confirm = layers.number("confirm_timeout", default=DEFAULT_CONFIRM_TIMEOUT)
    run_keys = sections.run_keys(layers)  # before the sources are copied: they name a layer
    keys = encryption.keyring(layers)  # before `sources` is copied: it records key_file's
    return Config(
        local_root=local_root,
        durable_root=durable_root,
        state_dir=state_dir,
        adapters=specs,
        interval=float(interval),
        jobs=jobs,
        sqlite_busy_timeout=float(busy),
        rescan_interval=float(rescan),
        sources=dict(layers.sources),
        journal_dir=journal_dir,
        gc=sections.gc_config(raw.get("gc", {}), origin),
        require_mount=require_mount,
        write_back=write_back,
        rclone_rc=rclone_rc,
        confirm_timeout=float(confirm),
        home=home,
        plain_after=float(plain_after),
        s3=s3,
        **run_keys,
        **keys,
    )


def _layers(
    raw: Mapping[str, Any],
    env: Mapping[str, str],
    overrides: Mapping[str, Any] | None,
    origin: str,
    base_dir: str | os.PathLike[str] | None,
) -> Layers:
    """The layers to look keys up in, after refusing a key the file may not have."""
    _refuse_unknown_keys(raw, origin)
    return Layers(
        env, raw, overrides or {}, origin, Path(base_dir) if base_dir is not None else None
    )


def _refuse_unknown_keys(raw: Mapping[str, Any], origin: str) -> None:
    unknown = sorted(set(raw) - TOP_KEYS)
    if unknown:
        raise ConfigError(
            f"{origin}: unknown key {unknown[0]!r}: valid keys are {', '.join(sorted(TOP_KEYS))}"
        )


def _durable_root(layers: Layers, env: Mapping[str, str]) -> tuple[Path, S3Location | None]:
    """A directory, or a bucket: ``s3://BUCKET/PREFIX`` with the AWS variables and files
    (durable paths are then names under `s3_location.virtual_root`, mapped to keys)."""
    value = layers.get("durable_root", "DATA_DIR", "/data")
    if not (isinstance(value, str) and s3_location.is_s3(value)):
        return layers.path("durable_root", env_key="DATA_DIR", default="/data"), None
    try:
        s3 = s3_location.from_environment(value, env)
    except ValueError as exc:
        raise ConfigError(f"{layers.sources['durable_root']}: {exc}") from exc
    return s3_location.virtual_root(s3), s3


def _home(layers: Layers, s3: S3Location | None) -> Path:
    """A directory, or (migrate from a legacy tree in the bucket) ``s3://BUCKET/KEY`` in
    the bucket of an s3:// durable_root: its path under `s3_location.bucket_root`."""
    value = layers.get("home", "HOME", None)
    if not (isinstance(value, str) and s3_location.is_s3(value)):
        return layers.path("home", env_key="HOME")
    try:
        return s3_location.virtual_path(value, s3)
    except ValueError as exc:
        raise ConfigError(f"{layers.sources['home']}: home {exc}") from exc


__all__ = [
    "GC_KEYS",
    "AdapterSpec",
    "Config",
    "ConfigError",
    "GcConfig",
    "MigrateStep",
    "builtin_adapters",
    "check_number",
    "config_from_dict",
    "load_config",
    "split_address",
]
