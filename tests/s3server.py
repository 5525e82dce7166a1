"""A real S3 server on 127.0.0.1 for the ``[s3]`` durable kind: moto's, in a child process.

`S3Server` runs ``python -m moto.server`` on a port the OS picks (nothing outside
127.0.0.1), its request log in a file: `requests` reads the lines logged so far
(werkzeug logs a request before it sends the response, so a request the client
saw answered is in the log).  A child process, not moto's ThreadedMotoServer:
its connection threads would outlive the test that opened them.  `bucket` makes
a new, empty bucket; `location` is an `S3Location` of a prefix in it with dummy
credentials, which moto accepts (set ``AWS_EC2_METADATA_DISABLED`` so no client
asks a metadata service).
"""

from __future__ import annotations

import gc
import itertools
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from syncengine.config.s3location import S3Location

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
# werkzeug colours every status but 200 (204, 206, 404...) with ANSI codes inside the quotes
_ANSI = r"(?:\x1b\[[\d;]*m)*"
_LINE = re.compile(rf'"{_ANSI}(GET|PUT|POST|DELETE|HEAD) (\S+) HTTP/[\d.]+{_ANSI}" (\d+)')
_RUNNING = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")
_names = itertools.count()


class S3Server:
    """moto's S3 server in a child process, with its request log."""

    def __init__(self, log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._read = 0  # bytes of the log parsed so far
        self._seen: list[tuple[str, str, int]] = []
        self._client: Any = None
        env = {**os.environ, **CREDENTIALS, **(env or {})}
        with open(log, "wb") as out:  # port 0: the OS picks a free one, moto logs which
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.port = self._listening_port(time.monotonic() + 60)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _listening_port(self, deadline: float) -> int:
        """The port of moto's ``Running on http://127.0.0.1:PORT`` line (or its death)."""
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited: {self.log.read_text()[-2000:]}")
            found = _RUNNING.search(self.log.read_text(errors="replace"))
            if found:
                return int(found.group(1))
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)  # polling the log, which says when

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def client(self) -> Any:
        """A botocore client, for the tests' own setup and inspection: one per server,
        made on first use (making one costs about 70 ms of CPU, and every `Tree.raw`
        asks for it)."""
        if self._client is None:
            import botocore.session

            self._client = botocore.session.Session().create_client(
                "s3",
                endpoint_url=self.endpoint,
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
        return self._client

    def bucket(self) -> str:
        name = f"bucket-{next(_names)}"
        self.client().create_bucket(Bucket=name)
        return name

    def location(self, bucket: str, prefix: str = "") -> S3Location:
        return S3Location(
            bucket,
            prefix,
            endpoint=self.endpoint,
            region="us-east-1",
            access_key_id="testing",
            secret_access_key="testing",
        )

    def requests(self, bucket: str | None = None) -> list[tuple[str, str, int]]:
        """(method, path, status) of every request logged so far (to `bucket` only).
        Reads only what the log gained since the last call: tests poll it in loops, and
        the session's log holds every test's requests."""
        with open(self.log, "rb") as f:
            f.seek(self._read)
            new = f.read()
        whole = new[: new.rfind(b"\n") + 1]  # a line still being written: next time
        self._read += len(whole)
        for m in _LINE.finditer(whole.decode(errors="replace")):
            self._seen.append((m.group(1), m.group(2), int(m.group(3))))
        if bucket is None:
            return list(self._seen)
        return [r for r in self._seen if r[1].split("?")[0].split("/")[1] == bucket]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    pytest.importorskip("moto.server", reason="moto[server] is not installed (test extra)")
    server = S3Server(tmp_path_factory.mktemp("moto") / "requests.log")
    try:
        yield server
    finally:
        # Engines a test dropped without close() may still sit in reference cycles: their
        # interpreter-exit release would retry against the stopped server (seconds each,
        # `lease.release-failed` at the worker's exit). Collected now, they release nothing.
        gc.collect()
        server.stop()


FLAKY = r"""
import http.client, http.server, sys
upstream_port, every = int(sys.argv[1]), int(sys.argv[2])
count = 0
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def handle_one_request(self):
        global count
        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline or not self.parse_request():
            self.close_connection = True
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        count += 1
        if every == 0 or count % every:  # refused: throttled, as S3 says it
            error = b"<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>"
            self.send_response(503, "Service Unavailable")
            self.send_header("Content-Length", str(len(error)))
            self.end_headers()
            self.wfile.write(error)
            return
        conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
        conn.request(self.command, self.path, body, dict(self.headers))
        answer = conn.getresponse()
        data = answer.read()
        self.send_response(answer.status, answer.reason)
        for k, v in answer.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class Flaky:
    """A proxy in front of `server` that answers 503 SlowDown to all but every
    `every`-th request (0: to every request), in a child process."""

    def __init__(self, server: S3Server, every: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FLAKY, str(server.port), str(every)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.endpoint = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
