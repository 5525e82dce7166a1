"""Numbers in the configuration: what each may be, and the check that says so.

Owns `RANGES` and `check_number`, which `syncengine.config` applies to every
number it reads (TOML values, and environment variables once parsed).  Reads
nothing itself: the environment and the files stay `config`'s.
"""

from __future__ import annotations

import math
from typing import Any

from syncengine.errors import ConfigError

# What a number may be: (smallest, largest, whole number).  Bounds keep a typo from
# becoming a busy loop (interval 0) or a timer that never fires (inf overflows a wait).
RANGES: dict[str, tuple[float, float, bool]] = {
    "interval": (0.1, 86400.0, False),
    "rescan_interval": (1.0, 604800.0, False),
    "sqlite_busy_timeout": (0.001, 3600.0, False),
    "jobs": (1, 256, True),
    "plain_after": (1.0, 604800.0, False),
    "absent_passes": (1, 255, True),  # the index counts absent passes up to 255
    "grace_seconds": (0.0, math.inf, False),
    "min_present_ratio": (0.0, 1.0, False),
    "staging_seconds": (0.0, math.inf, False),
    "confirm_timeout": (0.0, 3600.0, False),
    "lease_seconds": (1.0, 86400.0, False),
    "lease_wait": (0.0, 86400.0, False),
    "pack_after_seconds": (0.0, math.inf, False),
    "pack_bytes": (1 << 16, 1 << 32, True),  # 64 KiB to 4 GiB
    "pack_max_file_bytes": (1, 1 << 30, True),
    "pack_min_files": (0, 1 << 30, True),  # 0: never pack
}


def check_number(where: str, key: str, value: Any) -> float:
    """`value` as the number `key` must be (type and range: `RANGES`), or ConfigError.

    Strings are not numbers here: only environment variables are text, and
    their caller parses them first.
    """
    low, high, whole = RANGES[key]
    what = (
        f"a whole number from {low:g} to {high:g}"
        if whole
        else f"a number from {low:g}" + (f" to {high:g}" if math.isfinite(high) else " up")
    )
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (whole and not isinstance(value, int))
    ):
        fix = ""
        if isinstance(value, str):
            fix = f": write {key} = {value.strip()} without quotes" if _parses(value, whole) else ""
        elif isinstance(value, float) and whole and math.isfinite(value):
            fix = f": write {key} = {math.floor(value)} or {math.ceil(value)}"
        kind = "true/false" if isinstance(value, bool) else type(value).__name__
        raise ConfigError(f"{where}: {key} must be {what}, not the {kind} {value!r}{fix}")
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"{where}: {key} must be {what}, not {value!r}")
    number: float = value
    return number


def _parses(text: str, whole: bool) -> bool:
    try:
        number = int(text) if whole else float(text)
    except ValueError:
        return False
    return math.isfinite(number)
