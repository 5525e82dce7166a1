"""The lease's cost (S3 requests per pass) and the handover time, on moto on 127.0.0.1.

Counts the requests moto logs, split into those on the lease's objects
(``.syncengine/lease/``) and all others, for what an instance does:

- an embedded engine (what the daemon runs) holding the lease: an idle pass, a
  one-line append while the lease is fresh, the same append once the lease was
  last confirmed more than ``lease_seconds / 4`` ago (one check), and a pass
  when renewal is due; then an idle daemon over one whole ``lease_seconds``;
- a one-shot ``syncengine checkpoint`` of a one-line append (takes the lease,
  releases it at its end);

with a 12 s lease, so the windows are a few seconds.  Handover, median of
``--reps`` runs: a holder (``syncengine run -- sleep``) is stopped while a
new instance's ``restore`` waits for it; the time from the
signal to the new instance's exit, after SIGTERM (final checkpoint, release)
and after SIGKILL (the lease expires: ``--lease-seconds``), and the time of a
``restore --takeover`` next to a live holder against a plain ``restore`` with no
holder.  Short leases keep a run to a minute; request counts do not depend on
the lease's length (only how often renewals come: every third of it).

    python benchmarks/lease_bench.py --reps 5 [--out benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from syncengine import Engine, load_config  # noqa: E402
from syncengine.durable import lease  # noqa: E402
from tests.s3server import CREDENTIALS, S3Server  # noqa: E402


class Counter:
    """Requests to one bucket since the last `take`: (on lease objects, all others)."""

    def __init__(self, server: S3Server, bucket: str) -> None:
        self.server, self.bucket, self.seen = server, bucket, 0

    def take(self) -> tuple[int, int]:
        got = self.server.requests(self.bucket)
        new, self.seen = got[self.seen :], len(got)
        on_lease, after_lease = 0, False
        for method, path, _status in new:
            # a delete is a HEAD of the key, then a POST ?delete naming it in its body
            deleting = method == "POST" and path.endswith("?delete")
            lease_request = "lease" in path or (deleting and after_lease)
            on_lease += lease_request
            after_lease = "lease" in path and method == "HEAD"
        return on_lease, len(new) - on_lease


def _config(work: Path, who: str, bucket: str, **extra: float) -> Path:
    local = work / f"local-{who}"
    (local / "x").mkdir(parents=True, exist_ok=True)
    path = work / f"{who}.toml"
    path.write_text(
        f"local_root = {json.dumps(str(local))}\n"
        f'durable_root = "s3://{bucket}/data"\n'
        f"state_dir = {json.dumps(str(work / f'state-{who}'))}\n"
        "adapters = []\n"
        + "".join(f"{k} = {v}\n" for k, v in extra.items())
        + '\n[[adapter]]\nname = "x"\nlive = "x"\ndurable = "state/x"\n'
    )
    return path


def per_pass(work: Path, server: S3Server, lease_seconds: float = 12) -> list[tuple[str, int, int]]:
    """Requests per pass; a 12 s lease keeps "check due" (a quarter) and "renewal due" (a
    third) apart by a second, more than a pass here takes."""
    bucket = server.bucket()
    count = Counter(server, bucket)
    conf = _config(work, "pass", bucket, lease_seconds=lease_seconds)
    eng = Engine(load_config(conf, env=os.environ))
    live = eng.config.adapters[0].live
    for i in range(50):
        (live / f"f{i}.txt").write_text(f"file {i}\n" * 20)
    log = live / "session.jsonl"
    log.write_text('{"turn": 0}\n')
    rows: list[tuple[str, int, int]] = []

    def row(name: str) -> None:
        assert eng.checkpoint().ok
        rows.append((name, *count.take()))

    row("first checkpoint (takes the lease)")
    row("idle pass")
    with log.open("a") as f:
        f.write('{"turn": 1}\n')
    row("1-line append, lease fresh")
    time.sleep(lease_seconds / 4 + 0.1)  # past the fresh window, before renewal is due
    with log.open("a") as f:
        f.write('{"turn": 2}\n')
    row("1-line append, lease last confirmed > lease_seconds/4 ago")
    time.sleep(lease_seconds / 3 + 0.1)  # renewal due
    row("idle pass, renewal due")
    start = time.monotonic()
    passes = 0
    while time.monotonic() - start < lease_seconds:  # a daemon's idle loop, 4 passes/s
        assert eng.checkpoint().ok
        passes += 1
        time.sleep(0.25)
    on_lease, others = count.take()
    rows.append((f"idle daemon over one lease_seconds ({passes} passes)", on_lease, others))
    eng.close()
    rows.append(("close (release)", *count.take()))
    cli = [sys.executable, "-m", "syncengine", "--config", str(conf), "-q", "checkpoint"]
    with log.open("a") as f:
        f.write('{"turn": 3}\n')
    subprocess.run(cli, check=True)
    rows.append(("one-shot `syncengine checkpoint`, 1-line append", *count.take()))
    return rows


def _wait_held(server: S3Server, bucket: str, pid: int) -> None:
    store_env = load_config(_config(Path(tempfile.mkdtemp()), "probe", bucket), env=os.environ)
    store = Engine(store_env).stores(store_env.durable_root)
    deadline = time.monotonic() + 30
    while True:
        record = lease.read(store).record
        if record is not None and record.holder.pid == pid and not record.released:
            return
        if time.monotonic() > deadline:
            raise SystemExit("the holder never took the lease")
        time.sleep(0.02)  # polling the bucket: no event to wait on


def handover(work: Path, server: S3Server, how: str, lease_seconds: float) -> float:
    bucket = server.bucket()
    se = [sys.executable, "-m", "syncengine", "--config"]
    old = _config(work, f"old-{how}-{bucket}", bucket, lease_seconds=lease_seconds)
    new = _config(work, f"new-{how}-{bucket}", bucket, lease_seconds=lease_seconds)
    if how == "no holder":
        t0 = time.perf_counter()
        subprocess.run([*se, str(new), "-q", "restore"], check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0
    holder = subprocess.Popen(
        [*se, str(old), "run", "--", "sleep", "600"], start_new_session=True
    )  # fmt: skip
    _wait_held(server, bucket, holder.pid)
    try:
        if how == "takeover":
            t0 = time.perf_counter()
            subprocess.run(
                [*se, str(new), "-q", "restore", "--takeover"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            return time.perf_counter() - t0
        waiting = subprocess.Popen(
            [*se, str(new), "-v", "restore"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        assert waiting.stderr is not None
        for line in waiting.stderr:  # the new instance is waiting: now stop the old one
            if b"lease.waiting" in line:
                break
        t0 = time.perf_counter()
        os.killpg(holder.pid, signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
        rest = waiting.communicate(timeout=120)[1]
        if waiting.returncode != 0:
            raise SystemExit(
                f"restore after {how} failed ({waiting.returncode}): {rest.decode()[-2000:]}"
            )
        return time.perf_counter() - t0
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--lease-seconds", type=float, default=4.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[key]
    with tempfile.TemporaryDirectory(prefix="leasebench-") as tmp:
        work = Path(tmp)
        server = S3Server(work / "moto.log")
        os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=server.endpoint, PYTHONPATH=str(REPO))
        try:
            rows = per_pass(work, server)
            times = {
                how: [handover(work, server, how, args.lease_seconds) for _ in range(args.reps)]
                for how in ("no holder", "takeover", "SIGTERM", "SIGKILL")
            }
        finally:
            server.stop()
    table = _table(rows, times, args)
    print(table)
    if args.out:
        with args.out.open("a") as f:
            f.write("\n" + table)
    return 0


def _table(
    rows: list[tuple[str, int, int]], times: dict[str, list[float]], args: argparse.Namespace
) -> str:
    lines = [
        f"`python benchmarks/lease_bench.py --reps {args.reps} "
        f"--lease-seconds {args.lease_seconds:g}` (moto on 127.0.0.1):",
        "",
        "| what | requests on the lease | other requests |",
        "|---|---|---|",
        *(f"| {name} | {on} | {other} |" for name, on, other in rows),
        "",
        f"| handover (median of {args.reps}) | seconds | runs |",
        "|---|---|---|",
    ]
    labels = {
        "no holder": "`restore`, no other holder (baseline)",
        "takeover": "`restore --takeover` next to a live holder",
        "SIGTERM": "holder SIGTERMed -> waiting `restore` done",
        "SIGKILL": f"holder SIGKILLed -> waiting `restore` done (lease {args.lease_seconds:g} s)",
    }
    for how, got in times.items():
        runs = ", ".join(f"{t:.2f}" for t in got)
        lines.append(f"| {labels[how]} | {statistics.median(got):.2f} | {runs} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
