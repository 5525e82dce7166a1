"""Status: what the last runs did, kept as small local JSON files, and the status report.

Owns the files under ``state_dir`` that ``syncengine status`` reads:
``status/<adapter>.json`` (written after each checkpoint), ``restore.json``
(after each restore; ``complete`` gates ``syncengine run`` and ``gc``),
``daemon.json`` (written by the runner) and the cached mount probe.  Building
the report reads local files only: status never touches the durable side.
It also owns what status says about a write-back mount (`write_back`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from syncengine.config import AdapterSpec, Config
from syncengine.config import s3location as s3_location
from syncengine.crypt.secrets import Secrets, of_adapters, sealed_with
from syncengine.durable.posix import mount, probe
from syncengine.fs import savefile
from syncengine.local.index import Index
from syncengine.patterns import Matcher
from syncengine.report import Report
from syncengine.sqlite import files


def status_path(state_dir: Path, adapter: str) -> Path:
    return state_dir / "status" / f"{adapter}.json"


def index_path(state_dir: Path, adapter: str) -> Path:
    return state_dir / "index" / f"{adapter}.idx"


def staging_marker(state_dir: Path, adapter: str) -> Path:
    """Where an adapter's staging marker lives (`checkpointer.mark_unrecorded`)."""
    return state_dir / "staging" / f"{adapter}.pending"


def read_json(path: Path) -> dict[str, Any]:
    """A small local JSON file as a dict ({} when missing or unreadable)."""
    try:
        with open(path, "rb") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def restore_refusal(state_dir: os.PathLike[str] | str) -> str | None:
    """Why the last restore forbids gc (incomplete, or its record unreadable), or None."""
    try:
        with open(os.path.join(state_dir, "restore.json"), "rb") as f:
            record: Any = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"the restore record is unreadable ({exc}): run `syncengine restore`"
    if not isinstance(record, dict) or not record.get("complete"):
        return "the last restore is incomplete: finish `syncengine restore` first"
    return None


def write_checkpoint(state_dir: Path, report: Report) -> None:
    """Record one checkpoint per adapter: time, files, bytes, duration, errors."""
    for rep in report.adapters:
        path = status_path(state_dir, rep.name)
        old = read_json(path)
        now = report.started_ns
        data = {
            "adapter": rep.name,
            "last_attempt_ns": now,
            "last_checkpoint_ns": now if rep.ok else old.get("last_checkpoint_ns"),
            "last_files": rep.files,
            "last_bytes": rep.bytes,
            "last_duration_s": round(rep.duration_s, 3),
            "errors": [str(e) for e in rep.errors][:20],
            "last_error": rep.fatal
            or (
                str(rep.errors[0])
                if rep.errors
                else (old.get("last_error") if not rep.ok else None)
            ),
        }
        savefile.write_file(path, json.dumps(data).encode(), mode=0o600, fsync=False)


def write_restore(state_dir: Path, report: Report, now_ns: int) -> None:
    """Record whether the last restore was complete (fsynced: a server start depends on it),
    and what it did per adapter (`status` says so until a checkpoint follows)."""
    data = {
        "complete": report.ok,
        "started_ns": report.started_ns,
        "finished_ns": now_ns,
        "adapters": {
            a.name: {
                "files": a.files,
                "bytes": a.bytes,
                "unchanged": a.unchanged,
                "kept_local": a.kept_local,
                "ok": a.ok,
            }
            for a in report.adapters
        },
        "errors": [str(e) for e in report.errors][:50],
        "fatal": [f"{a.name}: {a.fatal}" for a in report.adapters if a.fatal],
    }
    savefile.write_file(
        state_dir / "restore.json", json.dumps(data).encode(), mode=0o600, fsync=True
    )


def write_background(state_dir: Path, background: dict[str, Any]) -> None:
    """Add how `run`'s background restore ended to ``restore.json``; a failed one makes
    the restore incomplete, as a foreground failure does (gc refuses until one completes)."""
    data = read_json(state_dir / "restore.json")
    data["background"] = background
    if background.get("state") == "failed":
        data["complete"] = False
        data["errors"] = (list(data.get("errors") or []) + list(background["errors"]))[:50]
    savefile.write_file(
        state_dir / "restore.json", json.dumps(data).encode(), mode=0o600, fsync=True
    )


