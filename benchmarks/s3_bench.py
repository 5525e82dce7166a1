"""syncengine straight to S3 against ``rclone copy`` and against syncengine through an
rclone mount of the bucket, on the same local S3 server.

``python benchmarks/s3_bench.py [--files 5000] [--bytes 200M] [--big 20M,35M,50M]
[--reps 3] [--out benchmarks/RESULTS.md] [--plot benchmarks/s3_bench.png]`` starts
moto's S3 server on 127.0.0.1 (the one the tests use: tests/s3server.py),
generates a realistic agent tree (gen_tree.py) plus a few large files, and times,
side by side in one run, three ways of keeping the tree in a bucket:

- ``syncengine`` with ``durable_root = "s3://BUCKET/agents"`` (the S3 API);
- ``rclone copy`` of the tree to another bucket (what a user would pick instead);
- ``syncengine`` with its durable root on ``rclone mount`` of a third bucket
  (``--vfs-cache-mode off``: close is the upload, so the time is the time until
  the bytes are in the bucket; the mode a user of the design's hf-mount-like
  setup runs).

Scenarios: a full checkpoint (a fresh prefix and state per repetition), an idle
checkpoint, a one-line append to one transcript, and a full restore into an
empty directory.  Each row is the median of ``--reps`` runs: wall time, peak RSS
of the process (GNU time) and the requests the server logged.  With ``--plot``
it draws the medians (needs matplotlib: ``pip install -e '.[bench]'``).  It
writes nothing outside a temp directory but the table to ``--out`` and the plot.
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
from collections.abc import Iterator
from pathlib import Path

from bench_tools import Sample, run_timed
from gen_tree import generate, mutate, parse_size

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.s3server import CREDENTIALS, S3Server  # noqa: E402

TOOLS = ("syncengine S3", "rclone copy", "syncengine on rclone mount")
SCENARIOS = ("full checkpoint", "idle checkpoint", "1-line append", "full restore")
# moto answers 400 to the ``HEAD ?versionId=null`` that ends rclone 1.60's streamed
# multipart upload (what a mount in cache mode off does with a file over the cutoff,
# 100 KiB by default): above every file here, so each upload is one PUT, as
# `rclone copy`'s are (below its 200 MiB upload cutoff).
STREAMING_CUTOFF = "64M"
Row = tuple[str, str, Sample, int]  # tool, scenario, one run, requests it made


def _config(path: Path, local: Path, state: Path, durable: str) -> Path:
    path.write_text(
        f"local_root = {json.dumps(str(local))}\n"
        f"durable_root = {json.dumps(durable)}\n"
        f"state_dir = {json.dumps(str(state))}\n"
        "adapters = []\n\n"
        '[[adapter]]\nname = "tree"\nlive = "."\ndurable = "tree"\n'
    )
    return path


class Bench:
    def __init__(self, work: Path, server: S3Server) -> None:
        self.work, self.server = work, server
        self.rows: list[Row] = []
        for key in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[key]  # run_timed's children inherit this process's environment
        os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=server.endpoint, PYTHONPATH=str(REPO))
        self.remote = (
            f":s3,provider=Other,endpoint='{server.endpoint}',"
            "access_key_id=testing,secret_access_key=testing,region=us-east-1"
        )

    def run(self, tool: str, scenario: str, argv: list[str]) -> Sample:
        before = len(self.server.requests())
        name = f"{tool}-{scenario}".replace(" ", "_")
        sample = run_timed(argv, self.work / f"{name}.out", self.work / f"{name}.err")
        if sample.returncode != 0:
            err = (self.work / f"{name}.err").read_text()[-2000:]
            raise SystemExit(f"{tool} {scenario} failed (exit {sample.returncode}): {err}")
        self.rows.append((tool, scenario, sample, len(self.server.requests()) - before))
        return sample

    def syncengine(self, config: Path, verb: str) -> list[str]:
        return [sys.executable, "-m", "syncengine", "--config", str(config), "-q", verb]

    def rclone(self, src: str, dst: str) -> list[str]:
        src = src.replace("REMOTE", self.remote)
        dst = dst.replace("REMOTE", self.remote)
        return ["rclone", "copy", "--config", "/dev/null", src, dst]

    @contextlib.contextmanager
    def mount(self, bucket: str) -> Iterator[Path]:
        """``rclone mount`` of `bucket` (cache mode off), unmounted on exit."""
        where = self.work / "mnt"
        where.mkdir()
        log = os.environ.get("S3BENCH_RCLONE_LOG", str(self.work / "rclone-mount.log"))
        proc = subprocess.Popen(
            ["rclone", "mount", f"{self.remote}:{bucket}", str(where), "--config", "/dev/null",
             "--vfs-cache-mode", "off", "--streaming-upload-cutoff", STREAMING_CUTOFF,
             "--log-file", log]
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while not os.path.ismount(where):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"rclone mount of {bucket} failed: see rclone-mount.log")
                time.sleep(0.05)  # polling the kernel's mount table: no event to wait on
            yield where
        finally:
            subprocess.run(["fusermount3", "-u", str(where)], check=False)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _big_files(live: Path, sizes: list[int]) -> None:
    for i, size in enumerate(sizes):
        path = live / "big" / f"blob-{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            left = size
            while left:
                chunk = min(left, 1 << 20)
                f.write(os.urandom(chunk))
                left -= chunk


def _round(bench: Bench, live: Path, mnt: Path, rep: int, seed: int) -> None:
    """One repetition of every scenario for the three tools, on fresh prefixes."""
    w = bench.work / f"rep{rep}"
    w.mkdir()
    prefix = f"agents{rep}"
    se = _config(w / "se.toml", live, w / "state-se", f"s3://bench-se/{prefix}")
    (mnt / prefix).mkdir()
    on_mount = _config(w / "mnt.toml", live, w / "state-mnt", str(mnt / prefix))
    copy_to = f"REMOTE:bench-rclone/{prefix}/tree"
    for scenario in SCENARIOS[:3]:
        if scenario == "1-line append":
            mutate(live, 1, seed + rep)
        bench.run(TOOLS[0], scenario, bench.syncengine(se, "checkpoint"))
        bench.run(TOOLS[1], scenario, bench.rclone(str(live), copy_to))
        bench.run(TOOLS[2], scenario, bench.syncengine(on_mount, "checkpoint"))
    for tool, config in ((TOOLS[0], se), (TOOLS[2], on_mount)):
        target = w / f"restored-{tool.split()[-1]}"
        target.mkdir()
        text = config.read_text().replace(json.dumps(str(live)), json.dumps(str(target)))
        restore = w / f"restore-{target.name}.toml"
        restore.write_text(text.replace("state-", "restore-state-"))
        bench.run(tool, "full restore", bench.syncengine(restore, "restore"))
        _same(live, target, tool)
        if tool == TOOLS[0]:  # rclone copy back, between the two
            back = bench.rclone(copy_to, str(w / "restored-rclone"))
            bench.run(TOOLS[1], "full restore", back)
            _same(live, w / "restored-rclone", TOOLS[1])


def _same(live: Path, restored: Path, tool: str) -> None:
    """Stop the benchmark when a restore did not bring back every file and byte."""
    want, got = _totals(live), _totals(restored)
    if want != got:
        raise SystemExit(f"{tool}: restored {got} (files, bytes), the tree has {want}")


def _totals(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file() and ".syncengine" not in p.parts]
    return len(files), sum(p.stat().st_size for p in files)


def medians(rows: list[Row]) -> dict[tuple[str, str], tuple[float, float | None, int]]:
    """(tool, scenario) -> median wall s, median peak RSS MiB, median requests."""
    out = {}
    for tool in TOOLS:
        for scenario in SCENARIOS:
            runs = [r for r in rows if r[0] == tool and r[1] == scenario]
            if not runs:
                continue
            rss = [r[2].maxrss_kb / 1024 for r in runs if r[2].maxrss_kb]
            out[(tool, scenario)] = (
                statistics.median(r[2].seconds for r in runs),
                statistics.median(rss) if rss else None,
                int(statistics.median(r[3] for r in runs)),
            )
    return out


def _table(rows: list[Row], args: argparse.Namespace) -> str:
    lines = [
        f"## S3: syncengine vs rclone copy vs syncengine on an rclone mount "
        f"({time.strftime('%Y-%m-%d')}, {platform.node()}, moto on 127.0.0.1)",
        "",
        f"Tree: {args.files} files, {args.bytes} plus large files {args.big}; "
        f"median of {args.reps}; load average at end {os.getloadavg()[0]:.2f}.",
        "",
        "| scenario | tool | wall s | peak RSS MiB | requests | wall / rclone copy |",
        "|---|---|---:|---:|---:|---:|",
    ]
    med = medians(rows)
    for scenario in SCENARIOS:
        for tool in TOOLS:
            if (tool, scenario) not in med:
                continue
            wall, rss, requests = med[(tool, scenario)]
            ratio = wall / med[(TOOLS[1], scenario)][0]
            mib = f"{rss:.0f}" if rss else "-"
            lines.append(f"| {scenario} | {tool} | {wall:.2f} | {mib} | {requests} | {ratio:.2f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib  # only for the benchmark: pip install -e '.[bench]'

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = medians(rows)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(TOOLS)
    for i, tool in enumerate(TOOLS):
        xs = [j + i * width for j in range(len(SCENARIOS))]
        ys = [med.get((tool, s), (0.0, None, 0))[0] for s in SCENARIOS]
        ax.bar(xs, ys, width, label=tool)
    ax.set_xticks([j + width for j in range(len(SCENARIOS))], SCENARIOS)
    ax.set_yscale("log")
    ax.set_ylabel("wall time (s, median)")
    ax.set_title("Keeping an agent tree in a bucket (moto S3 on 127.0.0.1)")
    ax.legend()
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--bytes", default="200M")
    parser.add_argument("--big", default="20M,35M,50M")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    for tool in ("rclone", "fusermount3"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (apt-get install rclone fuse3)")
    with tempfile.TemporaryDirectory(prefix="s3bench-") as tmp:
        work = Path(tmp)
        live = work / "live"
        generate(live, args.files, parse_size(args.bytes), args.seed)
        _big_files(live, [parse_size(s) for s in args.big.split(",") if s])
        server = S3Server(work / "moto.log")
        try:
            for bucket in ("bench-se", "bench-rclone", "bench-mnt"):
                server.client().create_bucket(Bucket=bucket)
            bench = Bench(work, server)
            with bench.mount("bench-mnt") as mnt:
                for rep in range(args.reps):
                    _round(bench, live, mnt, rep, args.seed)
        finally:
            server.stop()
    table = _table(bench.rows, args)
    print(table)
    if args.out:
        with args.out.open("a") as f:
            f.write("\n" + table)
    if args.plot:
        plot(bench.rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
