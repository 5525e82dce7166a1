"""What sealing secret files costs a full checkpoint and a full restore (issue 30).

    PYTHONPATH=. python benchmarks/crypt_bench.py [--files 2000] [--secrets 2 200] [--reps 5]

A Codex live tree of --files small files (2 KiB each) of which the first N match
the adapter's secrets (`auth.json`, `.credentials.json` and `[secrets] codex =
["/secret/*.json"]` for the rest), checkpointed into an empty durable directory and
restored into an empty live tree.  Each repetition is a fresh tree, without and
with a key in turn (both see the same machine load); the median of --reps is
printed, wall time and CPU (this process and its forked children).  Also the
cost of one seal and one unseal of a 2 KiB file.  The durable side is a local
directory: sealing is CPU, not I/O.
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

from syncengine import Engine, config_from_dict
from syncengine.crypt import keys, sealed

BODY = b'{"k": "' + b"v" * 2030 + b'"}\n'  # 2 KiB


def cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    w, c = time.perf_counter(), cpu()
    fn()
    return time.perf_counter() - w, cpu() - c


def populate(live: Path, files: int, secrets: int) -> None:
    (live / "secret").mkdir(parents=True)
    (live / "plain").mkdir()
    names = ["auth.json", ".credentials.json"][:secrets]
    names += [f"secret/s{i}.json" for i in range(secrets - len(names))]
    names += [f"plain/f{i}.json" for i in range(files - len(names))]
    for name in names:
        (live / name).write_bytes(BODY)


def one(files: int, secrets: int, with_key: bool) -> tuple[float, float, float, float]:
    base = Path(tempfile.mkdtemp(prefix="crypt-bench-"))
    try:
        env = {"AM_LOCAL": str(base / "local"), "DATA_DIR": str(base / "data"), "HOME": str(base)}
        if with_key:
            env["SYNCENGINE_KEY"] = keys.generate()
        raw = {"adapters": ["codex"], "secrets": {"codex": ["/secret/*.json"]}}
        populate(base / "local/codex-home", files, secrets)
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
    args = ap.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ring = keys.parse(keys.generate())
    n = 2000
    w = time.perf_counter()
    blobs = [sealed.seal(ring.writer, BODY, "codex/auth.json") for _ in range(n)]
    seal_us = (time.perf_counter() - w) / n * 1e6
    w = time.perf_counter()
    for blob in blobs:
        sealed.unseal(ring, blob, "codex/auth.json")
    unseal_us = (time.perf_counter() - w) / n * 1e6
    print(f"one 2 KiB file: seal {seal_us:.1f} us, unseal {unseal_us:.1f} us")
    print("| files | secret files | key | checkpoint wall s | CPU s | restore wall s | CPU s |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for secrets in args.secrets:
        runs: dict[bool, list[tuple[float, float, float, float]]] = {False: [], True: []}
        for _ in range(args.reps):  # interleaved: both see the same machine load
            for with_key in (False, True):
                runs[with_key].append(one(args.files, secrets, with_key))
        for with_key in (False, True):
            med = [statistics.median(r[i] for r in runs[with_key]) for i in range(4)]
            print(
                f"| {args.files} | {secrets} | {'yes' if with_key else 'no'} | "
                + " | ".join(f"{x:.3f}" for x in med)
                + " |"
            )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