# The settings `syncengine status` shows, with where each came from.
SHOWN_KEYS = (
    "local_root",
    "durable_root",
    "state_dir",
    "interval",
    "jobs",
    "sqlite_busy_timeout",
    "rescan_interval",
    "journal_dir",
    "require_mount",
    "write_back",
    "rclone_rc",
    "confirm_timeout",
    "home",
    "plain_after",
    "metrics_address",
    "key_file",
)


def gather(config: Config, matchers: Mapping[str, Matcher], now_ns: int) -> dict[str, Any]:
    """Effective configuration with sources, and per-adapter state (local files only)."""
    cfg = config
    daemon = _daemon_status(cfg.state_dir / "daemon.json")
    pending = daemon.get("pending", {}) if daemon.get("running") else {}
    adapters = []
    restore = read_json(cfg.state_dir / "restore.json")
    for spec in cfg.adapters:
        st = read_json(status_path(cfg.state_dir, spec.name))
        idx = Index.load(index_path(cfg.state_dir, spec.name))
        restored = (restore.get("adapters") or {}).get(spec.name)
        last = st.get("last_checkpoint_ns")
        live_source = cfg.sources.get(f"live.{spec.name}", "default")
        adapters.append(
            {
                "loss_window_s": round((now_ns - last) / 1e9, 3) if last else None,
                "restored": restored,
                "pending": pending.get(spec.name, 0) if daemon.get("running") else None,
                "name": spec.name,
                "live": str(spec.live),
                "durable": _durable(cfg, spec.durable),
                "live_source": live_source,
                "durable_source": cfg.sources.get(f"durable.{spec.name}", "default"),
                "warning": _live_warning(spec, live_source),
                "origin": spec.origin,
                "exclude": list(matchers[spec.name].patterns),
                "live_exists": spec.live.is_dir(),
                "indexed_files": len(idx) if idx is not None else 0,
                "unconfirmed": len(idx.meta.get("unconfirmed") or {}) if idx is not None else 0,
                "databases": _databases(idx) if idx is not None else [],
                "secrets": _secrets(of_adapters([spec], cfg.keys)[spec.name], idx),
                # a running count of everything ever published was shown next to the
                # indexed files and read as their number (issue 28): no longer kept
                **{k: v for k, v in st.items() if k not in _DROPPED},
            }
        )
    shown = {k: [_plain(getattr(cfg, k)), cfg.sources.get(k)] for k in SHOWN_KEYS}
    shown["adapters"] = [[s.name for s in cfg.adapters], cfg.sources.get("adapters")]
    if cfg.s3 is not None:  # backend, endpoint and bucket; never a secret
        shown["durable_root"] = [cfg.s3.describe(), cfg.sources.get("durable_root")]
        if cfg.home is not None:  # a legacy home in the bucket: its s3:// URL
            shown["home"][0] = s3_location.display(cfg.s3, cfg.home)
        if cfg.journal_dir is not None:
            shown["journal_dir"][0] = _durable(cfg, cfg.journal_dir)
    return {
        "config": shown,
        "durable_probe": (
            _probe_status(cfg.state_dir, cfg.durable_root) if cfg.s3 is None else None
        ),
        "write_back": write_back(cfg),
        "restore": read_json(cfg.state_dir / "restore.json") or None,
        "sqlite": _sqlite_version(),
        "daemon": daemon or None,
        "adapters": adapters,
        "encryption": (
            None
            if cfg.keys is None
            else {"keys": list(cfg.keys.fingerprints), "source": cfg.sources.get("key_file")}
        ),
    }


_DROPPED = frozenset({"adapter", "total_files", "total_bytes"})


def _durable(cfg: Config, path: Path) -> str:
    """A durable directory: its path, or its s3:// URL in the bucket."""
    return s3_location.display(cfg.s3, path)


def _live_warning(spec: AdapterSpec, source: str) -> str | None:
    """A built-in adapter's live tree named explicitly (its variable, a config file, a
    flag) that does not exist: probably a typo, or the harness writes somewhere else."""
    if not spec.builtin or source == "default" or spec.live.is_dir():
        return None
    return (
        f"live tree {spec.live} does not exist, but {source} names it: check the "
        "value (the harness may write elsewhere; nothing there is checkpointed)"
    )


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, os.PathLike) else value


