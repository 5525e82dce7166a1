"""A real S3 server on 127.0.0.1 for the ``[s3]`` durable kind: moto's, in a child process.

`S3Server` runs ``python -m moto.server`` on a free local port (nothing outside
127.0.0.1), its request log in a file: `requests` reads the lines logged so far
(werkzeug logs a request before it sends the response, so a request the client
saw answered is in the log).  A child process, not moto's ThreadedMotoServer:
its connection threads would outlive the test that opened them.  `bucket` makes
a new, empty bucket; `location` is an `S3Location` of a prefix in it with dummy
credentials, which moto accepts (set ``AWS_EC2_METADATA_DISABLED`` so no client
asks a metadata service).
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from syncengine.durable.s3.location import S3Location

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
# werkzeug colours every status but 200 (204, 206, 404...) with ANSI codes inside the quotes
_ANSI = r"(?:\x1b\[[\d;]*m)*"
_LINE = re.compile(rf'"{_ANSI}(GET|PUT|POST|DELETE|HEAD) (\S+) HTTP/[\d.]+{_ANSI}" (\d+)')
_names = itertools.count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """moto's S3 server in a child process, with its request log."""

    def __init__(self, log: Path, env: dict[str, str] | None = None) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {**os.environ, **CREDENTIALS, **(env or {})}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + 60
        while True:  # wait for the listening socket (or the child's death)
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited: {log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def client(self) -> Any:
        """A botocore client, for the tests' own setup and inspection."""
        import botocore.session

        return botocore.session.Session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

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
        """(method, path, status) of every request logged so far (to `bucket` only)."""
        out = []
        for m in _LINE.finditer(self.log.read_text(errors="replace")):
            method, path, status = m.group(1), m.group(2), int(m.group(3))
            if bucket is None or path.split("?")[0].split("/")[1] == bucket:
                out.append((method, path, status))
        return out


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    pytest.importorskip("moto.server", reason="moto[server] is not installed (test extra)")
    server = S3Server(tmp_path_factory.mktemp("moto") / "requests.log")
    try:
        yield server
    finally:
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
