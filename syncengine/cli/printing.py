"""What the command line prints: a checkpoint's or restore's report.

Owns the human-readable text of those outcomes (stdout, errors on stderr);
``syncengine status`` is `syncengine.cli.statusview`'s.  Decides nothing: the
exit codes are `syncengine.cli.commands`'.
"""

from __future__ import annotations

import sys

from syncengine.report import Report, published


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
            if a.dirs:
                extra += f", {a.dirs} director{'y' if a.dirs == 1 else 'ies'}"
            print(
                f"{a.name}: {verb} {published(a.files, a.plain_copies, a.bytes)}, "
                f"{a.unchanged} unchanged{extra}"
            )
        for e in a.errors:
            print(f"syncengine: {e}", file=sys.stderr)
    if absent and not quiet:
        why = (
            "no live tree yet (nothing to checkpoint)"
            if report.operation == "checkpoint"
            else "no durable checkpoint yet (nothing to restore)"
        )
        print(f"{why}: {', '.join(absent)}")
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
