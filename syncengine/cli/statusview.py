"""``syncengine status`` as text and as JSON.

Owns what an operator reads first: whether the state is protected now (a
daemon checkpointing, its last pass complete), how much could be lost (the
loss window, in seconds, minutes or hours), how the last daemon stopped (a
complete or an incomplete final checkpoint, or no final checkpoint at all: it
died), then the lease, the last restore, each adapter, the durable root, and
the configuration with ``--settings``.  Sizes and durations are in human
units ("12 s", "3 min", "203 MiB").

``--json`` is the engine's status dict with one time format: every time is an
ISO 8601 UTC string (``2026-12-05T16:20:05.123Z``), its key without the
``_ns`` the engine's dict has (`json_times`).  Decides nothing; reads nothing.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

_UNSET = {
    "write_back": "auto (the probe decides)",
    "metrics_address": "off",
}  # what a key left unset means


def add_parser(command: Any) -> None:
    """The ``status`` command (`command`: `args._command` bound to the subparsers)."""
    sub = command(
        "status",
        help="is the state protected, how much could be lost, how the last run stopped",
        description="First whether the state is protected now (a daemon checkpointing, "
        "its last pass complete), how much could be lost (the loss window), and how the "
        "last daemon stopped (final checkpoint complete or incomplete, or died without "
        "one); then the lease, the last restore, per adapter the last checkpoint, and "
        "the durable root. Reads local state only (and the lease object).",
    )
    sub.add_argument(
        "--json", action="store_true", help="machine-readable; every time an ISO 8601 UTC string"
    )
    sub.add_argument(
        "--settings",
        action="store_true",
        help="also each configuration value and where it came from (always in --json)",
    )


def iso(seconds: float) -> str:
    """A time for machines: ISO 8601, UTC, to the millisecond (``...T16:20:05.123Z``)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def json_times(value: Any) -> Any:
    """`value` with every time as `iso`: ``*_ns`` keys (ns since the epoch) lose their
    suffix, ``expires`` (seconds since the epoch) keeps its name."""
    if isinstance(value, list):
        return [json_times(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key.endswith("_ns") and isinstance(v, int | float) and not isinstance(v, bool):
            out[key[:-3]] = iso(v / 1e9)
        elif key.endswith("_ns") and v is None:
            out[key[:-3]] = None
        elif key == "expires" and isinstance(v, int | float) and not isinstance(v, bool):
            out[key] = iso(v)
        else:
            out[key] = json_times(v)
    return out


def duration(seconds: float) -> str:
    """``<0.1 s``, ``0.4 s``, ``12 s``, ``3 min``, ``2 h 5 min``, ``3 d 4 h``."""
    s = max(0.0, seconds)
    if s < 0.1:
        return "<0.1 s"
    if s < 10:
        return f"{s:.1f} s".replace(".0 s", " s")
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s // 60:.0f} min"
    if s < 172800:
        return f"{s // 3600:.0f} h {s % 3600 // 60:.0f} min"
    return f"{s // 86400:.0f} d {s % 86400 // 3600:.0f} h"


def size(n: float) -> str:
    """``512 B``, ``4.0 KiB``, ``203 MiB``, ``1.2 GiB``."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}" if n < 10 else f"{n:.0f} {unit}"


def when(ns: Any, now: float | None = None) -> str:
    """A time in ns since the epoch for people: UTC to the second, and how long ago."""
    if not ns:
        return "never"
    seconds = int(ns) / 1e9
    now = time.time() if now is None else now
    ago = now - seconds
    rel = f"{duration(ago)} ago" if ago >= 0 else f"in {duration(-ago)}"
    return f"{_utc(ns)} ({rel})"


def _utc(ns: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(ns or 0) / 1e9))


def show(status: dict[str, Any], *, as_json: bool = False, settings: bool = False) -> None:
    """``syncengine status``: protection first, then the lease, restore, adapters, root."""
    if as_json:
        print(json.dumps(json_times(status), indent=2))
        return
    print("\n".join(summary(status)))
    print("\n".join(lease_lines(status)))
    restore = status.get("restore")
    if restore:
        print(_restore_line(restore))
    background = background_line(status)
    if background:
        print(background)
    print("adapters:")
    daemon = status.get("daemon") or {}
    for a in status["adapters"]:
        print("\n".join(adapter_lines(a, bool(daemon.get("running")))))
    print("\n".join(_root_lines(status)))
    if settings:
        print("\n".join(_settings(status["config"])))
    else:
        print("configuration: `syncengine status --settings` shows each value and its source")


def summary(status: dict[str, Any]) -> list[str]:
    """The first lines: protected?, how much could be lost, how the last daemon stopped."""
    daemon = status.get("daemon") or {}
    lines = [f"protected: {_protected(daemon)}", f"could lose: {_could_lose(status['adapters'])}"]
    stop = _last_stop(daemon)
    if stop:
        lines.append(f"last stop: {stop}")
    if daemon.get("running") and daemon.get("metrics_address"):
        lines.append(f"metrics: http://{daemon['metrics_address']}/metrics")
    return lines


def _protected(daemon: dict[str, Any]) -> str:
    pid = daemon.get("pid")
    if daemon.get("died"):
        return (
            f"NO: the daemon (pid {pid}) died without a final checkpoint; nothing "
            "checkpoints this state now"
        )
    if not daemon.get("running"):
        return "no: no daemon running (changes are checkpointed only by `syncengine checkpoint`)"
    if daemon.get("lease_lost"):
        return f"NO: `syncengine run` (pid {pid}) lost the lease and checkpoints no more"
    how = (
        f"`syncengine run` (pid {pid}) checkpoints every {duration(daemon.get('interval') or 0)} "
        f"(mode {daemon.get('mode')})"
    )
    if daemon.get("last_error"):
        return f"NO: {how}, but its last pass failed: {daemon['last_error']}"
    if not daemon.get("last_pass_ns"):
        return f"yes: {how}; no pass yet since it started"
    last = daemon.get("last_ok_ns") or daemon["last_pass_ns"]
    return f"yes: {how}; last pass complete {when(last)}"


def _could_lose(adapters: list[dict[str, Any]]) -> str:
    """The widest loss window among the adapters that have anything to lose."""
    tracked = [a for a in adapters if a["live_exists"] or a["indexed_files"]]
    never = [a for a in tracked if a.get("loss_window_s") is None and a["live_exists"]]
    if never:
        return "; ".join(
            f"changes in {a['name']} since its restore (no checkpoint yet)"
            if a.get("restored")
            else f"everything in {a['name']} (never checkpointed)"
            for a in never
        )
    windows = [(a["loss_window_s"], a["name"]) for a in tracked if a.get("loss_window_s")]
    if not windows:
        return "nothing (no live tree has anything yet)"
    widest, name = max(windows)
    return f"up to {duration(widest)} of changes (the loss window of {name})"


def _last_stop(daemon: dict[str, Any]) -> str | None:
    if not daemon or daemon.get("running"):
        return None  # no daemon has run here, or it runs: its stop is to come
    at = when(daemon.get("updated_ns"))
    if daemon.get("died"):
        return (
            f"the daemon (pid {daemon.get('pid')}) died without a final checkpoint (its "
            f"last pass {when(daemon.get('last_pass_ns'))}): changes after the last "
            "checkpoint are on local disk only"
        )
    if daemon.get("lease_lost"):
        return f"fenced at {at}: another instance took the lease ({daemon['lease_lost']})"
    if daemon.get("final_ok") is True:
        return f"final checkpoint complete, {at}"
    if daemon.get("final_ok") is False:
        return (
            f"FINAL CHECKPOINT INCOMPLETE, {at}: changes after the last complete "
            "checkpoint are not durable"
        )
    return f"stopped {at} without a final checkpoint"


def lease_lines(status: dict[str, Any]) -> list[str]:
    """The durable root's lease: who holds it until when, and whether that is a dead
    daemon of this state dir (then the next instance waits for the expiry)."""
    held = status.get("lease") or {}
    if "error" in held:
        return [f"lease: unknown ({held['error']})"]
    if not held.get("generation"):
        return ["lease: none yet (taken by the first checkpoint that writes)"]
    if held.get("holder") is None:
        return [f"lease: generation {held['generation']}, unreadable ({held.get('unreadable')})"]
    expires = held.get("expires") or 0
    state = "released" if held.get("released") else f"expires {when(expires * 1e9)}"
    daemon = status.get("daemon") or {}
    lines = [f"lease: generation {held['generation']} held by {held['holder']}, {state}"]
    if daemon.get("died") and held.get("pid") == daemon.get("pid") and not held.get("released"):
        lines.append(
            "  held by the daemon that died: another instance waits for the expiry "
            "(`syncengine lease release --force` frees it now)"
        )
    if daemon.get("lease_lost"):
        lines.append(f"  LEASE LOST: {daemon['lease_lost']}")
    return lines


def background_line(status: dict[str, Any]) -> str | None:
    """`run`'s background restore: its progress while the daemon runs, else how it ended."""
    daemon = status.get("daemon") or {}
    bg = daemon.get("restore_background") if daemon.get("running") else None
    bg = bg or (status.get("restore") or {}).get("background")
    if not bg:
        return None
    total = bg.get("files_total") or 0
    done = (bg.get("files") or 0) + (bg.get("kept") or 0)
    line = (
        f"background restore: {bg.get('state')}, {done}/{total} file(s) "
        f"({100 * done // max(total, 1)}%), {size(bg.get('bytes') or 0)} of "
        f"{size(bg.get('bytes_total') or 0)}"
    )
    errors = bg.get("errors") or []
    return line + (f"; {len(errors)} error(s), first: {errors[0]}" if errors else "")


def _restore_line(restore: dict[str, Any]) -> str:
    state = "complete" if restore.get("complete") else "INCOMPLETE"
    done = list((restore.get("adapters") or {}).values())
    what = (
        f": {sum(a['files'] for a in done)} file(s), {size(sum(a['bytes'] for a in done))} "
        f"restored, {sum(a['unchanged'] for a in done)} unchanged, "
        f"{sum(a['kept_local'] for a in done)} newer local kept"
        if done
        else ""
    )
    return f"last restore: {state}, {when(restore.get('finished_ns'))}{what}"


def adapter_lines(a: dict[str, Any], running: bool) -> list[str]:
    """One adapter's lines (`running`: a daemon is, so pending changes are known)."""
    out = [
        f"  {a['name']}: {a['live']} ({a['live_source']}) -> {a['durable']} ({a['durable_source']})"
    ]
    if a.get("warning"):
        out.append(f"    WARNING: {a['warning']}")
    if not a["live_exists"] and not a["indexed_files"]:
        return [*out, "    live tree does not exist yet (nothing to checkpoint)"]
    if not a["live_exists"]:
        out.append("    live tree does not exist (it had files: restore brings them back)")
    out.append(f"    {_last_checkpoint(a)}; {a['indexed_files']} file(s) in the checkpoint")
    if a.get("unconfirmed"):
        out.append(
            f"    {a['unconfirmed']} path(s) published through the write-back mount and "
            "not confirmed in the bucket (checked again at the next start)"
        )
    for db in a.get("databases", []):
        out.append(
            f"    database {db['path']}: last snapshot {when(db.get('snapshot_ns'))}, "
            f"{size(db.get('size') or 0)}"
        )
    out.extend(_secret_lines(a.get("secrets") or {}))
    if a.get("loss_window_s") is not None:
        pending = a.get("pending")
        out.append(
            f"    loss window: {duration(a['loss_window_s'])} (changes since "
            f"{_utc(a.get('last_checkpoint_ns'))} are on local disk only)"
            + (
                ""
                if not running
                else "; pending: "
                + ("full walk due" if pending is None else f"{pending} changed path(s)")
            )
        )
    if a.get("last_error"):
        out.append(f"    last error: {a['last_error']}")
    return out


def _secret_lines(secrets: dict[str, Any]) -> list[str]:
    """Which secret files are encrypted, by key fingerprint, and which are still plain."""
    out = [
        f"    encrypted with key {fp}: {_some(paths)}"
        for fp, paths in (secrets.get("sealed") or {}).items()
    ]
    if secrets.get("plain"):
        out.append(f"    secret file(s) stored plain: {_some(secrets['plain'])}")
    return out


def _some(paths: list[str], shown: int = 5) -> str:
    """Up to `shown` paths, then how many more (``encrypt = "all"`` seals every file)."""
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def _last_checkpoint(a: dict[str, Any]) -> str:
    last = a.get("last_checkpoint_ns")
    restored = a.get("restored")
    if not last and restored:
        return (
            f"last checkpoint: none since the restore, which brought back {restored['files']} "
            f"file(s), {size(restored['bytes'])} ({restored['unchanged']} unchanged, "
            f"{restored['kept_local']} newer local kept)"
        )
    if not last:
        return "last checkpoint: never"
    failed = (a.get("last_attempt_ns") or 0) > last
    return (
        f"last checkpoint: {when(last)}, "
        + ("then a pass FAILED (last error below)" if failed else "complete")
        + f"; its pass published {a.get('last_files', 0)} file(s), "
        f"{size(a.get('last_bytes') or 0)}"
        + (f" in {duration(a['last_duration_s'])}" if a.get("last_duration_s") else "")
    )


def _root_lines(status: dict[str, Any]) -> list[str]:
    """The durable root's probe, what a write-back mount means, the SQLite library."""
    out = []
    caps = status.get("durable_probe")
    if caps:
        out.append(
            f"durable root probe ({when(caps.get('probed_ns'))}, "
            f"{caps.get('fstype') or 'unknown fs'}): {caps['summary']}"
        )
    elif str(status["config"]["durable_root"][0]).startswith("s3 "):
        out.append("durable root probe: none (an S3 bucket, reached through its API)")
    else:
        out.append("durable root probe: not yet (runs at the first checkpoint that writes)")
    enc = status.get("encryption")
    out.append(
        "encryption: off, secret files are stored plain (docs/SECRETS.md)"
        if not enc
        else f"encryption: secret files sealed with key {enc['keys'][0]}"
        + (f" (older keys read: {', '.join(enc['keys'][1:])})" if enc["keys"][1:] else "")
    )
    wb = status.get("write_back")
    if wb:
        out.append(f"  {'' if wb['confirmed'] else 'WARNING: '}{wb['text']}")
    lib = status.get("sqlite") or {}
    if lib:
        out.append(
            f"SQLite library: {lib['version']} ({lib.get('library', '?')}"
            f"{', bundled' if lib.get('bundled') else ''})"
        )
        if lib.get("warning"):
            out.append(f"  WARNING: {lib['warning']}")
    return out


def _settings(config: dict[str, Any]) -> list[str]:
    """Each configuration value and where it came from, lined up in one column."""
    out = ["configuration:"]
    width = max(map(len, config), default=0)
    for key, (value, source) in config.items():
        shown = _UNSET.get(key, "not set") if value is None else value
        out.append(f"  {key:<{width}}  {shown}  ({source})")
    return out


__all__ = ["add_parser", "duration", "iso", "json_times", "lease_lines", "show", "size", "when"]
