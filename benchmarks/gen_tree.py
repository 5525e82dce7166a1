"""Generate a realistic, deterministic agent state tree for benchmarks.

The tree looks like a live ``$AM_LOCAL`` root holding the harnesses listed in
``shared/docs/harnesses.md``: Codex rollouts under ``sessions/YYYY/MM/DD``,
Claude Code project transcripts with subagents and tool results, Gemini chats,
OpenClaw sessions, opencode's many small JSON files, and Hermes config and
sessions. Credentials are mode 0600.

For a given ``(files, total_bytes, seed)`` the output is byte-for-byte
deterministic, including modes and mtimes. The file count is exact; the total
size tracks the target to within one JSON line (a carried deviation steers
each file's size), unless the target is below about 300 bytes per file, where
the per-file header lines alone overshoot it.

Speed comes from building a few pools of JSON lines once and writing slices of
them. The price is that content repeats across files: a deduplicating or
compressing engine will look better here than on real transcripts (each
``.jsonl`` file starts with one unique header line, nothing more).

This module only creates and appends to files under the directory it is given;
it never deletes anything. ``generate``, ``mutate`` and ``parse_size`` are
imported by the other benchmarks.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import math
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

GENERATOR_VERSION = 1
# All dates count back from this instant, so output never depends on "now".
EPOCH_END_NS = 1_795_824_000 * 10**9  # 2026-11-28T00:00:00Z
DAY_NS = 86_400 * 10**9
POOL_BYTES = 4 * 2**20
WORDS = (
    "the a to of and in is for that with this it on be as are was by file "
    "function return value error test config path state index checkpoint "
    "restore durable local tree session rollout transcript agent tool call "
    "output input user assistant model token cache read write append rename "
    "fsync mount bucket object manifest segment snapshot sqlite wal journal "
    "lock thread event queue retry timeout signal process exit status code "
    "python rust node bash git diff commit branch merge patch import class "
    "def self none true false list dict string bytes int float async await "
    "let me check the failing test first then update the implementation "
    "I will run pytest again after fixing the import order in module "
    "src/engine/scan.py tests/test_index.py README.md pyproject.toml "
    "Traceback (most recent call last): AssertionError: expected 3 got 2"
).split()
NAME_WORDS = [w for w in WORDS if w.isalpha() and w.islower()]
SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


# --------------------------------------------------------------------------
# Content pools
# --------------------------------------------------------------------------


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choices(WORDS, k=max(1, n_words)))


def _words_in_line(rng: random.Random) -> int:
    """Heavy-tailed words per line: mostly chat-sized, some tool outputs."""
    if rng.random() < 0.08:
        return int(rng.lognormvariate(math.log(900), 0.8))
    return int(rng.lognormvariate(math.log(35), 0.9))


def _iso(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + ".000Z"


def _codex_line(rng: random.Random, ts: str) -> dict[str, object]:
    kind = rng.random()
    call_id = f"call_{rng.getrandbits(96):024x}"
    if kind < 0.35:
        payload: dict[str, object] = {
            "type": "message",
            "role": rng.choice(["assistant", "user"]),
            "content": [{"type": "output_text", "text": _text(rng, _words_in_line(rng))}],
        }
    elif kind < 0.6:
        cmd = ["bash", "-lc", _text(rng, rng.randint(2, 12))]
        payload = {"type": "function_call", "name": "shell", "arguments": json.dumps({"command": cmd}), "call_id": call_id}
    elif kind < 0.85:
        payload = {"type": "function_call_output", "call_id": call_id, "output": _text(rng, _words_in_line(rng))}
    else:
        return {"timestamp": ts, "type": "event_msg", "payload": {"type": "token_count", "input_tokens": rng.randint(1, 200_000)}}
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
        "message": {"role": role, "content": [{"type": "text", "text": _text(rng, _words_in_line(rng))}]},
        "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "timestamp": ts,
    }


def _gemini_line(rng: random.Random, ts: str) -> dict[str, object]:
    kind = rng.choice(["user", "gemini", "gemini", "tool"])
    return {"id": f"{rng.getrandbits(64):016x}", "timestamp": ts, "type": kind, "content": _text(rng, _words_in_line(rng))}


def _generic_line(rng: random.Random, ts: str) -> dict[str, object]:
    role = rng.choice(["user", "assistant", "tool"])
    return {"ts": ts, "role": role, "text": _text(rng, _words_in_line(rng))}


LINE_MAKERS: dict[str, Callable[[random.Random, str], dict[str, object]]] = {
    "codex": _codex_line,
    "claude": _claude_line,
    "gemini": _gemini_line,
    "generic": _generic_line,
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
            line = json.dumps(make(rng, _iso(ts_ns)), separators=(",", ":")).encode() + b"\n"
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
        text = _text(rng, 200_000)
        self.text = text + " " + text

    def pad(self, rng: random.Random, n: int) -> str:
        half = len(self.text) // 2
        if n <= 0:
            return ""
        if n > half:
            return (self.text[:half] * (n // half + 1))[:n]
        start = rng.randrange(half)
        return self.text[start : start + n]


# --------------------------------------------------------------------------
# Planning: which files exist, how big, with which mode and mtime
# --------------------------------------------------------------------------


@dataclass
class Spec:
    """One file to write. ``size`` is the planned size in bytes."""

    rel: str
    size: int
    kind: str  # "jsonl", "json" or "literal"
    flavor: str = "generic"
    mode: int = 0o644
    mtime_ns: int = EPOCH_END_NS
    elastic: bool = True
    header: dict[str, object] = field(default_factory=dict)
    literal: bytes = b""


@dataclass(frozen=True)
class Category:
    """A family of generated files: share of the count and natural size."""

    name: str
    weight: float
    median: int
    sigma: float
    elastic: bool
    cap: int = 64 * 2**20


CATEGORIES = (
    Category("codex_rollout", 0.13, 40_000, 1.7, True),
    Category("codex_archived", 0.01, 40_000, 1.5, True),
    Category("claude_transcript", 0.09, 30_000, 1.5, True),
    Category("claude_subagent", 0.07, 12_000, 1.3, True),
    Category("claude_tool_result", 0.06, 6_000, 1.2, True),
    Category("gemini_chat", 0.05, 16_000, 1.4, True),
    Category("openclaw_session", 0.04, 16_000, 1.4, True),
    Category("opencode_session", 0.01, 500, 0.3, False),
    Category("opencode_message", 0.15, 700, 0.4, False),
    Category("opencode_part", 0.37, 900, 1.0, False, cap=64_000),
    Category("hermes_session", 0.02, 8_000, 1.2, True),
)


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _b62(rng: random.Random, n: int) -> str:
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "".join(rng.choices(alphabet, k=n))


def _stamp(ns: int, fmt: str) -> str:
    return time.strftime(fmt, time.gmtime(ns // 10**9))


def _split_counts(total: int, weights: list[float]) -> list[int]:
    """Largest-remainder split of ``total`` into integer shares."""
    raw = [total * w / sum(weights) for w in weights]
    counts = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _groups(rng: random.Random, n: int, per_group: int) -> list[int]:
    """Assign ``n`` items to about ``n / per_group`` groups (skewed sizes)."""
    n_groups = max(1, round(n / per_group))
    # Mild skew: the largest group is about three times the mean, which keeps
    # directories near the 10-200 entries seen in real harness roots.
    weights = [rng.lognormvariate(0.0, 0.4) for _ in range(n_groups)]
    return rng.choices(range(n_groups), weights=weights, k=n)


def _session_time(rng: random.Random, days: int) -> int:
    """A past instant, skewed toward recent days like a live agent root."""
    day = int(days * rng.random() ** 1.25)
    return EPOCH_END_NS - day * DAY_NS - rng.randrange(DAY_NS)


def _jsonl(rel: str, flavor: str, mtime_ns: int, header: dict[str, object], mode: int = 0o644) -> Spec:
    return Spec(rel, 0, "jsonl", flavor, mode, mtime_ns, True, header)


def _plan_codex(rng: random.Random, n: int, archived: int) -> Iterator[Spec]:
    days = max(1, n // 25)
    for i in range(n + archived):
        ts = _session_time(rng, days)
        sid = _uuid(rng)
        name = f"rollout-{_stamp(ts, '%Y-%m-%dT%H-%M-%S')}-{sid}.jsonl"
        folder = "archived_sessions" if i >= n else f"sessions/{_stamp(ts, '%Y/%m/%d')}"
        header = {"timestamp": _iso(ts), "type": "session_meta", "payload": {"id": sid, "cwd": "/home/agent/src", "originator": "codex_cli_rs", "cli_version": "0.64.0"}}
        yield _jsonl(f"codex-home/{folder}/{name}", "codex", ts, header)


def _plan_claude(rng: random.Random, transcripts: int, subagents: int, results: int) -> Iterator[Spec]:
    root = "agent-state/claude"
    days = max(1, transcripts // 20)
    projects = [f"-home-agent-src-{_b62(rng, 6).lower()}-{rng.choice(NAME_WORDS)}" for _ in range(max(1, round(transcripts / 50)))]
    sessions: list[tuple[str, str, int]] = []
    for proj in _groups(rng, transcripts, 50):
        sid, ts = _uuid(rng), _session_time(rng, days)
        sessions.append((projects[proj % len(projects)], sid, ts))
        yield _jsonl(f"{root}/projects/{projects[proj % len(projects)]}/{sid}.jsonl", "claude", ts, {"type": "summary", "sessionId": sid, "timestamp": _iso(ts)})
    with_sub = sessions[: max(1, len(sessions) * 3 // 10)]
    for owner in _groups(rng, subagents, 3):
        slug, sid, ts = with_sub[owner % len(with_sub)]
        agent = f"agent-{rng.getrandbits(32):08x}"
        yield _jsonl(f"{root}/projects/{slug}/{sid}/subagents/{agent}.jsonl", "claude", ts, {"type": "summary", "sessionId": sid, "agentId": agent})
    for owner in _groups(rng, results, 15):
        slug, sid, ts = sessions[owner % len(sessions)]
        tool_id = f"toolu_01{_b62(rng, 22)}"
        yield _jsonl(f"{root}/tool-results/{slug}/{sid}/{tool_id}.txt", "generic", ts, {"tool_use_id": tool_id})


def _plan_gemini(rng: random.Random, n: int) -> Iterator[Spec]:
    days = max(1, n // 15)
    slugs = [hashlib.sha256(f"{rng.random()}".encode()).hexdigest() for _ in range(max(1, round(n / 50)))]
    for proj in _groups(rng, n, 50):
        ts, sid = _session_time(rng, days), f"{rng.getrandbits(32):08x}"
        rel = f"agent-state/gemini-home/.gemini/tmp/{slugs[proj % len(slugs)]}/chats/session-{_stamp(ts, '%Y-%m-%dT%H-%M')}-{sid}.jsonl"
        yield _jsonl(rel, "gemini", ts, {"sessionId": sid, "projectHash": slugs[proj % len(slugs)], "startTime": _iso(ts)})


def _plan_openclaw(rng: random.Random, n: int) -> Iterator[Spec]:
    days = max(1, n // 15)
    agents = [f"{rng.choice(NAME_WORDS)}-{_b62(rng, 4).lower()}" for _ in range(max(1, round(n / 100)))]
    for owner in _groups(rng, n, 100):
        ts, sid = _session_time(rng, days), _uuid(rng)
        rel = f"oc-home/.openclaw/agents/{agents[owner % len(agents)]}/sessions/{sid}.jsonl"
        yield _jsonl(rel, "generic", ts, {"type": "session", "id": sid, "timestamp": _iso(ts)})


def _plan_opencode(rng: random.Random, sessions: int, messages: int, parts: int) -> Iterator[Spec]:
    root = "opencode-share/opencode/storage"
    days = max(1, sessions // 10)
    projects = [hashlib.sha1(f"{rng.random()}".encode()).hexdigest() for _ in range(max(1, round(sessions / 100)))]
    ses: list[tuple[str, int]] = []
    for proj in _groups(rng, sessions, 100):
        sid, ts = f"ses_{_b62(rng, 26)}", _session_time(rng, days)
        ses.append((sid, ts))
        meta = {"id": sid, "projectID": projects[proj % len(projects)], "title": "", "time": {"created": ts // 10**6}}
        yield Spec(f"{root}/session/{projects[proj % len(projects)]}/{sid}.json", 0, "json", mode=0o644, mtime_ns=ts, elastic=False, header=meta)
    msgs: list[tuple[str, str, int]] = []
    for owner in _groups(rng, messages, max(1, messages // max(1, sessions))):
        sid, ts = ses[owner % len(ses)]
        mid = f"msg_{_b62(rng, 26)}"
        msgs.append((sid, mid, ts))
        meta = {"id": mid, "sessionID": sid, "role": rng.choice(["user", "assistant"]), "title": ""}
        yield Spec(f"{root}/message/{sid}/{mid}.json", 0, "json", mtime_ns=ts, elastic=False, header=meta)
    for owner in _groups(rng, parts, max(1, parts // max(1, messages))):
        sid, mid, ts = msgs[owner % len(msgs)]
        pid = f"prt_{_b62(rng, 26)}"
        meta = {"id": pid, "messageID": mid, "sessionID": sid, "type": rng.choice(["text", "tool", "step-start"]), "text": ""}
        yield Spec(f"{root}/part/{mid}/{pid}.json", 0, "json", mtime_ns=ts, elastic=False, header=meta)


def _plan_hermes(rng: random.Random, n: int) -> Iterator[Spec]:
    days = max(1, n // 10)
    for _ in range(n):
        ts = _session_time(rng, days)
        rel = f"hermes/sessions/{_stamp(ts, '%Y-%m-%d')}/session_{_stamp(ts, '%Y%m%d_%H%M%S')}_{rng.getrandbits(24):06x}.json"
        yield Spec(rel, 0, "json", mtime_ns=ts, header={"session_id": rel.rsplit("/", 1)[1][:-5], "platform": "cli", "text": ""})


def _fixed_specs(rng: random.Random, total_bytes: int) -> list[Spec]:
    """Singleton files every harness root has: config, history, credentials."""
    secret = f'{{"token": "{_b62(rng, 48)}", "refresh_token": "{_b62(rng, 64)}"}}\n'.encode()
    lit = [
        ("codex-home/auth.json", secret, 0o600),
        ("codex-home/config.toml", b'model = "gpt-5-codex"\napproval_policy = "never"\nsandbox_mode = "danger-full-access"\n\n[history]\npersistence = "save-all"\n', 0o644),
        ("codex-home/version.json", b'{"latest_version":"0.64.0","last_checked_at":"2026-11-28T23:10:00Z"}\n', 0o644),
        ("agent-state/claude/.credentials.json", secret, 0o600),
        ("agent-state/claude/settings.json", b'{"permissions": {"allow": ["Bash(*)"]}, "model": "opus"}\n', 0o644),
        ("agent-state/gemini-home/.gemini/settings.json", b'{"security": {"auth": {"selectedType": "oauth-personal"}}}\n', 0o644),
        ("agent-state/gemini-home/.gemini/projects.json", b'{"projects": {}}\n', 0o644),
        ("agent-state/gemini-home/.gemini/oauth_creds.json", secret, 0o600),
        ("agent-state/gemini-home/.gemini/installation_id", f"{_uuid(rng)}\n".encode(), 0o644),
        ("oc-home/.openclaw/openclaw.json", b'{"agents": {"defaults": {"model": "anthropic/claude-opus"}}}\n', 0o644),
        ("oc-home/.openclaw/credentials/oauth.json", secret, 0o600),
        ("opencode-share/opencode/auth.json", secret, 0o600),
        ("hermes/config.yaml", b"model:\n  default: hermes-4\nterminal:\n  backend: local\n", 0o644),
        ("hermes/.env", f"OPENROUTER_API_KEY={_b62(rng, 40)}\n".encode(), 0o600),
        ("hermes/SOUL.md", b"# Persona\n\nYou are a careful engineering agent.\n", 0o644),
        ("hermes/memories/MEMORY.md", b"# Memory\n\n- The user prefers small commits.\n", 0o644),
    ]
    specs = [Spec(rel, len(data), "literal", mode=mode, elastic=False, literal=data) for rel, data, mode in lit]
    for rel, flavor, frac in (("codex-home/history.jsonl", "codex", 0.004), ("agent-state/claude/history.jsonl", "claude", 0.002)):
        spec = _jsonl(rel, flavor, EPOCH_END_NS, {"type": "history", "version": 1})
        spec.size, spec.elastic = max(1, int(total_bytes * frac)), False
        specs.append(spec)
    return specs


def _natural_sizes(rng: random.Random, specs: list[Spec], cat: Category) -> None:
    for spec in specs:
        spec.size = min(cat.cap, max(1, int(rng.lognormvariate(math.log(cat.median), cat.sigma))))
        spec.elastic = cat.elastic


def _scale_to(specs: list[Spec], total_bytes: int) -> None:
    """Scale elastic sizes (all non-literal sizes if needed) to hit the target."""
    cap = max(1, min(64 * 2**20, total_bytes // 8))
    for _ in range(4):
        elastic = [s for s in specs if s.elastic]
        fixed_total = sum(s.size for s in specs if not s.elastic)
        if elastic and total_bytes > fixed_total:
            movable, room = elastic, total_bytes - fixed_total
        else:
            movable = [s for s in specs if s.kind != "literal"]
            room = total_bytes - sum(s.size for s in specs if s.kind == "literal")
        have = sum(s.size for s in movable)
        if have <= 0 or abs(room - have) <= total_bytes * 0.001:
            return
        factor = max(room, 0) / have
        for spec in movable:
            spec.size = min(cap, max(1, int(spec.size * factor)))


def plan(files: int, total_bytes: int, seed: int) -> list[Spec]:
    """The full, deterministic list of files for these parameters."""
    rng = random.Random(f"{seed}:plan")
    fixed = _fixed_specs(rng, total_bytes)
    if files < len(fixed) + len(CATEGORIES):
        raise ValueError(f"--files must be at least {len(fixed) + len(CATEGORIES)}")
    counts = dict(zip((c.name for c in CATEGORIES), _split_counts(files - len(fixed), [c.weight for c in CATEGORIES]), strict=True))
    # archived_sessions is one flat directory: keep it under 200 entries.
    spill = max(0, counts["codex_archived"] - 200)
    counts["codex_archived"] -= spill
    counts["codex_rollout"] += spill
    families = {
        "codex": list(_plan_codex(rng, counts["codex_rollout"], counts["codex_archived"])),
        "claude": list(_plan_claude(rng, counts["claude_transcript"], counts["claude_subagent"], counts["claude_tool_result"])),
        "gemini": list(_plan_gemini(rng, counts["gemini_chat"])),
        "openclaw": list(_plan_openclaw(rng, counts["openclaw_session"])),
        "opencode": list(_plan_opencode(rng, counts["opencode_session"], counts["opencode_message"], counts["opencode_part"])),
        "hermes": list(_plan_hermes(rng, counts["hermes_session"])),
    }
    # Families yield their files in CATEGORIES order, so slicing recovers them.
    generated = [s for family in families.values() for s in family]
    pos = 0
    for cat in CATEGORIES:
        _natural_sizes(rng, generated[pos : pos + counts[cat.name]], cat)
        pos += counts[cat.name]
    specs = fixed + generated
    _scale_to(specs, total_bytes)
    return specs


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """What ``generate`` produced."""

    files: int
    dirs: int
    bytes: int
    seconds: float


def _content(spec: Spec, goal: int, pools: Pools, rng: random.Random) -> list[bytes | memoryview]:
    if spec.kind == "literal":
        return [spec.literal]
    if spec.kind == "json":
        doc = dict(spec.header)
        key = "text" if "text" in doc else "summary"
        doc[key] = ""
        doc[key] = pools.pad(rng, goal - len(json.dumps(doc, separators=(",", ":"))) - 1)
        return [json.dumps(doc, separators=(",", ":")).encode() + b"\n"]
    head = json.dumps(spec.header, separators=(",", ":")).encode() + b"\n"
    return [head, *pools.lines[spec.flavor].fill(rng, goal - len(head))]


def _write(path: str, chunks: list[bytes | memoryview], mode: int, mtime_ns: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        written = 0
        total = sum(len(c) for c in chunks)
        while written < total:
            written += os.writev(fd, _remaining(chunks, written))
        os.fchmod(fd, mode)
        os.utime(fd, ns=(mtime_ns, mtime_ns))
    finally:
        os.close(fd)
    return written


def _remaining(chunks: list[bytes | memoryview], skip: int) -> list[bytes | memoryview]:
    out: list[bytes | memoryview] = []
    for chunk in chunks:
        if skip >= len(chunk):
            skip -= len(chunk)
            continue
        out.append(memoryview(chunk)[skip:] if skip else chunk)
        skip = 0
    return out[:1024]  # IOV_MAX


def generate(out: str | os.PathLike[str], files: int, total_bytes: int, seed: int) -> Summary:
    """Create the tree under ``out`` (created if missing; must be empty)."""
    start = time.perf_counter()
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty; remove it or choose another directory")
    specs = plan(files, total_bytes, seed)
    pools = Pools(seed)
    rng = random.Random(f"{seed}:content")
    dirs = sorted({os.path.dirname(s.rel) for s in specs})
    for d in dirs:
        os.makedirs(root / d, mode=0o700 if d.endswith("credentials") else 0o755, exist_ok=True)
    deviation = 0
    written = 0
    base = str(root) + os.sep
    # mtimes are fixed dates before EPOCH_END_NS; on a machine whose clock is
    # earlier than that they are clamped so that no file is in the future.
    ceiling = time.time_ns() - 3600 * 10**9
    for spec in specs:
        chunks = _content(spec, spec.size - deviation, pools, rng)
        n = _write(base + spec.rel, chunks, spec.mode, min(spec.mtime_ns, ceiling))
        deviation += n - spec.size
        written += n
    all_dirs = {p for d in dirs for p in _parents(d)}
    return Summary(len(specs), len(all_dirs), written, time.perf_counter() - start)


def _parents(rel_dir: str) -> Iterator[str]:
    parts = rel_dir.split("/")
    for i in range(1, len(parts) + 1):
        yield "/".join(parts[:i])


def list_jsonl(out: str | os.PathLike[str]) -> list[str]:
    """Sorted relative paths of every ``.jsonl`` file under ``out``."""
    found: list[str] = []
    base = str(out)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        rel = os.path.relpath(dirpath, base)
        found.extend(os.path.normpath(os.path.join(rel, f)) for f in filenames if f.endswith(".jsonl"))
    found.sort()
    return found


def mutate(out: str | os.PathLike[str], n: int, seed: int, candidates: list[str] | None = None) -> list[str]:
    """Append one JSON line to ``n`` distinct ``.jsonl`` files; return their paths.

    The choice depends only on ``seed`` and the sorted candidate list, so the
    same tree and seed always touch the same files. Pass ``candidates`` (from
    ``list_jsonl``) to skip the walk when calling this repeatedly.
    """
    pool = candidates if candidates is not None else list_jsonl(out)
    if n > len(pool):
        raise ValueError(f"asked to mutate {n} files but {out} has only {len(pool)} .jsonl files")
    rng = random.Random(f"{seed}:mutate")
    chosen = rng.sample(pool, n)
    now = _iso(time.time_ns())
    for rel in chosen:
        line = json.dumps(_generic_line(rng, now), separators=(",", ":")).encode() + b"\n"
        with open(os.path.join(out, rel), "ab") as fh:
            fh.write(line)
    return chosen


def parse_size(text: str) -> int:
    """``800M`` -> 838860800. Units are binary (K=1024); a bare number is bytes."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1] if value and value[-1] in SIZE_UNITS else ""
    number = value[: len(value) - len(unit)]
    try:
        return int(float(number) * SIZE_UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 800M, 20M, 1G, 4096)") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="directory to create (must be empty or missing); with --mutate, an existing tree")
    p.add_argument("--files", type=int, default=100_000, help="exact number of files (default 100000)")
    p.add_argument("--bytes", type=parse_size, default=parse_size("800M"), help="approximate total size, e.g. 800M (binary units; default 800M)")
    p.add_argument("--seed", type=int, default=1, help="seed for names, sizes, contents (default 1)")
    p.add_argument("--mutate", type=int, metavar="N", help="instead of generating, append a line to N existing .jsonl files")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.mutate is not None:
            chosen = mutate(args.out, args.mutate, args.seed)
            print(f"mutated {len(chosen)} files in {args.out} (seed {args.seed})")
            return 0
        s = generate(args.out, args.files, args.bytes, args.seed)
    except (ValueError, FileExistsError) as exc:
        print(f"gen_tree: {exc}", file=sys.stderr)
        return 2
    print(f"generated {s.files} files in {s.dirs} directories, {s.bytes} bytes ({s.bytes / 2**20:.1f} MiB, target {args.bytes / 2**20:.1f} MiB) in {s.seconds:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
