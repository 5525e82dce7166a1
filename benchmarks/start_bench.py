"""Time from ``syncengine run`` to COMMAND's start on an empty local root (issue 27 part 1).

``python benchmarks/start_bench.py [--files 20000] [--reps 2] [--s3 | --emulator]
[--modes background,all-first] [--start-only] [--out benchmarks/RESULTS.md]``
generates a Claude Code-like
tree (settings and credentials at the top, one transcript per ten files under
``projects/``, the rest small ``file-history/`` files, mtimes spread over a year),
checkpoints it once (to a directory root, or with ``--s3`` to moto's S3 server on
127.0.0.1, the one the tests use; with ``--emulator`` to a directory that then
becomes the backing store of the bucket emulator, tests/fusebucket.py, mounted with
mount_bench.py's latency: 2 ms a metadata operation, 50 ms a listing, 30 ms a
commit), then per repetition and mode empties the local root and the state dir and
times ``syncengine run --restore MODE -- COMMAND``:

- *COMMAND start*: from launching ``run`` to COMMAND's first line (``date``);
- *tree whole*: until the oldest file (the background restores it last) exists;
- *run exit*: until ``run`` exits (COMMAND exits once the tree is whole).

With ``--start-only`` COMMAND exits as soon as it starts (no *tree whole*): `run`
stops the background restore after its batch and takes the final checkpoint, so a
100,000-file tree on a slow root is timed to COMMAND without waiting for every file.

It also reads ``run``'s ``--log-json -v`` lines to split the start-up: until the
lease is taken (interpreter, imports, configuration, probe, lease), until the
restore starts (the manifest read, the plan, the split and the seeding of the
waiting files into the index), until COMMAND starts (the first set, the index
saved, the start-up check of the durable side).  It
writes nothing outside a temp directory but the table to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.s3server import CREDENTIALS, S3Server  # noqa: E402

if TYPE_CHECKING:
    from tests.bucket_mount import BucketMount

YEAR_NS = 365 * 86400 * 10**9
OLDEST = "file-history/d000/f000000.txt"


def generate(live: Path, files: int) -> None:
    """`files` files; the oldest is `OLDEST`, transcripts are newer than history."""
    now = time.time_ns()
    (live / "file-history").mkdir(parents=True)
    (live / "settings.json").write_text('{"theme": "dark"}\n')
    (live / ".credentials.json").write_text('{"token": "x"}\n')
    (live / "history.jsonl").write_text('{"display": "hi"}\n' * 50)
    chats = files // 10
    for i in range(files - 3):
        if i < chats:
            path = live / f"projects/p{i % 40:02d}/s{i:06d}.jsonl"
            body = ('{"type": "user", "message": "' + "x" * 200 + '"}\n') * 16
            mtime = now - YEAR_NS // 2 + i * (YEAR_NS // 2 // chats)
        else:
            j = i - chats
            path = live / f"file-history/d{j // 500:03d}/f{j:06d}.txt"
            body = f"version {j}\n" + "y" * 900
            mtime = now - YEAR_NS + j * (YEAR_NS // 2 // max(files - chats, 1))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        os.utime(path, ns=(mtime, mtime))


def config(work: Path, durable: str) -> Path:
    path = work / "config.toml"
    path.write_text(
        f"local_root = {json.dumps(str(work / 'local'))}\n"
        f"durable_root = {json.dumps(durable)}\n"
        f"state_dir = {json.dumps(str(work / 'state'))}\n"
        'adapters = ["claude"]\n'
    )
    return path


def one_run(work: Path, cfg: Path, mode: str, start_only: bool = False) -> dict[str, float]:
    """Empty the local side, run, and time it (see the module doc)."""
    shutil.rmtree(work / "local/agent-state", ignore_errors=True)
    shutil.rmtree(work / "state", ignore_errors=True)
    oldest = work / "local/agent-state/claude" / OLDEST
    script = f'date +%s.%N; while [ ! -e "{oldest}" ]; do sleep 0.02; done; date +%s.%N'
    if start_only:
        script = "date +%s.%N"
    argv = [sys.executable, "-m", "syncengine", "--config", str(cfg), "--log-json", "-v"]
    t0 = time.time()
    proc = subprocess.run(
        [*argv, "run", "--restore", mode, "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
    )
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    stamps = [float(x) for x in proc.stdout.split()]
    started, whole = stamps[0], stamps[-1]
    events = {}
    for line in proc.stderr.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        events.setdefault(rec.get("event"), rec.get("ts"))
    out = {"command": started - t0, "exit": end - t0}
    if not start_only:
        out["whole"] = whole - t0
    for name, event in (("lease", "lease.acquired"), ("restore", "restore.start")):
        at = _seconds(events.get(event))
        if at is not None:
            out[name] = at - t0
    return out


def _seconds(value: object) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        from datetime import datetime

        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def table(rows: dict[str, list[dict[str, float]]], args: argparse.Namespace, root: str) -> str:
    load = os.getloadavg()
    head = (
        f"### Time to COMMAND, {args.files:,} files, {root} "
        f"({time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} cores, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})\n\n"
        f"`python benchmarks/start_bench.py --files {args.files} --reps {args.reps}"
        + (" --s3" if args.s3 else "")
        + (" --emulator" if args.emulator else "")
        + (" --start-only" if args.start_only else "")
        + f" --modes {args.modes}`; medians of {args.reps}, seconds from launching `run`:\n\n"
        "| mode | COMMAND starts | lease taken | restore starts | tree whole | run exits |\n"
        "|---|---|---|---|---|---|\n"
    )
    lines = []
    for mode, samples in rows.items():

        def med(key: str, samples: list[dict[str, float]] = samples) -> str:
            found = [s[key] for s in samples if key in s]
            return f"{statistics.median(found):.2f}" if found else "-"

        cells = [med(k) for k in ("command", "lease", "restore", "whole", "exit")]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def emulator(work: Path) -> BucketMount:
    """The bucket emulator over the seeded directory root, with mount_bench.py's latency."""
    from tests.bucket_mount import BucketMount

    latency = {"latency_meta_ms": 2.0, "latency_list_ms": 50.0, "latency_commit_ms": 30.0}
    return BucketMount(work / "data", work / "mnt", **latency)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--s3", action="store_true", help="moto's S3 server, not a directory")
    parser.add_argument(
        "--emulator", action="store_true", help="the bucket emulator with latency, not a directory"
    )
    parser.add_argument(
        "--start-only", action="store_true", help="COMMAND exits at once: no tree-whole time"
    )
    parser.add_argument("--modes", default="background,all-first")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="startbench-") as tmp:
        work = Path(tmp)
        generate(work / "local/agent-state/claude", args.files)
        server = None
        os.environ["PYTHONPATH"] = str(REPO)
        if args.s3:
            server = S3Server(work / "moto.log")
            server.client().create_bucket(Bucket="bench")
            for key in [k for k in os.environ if k.startswith("AWS_")]:
                del os.environ[key]
            os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=server.endpoint)
            durable, root = "s3://bench/agents", "moto S3 on 127.0.0.1"
        else:
            (work / "data").mkdir()
            durable, root = str(work / "data"), "directory root"
        try:
            cfg = config(work, durable)
            t0 = time.monotonic()
            subprocess.run(
                [sys.executable, "-m", "syncengine", "--config", str(cfg), "-q", "checkpoint"],
                check=True,
            )
            print(f"checkpoint of {args.files} files: {time.monotonic() - t0:.1f}s", flush=True)
            with contextlib.ExitStack() as stack:
                if args.emulator:  # the seeded directory becomes the bucket
                    cfg = config(work, str(stack.enter_context(emulator(work)).mountpoint))
                    root = "the bucket emulator (latency as mount_bench.py)"
                rows = {m: [] for m in args.modes.split(",")}
                for _rep in range(args.reps):
                    for mode in rows:
                        rows[mode].append(one_run(work, cfg, mode, args.start_only))
                        print(mode, rows[mode][-1], flush=True)
        finally:
            if server is not None:
                server.stop()
    text = table(rows, args, root)
    print(text)
    if args.out:
        with args.out.open("a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
