"""Pools of realistic JSON lines, built once per seed and sliced into files.

Building a few megabytes of lines once and writing slices of them is what
makes generating 100,000 files fast. The price is that content repeats across
files: an engine that deduplicates or compresses will look better on this
tree than on real transcripts. Each generated ``.jsonl`` file starts with one
unique header line (see ``tree_plan``), nothing more.

This module only builds bytes in memory; it touches no file.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import time
import uuid
from collections.abc import Callable

EPOCH_END_NS = 1_795_824_000 * 10**9  # 2026-11-28T00:00:00Z: dates count back from here
DAY_NS = 86_400 * 10**9
POOL_BYTES = 4 * 2**20
_WORDS_TEXT = """
the a to of and in is for that with this it on be as are was by file function
return value error test config path state index checkpoint restore durable
local tree session rollout transcript agent tool call output input user
assistant model token cache read write append rename fsync mount bucket object
manifest segment snapshot sqlite wal journal lock thread event queue retry
timeout signal process exit status code python rust node bash git diff commit
branch merge patch import class def self none true false list dict string
bytes int float async await let me check the failing test first then update
the implementation I will run pytest again after fixing the import order in
module src/engine/scan.py tests/test_index.py README.md pyproject.toml
Traceback (most recent call last): AssertionError: expected 3 got 2
"""
WORDS = _WORDS_TEXT.split()
NAME_WORDS = [w for w in WORDS if w.isalpha() and w.islower()]


def iso(ns: int) -> str:
    """UTC ISO-8601 with milliseconds, as the harnesses write it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + ".000Z"


def text(rng: random.Random, n_words: int) -> str:
    """Plausible prose-and-code words; no quotes or backslashes (JSON-safe)."""
    return " ".join(rng.choices(WORDS, k=max(1, n_words)))


def _words_in_line(rng: random.Random) -> int:
    """Heavy-tailed words per line: mostly chat-sized, some tool outputs."""
    if rng.random() < 0.08:
        return int(rng.lognormvariate(math.log(900), 0.8))
    return int(rng.lognormvariate(math.log(35), 0.9))


def _codex_line(rng: random.Random, ts: str) -> dict[str, object]:
    kind = rng.random()
    call_id = f"call_{rng.getrandbits(96):024x}"
    if kind < 0.35:
        payload: dict[str, object] = {
            "type": "message",
            "role": rng.choice(["assistant", "user"]),
            "content": [{"type": "output_text", "text": text(rng, _words_in_line(rng))}],
        }
    elif kind < 0.6:
        cmd = ["bash", "-lc", text(rng, rng.randint(2, 12))]
        payload = {
            "type": "function_call",
            "name": "shell",
            "arguments": json.dumps({"command": cmd}),
            "call_id": call_id,
        }
    elif kind < 0.85:
        payload = {
            "type": "function_call_output",
            "call_id": call_id,
            "output": text(rng, _words_in_line(rng)),
        }
    else:
        return {
            "timestamp": ts,
            "type": "event_msg",
            "payload": {"type": "token_count", "input_tokens": rng.randint(1, 200_000)},
        }
    return {"timestamp": ts, "type": "response_item", "payload": payload}


def _claude_line(rng: random.Random, ts: str) -> dict[str, object]:
    role = rng.choice(["user", "assistant"])
    return {
        "parentUuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/agent/src/project",
        "version": "2.0.31",
        "type": role,
        "message": {
            "role": role,
            "content": [{"type": "text", "text": text(rng, _words_in_line(rng))}],
        },
        "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "timestamp": ts,
    }


def _gemini_line(rng: random.Random, ts: str) -> dict[str, object]:
    kind = rng.choice(["user", "gemini", "gemini", "tool"])
    return {
        "id": f"{rng.getrandbits(64):016x}",
        "timestamp": ts,
        "type": kind,
        "content": text(rng, _words_in_line(rng)),
    }


def generic_line(rng: random.Random, ts: str) -> dict[str, object]:
    """A plain chat record, also what `gen_tree.mutate` appends."""
    role = rng.choice(["user", "assistant", "tool"])
    return {"ts": ts, "role": role, "text": text(rng, _words_in_line(rng))}


LINE_MAKERS: dict[str, Callable[[random.Random, str], dict[str, object]]] = {
    "codex": _codex_line,
    "claude": _claude_line,
    "gemini": _gemini_line,
    "generic": generic_line,
}


class LinePool:
    """A buffer of complete JSON lines, doubled so any slice is contiguous."""

    def __init__(self, flavor: str, seed: int, size: int = POOL_BYTES) -> None:
        rng = random.Random(f"{seed}:pool:{flavor}")
        make = LINE_MAKERS[flavor]
        lines: list[bytes] = []
        total = 0
        ts_ns = EPOCH_END_NS - 30 * DAY_NS
        while total < size:
            ts_ns += rng.randint(10**8, 10**11)
            line = json.dumps(make(rng, iso(ts_ns)), separators=(",", ":")).encode() + b"\n"
            lines.append(line)
            total += len(line)
        buf = b"".join(lines)
        self.size = len(buf)
        self.view = memoryview(buf + buf)
        ends: list[int] = []
        offset = 0
        for line in lines:
            offset += len(line)
            ends.append(offset)
        self.starts = [0, *ends[:-1]]
        self.ends2 = ends + [e + self.size for e in ends]

    def fill(self, rng: random.Random, goal: int) -> list[memoryview]:
        """Whole lines totalling as close to ``goal`` bytes as line ends allow."""
        if goal <= 0:
            return []
        chunks = [self.view[: self.size]] * (goal // self.size)
        rest = goal % self.size
        if rest:
            start = self.starts[rng.randrange(len(self.starts))]
            want = start + rest
            j = bisect.bisect_left(self.ends2, want)
            end = self.ends2[j]
            if j > 0 and self.ends2[j - 1] > start and want - self.ends2[j - 1] < end - want:
                end = self.ends2[j - 1]
            chunks.append(self.view[start:end])
        return chunks


class Pools:
    """All line pools plus a plain-text buffer for padding JSON documents."""

    def __init__(self, seed: int) -> None:
        self.lines = {flavor: LinePool(flavor, seed) for flavor in LINE_MAKERS}
        rng = random.Random(f"{seed}:words")
        words = text(rng, 200_000)
        self.text = words + " " + words

    def pad(self, rng: random.Random, n: int) -> str:
        """``n`` characters of JSON-safe text, to size a JSON document."""
        half = len(self.text) // 2
        if n <= 0:
            return ""
        if n > half:
            return (self.text[:half] * (n // half + 1))[:n]
        start = rng.randrange(half)
        return self.text[start : start + n]
