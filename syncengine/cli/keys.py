"""The command line's encryption commands: ``syncengine keygen`` and ``syncengine rekey``.

Owns their grammar (`add_parser`) and what they print (docs/SECRETS.md).
``keygen`` writes a new key line to stdout for ``> FILE`` and refuses a
terminal, so a key is never shown on a screen or in a scrollback.  ``rekey``
is a checkpoint that first seals again, with the key file's first key, every
published secret file that is plain or sealed with another key (every first
pass of a process does the same, `checkpoint.sealing.stale_secrets`); the old
keys can be dropped from the key file once it succeeded.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from syncengine.crypt import keys
from syncengine.engine import Engine
from syncengine.errors import ConfigError
from syncengine.report import Report


def add_parser(command: Any) -> None:
    """The ``keygen`` and ``rekey`` commands (`command`: `args._command` bound)."""
    command(
        "keygen",
        help="print a new encryption key, for `syncengine keygen > FILE`",
        description="Print a new 256-bit key for sealing secret files (docs/SECRETS.md). "
        "Redirect it to a file (umask 077) and name the file in SYNCENGINE_KEY_FILE or "
        "key_file; refused when stdout is a terminal.  To rotate, put the new key on the "
        "first line of the key file, keep the old ones below it, run `syncengine rekey`.",
    )
    r = command(
        "rekey",
        help="seal every secret file again with the key file's first key",
        description="A checkpoint that first seals again, with the first key, every "
        "published secret file that is plain or sealed with another key.  Afterwards the "
        "other keys are needed only for what gc has not collected yet.",
    )
    r.add_argument("adapters", nargs="*", metavar="ADAPTER", help="only these adapters")


def keygen() -> int:
    if sys.stdout.isatty():
        print(
            "syncengine keygen: stdout is a terminal; redirect it to a file: "
            "(umask 077; syncengine keygen > FILE)",
            file=sys.stderr,
        )
        return 2
    print(keys.generate())
    return 0


def rekey(engine: Engine, args: argparse.Namespace) -> Report:
    ring = engine.config.keys
    if ring is None:
        raise ConfigError(
            "rekey: no key is configured: set SYNCENGINE_KEY_FILE (or key_file) to a key "
            "file made by `syncengine keygen > FILE`"
        )
    print(f"sealing secret files with key {ring.writer.fingerprint}", file=sys.stderr)
    return engine.checkpoint(args.adapters)


__all__ = ["add_parser", "keygen", "rekey"]
