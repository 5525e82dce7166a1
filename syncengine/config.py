"""Configuration: the only module that reads the environment and TOML files.

Turns built-in adapter descriptions (``adapters/*.toml``), environment
variables, an optional config file and command-line overrides into one frozen
`Config`, remembering where each value came from so ``syncengine status`` can
show it.  Precedence: environment < config file < command-line flag.  Nothing
else in the package may read ``os.environ``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from syncengine.errors import ConfigError

TOP_KEYS = frozenset(
    {"local_root", "durable_root", "state_dir", "interval", "adapters", "adapter", "jobs",
     "journal_dir", "sqlite_busy_timeout", "rescan_interval", "gc", "require_mount"}
)
ADAPTER_KEYS = frozenset(
    {"name", "description", "live", "durable", "exclude", "sqlite", "segments", "migrate"}
)
GC_KEYS = frozenset({"absent_passes", "grace_seconds", "min_present_ratio", "staging_seconds"})
# [[migrate]] steps: action -> (required keys, optional keys)
MIGRATE_ACTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "unlink_symlink": (frozenset({"path"}), frozenset({"target"})),
    "copy_tree": (frozenset({"from"}), frozenset({"to", "rename_to", "if_symlink"})),
    "quarantine": (frozenset({"patterns", "to"}), frozenset()),
    "snapshot_open": (frozenset({"patterns"}), frozenset()),
}
PLACEHOLDERS = ("{durable_root}", "{local_root}", "{durable}", "{live}", "{from}")
DEFAULT_INTERVAL = 15.0
DEFAULT_JOBS = 8
DEFAULT_SQLITE_BUSY_TIMEOUT = 2.0
DEFAULT_RESCAN_INTERVAL = 600.0


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
class GcConfig:
    """The `[gc]` table: when a deleted file becomes a tombstone and when it may go."""

    absent_passes: int = 3  # consecutive checkpoints a path must be missing locally
    grace_seconds: float = 604800.0  # then this long (7 days) before gc --apply deletes it
    min_present_ratio: float = 0.5  # refuse when fewer manifest paths than this exist locally
    staging_seconds: float = 3600.0  # staging temp files older than this are leftovers


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
    gc: GcConfig = GcConfig()

    def adapter(self, name: str) -> AdapterSpec:
        for spec in self.adapters:
            if spec.name == name:
                return spec
        known = ", ".join(s.name for s in self.adapters) or "none"
        raise ConfigError(f"unknown adapter {name!r}: enabled adapters are {known}")

    def select(self, names: Sequence[str] | None) -> tuple[AdapterSpec, ...]:
        """The adapters named (all enabled ones when `names` is empty)."""
        if not names:
            return self.adapters
        return tuple(self.adapter(n) for n in names)


def builtin_adapter_dir() -> Path:
    """Where the shipped adapters/*.toml live: inside the wheel, or the source tree."""
    here = Path(__file__).resolve().parent
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
        out[str(raw["name"])] = raw
    return out


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist: check --config") from exc
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
    values (key -> value) and win over everything.
    """
    env = os.environ if env is None else env
    origin = "config"
    raw: dict[str, Any] = {}
    if path is None and env.get("SYNCENGINE_CONFIG"):
        path = env["SYNCENGINE_CONFIG"]
        origin = "config $SYNCENGINE_CONFIG"
    if path is not None:
        raw = _read_toml(Path(path))
        origin = f"config {path}"
    return config_from_dict(raw, env=env, overrides=overrides, origin=origin)


def config_from_dict(
    raw: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    origin: str = "config",
) -> Config:
    """Build a Config from an already-parsed mapping with the config-file schema."""
    env = os.environ if env is None else env
    unknown = sorted(set(raw) - TOP_KEYS)
    if unknown:
        raise ConfigError(
            f"{origin}: unknown key {unknown[0]!r}: valid keys are {', '.join(sorted(TOP_KEYS))}"
        )
    layers = _Layers(env, raw, overrides or {}, origin)
    local_root = layers.path("local_root", env_key="AM_LOCAL", fix="set AM_LOCAL or local_root")
    durable_root = layers.path("durable_root", env_key="DATA_DIR", default="/data")
    state_dir = layers.path("state_dir", default=str(local_root / ".syncengine"))
    interval = layers.number("interval", env_key="AGENT_STATE_CHECKPOINT_SECONDS",
                             default=DEFAULT_INTERVAL)
    jobs = int(layers.number("jobs", default=DEFAULT_JOBS))
    rescan = layers.number("rescan_interval", default=DEFAULT_RESCAN_INTERVAL)
    if jobs < 1 or jobs > 256:
        raise ConfigError(f"{layers.sources['jobs']}: jobs must be between 1 and 256")
    journal_dir = layers.path("journal_dir", default=str(durable_root / "journal"))
    busy = layers.number("sqlite_busy_timeout", default=DEFAULT_SQLITE_BUSY_TIMEOUT)
    require_mount = layers.get("require_mount", None, False)
    if not isinstance(require_mount, bool):
        raise ConfigError(f"{layers.sources['require_mount']}: require_mount must be true or "
                          f"false, not {require_mount!r}")
    specs = _adapter_specs(layers, local_root, durable_root)
    _check_overlaps(specs, state_dir)
    gc = _gc_config(raw.get("gc", {}), origin)
    return Config(local_root=local_root, durable_root=durable_root, state_dir=state_dir,
                  adapters=specs, interval=interval, jobs=jobs, sqlite_busy_timeout=busy,
                  rescan_interval=rescan, sources=dict(layers.sources), journal_dir=journal_dir,
                  gc=gc, require_mount=require_mount)



def _gc_config(table: Any, origin: str) -> GcConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"{origin}: gc must be a table ([gc])")
    unknown = sorted(set(table) - GC_KEYS)
    if unknown:
        raise ConfigError(f"{origin}: [gc] unknown key {unknown[0]!r}: valid keys are "
                          f"{', '.join(sorted(GC_KEYS))}")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{origin}: [gc] {key} must be a number >= 0, not {value!r}")
        values[key] = value
    if "absent_passes" in values:
        if values["absent_passes"] != int(values["absent_passes"]) or values["absent_passes"] < 1:
            raise ConfigError(f"{origin}: [gc] absent_passes must be a whole number >= 1")
        values["absent_passes"] = int(values["absent_passes"])
    if values.get("min_present_ratio", 0) > 1:
        raise ConfigError(f"{origin}: [gc] min_present_ratio must be between 0 and 1")
    return GcConfig(**values)


def _migrate_steps(value: Any, where: str) -> tuple[MigrateStep, ...]:
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
            ok = (isinstance(val, list) and all(isinstance(v, str) and v for v in val)
                  if key == "patterns" else isinstance(val, str))
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


@attrs.define
class _Layers:
    """Looks a key up in overrides, then the config file, then the environment."""

    env: Mapping[str, str]
    raw: Mapping[str, Any]
    overrides: Mapping[str, Any]
    origin: str
    sources: dict[str, str] = attrs.field(factory=dict)

    def get(self, key: str, env_key: str | None, default: Any) -> Any:
        if self.overrides.get(key) is not None:
            self.sources[key] = f"flag --{key.replace('_', '-')}"
            return self.overrides[key]
        if key in self.raw:
            self.sources[key] = self.origin
            return self.raw[key]
        if env_key and self.env.get(env_key):
            self.sources[key] = f"env ${env_key}"
            return self.env[env_key]
        self.sources[key] = "default"
        return default

    def path(self, key: str, *, env_key: str | None = None, default: str | None = None,
             fix: str = "") -> Path:
        value = self.get(key, env_key, default)
        if value is None or value == "":
            raise ConfigError(f"{key} is not set: {fix} (in the file given by --config)")
        if not isinstance(value, (str, os.PathLike)):
            raise ConfigError(f"{self.sources[key]}: {key} must be a path string")
        return Path(os.path.abspath(os.path.expanduser(os.fspath(value))))

    def number(self, key: str, *, env_key: str | None = None, default: float) -> float:
        value = self.get(key, env_key, default)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{self.sources[key]}: {key} must be a number, not {value!r}") from None
        if not number > 0:
            raise ConfigError(f"{self.sources[key]}: {key} must be greater than 0")
        return number


def _adapter_specs(layers: _Layers, local_root: Path, durable_root: Path
                   ) -> tuple[AdapterSpec, ...]:
    builtins = builtin_adapters()
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
    if not isinstance(extra, list):
        raise ConfigError(f"{layers.origin}: adapter must be an array of tables ([[adapter]])")
    tables.extend({**t, "__origin__": layers.origin} for t in extra)
    specs: list[AdapterSpec] = []
    seen: set[str] = set()
    for table in tables:
        spec = _adapter_spec(table, local_root, durable_root)
        if spec.name in seen:
            raise ConfigError(
                f"{spec.origin}: adapter name {spec.name!r} is used twice: rename one "
                "or remove it from `adapters`"
            )
        seen.add(spec.name)
        specs.append(spec)
    return tuple(specs)


def _adapter_spec(table: Mapping[str, Any], local_root: Path, durable_root: Path) -> AdapterSpec:
    origin = str(table.get("__origin__", "config"))
    unknown = sorted(set(table) - ADAPTER_KEYS - {"__origin__"})
    if unknown:
        raise ConfigError(
            f"{origin}: [[adapter]] unknown key {unknown[0]!r}: valid keys are "
            f"{', '.join(sorted(ADAPTER_KEYS))}"
        )
    name = table.get("name")
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ConfigError(f"{origin}: [[adapter]] name must be a plain non-empty string")
    for key in ("live", "durable"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise ConfigError(f"{origin}: adapter {name!r}: {key} must be a non-empty path")
    lists = {}
    for key in ("exclude", "sqlite", "segments"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{origin}: adapter {name!r}: {key} must be a list of strings")
        lists[key] = tuple(value)
    return AdapterSpec(
        name=name,
        live=Path(os.path.normpath(local_root / os.path.expanduser(table["live"]))),
        durable=Path(os.path.normpath(durable_root / os.path.expanduser(table["durable"]))),
        exclude=lists["exclude"],
        sqlite=lists["sqlite"],
        segments=lists["segments"],
        migrate=_migrate_steps(table.get("migrate", []), f"{origin}: adapter {name!r}"),
        description=str(table.get("description", "")),
        origin=origin,
    )


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def _check_overlaps(specs: tuple[AdapterSpec, ...], state_dir: Path) -> None:
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
