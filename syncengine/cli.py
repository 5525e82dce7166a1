"""The ``syncengine`` command line: parse arguments, build the engine, print results.

Owns argument parsing, logging setup and the mapping of outcomes to exit
codes: 0 done, 1 incomplete (some path or adapter failed; named on stderr),
2 usage or configuration error.  All behaviour lives in the engine.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from syncengine import __version__
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
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("checkpoint", help="publish what changed since the last checkpoint",
                       description="Walk the live trees (never the durable side), publish new "
                       "and changed files as closed objects, then record them in a manifest. "
                       "Deletions are not propagated.")
    c.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")
    c.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
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
    return p


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else
                                           logging.INFO if verbose else logging.WARNING)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("syncengine %(levelname)s %(message)s"))
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
    print("adapters:")
    for a in status["adapters"]:
        print(f"  {a['name']}: {a['live']} -> {a['durable']}")
        if not a["live_exists"]:
            print("    live tree does not exist yet (nothing to checkpoint)")
        print(f"    last checkpoint: {_fmt_time(a.get('last_checkpoint_ns'))}; "
              f"last pass published {a.get('last_files', 0)} file(s), "
              f"{a.get('last_bytes', 0)} bytes; total {a.get('total_files', 0)} file(s), "
              f"{a.get('total_bytes', 0)} bytes; {a['indexed_files']} indexed")
        if a.get("last_error"):
            print(f"    last error: {a['last_error']}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose, args.quiet)
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
        if args.command == "checkpoint":
            report = engine.checkpoint(args.adapters, wait=not args.no_wait,
                                       dry_run=args.dry_run)
        else:
            report = engine.restore(args.adapters, dry_run=args.dry_run)
    except SyncEngineError as exc:
        print(f"syncengine: {exc}", file=sys.stderr)
        return exc.exit_code
    _print_report(report, args.quiet)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
