"""The ``syncengine`` command line: build the engine, run the command, map the outcome.

Owns `main` (the console script, through `syncengine.cli`), logging setup and
the mapping of outcomes to exit codes: 0 done, 1 incomplete (some path or
adapter failed; named on stderr), 2 usage or configuration error.  The
grammar (options, ``--help``) is `syncengine.cli.args`; what is printed,
`syncengine.cli.printing`; the ``lease`` command, `syncengine.cli.lease`; all
behaviour lives in the engine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from syncengine.cli import keys, printing
from syncengine.cli.args import build_parser
from syncengine.config import load_config
from syncengine.engine import Engine
from syncengine.errors import SyncEngineError
from syncengine.fs import savefile
from syncengine.progress import Reporter
from syncengine.report import Report


class _JsonFormatter(logging.Formatter):
    """One JSON object per line; `event` is the stable name ("checkpoint.manifest") the
    call passed as a structured field, ``log.info(msg, ..., extra={"event": name})``.

    A call that passes none yet (a few in the durable side's and restore's modules,
    tests/test_logging.py lists them) falls back to the first word of its message,
    which by convention is that same name; the fallback goes when the list is empty.
    """

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        event = getattr(record, "event", None)
        if not isinstance(event, str):
            word = msg.split(" ", 1)[0]
            event = word if msg[:1].isalpha() and "." in word else ""
        return json.dumps(
            {
                "ts": round(record.created, 6),
                "level": record.levelname.lower(),
                "event": event,
                "msg": msg,
            }
        )


def _setup_logging(verbose: int, quiet: bool, as_json: bool = False) -> None:
    level = (
        logging.WARNING
        if quiet
        else (logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING)
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter() if as_json else logging.Formatter("syncengine %(levelname)s %(message)s")
    )
    root = logging.getLogger("syncengine")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def _progress_bar(args: argparse.Namespace, stream: TextIO) -> TextIO | None:
    """Where a one-shot checkpoint, restore or verify draws its progress bar: stderr when it
    is a terminal, unless -q, -v (the *.progress log lines say it) or --log-json."""
    if args.command not in ("checkpoint", "restore", "verify") or getattr(args, "dry_run", False):
        return None
    if args.quiet or args.verbose or args.log_json or not stream.isatty():
        return None
    return stream


def _export(engine: Engine, path: str, adapter: str | None, output: str | None) -> int:
    if output is None:
        engine.export(path, sys.stdout.buffer, adapter=adapter)
        sys.stdout.buffer.flush()
        return 0
    out_dir = os.path.dirname(os.path.abspath(output))
    with savefile.staged(out_dir, source_mode=0o644) as tmp, os.fdopen(os.dup(tmp.fd), "wb") as f:
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
    for prompt, data in (
        journal.export(session) if action == "export" else ((p, b"") for p in journal.list(session))
    ):
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(prompt.time_ns / 1e9))
        out.write(
            f"{prompt.seq} {when} {prompt.size} {prompt.name}\n".encode()
            if action == "list"
            else f"--- prompt {prompt.seq} {when} {prompt.size} bytes\n".encode()
        )
        if action == "export":
            out.write(data + b"\n")
    out.flush()
    return 0


def _run(engine: Engine, args: argparse.Namespace) -> int:
    """``run`` (and ``lease``, the other command about who writes the durable root)."""
    if args.command == "lease":
        from syncengine.cli import lease

        return lease.command(engine, args)
    from syncengine.daemon.runner import Runner
    from syncengine.daemon.supervisor import Supervisor

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print(
            "syncengine run: missing COMMAND (syncengine run -- COMMAND [ARGS...])", file=sys.stderr
        )
        return 2
    runner = Runner(engine, watch=not args.no_watch, takeover=args.takeover)
    return Supervisor(
        runner,
        cmd,
        grace=args.grace,
        stop_timeout=args.stop_timeout,
        quiet=args.quiet or args.log_json,
    ).run()


def _checkpoint(engine: Engine, args: argparse.Namespace) -> Report:
    if args.command == "rekey":
        return keys.rekey(engine, args)
    return engine.checkpoint(
        args.adapters,
        wait=not args.no_wait,
        dry_run=args.dry_run,
        final=args.final,
        check_durable=args.check_durable,
    )


def _verify(engine: Engine, args: argparse.Namespace) -> int:
    vrep = engine.verify(
        args.adapters,
        sample=args.sample,
        strict=args.strict,
        restart=args.restart,
        limit=args.max_entries,
    )
    said = [json.dumps(vrep.to_json(), indent=2)] if args.json else vrep.lines(quiet=args.quiet)
    if said:  # -q with nothing wrong: nothing at all
        print("\n".join(said))
    return vrep.exit_code


def _release_lease(engine: Engine | None) -> None:
    """A command ends: the lease it took goes (the next instance need not wait)."""
    if engine is not None:
        engine.close()  # a failure is logged: the lease expires instead


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The command-line values that override the config file and the environment."""
    return {
        "local_root": args.local_root,
        "durable_root": args.durable_root,
        "state_dir": args.state_dir,
        "jobs": args.jobs,
        **{
            key: dict([*(getattr(args, key) or ()), *(getattr(args, f"{key}_after", None) or ())])
            for key in ("live", "durable")
        },
        "interval": getattr(args, "interval", None),  # run --interval
        "metrics_address": getattr(args, "metrics_address", None),  # run --metrics-address
        "restore": getattr(args, "restore", None),  # run --restore
    }


