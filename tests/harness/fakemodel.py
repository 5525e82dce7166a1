"""A fake model server on 127.0.0.1 for the real harness CLIs.

Owns the wire formats the harnesses speak, reduced to a text reply: OpenAI
Responses (streaming SSE: Codex), OpenAI Chat Completions (streaming and not:
opencode, OpenClaw, Hermes), Anthropic Messages (SSE or JSON: Claude Code) and
the Gemini API (``generateContent`` / ``streamGenerateContent``: Gemini CLI).
Every reply carries a unique token (``R<n>-<hex>``), and every request is
recorded (path, headers, JSON body, the token replied), so a test can read back
whether a resumed turn's request carried the earlier turns' prompts and replies.

It listens on 127.0.0.1 only, on a port the kernel picks, and never makes a
request itself.  Start and stop it with ``with FakeModel() as server:``.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import secrets
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

MODEL = "fake-model"


@attrs.frozen
class Request:
    """One request the server received, and the token of its reply (if it replied)."""

    seq: int
    time: float
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text
    raw: str
    reply: str | None
    api: str

    def __str__(self) -> str:
        return (
            f"#{self.seq} {self.method} {self.path} [{self.api}] -> {self.reply}: {self.raw[:600]}"
        )


def new_token(prefix: str) -> str:
    """A token no harness could produce by chance (and easy to grep for)."""
    return f"{prefix}{secrets.token_hex(5).upper()}"


class FakeModel:
    """The server: ``url``, ``requests`` (in arrival order), ``log()`` for failures."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._stalling = False
        self._release = threading.Event()
        self.held = threading.Event()  # set when a model request waits in `stalled()`
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fakemodel", kwargs={"poll_interval": 0.1}
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @contextlib.contextmanager
    def stalled(self) -> Iterator[threading.Event]:
        """Model requests wait (a turn stays in flight) until the block ends; yields the
        event set once one is waiting."""
        self.held.clear()
        self._release.clear()
        self._stalling = True
        try:
            yield self.held
        finally:
            self._stalling = False
            self._release.set()

    def wait_if_stalled(self) -> None:
        if self._stalling:
            self.held.set()
            self._release.wait(timeout=900)

    def escapes(self) -> list[Request]:
        """Requests that were meant for another host (sent here through the proxy
        variables the suite sets): none of them left the machine."""
        with self._lock:
            return [r for r in self.requests if r.api == "escape"]

    def record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def next_seq(self) -> int:
        with self._lock:
            return next(self._seq)

    def since(self, mark: int) -> list[Request]:
        """Requests that arrived after `mark` (a value of ``len(server.requests)``)."""
        with self._lock:
            return self.requests[mark:]

    def model_requests(self, mark: int = 0) -> list[Request]:
        return [r for r in self.since(mark) if r.reply is not None]

    def log(self) -> str:
        with self._lock:
            return "\n".join(map(str, self.requests)) or "(no requests)"


# -- replies per API ------------------------------------------------------


def _sse(events: list[tuple[str | None, Any]]) -> Iterator[bytes]:
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        yield (f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode()


def _responses(body: dict[str, Any], text: str) -> tuple[str, Any]:
    rid, mid = f"resp_{secrets.token_hex(8)}", f"msg_{secrets.token_hex(8)}"
    item = {
        "type": "message",
        "id": mid,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    base = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "model": body.get("model", MODEL),
        "status": "in_progress",
        "output": [],
    }
    done = {**base, "status": "completed", "output": [item], "usage": usage}
    if not body.get("stream"):
        return "json", done
    started = {**item, "status": "in_progress", "content": []}
    return "sse", list(
        _sse(
            [
                ("response.created", {"type": "response.created", "response": base}),
                (
                    "response.output_item.added",
                    {"type": "response.output_item.added", "output_index": 0, "item": started},
                ),
                (
                    "response.output_text.delta",
                    {
                        "type": "response.output_text.delta",
                        "item_id": mid,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": text,
                    },
                ),
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": 0, "item": item},
                ),
                ("response.completed", {"type": "response.completed", "response": done}),
            ]
        )
    )


def _chat(body: dict[str, Any], text: str) -> tuple[str, Any]:
    cid, created = f"chatcmpl-{secrets.token_hex(8)}", int(time.time())
    model = body.get("model", MODEL)
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if not body.get("stream"):
        return "json", {
            "id": cid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "usage": usage,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "logprobs": None,
                    "message": {"role": "assistant", "content": text},
                }
            ],
        }

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    last = chunk({}, "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        tail = [(None, last), (None, {**chunk({}, None), "choices": [], "usage": usage})]
    else:
        tail = [(None, {**last, "usage": usage})]
    return "sse", list(
        _sse(
            [
                (None, chunk({"role": "assistant", "content": ""}, None)),
                (None, chunk({"content": text}, None)),
                *tail,
                (None, "[DONE]"),
            ]
        )
    )


def _anthropic(body: dict[str, Any], text: str) -> tuple[str, Any]:
    mid = f"msg_{secrets.token_hex(8)}"
    model = body.get("model", MODEL)
    usage = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    message = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    if not body.get("stream"):
        return "json", message
    return "sse", list(
        _sse(
            [
                (
                    "message_start",
                    {
                        "type": "message_start",
                        "message": {
                            **message,
                            "content": [],
                            "stop_reason": None,
                            "usage": {**usage, "output_tokens": 1},
                        },
                    },
                ),
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                ),
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": text},
                    },
                ),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": 5},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ]
        )
    )


