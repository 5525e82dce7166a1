"""The HTTP endpoint of the runner's metrics: ``GET /metrics`` on an address it is given.

Owns the listening socket and its thread: `MetricsServer` binds ``HOST:PORT``
(port 0: the system picks one; `address` says which), answers ``/metrics``
with `Metrics.render` in the Prometheus text format (any other path: 404),
and `stop` shuts the server down, closes the socket and joins the thread.
Requests are answered one at a time on that thread: a scrape is small, and a
slow client cannot start threads.  Logs ``metrics.serving`` with the address.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from syncengine.config import split_address
from syncengine.errors import ConfigError

log = logging.getLogger("syncengine")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # the text exposition format


class MetricsServer:
    """Serve `render()` at ``/metrics`` on `address` until `stop`."""

    def __init__(self, address: str, render: Callable[[], str]) -> None:
        host, port = split_address(address)
        handler = type("Handler", (_Handler,), {"render": staticmethod(render)})
        family = 10 if ":" in host else 2  # AF_INET6 / AF_INET
        server_class = type("Server", (HTTPServer,), {"address_family": family})
        try:
            self._server = server_class((host, port), handler)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {address}: {exc.strerror or exc}: "
                "choose a free port, or an address of this machine"
            ) from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="syncengine-metrics", daemon=True
        )

    @property
    def address(self) -> str:
        """``HOST:PORT`` as bound (the port the system chose for port 0)."""
        host, port = self._server.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else str(host)
        return f"{shown}:{port}"

    def start(self) -> None:
        self._thread.start()
        log.info(
            "metrics.serving address=%s (GET /metrics)",
            self.address,
            extra={"event": "metrics.serving"},
        )

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    render: Callable[[], str]

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only /metrics is served here")
            return
        body = self.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics.request %s", format % args, extra={"event": "metrics.request"})


__all__ = ["CONTENT_TYPE", "MetricsServer"]
