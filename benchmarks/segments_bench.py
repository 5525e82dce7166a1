"""Append-only transcripts: whole-file mode against segment mode, on the bucket emulator.

    PYTHONPATH=. python benchmarks/segments_bench.py [--local] [--size-mb 10] [--intervals 100]

1. A rollout of --size-mb MB appended with 1 KB (4 complete lines) per interval
   for --intervals checkpoints: bytes and objects committed per checkpoint
   (data objects + manifest objects), in whole-file mode (an adapter without
   `segments`) and in segment mode.
2. Restore time of one file made of 1,000 segments (compaction disabled).
3. The time of a checkpoint with 50 active transcripts (1 MB each, 1 KB appended).

The durable side is the fusebucket FUSE emulator (tests/fusebucket.py, commit on
close, no added latency) unless --local is given.  Bytes and objects are
measured in the emulator's backing directory (what the "bucket" received).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from syncengine import Engine, config_from_dict
from syncengine.checkpoint import segments

LINE = b'{"type":"event","payload":"' + b"x" * 226 + b'"}\n'  # 256 bytes


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[int, int, int]:
    """(bytes, data objects, manifest objects) committed between two snapshots."""
    new = [p for p, v in after.items() if before.get(p) != v]
    manifests = [p for p in new if "/.syncengine/manifest/" in p]
    return (sum(after[p][0] for p in new), len(new) - len(manifests), len(manifests))


@contextlib.contextmanager
def durable(base: Path, local: bool) -> Iterator[tuple[Path, Path]]:
    """(durable root, backing dir)."""
    if local:
        (base / "data").mkdir()
        yield base / "data", base / "data"
        return
    from tests.bucket_mount import BucketMount, fuse_available

    ok, why = fuse_available()
    if not ok:
        sys.exit(f"FUSE unavailable ({why}): run with --local")
    with BucketMount(base / "bucket", base / "mnt") as mount:
        yield mount.mountpoint, mount.backing


def engine(base: Path, data: Path, name: str, segs: bool, **kw: Any) -> Engine:
    raw = {
        "adapters": [],
        "adapter": [
            {
                "name": name,
                "live": name,
                "durable": f"state/{name}",
                "segments": ["*.jsonl"] if segs else [],
            }
        ],
    }
    env = {"AM_LOCAL": str(base / "local"), "DATA_DIR": str(data)}
    return Engine(config_from_dict(raw, env=env), **kw)


def append(path: Path, nbytes: int = 1024) -> None:
    with path.open("ab") as f:
        f.write(LINE * (nbytes // len(LINE)))


def appends(base: Path, data: Path, backing: Path, size_mb: int, intervals: int) -> list[str]:
    rows = []
    for mode, segs in (("whole-file", False), ("segments", True)):
        name = f"r-{mode}"
        path = base / "local" / name / "sessions" / "rollout-1.jsonl"
        path.parent.mkdir(parents=True)
        path.write_bytes(LINE * (size_mb * 4096))
        eng = engine(base, data, name, segs)
        t0 = time.monotonic()
        assert eng.checkpoint().ok
        first = time.monotonic() - t0
        per: list[tuple[int, int, int]] = []
        times = []
        for _ in range(intervals):
            append(path)
            before = snapshot(backing)
            t0 = time.monotonic()
            report = eng.checkpoint()
            times.append(time.monotonic() - t0)
            assert report.ok, report.errors
            per.append(diff(before, snapshot(backing)))
        b = [p[0] for p in per]
        rows.append(
            f"| {mode} | {size_mb} MB + 1 KB x {intervals} | {statistics.mean(b):,.0f} B "
            f"(max {max(b):,}) | {statistics.mean(p[1] for p in per):.2f} + "
            f"{statistics.mean(p[2] for p in per):.2f} | "
            f"{statistics.median(times) * 1000:.1f} ms | {first:.2f} s |"
        )
    return rows


def restore_1000(base: Path, data: Path, backing: Path) -> str:
    old = segments.MAX_SEGMENTS
    segments.MAX_SEGMENTS = 10**6
    try:
        path = base / "local" / "r1000" / "rollout.jsonl"
        path.parent.mkdir(parents=True)
        path.write_bytes(LINE)
        eng = engine(base, data, "r1000", True)
        for _ in range(1000):
            assert eng.checkpoint().ok
            append(path, 512)
        assert eng.checkpoint().ok
        expected = path.read_bytes()
    finally:
        segments.MAX_SEGMENTS = old
    shutil.rmtree(base / "local")
    (base / "local").mkdir()
    eng = engine(base, data, "r1000", True)
    t0 = time.monotonic()
    report = eng.restore()
    elapsed = time.monotonic() - t0
    assert report.ok, report.errors
    assert path.read_bytes() == expected
    n = len(list((backing / "state/r1000" / segments.SEG_DIR).rglob("*.seg")))
    return f"| restore 1 file of {n} objects ({len(expected) / 1e6:.2f} MB) | {elapsed:.2f} s |"


def fifty(base: Path, data: Path, backing: Path) -> list[str]:
    rows = []
    for mode, segs in (("whole-file", False), ("segments", True)):
        name = f"f-{mode}"
        paths = []
        for i in range(50):
            p = base / "local" / name / "sessions" / f"rollout-{i}.jsonl"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(LINE * 4096)
            paths.append(p)
        eng = engine(base, data, name, segs)
        assert eng.checkpoint().ok
        times = []
        per = []
        for _ in range(5):
            for p in paths:
                append(p)
            before = snapshot(backing)
            t0 = time.monotonic()
            assert eng.checkpoint().ok
            times.append(time.monotonic() - t0)
            per.append(diff(before, snapshot(backing)))
        rows.append(
            f"| {mode} | 50 x 1 MB, 1 KB appended to each | "
            f"{statistics.median(times) * 1000:.0f} ms | "
            f"{statistics.mean(p[0] for p in per) / 1e6:.2f} MB |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--local", action="store_true", help="durable side on local disk")
    ap.add_argument("--size-mb", type=int, default=10)
    ap.add_argument("--intervals", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="segbench-") as tmp:
        base = Path(tmp)
        (base / "local").mkdir()
        with durable(base, args.local) as (data, backing):
            where = "local disk" if args.local else "fusebucket emulator"
            print(f"durable side: {where}\n")
            print(
                "| mode | rollout | bytes committed per checkpoint | objects per checkpoint "
                "(data + manifest) | checkpoint time (median) | first checkpoint |"
            )
            print("|---|---|---|---|---|---|")
            for row in appends(base, data, backing, args.size_mb, args.intervals):
                print(row, flush=True)
            print("\n| restore | time |\n|---|---|")
            print(restore_1000(base, data, backing), flush=True)
            print("\n| mode | transcripts | checkpoint time (median of 5) | bytes committed |")
            print("|---|---|---|---|")
            for row in fifty(base, data, backing):
                print(row, flush=True)


if __name__ == "__main__":
    main()
