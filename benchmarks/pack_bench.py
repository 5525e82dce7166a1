"""A full restore of many small files after ``gc`` packed them, against plain GETs.

``python benchmarks/pack_bench.py [--files 20000] [--reps 3] [--emulator]
[--out benchmarks/RESULTS.md]`` starts moto's S3 server on 127.0.0.1
(tests/s3server.py, the tests' own), writes `--files` small files (200 B to 4 KiB,
200 directories), checkpoints them with ``durable_root = "s3://BUCKET/agents"`` and
times, side by side on that server:

- ``plain restore``: ``syncengine restore`` into an empty root before any packing
  (one GET per file, 8 threads: the default `jobs` on S3), once;
- ``32-thread GETs``: boto3 GETs of every file object from 32 threads, nothing
  written (the server's own cost of one request per file: the issue's baseline);
- ``gc --apply``: the packing itself, once;
- ``packed restore``: ``syncengine restore`` into an empty root after gc packed;
- ``packed run, background``: ``syncengine run`` into an empty root and state dir,
  the adapter declaring a restore order (so COMMAND starts first and the tree comes
  back in the background); COMMAND waits until ``daemon.json`` says the background
  restore is done, so the row is the time to the whole tree through `run`.

With ``--emulator`` the durable root is the bucket emulator's mount
(tests/fusebucket.py) with mount_bench.py's latency (2 ms a metadata operation,
50 ms a listing, 30 ms a commit; the checkpoint runs without it), the GETs are 32
threads reading each file through the mount, and "requests" are the emulator's
operations.  Each row: the median (and min/max) wall time of `--reps` runs and the
requests for one run.  Every restore is compared with the live tree.
Writes nothing outside a temp directory but the table appended to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.s3server import CREDENTIALS, S3Server  # noqa: E402


def make_tree(live: Path, files: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    old = time.time_ns() - 7200 * 10**9  # two hours old: past pack_after_seconds
    for i in range(files):
        path = live / f"sessions/d{i % 200:03}/f{i:06}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(100, 2048)).hex().encode())
        os.utime(path, ns=(old, old))


def config(work: Path, name: str, root: str, order: str = "") -> Path:
    path = work / f"{name}.toml"
    path.write_text(
        f"local_root = {json.dumps(str(work / name / 'live'))}\n"
        f"durable_root = {json.dumps(root)}\n"
        f"state_dir = {json.dumps(str(work / name / 'state'))}\n"
        'adapters = []\n\n[[adapter]]\nname = "tree"\nlive = "."\ndurable = "tree"\n' + order
    )
    return path


# COMMAND of the background row: wait for the runner's status file to say "done"
WAIT_DONE = """
import json, pathlib, sys, time
path = pathlib.Path(sys.argv[1])
while True:
    try:
        state = (json.loads(path.read_text()).get("restore_background") or {}).get("state")
    except (OSError, ValueError):
        state = None
    if state in ("done", "failed", "stopped"):
        sys.exit(state != "done")
    time.sleep(0.05)