INTERRUPTED = 130  # the shell's code for a command ended by SIGINT


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose, args.quiet, args.log_json)
    if args.command == "keygen":  # needs no configuration
        return keys.keygen()
    try:
        code = _command(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        _quiet_stdout()  # `syncengine ... | head`: the reader has all it wanted
        return 0
    except KeyboardInterrupt:
        print(
            f"syncengine: {args.command} interrupted; what it published stays, "
            "the next run carries on from there",
            file=sys.stderr,
        )
        return INTERRUPTED


def _stdout_closed() -> bool:
    """Whether the reader of stdout went away (a pipe whose other end is closed)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return True  # no stdout to write to at all


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that what is still buffered is not written at exit
    (where a closed pipe would print "Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _command(args: argparse.Namespace) -> int:
    engine = None
    try:
        bar = _progress_bar(args, sys.stderr)
        engine = Engine(
            load_config(args.config, overrides=_overrides(args)),
            progress=Reporter(bar=bar) if bar is not None else None,
        )
        if args.command == "status":
            from syncengine.cli import statusview

            statusview.show(engine.status(), as_json=args.json, settings=args.settings)
            return 0
        if args.command == "export":
            return _export(engine, args.path, args.adapter, args.output)
        if args.command == "journal":
            return _journal(engine, args.action, args.session)
        if args.command in ("run", "lease"):
            return _run(engine, args)
        if args.command == "explain":
            from syncengine.ops import explain

            return explain.command(engine, args.adapter, args.paths, args.json)
        if args.command == "verify":
            return _verify(engine, args)
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
        if args.command in ("checkpoint", "rekey"):
            report = _checkpoint(engine, args)
        else:
            report = engine.restore(args.adapters, dry_run=args.dry_run, takeover=args.takeover)
    except SyncEngineError as exc:
        print(f"syncengine: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # no layer translated it: still one line, the path and the fix
        if isinstance(exc, BrokenPipeError) and _stdout_closed():
            raise  # not an error: `main` ends quietly
        error = engine.os_error(args.command, exc) if engine is not None else exc
        print(f"syncengine: {error}", file=sys.stderr)
        return 1
    finally:
        _release_lease(engine)
    printing.report(report, args.quiet)
    return report.exit_code


__all__ = ["main"]
