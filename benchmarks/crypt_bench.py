"""What sealing secret files costs a full checkpoint and a full restore (issue 30).

    PYTHONPATH=. python benchmarks/crypt_bench.py [--files 2000] [--secrets 2 200] [--reps 5]
        [--big-mb 0]

A Codex live tree of --files small files (2 KiB each) of which the first N match
the adapter's secrets (`auth.json`, `.credentials.json` and `[secrets] codex =
["/secret/*.json"]` for the rest), plus one --big-mb file of random bytes,
checkpointed into an empty durable directory and restored into an empty live
tree.  Each repetition is a fresh tree, without a key, with one, and with one
and ``encrypt = "all"`` (every file sealed) in turn (all see the same machine
load); the median of --reps is printed, wall time and CPU (this process and its
forked children).  Also the cost of one seal and one open of a 2 KiB file (the
streaming format, version 2).  The durable side is a local directory: sealing
is CPU, not I/O.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import io

from syncengine import Engine, config_from_dict
from syncengine.crypt import chunked, keys

BODY = b'{"k": "' + b"v" * 2030 + b'"}\n'  # 2 KiB


def cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    w, c = time.perf_counter(), cpu()
    fn()
    return time.perf_counter() - w, cpu() - c


def populate(live: Path, files: int, secrets: int, big_mb: int) -> None:
    (live / "secret").mkdir(parents=True)
    (live / "plain").mkdir()
    names = ["auth.json", ".credentials.json"][:secrets]
    names += [f"secret/s{i}.json" for i in range(secrets - len(names))]
    names += [f"plain/f{i}.json" for i in range(files - len(names))]
    for name in names:
        (live / name).write_bytes(BODY)
    if big_mb:
        with open(live / "plain/big.bin", "wb") as f:
            for _ in range(big_mb):
                f.write(os.urandom(1 << 20))


def one(files: int, secrets: int, mode: str, big_mb: int) -> tuple[float, float, float, float]:
    base = Path(tempfile.mkdtemp(prefix="crypt-bench-"))
    try:
        env = {"AM_LOCAL": str(base / "local"), "DATA_DIR": str(base / "data"), "HOME": str(base)}
        if mode != "no":
            env["SYNCENGINE_KEY"] = keys.generate()
        raw: dict[str, object] = {"adapters": ["codex"], "secrets": {"codex": ["/secret/*.json"]}}
        if mode == "all":
            raw["encrypt"] = "all"
        populate(base / "local/codex-home", files, secrets, big_mb)
        (base / "data").mkdir()
        eng = Engine(config_from_dict(raw, env=env))
        cw, cc = timed(lambda: eng.checkpoint())
        eng.close()
        shutil.rmtree(base / "local")
        eng = Engine(config_from_dict(raw, env=env))
        rw, rc = timed(lambda: eng.restore())
        eng.close()
        assert (base / "local/codex-home/auth.json").read_bytes() == BODY
        return cw, cc, rw, rc
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--secrets", type=int, nargs="+", default=[2, 200])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--big-mb", type=int, default=0)
    args = ap.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ring = keys.parse(keys.generate())
    n = 2000
    w = time.perf_counter()
    blobs = [chunked.seal_bytes(ring.writer, BODY, "codex/auth.json") for _ in range(n)]
    seal_us = (time.perf_counter() - w) / n * 1e6
    w = time.perf_counter()
    for blob in blobs:
        chunked.opener(ring, io.BytesIO(blob), "codex/auth.json").read()
    unseal_us = (time.perf_counter() - w) / n * 1e6
    print(f"one 2 KiB file: seal {seal_us:.1f} us, unseal {unseal_us:.1f} us")
    print(f"plus one file of {args.big_mb} MB")
    print("| files | secret files | key | checkpoint wall s | CPU s | restore wall s | CPU s |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    modes = ("no", "yes", "all")
    for secrets in args.secrets:
        runs: dict[str, list[tuple[float, float, float, float]]] = {m: [] for m in modes}
        for _ in range(args.reps):  # interleaved: all see the same machine load
            for mode in modes:
                runs[mode].append(one(args.files, secrets, mode, args.big_mb))
        for mode in modes:
            med = [statistics.median(r[i] for r in runs[mode]) for i in range(4)]
            label = 'yes, encrypt = "all"' if mode == "all" else mode
            print(
                f"| {args.files} | {secrets} | {label} | "
                + " | ".join(f"{x:.3f}" for x in med)
                + " |"
            )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