"""


class Bench:
    def __init__(self, work: Path, root: str, count: Callable[[], int]) -> None:
        self.work, self.root, self.count = work, root, count  # count: requests so far
        self.rows: dict[str, tuple[list[float], int]] = {}

    def timed(self, name: str, run: Callable[[], None]) -> None:
        before = self.count()
        t0 = time.perf_counter()
        run()
        took = time.perf_counter() - t0
        requests = self.count() - before
        times, _ = self.rows.get(name, ([], 0))
        self.rows[name] = ([*times, took], requests)
        print(f"{name}: {took:.2f} s, {requests} requests", flush=True)

    def cli(self, conf: Path, *args: str) -> None:
        argv = [sys.executable, "-m", "syncengine", "--config", str(conf), "-q", *args]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{args} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")

    def restore(self, name: str, live: Path, rep: int) -> None:
        conf = config(self.work, f"{name.replace(' ', '-')}-{rep}", self.root)
        self.timed(name, lambda: self.cli(conf, "restore"))
        restored = self.work / f"{name.replace(' ', '-')}-{rep}" / "live"
        same(live, restored)

    def background(self, name: str, live: Path, rep: int) -> None:
        """`run` with the background restore, until COMMAND sees it done."""
        here = f"{name.replace(' ', '-').replace(',', '')}-{rep}"
        order = 'restore_first = ["/none"]\nrestore_newest = ["**"]\nrestore_newest_count = 20\n'
        conf = config(self.work, here, self.root, order)
        status = self.work / here / "state" / "daemon.json"
        waiter = [sys.executable, "-c", WAIT_DONE, str(status)]
        self.timed(name, lambda: self.cli(conf, "run", "--restore", "background", "--", *waiter))
        same(live, self.work / here / "live")


def same(live: Path, restored: Path) -> None:
    for path in live.rglob("*.json"):
        if (restored / path.relative_to(live)).read_bytes() != path.read_bytes():
            raise SystemExit(f"restore differs: {path}")


def plain_gets(server: S3Server, bucket: str, keys: list[str]) -> Callable[[], None]:
    import boto3

    client = boto3.client(
        "s3", endpoint_url=server.endpoint, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip

    def run() -> None:
        with ThreadPoolExecutor(32) as pool:
            for body in pool.map(lambda k: client.get_object(Bucket=bucket, Key=k), keys):
                body["Body"].read()

    return run


def plain_reads(paths: list[Path]) -> Callable[[], None]:
    def run() -> None:
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(Path.read_bytes, paths))

    return run


def table(bench: Bench, args: argparse.Namespace, load: str) -> str:
    base = statistics.median(bench.rows["32-thread GETs"][0])
    where, flag = ("the bucket emulator", " --emulator") if args.emulator else ("moto", "")
    lines = [
        f"### Packs: full restore of {args.files} small files on {where} (pack_bench.py)",
        "",
        f"`python benchmarks/pack_bench.py --files {args.files} --reps {args.reps}{flag}`; "
        f"load average (1, 5, 15 min) at start / end: {load}.",
        "",
        "| run | median s | min s | max s | vs 32-thread GETs | requests (one run) |",
        "|---|---|---|---|---|---|",
    ]
    for name, (times, requests) in bench.rows.items():
        med = statistics.median(times)
        lines.append(
            f"| {name} | {med:.2f} | {min(times):.2f} | {max(times):.2f} | "
            f"{med / base:.2f}x | {requests} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--emulator", action="store_true", help="the bucket emulator, not moto")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[key]
    os.environ["PYTHONPATH"] = str(REPO)
    with tempfile.TemporaryDirectory(prefix="pack-bench-") as tmp:
        work = Path(tmp)
        live = work / "source" / "live"
        make_tree(live, args.files)
        bench = (emulator if args.emulator else moto)(work, live, args)
    load += " / " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = table(bench, args, load)
    print(text)
    if args.out:
        with open(args.out, "a") as out:
            out.write("\n" + text)
    return 0


def runs(bench: Bench, live: Path, gets: Callable[[], None], reps: int) -> None:
    """Everything after the checkpoint, in the same order on both targets."""
    source = bench.work / "source.toml"
    bench.restore("plain restore", live, 0)
    for _ in range(reps):
        bench.timed("32-thread GETs", gets)
    bench.timed("gc --apply (packing)", lambda: bench.cli(source, "gc", "--apply"))
    for rep in range(reps):
        bench.restore("packed restore", live, rep)
    for rep in range(reps):
        bench.background("packed run, background", live, rep)


def moto(work: Path, live: Path, args: argparse.Namespace) -> Bench:
    server = S3Server(work / "requests.log")
    try:
        os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=server.endpoint)
        bucket = server.bucket()
        bench = Bench(work, f"s3://{bucket}/agents", lambda: len(server.requests(bucket)))
        source = config(work, "source", bench.root)
        bench.timed("checkpoint", lambda: bench.cli(source, "checkpoint"))
        keys = [f"agents/tree/{p.relative_to(live)}" for p in live.rglob("*.json")]
        runs(bench, live, plain_gets(server, bucket, keys), args.reps)
    finally:
        server.stop()
    return bench


def emulator(work: Path, live: Path, args: argparse.Namespace) -> Bench:
    from tests.bucket_mount import BucketMount

    backing, mnt = work / "bucket", work / "mnt"
    with BucketMount(backing, mnt) as fast:  # the seeding checkpoint: no latency
        bench = Bench(work, str(fast.mountpoint), lambda: 0)
        bench.cli(config(work, "source", bench.root), "checkpoint")
    latency = {"latency_meta_ms": 2.0, "latency_list_ms": 50.0, "latency_commit_ms": 30.0}
    with BucketMount(backing, mnt, stats=True, **latency) as mount:  # type: ignore[arg-type]
        bench.count = lambda: sum(mount.stats().values())
        paths = [mnt / "tree" / p.relative_to(live) for p in live.rglob("*.json")]
        runs(bench, live, plain_reads(paths), args.reps)
    return bench


if __name__ == "__main__":
    sys.exit(main())