def _gemini(path: str, text: str) -> tuple[str, Any]:
    reply = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": MODEL,
    }
    if ":streamGenerateContent" in path:
        return "sse", list(_sse([(None, reply)]))
    return "json", reply


def from_schema(schema: Any, text: str) -> Any:
    """A value that fits a JSON schema (JSON-mode requests: routers, classifiers, titles)."""
    if not isinstance(schema, dict):
        return text
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return from_schema(schema[key][0], text)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind or ("object" if "properties" in schema else "string")).lower()
    if kind == "object":
        return {k: from_schema(v, text) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [from_schema(schema.get("items"), text)]
    if kind in ("integer", "number"):
        return max(1, int(schema.get("minimum", 1)))
    if kind == "boolean":
        return False
    return text


def _json_schema(body: dict[str, Any]) -> Any:
    """The schema a request asks its reply to follow, if any (per API)."""
    gen = body.get("generationConfig") or {}
    fmt = (body.get("text") or {}).get("format") or {}
    chat = (body.get("response_format") or {}).get("json_schema") or {}
    return (
        gen.get("responseJsonSchema")
        or gen.get("responseSchema")
        or fmt.get("schema")
        or chat.get("schema")
    )


def _api(method: str, path: str) -> str:
    p = path.split("?", 1)[0]
    if method == "POST" and p.endswith("/responses"):
        return "responses"
    if method == "POST" and p.endswith("/chat/completions"):
        return "chat"
    if method == "POST" and p.endswith("/messages"):
        return "anthropic"
    if method == "POST" and p.endswith("/count_tokens"):
        return "anthropic-count"
    if method == "POST" and (":generateContent" in p or ":streamGenerateContent" in p):
        return "gemini"
    if method == "POST" and ":countTokens" in p:
        return "gemini-count"
    if method == "GET" and p.rstrip("/").endswith("/models"):
        return "models"
    return "other"


def _decode(raw: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(raw)
    if encoding == "deflate":
        return zlib.decompress(raw)
    return raw


def _handler(server: FakeModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the request log is the record

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_HEAD(self) -> None:
            self._serve("HEAD")

        def do_CONNECT(self) -> None:  # a client honouring HTTPS_PROXY: refuse the tunnel
            server.record(
                Request(
                    server.next_seq(), time.time(), "CONNECT", self.path, {}, "", "", None, "escape"
                )
            )
            self._send(403, "text/plain", b"fake model server: no requests leave this machine")
            self.close_connection = True

        def _body(self) -> tuple[Any, str]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not length and self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                raw = self._chunked()
            try:
                raw = _decode(raw, self.headers.get("Content-Encoding", "").lower())
            except (OSError, zlib.error):
                pass
            text = raw.decode("utf-8", "replace")
            try:
                return json.loads(text), text
            except ValueError:
                return text, text

        def _chunked(self) -> bytes:
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()

        def _serve(self, method: str) -> None:
            body, raw = self._body()
            api = (
                "escape"
                if self.path.startswith(("http://", "https://"))
                else _api(method, self.path)
            )
            seq = server.next_seq()
            reply: str | None = None
            kind, payload = "json", {}
            if api in ("responses", "chat", "anthropic", "gemini"):
                reply = new_token(f"R{seq}-")
                server.wait_if_stalled()
                data = body if isinstance(body, dict) else {}
                schema = _json_schema(data)
                text = (
                    json.dumps(from_schema(schema, reply))
                    if schema is not None
                    else f"Noted. {reply}"
                )
                kind, payload = (
                    _responses(data, text)
                    if api == "responses"
                    else _chat(data, text)
                    if api == "chat"
                    else _anthropic(data, text)
                    if api == "anthropic"
                    else _gemini(self.path, text)
                )
            elif api == "anthropic-count":
                payload = {"input_tokens": 10}
            elif api == "gemini-count":
                payload = {"totalTokens": 10}
            elif api == "models":
                payload = {
                    "object": "list",
                    "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "fake"}],
                    "models": [{"name": f"models/{MODEL}", "slug": MODEL}],
                }
            server.record(
                Request(
                    seq,
                    time.time(),
                    method,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                    raw,
                    reply,
                    api,
                )
            )
            if api in ("other", "escape"):
                self._send(
                    404,
                    "application/json",
                    json.dumps(
                        {"error": {"message": f"fake model server: no route {self.path}"}}
                    ).encode(),
                )
            elif kind == "json":
                self._send(200, "application/json", json.dumps(payload).encode())
            else:
                self._stream(payload)

        def _send(self, code: int, ctype: str, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _stream(self, events: list[bytes]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for event in events:
                self.wfile.write(event)
            self.wfile.flush()

    return Handler
