"""The command line's grammar: commands, options, their checks and the ``--help`` text.

Owns what ``syncengine`` accepts, not what it does (`build_parser`; run by
`syncengine.cli.commands`).  Global options go before or after the command.
Values that cannot be right are refused here with exit 2.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from syncengine.__about__ import __version__
from syncengine.cli import argtypes, keys, lease, optionplace, runargs, statusview

EPILOG = """\
exit codes:
  0  done
  1  incomplete: something could not be checkpointed or restored (named on stderr),
     or the durable side failed
  2  usage or configuration error: nothing was done
  run exits with COMMAND's status (128 + N if a signal N killed it), except
  75 when COMMAND exited 0 but the final checkpoint was incomplete

configuration (lowest to highest precedence):
  environment  AM_LOCAL (local_root), DATA_DIR (durable_root, default /data),
               AGENT_STATE_CHECKPOINT_SECONDS (interval, default 15),
               SYNCENGINE_CONFIG (config file path), HOME (migrate);
               the design's per-harness trees: CODEX_HOME, CODEX_DURABLE,
               CLAUDE_CONFIG_DIR, CLAUDE_DURABLE, GEMINI_CLI_HOME, GEMINI_LIVE,
               GEMINI_DURABLE, OPENCLAW_STATE_DIR, OPENCLAW_DURABLE, OPENCODE_LIVE,
               OPENCODE_DURABLE, HERMES_LIVE, HERMES_DURABLE
  config file  --config PATH (TOML; see docs/CONFIGURATION.md)
  flags        --local-root, --durable-root, --state-dir, --jobs, --live, --durable

examples:
  AM_LOCAL=/srv/agents DATA_DIR=/data syncengine restore
  syncengine --config /etc/syncengine.toml checkpoint codex claude
  syncengine checkpoint --dry-run          # print the plan, write nothing
  syncengine status --json
"""


def _global_options(group: argparse._ActionsContainer, *, after: bool = False) -> None:
    """The options every command takes, before or after its name.

    After the command (`after`) they default to SUPPRESS, so an option given
    only before the command is not reset by the subcommand's defaults.
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if after else value

    _root_options(group, default)
    _tree_options(group, default, after=after)
    _log_options(group, default)


def _root_options(group: argparse._ActionsContainer, default: Callable[[Any], Any]) -> None:
    group.add_argument(
        "--config",
        metavar="PATH",
        default=default(None),
        help="TOML config file (default: $SYNCENGINE_CONFIG)",
    )
    group.add_argument(
        "--local-root",
        metavar="DIR",
        default=default(None),
        help="live state root (default: $AM_LOCAL); must exist",
    )
    group.add_argument(
        "--durable-root",
        metavar="DIR",
        default=default(None),
        help="durable root, usually the bucket mount (default: $DATA_DIR or /data)",
    )
    group.add_argument(
        "--state-dir",
        metavar="DIR",
        default=default(None),
        help="local index, lock and status (default: <local-root>/.syncengine)",
    )
    group.add_argument(
        "--jobs",
        type=argtypes.jobs,
        metavar="N",
        default=default(None),
        help="parallel file copies, 1 to 256 (default: 8 on a mount or S3, 1 on local disk)",
    )


def _tree_options(
    group: argparse._ActionsContainer, default: Callable[[Any], Any], *, after: bool
) -> None:
    # repeatable: given after the command too, they add to (not replace) those before it
    group.add_argument(
        "--live",
        type=_assignment,
        action="append",
        metavar="ADAPTER=DIR",
        default=default(None),
        dest="live_after" if after else "live",
        help="an adapter's live tree (repeatable; default: its variable, "
        "e.g. $CODEX_HOME, else under --local-root)",
    )
    group.add_argument(
        "--durable",
        type=_assignment,
        action="append",
        metavar="ADAPTER=DIR",
        default=default(None),
        dest="durable_after" if after else "durable",
        help="an adapter's durable tree (repeatable; default: its variable, "
        "e.g. $CODEX_DURABLE, else under --durable-root); with an s3:// durable "
        "root, a name relative to it or an s3:// URL in its bucket",
    )


def _log_options(group: argparse._ActionsContainer, default: Callable[[Any], Any]) -> None:
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default(0),
        help="more log lines (-v: progress and passes; -vv: debug)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="only warnings and errors",
    )
    group.add_argument(
        "--log-json",
        action="store_true",
        default=default(False),
        help='log JSON lines {"ts","level","event","msg"} on stderr',
    )