def _secrets(secrets: Secrets, index: Index | None) -> dict[str, Any]:
    """The secret files the index knows: sealed (by key fingerprint) and plain."""
    sealed: dict[str, list[str]] = {}
    plain: list[str] = []
    if index is None:
        return {"sealed": sealed, "plain": plain}
    for path, rec in sorted(index.items()):
        fp = sealed_with(index.extras.get(path))
        if fp is not None:
            sealed.setdefault(fp, []).append(path)
        elif rec.kind == "file" and not rec.absent and secrets.secret(path):
            plain.append(path)
    return {"sealed": sealed, "plain": plain}


def _databases(index: Index) -> list[dict[str, Any]]:
    """The SQLite snapshots the index knows: path, object, size, time of the last one."""
    out = []
    for path, rec in sorted(index.items()):
        extra = index.extras.get(path, {})
        if rec.kind == "sqlite" and not extra.get("_local"):
            out.append(
                {
                    "path": path,
                    "object": extra.get("object"),
                    "size": extra.get("size", rec.size),
                    "snapshot_ns": extra.get("snapshot_ns"),
                    "listed": bool(files.is_listed(extra)),
                }
            )
    return out


def _daemon_status(path: Path) -> dict[str, Any]:
    """The runner's status file; `running` is cleared when its process is gone, and
    `died` set: it stopped without its final checkpoint (SIGKILL, OOM, a crash)."""
    data = read_json(path)
    pid = data.get("pid")
    if data.get("running") and isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            data["running"] = False
            data["died"] = True
        except PermissionError:
            pass
    return data


def _probe_status(state_dir: Path, root: Path) -> dict[str, Any] | None:
    """The cached probe of the durable root, with a one-line summary (no mount operation)."""
    cached = probe.read_cache(state_dir, root)
    if not cached:
        return None
    caps = mount.Capabilities.from_json(cached)
    if caps is None:
        return None
    return {**cached, "summary": caps.describe(), "rename_supported": caps.rename_supported}


def write_back(cfg: Config) -> dict[str, Any] | None:
    """What a write-back mount means for durability (None: close is the upload, or not
    probed yet): ``confirmed`` whether each pass waits for the mount's own report."""
    cached = probe.read_cache(cfg.state_dir, cfg.durable_root)
    caps = mount.Capabilities.from_json(cached) if cached else None
    if caps is None or not (caps.write_back if cfg.write_back is None else cfg.write_back):
        return None
    who = (
        f"{caps.client} ({caps.client_detail})"
        if caps.write_back and caps.client
        else "declared in the configuration (write_back = true)"
    )
    rc = cfg.rclone_rc or caps.rclone_rc
    if rc and cfg.confirm_timeout > 0:
        return {
            "confirmed": True,
            "text": (
                f"write-back mount, {who}: it acknowledges writes before they reach the bucket; "
                f"each checkpoint waits (up to {cfg.confirm_timeout:g}s) until rclone's remote "
                f"control at {rc} reports its uploads done before recording them"
            ),
        }
    delay = f"{caps.write_back_delay_s:g}s" if caps.write_back_delay_s is not None else "unknown"
    return {
        "confirmed": False,
        "text": (
            f"write-back mount, {who}: it acknowledges writes before they reach the bucket, and "
            "syncengine cannot ask it when they have. If the mount dies with uploads pending, "
            f"they are lost: the loss window is the mount's write-back delay ({delay}) plus the "
            f"interval ({cfg.interval:g}s), longer while uploads queue. Each start compares the "
            "bucket with the index and publishes again what is missing. "
            + (
                "To have each checkpoint confirmed, run rclone with --rc --rc-addr "
                "127.0.0.1:5572 (no --rc-user), or with --vfs-cache-mode off"
                if caps.client == "rclone"
                else "Use a mount that uploads during close, or rclone with its remote control"
            )
            + " (docs/OPERATING.md: Write-back mounts)"
        ),
    }


def _sqlite_version() -> dict[str, Any]:
    from syncengine.sqlite import (
        check as sqlite_check,  # imports apsw: status is the only user here
    )

    return sqlite_check.library_version()
