"""The command line's lease parts: ``syncengine lease release --force`` (the lease lines
of ``syncengine status`` are `syncengine.cli.statusview`'s).

Owns how the durable root's lease (issue 16; `syncengine.local.leaseholder`) is
shown to and changed by an operator.  Grammar only in `add_parser`; the
behaviour is `lease.force_release` and `lease.status` (`syncengine.durable.lease`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from syncengine.durable import lease
from syncengine.engine import Engine

TAKEOVER = (
    "take the durable root's lease from another instance at once instead of waiting "
    "lease_wait seconds for it to be released or to expire (the other instance is "
    "fenced: it publishes nothing more and exits 76)"
)
CHECK_DURABLE = (
    "first compare the durable side with the local index, as at a start, whatever was "
    "checked before; a forked manifest (restore and verify say so) gets a full base of "
    "this instance's state under a new lease generation"
)


def add_parser(command: Any) -> None:
    """The ``lease`` command (`command`: `args._command` bound to the subparsers)."""
    sub = command(
        "lease",
        help="the durable root's lease: one writer per durable root",
        description="release --force: mark the durable root's lease released, whoever "
        "holds it, so the next instance takes it at once. Only for a holder you know "
        "is dead: a live holder is fenced at its next manifest object and stops "
        "(lease.lost).",
    )
    sub.add_argument("action", choices=("release",))
    sub.add_argument("--force", action="store_true", help="required: you know the holder is dead")


def command(engine: Engine, args: argparse.Namespace) -> int:
    if not args.force:
        print("syncengine lease release: add --force (the holder must be dead)", file=sys.stderr)
        return 2
    engine.durable.check()
    store = engine.durable.writable_store(engine.config.durable_root)
    released = lease.force_release(store)
    if released is None:
        print("no lease to release")
        return 0
    print(f"released generation {released.generation} (held by {released.holder})")
    return 0


__all__ = ["add_parser", "command"]