def _assignment(text: str) -> tuple[str, str]:
    """ADAPTER=DIR (--live, --durable)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r} is not ADAPTER=DIR (e.g. codex=/srv/codex)")
    return name, path


def _command(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, **kwargs)
    _global_options(parser.add_argument_group("global options"), after=True)
    return parser


def build_parser() -> argparse.ArgumentParser:
    p = optionplace.Parser(
        prog="syncengine",
        description="Checkpoint coding-agent state from local disk to a durable "
        "(object-storage) mount, and restore it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"syncengine {__version__}")
    _global_options(p.add_argument_group("global options (also accepted after COMMAND)"))
    sub = p.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=argparse.ArgumentParser
    )

    _pass_commands(sub)  # in this order in --help
    _durable_commands(sub)
    _explain_and_run(sub)
    runargs.add_parser(functools.partial(_command, sub))
    lease.add_parser(functools.partial(_command, sub))
    keys.add_parser(functools.partial(_command, sub))
    return p


def _pass_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """checkpoint, restore and status (its grammar is `statusview`'s)."""
    c = _command(
        sub,
        "checkpoint",
        help="publish what changed since the last checkpoint",
        description="Walk the live trees (never the durable side), publish new "
        "and changed files as closed objects, then record them in a manifest. "
        "Deletions are not propagated.",
    )
    c.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")
    c.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    c.add_argument(
        "--final",
        action="store_true",
        help="the writers have stopped: publish append-only logs to their exact "
        "end, trailing partial line included (shutdown checkpoint)",
    )
    c.add_argument(
        "--no-wait",
        action="store_true",
        help="skip (exit 0) if another checkpoint or restore is running "
        "(for timers); by default wait for it",
    )
    c.add_argument("--check-durable", action="store_true", help=lease.CHECK_DURABLE)

    r = _command(
        sub,
        "restore",
        help="fill the live trees from the durable checkpoint",
        description="Copy files that are missing locally or older than the "
        "durable copy; never overwrite a newer local file; never write outside "
        "the live root.  Waits first until no other instance holds the durable "
        "root's lease (its final checkpoint is what you restore); 77 when it did "
        "not come free within lease_wait.",
    )
    r.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")
    r.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    r.add_argument("--takeover", action="store_true", help=lease.TAKEOVER)

    statusview.add_parser(functools.partial(_command, sub))


def _durable_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """export, verify, gc, migrate and journal: reading and maintaining the durable side."""
    _export_and_verify(sub)
    _maintenance_commands(sub)


def _export_and_verify(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    e = _command(
        sub,
        "export",
        help="write the durable copy of one file (a transcript rebuilt from its segments)",
        description="Rebuild PATH from the durable side (base + segments, "
        "verified) and write it to stdout or -o FILE. PATH is absolute under an "
        "adapter's live tree or relative to it.",
    )
    e.add_argument("path", metavar="PATH")
    e.add_argument("--adapter", metavar="NAME", help="the adapter PATH belongs to")
    e.add_argument("-o", "--output", metavar="FILE", help="write here (atomically), not stdout")

    v = _command(
        sub,
        "verify",
        help="check the durable side against the manifest",
        description="Every manifest entry exists with its recorded size; a "
        "sample is read back and hashed; SQLite snapshots pass quick_check "
        "(on a local copy); files no entry names are listed. Resumes where an "
        "interrupted run stopped (progress in <state_dir>/verify/).",
    )
    v.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")
    v.add_argument(
        "--sample",
        type=argtypes.percent,
        default=10.0,
        metavar="PERCENT",
        help="read back and hash this share of the files (default 10; 100 = all)",
    )
    v.add_argument("--strict", action="store_true", help="unlisted durable files fail the run too")
    v.add_argument("--restart", action="store_true", help="ignore saved progress")
    v.add_argument(
        "--max-entries",
        type=argtypes.positive,
        metavar="N",
        help="check at most N entries per adapter, then save progress and stop",
    )
    v.add_argument("--json", action="store_true", help="machine-readable output")


def _maintenance_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    g = _command(
        sub,
        "gc",
        help="delete tombstoned files and superseded objects (dry run unless --apply)",
        description="A file deleted locally is deleted from the durable side "
        "only after [gc] absent_passes checkpoints and grace_seconds, and only "
        "with --apply. Also removes staging leftovers, superseded manifest "
        "objects and superseded segment chains. Refuses while a restore is "
        "incomplete or the local tree looks empty or partial.",
    )
    g.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")
    g.add_argument("--apply", action="store_true", help="really delete (default: dry run)")

    m = _command(
        sub,
        "migrate",
        help="move a deployment from the old rsync layout",
        description="What the design's entrypoint did before restore: create "
        "every live and durable directory, then run each adapter's [[migrate]] "
        "steps: copy open files, unlink the old symlink, quarantine cache "
        "databases, copy legacy directories under $HOME into the checkpoints "
        "(keeping or renaming them) and link $HOME/.local/share/opencode and "
        "$HOME/.hermes to their live trees. Nothing is deleted; a second run "
        "changes nothing.",
    )
    m.add_argument("--dry-run", action="store_true", help="print the plan, touch nothing")

    j = _command(
        sub,
        "journal",
        help="the input journal: one durable object per prompt",
        description="record: read one prompt (any bytes) from stdin and return "
        "once it is a closed object on the durable side. list / export: the "
        "session's prompts in order.",
    )
    j.add_argument("action", choices=("record", "list", "export"))
    j.add_argument("--session", required=True, metavar="ID", help="session id (any text)")


def _explain_and_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """explain (the live tree against the rules) and run (the container entrypoint)."""
    x = _command(
        sub,
        "explain",
        help="what a checkpoint does with each path of an "
        "adapter's live tree, and which rule decided it",
        description="For every path of ADAPTER's live tree (or each PATH): "
        "publish, segments, snapshot, unlisted-db, companion, link, exclude, "
        "special, internal or dir, with the pattern and the file it comes "
        "from. Reads the live tree only.",
    )
    x.add_argument("adapter", metavar="ADAPTER")
    x.add_argument(
        "paths", nargs="*", metavar="PATH", help="absolute, or relative to the live tree"
    )
    x.add_argument("--json", action="store_true", help="machine-readable output")
