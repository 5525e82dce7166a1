"""What the command line prints: a checkpoint's or restore's report, and ``syncengine status``.

Owns the human-readable text of those outcomes (stdout, errors on stderr);
``--json`` output is the engine's own values, dumped.  Decides nothing: the
exit codes are `syncengine.cli.commands`'.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from syncengine.report import Report


def report(report: Report, quiet: bool) -> None:
    """A checkpoint's or restore's outcome: one line per adapter, errors on stderr."""
    if report.skipped_busy:
        print("checkpoint skipped: another checkpoint or restore is running")
        return
    stopped: dict[str, list[str]] = {}  # one message, every adapter it stopped
    absent = [a.name for a in report.adapters if a.absent and a.ok]
    for a in report.adapters:
        if a.fatal:
            stopped.setdefault(a.fatal, []).append(a.name)
        elif a.absent:  # all of them in one line below
            continue
        elif report.dry_run:
            print(f"{a.name}: {len(a.plan)} action(s)")
            for line in a.plan:
                print(f"  {line}")
        elif not quiet:
            verb = "published" if report.operation == "checkpoint" else "restored"
            extra = f", {a.kept_local} newer local kept" if report.operation == "restore" else ""
            if a.changed:
                extra += f", {a.changed} changed while copied (taken again next pass)"
            if a.plain_copies:
                extra += f", {a.plain_copies} transcript(s) whole at their plain path"
            if a.dirs:
                extra += f", {a.dirs} director{'y' if a.dirs == 1 else 'ies'}"
            print(
                f"{a.name}: {verb} {a.files} file(s), {a.bytes} bytes, "
                f"{a.unchanged} unchanged{extra}"
            )
        for e in a.errors:
            print(f"syncengine: {e}", file=sys.stderr)
    if absent and not quiet:
        print(f"no live tree yet (nothing to checkpoint): {', '.join(absent)}")
    for message, names in stopped.items():
        print(
            f"syncengine: {report.operation} stopped ({', '.join(names)}): {message}",
            file=sys.stderr,
        )
    if not report.ok:
        print(
            f"syncengine: {report.operation} incomplete: {len(report.errors)} path error(s), "
            f"{sum(len(n) for n in stopped.values())} adapter(s) stopped",
            file=sys.stderr,
        )


def when(ns: Any) -> str:
    """A time in ns since the epoch, local, to the second; "never" for none."""
    if not ns:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(ns) / 1e9))


_UNSET = {"write_back": "auto (the probe decides)"}  # what a key left unset means


def status(status: dict[str, Any], *, as_json: bool = False) -> None:
    """``syncengine status``: the configuration, the durable root, the lease, each adapter."""
    if as_json:
        print(json.dumps(status, indent=2))
        return
    print("configuration:")
    width = max(map(len, status["config"]), default=0)
    for key, (value, source) in status["config"].items():
        shown = _UNSET.get(key, "not set") if value is None else value
        print(f"  {key:<{width}}  {shown}  ({source})")
    caps = status.get("durable_probe")
    if caps:
        print(
            f"durable root probe ({when(caps.get('probed_ns'))}, "
            f"{caps.get('fstype') or 'unknown fs'}): {caps['summary']}"
        )
    elif str(status["config"]["durable_root"][0]).startswith("s3 "):
        print("durable root probe: none (an S3 bucket, reached through its API)")
    else:
        print("durable root probe: not yet (runs at the first checkpoint that writes)")
    wb = status.get("write_back")
    if wb:
        print(f"  {'' if wb['confirmed'] else 'WARNING: '}{wb['text']}")
    restore = status.get("restore")
    if restore:
        state = "complete" if restore.get("complete") else "INCOMPLETE"
        print(f"last restore: {state} at {when(restore.get('finished_ns'))}")
    lib = status.get("sqlite") or {}
    if lib:
        print(
            f"SQLite library: {lib['version']} ({lib.get('library', '?')}"
            f"{', bundled' if lib.get('bundled') else ''})"
        )
        if lib.get("warning"):
            print(f"  WARNING: {lib['warning']}")
    daemon = status.get("daemon")
    if daemon:
        state = f"running (pid {daemon.get('pid')})" if daemon.get("running") else "not running"
        print(
            f"daemon: {state}, mode {daemon.get('mode')}, interval {daemon.get('interval')}s, "
            f"last pass {when(daemon.get('last_pass_ns'))}"
            + (f", last error: {daemon['last_error']}" if daemon.get("last_error") else "")
            + (", FINAL CHECKPOINT INCOMPLETE" if daemon.get("final_ok") is False else "")
        )
    from syncengine.cli import lease

    print("\n".join(lease.status_lines(status)))
    print("adapters:")
    running = bool(daemon and daemon.get("running"))
    for a in status["adapters"]:
        _adapter_status(a, running)


def _adapter_status(a: dict[str, Any], running: bool) -> None:
    """One adapter's lines of `syncengine status` (`running`: the daemon is)."""
    print(
        f"  {a['name']}: {a['live']} ({a['live_source']}) -> {a['durable']} ({a['durable_source']})"
    )
    if a.get("warning"):
        print(f"    WARNING: {a['warning']}")
    if not a["live_exists"] and not a["indexed_files"] and not a.get("total_files"):
        print("    live tree does not exist yet (nothing to checkpoint)")
        return
    if not a["live_exists"]:
        print("    live tree does not exist (it had files: restore brings them back)")
    print(
        f"    last checkpoint: {when(a.get('last_checkpoint_ns'))}; "
        f"last pass published {a.get('last_files', 0)} file(s), "
        f"{a.get('last_bytes', 0)} bytes; total {a.get('total_files', 0)} file(s), "
        f"{a.get('total_bytes', 0)} bytes; {a['indexed_files']} indexed"
    )
    if a.get("unconfirmed"):
        print(
            f"    {a['unconfirmed']} path(s) published through the write-back mount and "
            "not confirmed in the bucket (checked again at the next start)"
        )
    for db in a.get("databases", []):
        print(
            f"    database {db['path']}: last snapshot {when(db.get('snapshot_ns'))}, "
            f"{db.get('size', 0)} bytes"
        )
    if a.get("loss_window_s") is not None:
        pending = a.get("pending")
        print(
            f"    loss window: {a.get('loss_window_s')}s since the last checkpoint"
            + (
                ""
                if not running
                else "; pending: "
                + ("full walk due" if pending is None else f"{pending} changed path(s)")
            )
        )
    if a.get("last_error"):
        print(f"    last error: {a['last_error']}")
