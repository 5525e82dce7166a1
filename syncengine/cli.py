"""The ``syncengine`` command line: parse arguments, build the engine, print results.

Owns argument parsing, logging setup and the mapping of outcomes to exit
codes: 0 done, 1 incomplete (some path or adapter failed; named on stderr),
2 usage or configuration error.  All behaviour lives in the engine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from syncengine import __version__, savefile
from syncengine.engine import Engine
from syncengine.errors import SyncEngineError
from syncengine.report import Report

EPILOG = """\
exit codes:
  0  done
  1  incomplete: something could not be checkpointed or restored (named on stderr),
     or the durable side failed
  2  usage or configuration error: nothing was done

configuration (lowest to highest precedence):
  environment  AM_LOCAL (local_root), DATA_DIR (durable_root, default /data),
               AGENT_STATE_CHECKPOINT_SECONDS (interval, default 15),
               SYNCENGINE_CONFIG (config file path)
  config file  --config PATH (TOML; see README "Configuration")
  flags        --local-root, --durable-root, --state-dir, --jobs

examples:
  AM_LOCAL=/srv/agents DATA_DIR=/data syncengine restore
  syncengine --config /etc/syncengine.toml checkpoint codex claude
  syncengine checkpoint --dry-run          # print the plan, write nothing
  syncengine status --json
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="syncengine",
        description="Checkpoint coding-agent state from local disk to a durable "
                    "(object-storage) mount, and restore it.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"syncengine {__version__}")
    p.add_argument("--config", metavar="PATH",
                   help="TOML config file (default: $SYNCENGINE_CONFIG)")
    p.add_argument("--local-root", metavar="DIR", help="live state root (default: $AM_LOCAL)")
    p.add_argument("--durable-root", metavar="DIR",
                   help="durable root, usually the bucket mount (default: $DATA_DIR or /data)")
    p.add_argument("--state-dir", metavar="DIR",
                   help="local index, lock and status (default: <local-root>/.syncengine)")
    p.add_argument("--jobs", type=int, metavar="N", help="parallel file copies (default 8)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log lines (-vv: debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.add_argument("--log-json", action="store_true",
                   help='log JSON lines {"ts","level","event","msg"} on stderr')
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("checkpoint", help="publish what changed since the last checkpoint",
                       description="Walk the live trees (never the durable side), publish new "
                       "and changed files as closed objects, then record them in a manifest. "
                       "Deletions are not propagated.")
    c.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")
    c.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    c.add_argument("--final", action="store_true",
                   help="the writers have stopped: publish append-only logs to their exact "
                        "end, trailing partial line included (shutdown checkpoint)")
    c.add_argument("--no-wait", action="store_true",
                   help="skip (exit 0) if another checkpoint or restore is running "
                        "(for timers); by default wait for it")

    r = sub.add_parser("restore", help="fill the live trees from the durable checkpoint",
                       description="Copy files that are missing locally or older than the "
                       "durable copy; never overwrite a newer local file; never write outside "
                       "the live root.")
    r.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")
    r.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")

    s = sub.add_parser("status", help="effective configuration and per-adapter state",
                       description="Show each configuration value and where it came from, and "
                       "per adapter the last checkpoint, files and bytes published, and errors. "
                       "Reads local state only.")
    s.add_argument("--json", action="store_true", help="machine-readable output")

    e = sub.add_parser("export", help="write the durable copy of one file (a transcript "
                       "rebuilt from its segments)",
                       description="Rebuild PATH from the durable side (base + segments, "
                       "verified) and write it to stdout or -o FILE. PATH is absolute under an "
                       "adapter's live tree or relative to it.")
    e.add_argument("path", metavar="PATH")
    e.add_argument("--adapter", metavar="NAME", help="the adapter PATH belongs to")
    e.add_argument("-o", "--output", metavar="FILE", help="write here (atomically), not stdout")

    v = sub.add_parser("verify", help="check the durable side against the manifest",
                       description="Every manifest entry exists with its recorded size; a "
                       "sample is read back and hashed; SQLite snapshots pass quick_check "
                       "(on a local copy); files no entry names are listed. Resumes where an "
                       "interrupted run stopped (progress in <state_dir>/verify/).")
    v.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")
    v.add_argument("--sample", type=float, default=10.0, metavar="PERCENT",
                   help="read back and hash this share of the files (default 10; 100 = all)")
    v.add_argument("--strict", action="store_true",
                   help="unlisted durable files fail the run too")
    v.add_argument("--restart", action="store_true", help="ignore saved progress")
    v.add_argument("--max-entries", type=int, metavar="N",
                   help="check at most N entries per adapter, then save progress and stop")
    v.add_argument("--json", action="store_true", help="machine-readable output")

    g = sub.add_parser("gc", help="delete tombstoned files and superseded objects (dry run "
                       "unless --apply)",
                       description="A file deleted locally is deleted from the durable side "
                       "only after [gc] absent_passes checkpoints and grace_seconds, and only "
                       "with --apply. Also removes staging leftovers, superseded manifest "
                       "objects and superseded segment chains. Refuses while a restore is "
                       "incomplete or the local tree looks empty or partial.")
    g.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")
    g.add_argument("--apply", action="store_true", help="really delete (default: dry run)")

    m = sub.add_parser("migrate", help="move a deployment from the old rsync layout",
                       description="Run each adapter's [[migrate]] steps: unlink the old "
                       "symlink, copy legacy directories into the checkpoints (keeping or "
                       "renaming them), quarantine cache databases, copy open files. Nothing "
                       "is deleted; a second run changes nothing.")
    m.add_argument("--dry-run", action="store_true", help="print the plan, touch nothing")

    j = sub.add_parser("journal", help="the input journal: one durable object per prompt",
                       description="record: read one prompt (any bytes) from stdin and return "
                       "once it is a closed object on the durable side. list / export: the "
                       "session's prompts in order.")
    j.add_argument("action", choices=("record", "list", "export"))
    j.add_argument("--session", required=True, metavar="ID", help="session id (any text)")

    x = sub.add_parser("explain", help="what a checkpoint does with each path of an "
                       "adapter's live tree, and which rule decided it",
                       description="For every path of ADAPTER's live tree (or each PATH): "
                       "publish, segments, snapshot, unlisted-db, companion, link, exclude, "
                       "special, internal or dir, with the pattern and the file it comes "
                       "from. Reads the live tree only.")
    x.add_argument("adapter", metavar="ADAPTER")
    x.add_argument("paths", nargs="*", metavar="PATH",
                   help="only these paths (absolute, or relative to the live tree)")
    x.add_argument("--json", action="store_true", help="machine-readable output")

    u = sub.add_parser("run", help="restore, run COMMAND, checkpoint until it exits",
                       description="Container entrypoint: restore (COMMAND is not started if "
                       "the restore is incomplete), start COMMAND, checkpoint every interval "
                       "(inotify hints when available), forward SIGTERM/SIGINT/SIGHUP, take a "
                       "final checkpoint, exit with COMMAND's status.")
    u.add_argument("--interval", type=float, metavar="S",
                   help="seconds between checkpoints (default: interval, 15)")
    u.add_argument("--grace", type=float, default=1.0, metavar="S",
                   help="after a signal, wait this long for COMMAND before the final "
                        "checkpoint (default 1)")
    u.add_argument("--stop-timeout", type=float, default=10.0, metavar="S",
                   help="SIGKILL COMMAND this long after the signal (default 10)")
    u.add_argument("--no-watch", action="store_true",
                   help="walk the trees every pass instead of using inotify hints")
    u.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    return p


