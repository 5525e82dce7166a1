"""The command line's number types: a finite number in range, else exit 2 saying the rule.

Shared by the grammar modules (`args`, `runargs`); the configuration checks ranges
it owns (`_jobs`, `_interval`), the types only that the text is a number.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def checked(
    rule: str, ok: Callable[[float], bool] | None, *, whole: bool = False
) -> Callable[[str], float]:
    """An argparse type: a finite number for which `ok` holds, else exit 2 saying `rule`
    (`ok` None: any number; its range is the configuration's check, one line)."""

    def parse(text: str) -> float:
        try:
            value = int(text) if whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number: {rule}") from None
        if ok is not None and not (math.isfinite(value) and ok(value)):
            raise argparse.ArgumentTypeError(f"{text} is out of range: {rule}")
        return value

    return parse


percent = checked("0 < PERCENT <= 100", lambda v: 0 < v <= 100)  # --sample
seconds = checked("seconds from 0 to 86400", lambda v: 0 <= v <= 86400)  # --grace, --stop-timeout
positive = checked("a whole number >= 1", lambda v: v >= 1, whole=True)  # --max-entries
jobs = checked("parallel file copies, 1 to 256", None, whole=True)  # range: config
interval = checked("seconds from 0.1 to 86400", None)  # run --interval; range: config
