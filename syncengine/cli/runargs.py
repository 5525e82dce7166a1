"""The ``run`` command's grammar: the container entrypoint's options and ``--help``.

Owns what ``syncengine run`` accepts (`add_parser`, called by `args.build_parser`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from syncengine.cli import argtypes, lease


def add_parser(command: Callable[..., argparse.ArgumentParser]) -> None:
    """run: the container entrypoint (`command` makes a subcommand parser)."""
    u = command(
        "run",
        help="restore, run COMMAND, checkpoint until it exits",
        description="Container entrypoint: take the durable root's lease (waiting for "
        "another instance's), restore each adapter's first set (restore_first, the newest "
        "restore_newest; COMMAND is not started if it is incomplete), start COMMAND, restore "
        "the rest in the background (newest first), checkpoint every interval (inotify hints when "
        "available), forward SIGTERM/SIGINT/SIGHUP, take a final checkpoint, release "
        "the lease, exit with COMMAND's status; 75 when COMMAND exited 0 but the final "
        "checkpoint was incomplete (state since the last complete one is not durable); "
        "1 when COMMAND exited 0 but the background restore failed; 76 when another "
        "instance took the lease over (COMMAND is stopped first); 77 "
        "when another instance's lease did not come free within lease_wait.",
    )
    u.add_argument(
        "--interval",
        type=argtypes.interval,
        metavar="S",
        help="seconds between checkpoints, 0.1 to 86400 (default: interval, 15)",
    )
    u.add_argument(
        "--grace",
        type=argtypes.seconds,
        default=1.0,
        metavar="S",
        help="after a signal, wait this long for COMMAND before the final checkpoint (default 1)",
    )
    u.add_argument(
        "--stop-timeout",
        type=argtypes.seconds,
        default=10.0,
        metavar="S",
        help="SIGKILL COMMAND this long after the signal (default 10)",
    )
    u.add_argument(
        "--no-watch",
        action="store_true",
        help="walk the trees every pass instead of using inotify hints",
    )
    u.add_argument("--takeover", action="store_true", help=lease.TAKEOVER)
    u.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (docs/METRICS.md; "
        "default: metrics_address, else off; port 0: any free port, shown by status)",
    )
    u.add_argument(
        "--restore",
        choices=("background", "all-first"),
        help="background: COMMAND starts after each adapter's first set, the rest follows; "
        "all-first: the whole tree before COMMAND (default: restore, background)",
    )
    u.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
