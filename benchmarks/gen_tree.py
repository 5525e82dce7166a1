"""Generate a realistic, deterministic agent state tree for benchmarks.

``python benchmarks/gen_tree.py OUT_DIR [--files 100000] [--bytes 800M] [--seed 1]``
creates a tree that looks like a live ``$AM_LOCAL`` root holding several
harnesses (layout in ``tree_plan``); ``--mutate N`` instead appends one JSON
line to N existing ``.jsonl`` files, as agents do between two checkpoints.

For a given ``(files, bytes, seed)`` the output is byte-for-byte
deterministic, including modes and mtimes (fixed dates before 2026-11-28; on a
machine whose clock is earlier they are clamped to an hour ago, so no file is
ever in the future). The file count is exact; the total size tracks the target
to within about one JSON line, because each file's size is steered by the
deviation carried from the files before it. Below about 500 bytes per file the
per-file header lines alone overshoot the target.

Other benchmarks import ``generate``, ``mutate``, ``list_jsonl`` and
``parse_size`` (run them as scripts from ``benchmarks/``, which puts this
directory on ``sys.path``). This module creates and appends to files under the
directory it is given; it never deletes anything.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tree_content import EPOCH_END_NS, Pools, generic_line, iso
from tree_plan import Spec, plan

GENERATOR_VERSION = 1  # bump when the same parameters would give another tree
SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
Chunk = bytes | memoryview


@dataclass(frozen=True)
class Summary:
    """What ``generate`` produced."""

    files: int
    dirs: int
    bytes: int
    seconds: float


def generate(out: str | os.PathLike[str], files: int, total_bytes: int, seed: int) -> Summary:
    """Create the tree under ``out`` (created if missing; must be empty)."""
    start = time.perf_counter()
    specs = plan(files, total_bytes, seed)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty; remove it or choose another directory")
    pools = Pools(seed)
    rng = random.Random(f"{seed}:content")
    dirs = sorted({os.path.dirname(s.rel) for s in specs})
    for d in dirs:
        os.makedirs(root / d, mode=0o700 if d.endswith("credentials") else 0o755, exist_ok=True)
    ceiling = time.time_ns() - 3600 * 10**9
    base = f"{root}{os.sep}"
    deviation = written = 0
    for spec in specs:
        chunks = _content(spec, spec.size - deviation, pools, rng)
        n = _write(base + spec.rel, chunks, spec.mode, min(spec.mtime_ns, ceiling))
        deviation += n - spec.size
        written += n
    n_dirs = len({p for d in dirs for p in _ancestors(d)})
    return Summary(len(specs), n_dirs, written, time.perf_counter() - start)


def _content(spec: Spec, goal: int, pools: Pools, rng: random.Random) -> list[Chunk]:
    """The bytes of one file, about ``goal`` long."""
    if spec.kind == "literal":
        return [spec.literal]
    if spec.kind == "json":
        doc = dict(spec.header)
        key = "text" if "text" in doc else "summary"
        doc[key] = ""
        doc[key] = pools.pad(rng, goal - len(json.dumps(doc, separators=(",", ":"))) - 1)
        return [json.dumps(doc, separators=(",", ":")).encode() + b"\n"]
    head = json.dumps(spec.header, separators=(",", ":")).encode() + b"\n"
    return [head, *pools.lines[spec.flavor].fill(rng, goal - len(head))]


def _write(path: str, chunks: list[Chunk], mode: int, mtime_ns: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        total = sum(len(c) for c in chunks)
        written = 0
        while written < total:
            written += os.writev(fd, _unwritten(chunks, written))
        os.fchmod(fd, mode)  # independent of the caller's umask
        os.utime(fd, ns=(mtime_ns, mtime_ns))
    finally:
        os.close(fd)
    return written


def _unwritten(chunks: list[Chunk], skip: int) -> list[Chunk]:
    """The chunks left after a short write of ``skip`` bytes (at most IOV_MAX)."""
    out: list[Chunk] = []
    for chunk in chunks:
        if skip >= len(chunk):
            skip -= len(chunk)
            continue
        out.append(memoryview(chunk)[skip:] if skip else chunk)
        skip = 0
    return out[:1024]


def _ancestors(rel_dir: str) -> Iterator[str]:
    parts = rel_dir.split("/")
    for i in range(1, len(parts) + 1):
        yield "/".join(parts[:i])


def list_jsonl(out: str | os.PathLike[str]) -> list[str]:
    """Sorted relative paths of every ``.jsonl`` file under ``out``."""
    found: list[str] = []
    base = os.fspath(out)
    for dirpath, _dirnames, filenames in os.walk(base):
        rel = os.path.relpath(dirpath, base)
        found.extend(
            os.path.normpath(os.path.join(rel, f)) for f in filenames if f.endswith(".jsonl")
        )
    found.sort()
    return found


def mutate(
    out: str | os.PathLike[str], n: int, seed: int, candidates: list[str] | None = None
) -> list[str]:
    """Append one JSON line to ``n`` distinct ``.jsonl`` files; return their paths.

    The choice and the appended bytes depend only on ``seed`` and the sorted
    candidate list, so the same tree and seed touch the same files. Pass
    ``candidates`` (from ``list_jsonl``) to skip the walk on repeated calls.
    """
    pool = list_jsonl(out) if candidates is None else candidates
    if n > len(pool):
        raise ValueError(f"cannot mutate {n} files: {out} has only {len(pool)} .jsonl files")
    rng = random.Random(f"{seed}:mutate")
    chosen = rng.sample(pool, n)
    stamp = iso(EPOCH_END_NS + seed * 10**9)
    for rel in chosen:
        line = json.dumps(generic_line(rng, stamp), separators=(",", ":")).encode() + b"\n"
        with open(os.path.join(out, rel), "ab") as fh:
            fh.write(line)
    return chosen


def parse_size(text: str) -> int:
    """``800M`` -> 838860800. Units are binary (K=1024); a bare number is bytes."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in SIZE_UNITS else ""
    try:
        return int(float(value[: len(value) - len(unit)]) * SIZE_UNITS[unit])
    except ValueError:
        msg = f"not a size: {text!r} (examples: 800M, 20M, 1G, 4096)"
        raise argparse.ArgumentTypeError(msg) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Generate (or mutate) a realistic agent state tree for benchmarks."
    )
    p.add_argument("out", help="directory to fill (missing or empty); with --mutate, a tree")
    p.add_argument("--files", type=int, default=100_000, help="exact file count (100000)")
    p.add_argument(
        "--bytes", type=parse_size, default=800 * 2**20, help="total size, e.g. 800M (800M)"
    )
    p.add_argument("--seed", type=int, default=1, help="seed for names, sizes, content (1)")
    p.add_argument("--mutate", type=int, metavar="N", help="append a line to N .jsonl files")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.mutate is not None:
            chosen = mutate(args.out, args.mutate, args.seed)
            print(f"mutated {len(chosen)} files in {args.out} (seed {args.seed})")
            return 0
        s = generate(args.out, args.files, args.bytes, args.seed)
    except (ValueError, FileExistsError) as exc:
        print(f"gen_tree: {exc}", file=sys.stderr)
        return 2
    print(
        f"generated {s.files} files in {s.dirs} directories, {s.bytes} bytes "
        f"({s.bytes / 2**20:.1f} MiB; target {args.bytes / 2**20:.1f} MiB) "
        f"in {s.seconds:.1f} s -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
