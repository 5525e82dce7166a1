"""The runner's one-line descriptions: what a restore brought back, what a pass published.

Owns the wording `syncengine run` prints on stderr and the runner logs: the
start line, a pass's line, a failure's lines, and the background restore's
closing line.
"""

from __future__ import annotations

from typing import Any

from syncengine.config import Config
from syncengine.report import Report, published


def describe_failure(report: Report) -> str:
    """One line per failed adapter or path, for messages and logs."""
    lines = [f"{a.name}: {a.fatal}" for a in report.adapters if a.fatal]
    lines.extend(str(e) for e in report.errors[:20])
    more = len(report.errors) - 20
    if more > 0:
        lines.append(f"... and {more} more path error(s)")
    return "\n".join(lines)


def describe_start(
    report: Report, config: Config, interval: float, mode: str, later: int = 0
) -> str:
    """One line: what the restore brought back (and `later` files still to come), and
    what the loop will checkpoint."""
    kept = sum(a.kept_local for a in report.adapters)
    same = sum(a.unchanged for a in report.adapters)
    live = [s.name for s in config.adapters if s.live.is_dir()]
    waiting = [s.name for s in config.adapters if not s.live.is_dir()]
    return (
        f"restored {report.files} file(s), {report.bytes} bytes"
        + (f", {same} unchanged" if same else "")
        + (f" ({kept} newer local kept)" if kept else "")
        + (f"; {later} more in the background, newest first" if later else "")
        + f"; checkpointing {', '.join(live) or 'nothing yet'} every {interval:g}s "
        f"(mode {mode})"
        + (f"; no live tree yet (taken once it appears): {', '.join(waiting)}" if waiting else "")
    )


def describe_pass(report: Report) -> str:
    """One line: what a complete checkpoint published."""
    return f"published {published(report.files, report.plain_copies, report.bytes)}; all durable"


def describe_background(status: dict[str, Any]) -> str:
    """One line: how the background restore ended (`BackgroundRestore.status`)."""
    done = (
        f"{status['files']} file(s), {status['bytes']} bytes"
        + (f" ({status['kept']} written locally meanwhile, kept)" if status["kept"] else "")
        + f" in {status['seconds']:.1f}s"
    )
    if status["state"] == "done":
        return f"background restore complete: {done}"
    if status["state"] == "stopped":
        left = status["files_total"] - status["files"] - status["kept"]
        return f"background restore stopped: {done}; {left} file(s) still to come next start"
    return f"background restore INCOMPLETE: {done}; " + "; ".join(status["errors"][:3])
