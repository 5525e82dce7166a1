"""What a transcript's plain copy costs: bytes and objects per hour, by kind of object.

    PYTHONPATH=. python benchmarks/plain_bench.py [--size-mb 1 10] [--plain-after 180]

One rollout of --size-mb MB, appended with 1 KB (four 256-byte lines) every 15 s and
checkpointed every 15 s (the default interval), for one simulated hour (the engine's
clock is driven, so the hour takes seconds), in two patterns:

- active: an append every 15 s for the whole hour (it never goes quiet);
- bursts: 5 minutes of appends every 15 s, then 5 minutes quiet, repeated (turns
  separated by pauses, as an agent session runs).

What the durable side received is counted per kind: segment objects (the appends),
the chain's new bases (compaction), the plain copy at the transcript's own path, and
manifest objects.  Bytes and objects do not depend on the mount, so the durable side
is a local directory.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from syncengine import Engine, config_from_dict

LINE = b'{"type":"event","payload":"' + b"x" * 226 + b'"}\n'  # 256 bytes
REL = "sessions/rollout-1.jsonl"
T0 = 1_800_000_000 * 10**9
S = 10**9


def files(root: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (
                st.st_size,
                st.st_mtime_ns,
                st.st_ino,
            )
    return out


def kind(rel: str) -> str:
    if rel == f"state/x/{REL}":
        return "plain"
    if rel.endswith(".seg"):
        return "base" if "/00000000-" in rel else "segment"
    if "/manifest/" in rel:
        return "manifest"
    return "other"


def hour(base: Path, size_mb: int, pattern: str, plain_after: float) -> Counter[str]:
    live, data = base / "local", base / "data"
    path = live / "x" / REL
    path.parent.mkdir(parents=True)
    data.mkdir()
    path.write_bytes(LINE * (size_mb * 4096))
    os.utime(path, ns=(T0, T0))
    now = [T0 + 5 * S]
    raw = {
        "adapters": [],
        "plain_after": plain_after,
        "adapter": [{"name": "x", "live": "x", "durable": "state/x", "segments": ["*.jsonl"]}],
    }
    eng = Engine(
        config_from_dict(raw, env={"AM_LOCAL": str(live), "DATA_DIR": str(data)}),
        clock=lambda: now[0],
    )
    assert eng.checkpoint().ok
    for t in range(300, 600, 15):  # an hour before: the state an hour of work starts from
        now[0] = T0 + t * S
        assert eng.checkpoint().ok
    counts: Counter[str] = Counter()
    start = 600
    for tick in range(240):  # 240 checkpoints of 15 s: one hour
        t = start + tick * 15
        if pattern == "active" or (tick // 20) % 2 == 0:
            with path.open("ab") as f:
                f.write(LINE * 4)
            os.utime(path, ns=(T0 + (t - 7) * S,) * 2)
        before = files(data)
        now[0] = T0 + t * S
        assert eng.checkpoint().ok
        after = files(data)
        for rel, (size, _, _) in after.items():
            if before.get(rel) != after[rel]:
                counts[f"{kind(rel)} objects"] += 1
                counts[f"{kind(rel)} bytes"] += size
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--plain-after", type=float, default=180.0)
    args = ap.parse_args()
    print(f"plain_after = {args.plain_after:g} s; per simulated hour, 240 checkpoints\n")
    print(
        "| pattern | rollout | segments (objects, bytes) | plain copies (objects, bytes) "
        "| compaction bases (objects, bytes) | manifest objects |"
    )
    print("|---|---|---|---|---|---|")
    for size in args.size_mb:
        for pattern in ("active", "bursts"):
            with tempfile.TemporaryDirectory(prefix="plainbench-") as tmp:
                c = hour(Path(tmp), size, pattern, args.plain_after)
            print(
                f"| {pattern} | {size} MB + 1 KB / 15 s | {c['segment objects']}, "
                f"{c['segment bytes']:,} B | {c['plain objects']}, {c['plain bytes']:,} B "
                f"| {c['base objects']}, {c['base bytes']:,} B | {c['manifest objects']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
