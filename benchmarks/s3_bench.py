"""syncengine straight to S3 against ``rclone copy``, on the same local S3 server.

``python benchmarks/s3_bench.py [--files 5000] [--bytes 200M] [--big 20M,35M,50M]
[--out benchmarks/RESULTS.md]`` starts moto's S3 server on 127.0.0.1 (the one the
tests use: tests/s3server.py), generates a realistic agent tree (gen_tree.py) plus a
few large files, and times, side by side in one run:

- a full checkpoint of the tree: ``syncengine checkpoint`` with
  ``durable_root = "s3://bench-se/agents"`` against ``rclone copy`` to another
  bucket of the same server;
- an idle checkpoint and a one-line append to one transcript (syncengine; rclone
  copy of the same tree again, which lists the bucket to find nothing to do);
- a full restore into an empty directory (``syncengine restore`` against
  ``rclone copy`` back).

Each row has wall time, peak RSS of the process (GNU time) and the number of
requests the server logged.  It writes nothing outside a temp directory, and
nothing but the table to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_tools import Sample, run_timed
from gen_tree import generate, mutate, parse_size

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.s3server import CREDENTIALS, S3Server  # noqa: E402


def _config(path: Path, local: Path, state: Path, bucket: str) -> Path:
    path.write_text(
        f"local_root = {json.dumps(str(local))}\n"
        f'durable_root = "s3://{bucket}/agents"\n'
        f"state_dir = {json.dumps(str(state))}\n"
        "adapters = []\n\n"
        '[[adapter]]\nname = "tree"\nlive = "."\ndurable = "tree"\n'
    )
    return path


class Bench:
    def __init__(self, work: Path, server: S3Server) -> None:
        self.work, self.server = work, server
        self.rows: list[tuple[str, str, Sample, int]] = []
        for key in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[key]  # run_timed's children inherit this process's environment
        os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=server.endpoint, PYTHONPATH=str(REPO))

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
        remote = (
            f":s3,provider=Other,endpoint='{self.server.endpoint}',"
            "access_key_id=testing,secret_access_key=testing,region=us-east-1"
        )
        src = src.replace("REMOTE", remote)
        dst = dst.replace("REMOTE", remote)
        return ["rclone", "copy", "--config", "/dev/null", src, dst]


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


def _table(rows: list[tuple[str, str, Sample, int]], args: argparse.Namespace) -> str:
    lines = [
        f"## S3: syncengine vs rclone copy ({time.strftime('%Y-%m-%d')}, "
        f"{platform.node()}, moto on 127.0.0.1)",
        "",
        f"Tree: {args.files} files, {args.bytes} plus large files {args.big}; "
        f"load average at end {os.getloadavg()[0]:.2f}.",
        "",
        "| tool | scenario | wall s | peak RSS MiB | requests |",
        "|---|---|---:|---:|---:|",
    ]
    for tool, scenario, s, requests in rows:
        rss = f"{s.maxrss_kb / 1024:.0f}" if s.maxrss_kb else "-"
        lines.append(f"| {tool} | {scenario} | {s.seconds:.2f} | {rss} | {requests} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--bytes", default="200M")
    parser.add_argument("--big", default="20M,35M,50M")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if shutil.which("rclone") is None:
        raise SystemExit("rclone is not installed (apt-get install rclone)")
    with tempfile.TemporaryDirectory(prefix="s3bench-") as tmp:
        work = Path(tmp)
        live = work / "live"
        generate(live, args.files, parse_size(args.bytes), args.seed)
        _big_files(live, [parse_size(s) for s in args.big.split(",") if s])
        server = S3Server(work / "moto.log")
        try:
            for bucket in ("bench-se", "bench-rclone"):
                server.client().create_bucket(Bucket=bucket)
            bench = Bench(work, server)
            config = _config(work / "se.toml", live, work / "state", "bench-se")
            bench.run("syncengine", "full checkpoint", bench.syncengine(config, "checkpoint"))
            bench.run(
                "rclone copy",
                "full checkpoint",
                bench.rclone(str(live), "REMOTE:bench-rclone/agents/tree"),
            )
            bench.run("syncengine", "idle checkpoint", bench.syncengine(config, "checkpoint"))
            bench.run(
                "rclone copy",
                "idle checkpoint",
                bench.rclone(str(live), "REMOTE:bench-rclone/agents/tree"),
            )
            mutate(live, 1, args.seed)
            bench.run("syncengine", "1-line append", bench.syncengine(config, "checkpoint"))
            bench.run(
                "rclone copy",
                "1-line append",
                bench.rclone(str(live), "REMOTE:bench-rclone/agents/tree"),
            )
            target = work / "restored-se"
            target.mkdir()
            restore_cfg = _config(work / "re.toml", target, work / "state-re", "bench-se")
            bench.run("syncengine", "full restore", bench.syncengine(restore_cfg, "restore"))
            bench.run(
                "rclone copy",
                "full restore",
                bench.rclone("REMOTE:bench-rclone/agents/tree", str(work / "restored-rc")),
            )
        finally:
            server.stop()
    table = _table(bench.rows, args)
    print(table)
    if args.out:
        with args.out.open("a") as f:
            f.write("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