class _JsonFormatter(logging.Formatter):
    """One JSON object per line; `event` is the stable prefix ("checkpoint.manifest")."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        event = msg.split(" ", 1)[0] if msg[:1].isalpha() and "." in msg.split(" ", 1)[0] else ""
        return json.dumps({"ts": round(record.created, 6), "level": record.levelname.lower(),
                           "event": event, "msg": msg})


def _setup_logging(verbose: int, quiet: bool, as_json: bool = False) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else
                                           logging.INFO if verbose else logging.WARNING)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if as_json else
                         logging.Formatter("syncengine %(levelname)s %(message)s"))
    root = logging.getLogger("syncengine")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def _print_report(report: Report, quiet: bool) -> None:
    if report.skipped_busy:
        print("checkpoint skipped: another checkpoint or restore is running")
        return
    for a in report.adapters:
        if report.dry_run:
            print(f"{a.name}: {len(a.plan)} action(s)")
            for line in a.plan:
                print(f"  {line}")
            continue
        if not quiet:
            verb = "published" if report.operation == "checkpoint" else "restored"
            extra = f", {a.kept_local} newer local kept" if report.operation == "restore" else ""
            print(f"{a.name}: {verb} {a.files} file(s), {a.bytes} bytes, "
                  f"{a.unchanged} unchanged{extra}")
        if a.fatal:
            print(f"syncengine: {report.operation} {a.name} stopped: {a.fatal}", file=sys.stderr)
        for e in a.errors:
            print(f"syncengine: {e}", file=sys.stderr)
    if not report.ok:
        print(f"syncengine: {report.operation} incomplete: {len(report.errors)} path error(s), "
              f"{sum(1 for a in report.adapters if a.fatal)} adapter(s) stopped", file=sys.stderr)


def _fmt_time(ns: Any) -> str:
    if not ns:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(ns) / 1e9))


def _print_status(status: dict[str, Any]) -> None:
    print("configuration:")
    for key, (value, source) in status["config"].items():
        print(f"  {key:<13} {value}  ({source})")
    caps = status.get("durable_probe")
    if caps:
        print(f"durable root probe ({_fmt_time(caps.get('probed_ns'))}, "
              f"{caps.get('fstype') or 'unknown fs'}): {caps['summary']}")
    else:
        print("durable root probe: not yet (runs at the first checkpoint that writes)")
    restore = status.get("restore")
    if restore:
        state = "complete" if restore.get("complete") else "INCOMPLETE"
        print(f"last restore: {state} at {_fmt_time(restore.get('finished_ns'))}")
    lib = status.get("sqlite") or {}
    if lib:
        print(f"SQLite library: {lib['version']}")
        if lib.get("warning"):
            print(f"  WARNING: {lib['warning']}")
    daemon = status.get("daemon")
    if daemon:
        state = f"running (pid {daemon.get('pid')})" if daemon.get("running") else "not running"
        print(f"daemon: {state}, mode {daemon.get('mode')}, interval {daemon.get('interval')}s, "
              f"last pass {_fmt_time(daemon.get('last_pass_ns'))}"
              + (f", last error: {daemon['last_error']}" if daemon.get("last_error") else ""))
    print("adapters:")
    for a in status["adapters"]:
        print(f"  {a['name']}: {a['live']} -> {a['durable']}")
        if not a["live_exists"] and not a["indexed_files"] and not a.get("total_files"):
            print("    live tree does not exist yet (nothing to checkpoint)")
            continue
        if not a["live_exists"]:
            print("    live tree does not exist (it had files: restore brings them back)")
        print(f"    last checkpoint: {_fmt_time(a.get('last_checkpoint_ns'))}; "
              f"last pass published {a.get('last_files', 0)} file(s), "
              f"{a.get('last_bytes', 0)} bytes; total {a.get('total_files', 0)} file(s), "
              f"{a.get('total_bytes', 0)} bytes; {a['indexed_files']} indexed")
        for db in a.get("databases", []):
            print(f"    database {db['path']}: last snapshot {_fmt_time(db.get('snapshot_ns'))}, "
                  f"{db.get('size', 0)} bytes")
        running = bool(daemon and daemon.get("running"))
        if a.get("loss_window_s") is not None:
            pending = a.get("pending")
            print(f"    loss window: {a.get('loss_window_s')}s since the last checkpoint"
                  + ("" if not running else "; pending: " + (
                      "full walk due" if pending is None else f"{pending} changed path(s)")))
        if a.get("last_error"):
            print(f"    last error: {a['last_error']}")


def _export(engine: Engine, path: str, adapter: str | None, output: str | None) -> int:
    if output is None:
        engine.export(path, sys.stdout.buffer, adapter=adapter)
        sys.stdout.buffer.flush()
        return 0
    out_dir = os.path.dirname(os.path.abspath(output))
    with savefile.staged(out_dir, source_mode=0o644) as tmp, \
            os.fdopen(os.dup(tmp.fd), "wb") as f:
        engine.export(path, f, adapter=adapter)
        f.flush()
        tmp.close(mode=0o644)
        tmp.publish(output)
    return 0


def _journal(engine: Engine, action: str, session: str) -> int:
    journal = engine.journal()
    if action == "record":
        p = journal.record(session, sys.stdin.buffer.read())
        print(f"recorded {p.name} ({p.size} bytes)")
        return 0
    out = sys.stdout.buffer
    for prompt, data in (journal.export(session) if action == "export" else
                         ((p, b"") for p in journal.list(session))):
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(prompt.time_ns / 1e9))
        out.write(f"{prompt.seq} {when} {prompt.size} {prompt.name}\n".encode()
                  if action == "list" else
                  f"--- prompt {prompt.seq} {when} {prompt.size} bytes\n".encode())
        if action == "export":
            out.write(data + b"\n")
    out.flush()
    return 0

def _run(engine: Engine, args: argparse.Namespace) -> int:
    from syncengine.runner import Runner
    from syncengine.supervisor import Supervisor

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("syncengine run: missing COMMAND (syncengine run -- COMMAND [ARGS...])",
              file=sys.stderr)
        return 2
    runner = Runner(engine, interval=args.interval, watch=not args.no_watch)
    return Supervisor(runner, cmd, grace=args.grace, stop_timeout=args.stop_timeout).run()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose, args.quiet, args.log_json)
    overrides = {"local_root": args.local_root, "durable_root": args.durable_root,
                 "state_dir": args.state_dir, "jobs": args.jobs}
    try:
        engine = Engine.from_file(args.config, overrides=overrides)
        if args.command == "status":
            status = engine.status()
            if args.json:
                print(json.dumps(status, indent=2))
            else:
                _print_status(status)
            return 0
        if args.command == "export":
            return _export(engine, args.path, args.adapter, args.output)
        if args.command == "journal":
            return _journal(engine, args.action, args.session)
        if args.command == "run":
            return _run(engine, args)
        if args.command == "explain":
            from syncengine import explain
            return explain.command(engine, args.adapter, args.paths, args.json)
        if args.command == "verify":
            vrep = engine.verify(args.adapters, sample=args.sample, strict=args.strict,
                                 restart=args.restart, limit=args.max_entries)
            print(json.dumps(vrep.to_json(), indent=2) if args.json else "\n".join(vrep.lines()))
            return vrep.exit_code
        if args.command == "gc":
            grep = engine.gc(args.adapters, apply=args.apply)
            print("\n".join(grep.lines()))
            return grep.exit_code
        if args.command == "migrate":
            mrep = engine.migrate(dry_run=args.dry_run)
            print("\n".join(mrep.lines))
            for err in mrep.errors:
                print(f"syncengine: migrate: {err}", file=sys.stderr)
            return mrep.exit_code
        if args.command == "checkpoint":
            report = engine.checkpoint(args.adapters, wait=not args.no_wait,
                                       dry_run=args.dry_run, final=args.final)
        else:
            report = engine.restore(args.adapters, dry_run=args.dry_run)
    except SyncEngineError as exc:
        print(f"syncengine: {exc}", file=sys.stderr)
        return exc.exit_code
    _print_report(report, args.quiet)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
