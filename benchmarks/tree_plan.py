"""Plan a realistic agent state tree: which files exist, how big, mode, mtime.

The layout follows ``shared/docs/harnesses.md``: Codex rollouts under
``sessions/YYYY/MM/DD``, Claude Code transcripts with subagents and tool
results, Gemini chats, OpenClaw sessions, opencode's many small JSON files
(its real layout: one directory per session under ``storage/message`` and one
per message under ``storage/part``, so those two parents are wide), Hermes
sessions, plus each harness's config, history and 0600 credentials.

Sizes come from per-category log-normal distributions (many small, a few
large), then the elastic categories (transcripts) are scaled so the plan adds
up to the target. Everything derives from the seed; nothing here touches a
file.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from tree_content import DAY_NS, EPOCH_END_NS, NAME_WORDS, iso


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
    header: Mapping[str, object] = field(default_factory=dict)
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


def _jsonl(
    rel: str, flavor: str, mtime_ns: int, header: Mapping[str, object], mode: int = 0o644
) -> Spec:
    return Spec(rel, 0, "jsonl", flavor, mode, mtime_ns, True, header)


def _plan_codex(rng: random.Random, n: int, archived: int) -> Iterator[Spec]:
    days = max(1, n // 25)
    for i in range(n + archived):
        ts = _session_time(rng, days)
        sid = _uuid(rng)
        name = f"rollout-{_stamp(ts, '%Y-%m-%dT%H-%M-%S')}-{sid}.jsonl"
        folder = "archived_sessions" if i >= n else f"sessions/{_stamp(ts, '%Y/%m/%d')}"
        header = {
            "timestamp": iso(ts),
            "type": "session_meta",
            "payload": {
                "id": sid,
                "cwd": "/home/agent/src",
                "originator": "codex_cli_rs",
                "cli_version": "0.64.0",
            },
        }
        yield _jsonl(f"codex-home/{folder}/{name}", "codex", ts, header)


def _plan_claude(
    rng: random.Random, transcripts: int, subagents: int, results: int
) -> Iterator[Spec]:
    root = "agent-state/claude"
    days = max(1, transcripts // 20)
    projects = [
        f"-home-agent-src-{_b62(rng, 6).lower()}-{rng.choice(NAME_WORDS)}"
        for _ in range(max(1, round(transcripts / 50)))
    ]
    sessions: list[tuple[str, str, int]] = []
    for proj in _groups(rng, transcripts, 50):
        sid, ts = _uuid(rng), _session_time(rng, days)
        sessions.append((projects[proj % len(projects)], sid, ts))
        yield _jsonl(
            f"{root}/projects/{projects[proj % len(projects)]}/{sid}.jsonl",
            "claude",
            ts,
            {"type": "summary", "sessionId": sid, "timestamp": iso(ts)},
        )
    with_sub = sessions[: max(1, len(sessions) * 3 // 10)]
    for owner in _groups(rng, subagents, 3):
        slug, sid, ts = with_sub[owner % len(with_sub)]
        agent = f"agent-{rng.getrandbits(32):08x}"
        yield _jsonl(
            f"{root}/projects/{slug}/{sid}/subagents/{agent}.jsonl",
            "claude",
            ts,
            {"type": "summary", "sessionId": sid, "agentId": agent},
        )
    for owner in _groups(rng, results, 15):
        slug, sid, ts = sessions[owner % len(sessions)]
        tool_id = f"toolu_01{_b62(rng, 22)}"
        yield _jsonl(
            f"{root}/tool-results/{slug}/{sid}/{tool_id}.txt",
            "generic",
            ts,
            {"tool_use_id": tool_id},
        )


def _plan_gemini(rng: random.Random, n: int) -> Iterator[Spec]:
    days = max(1, n // 15)
    slugs = [
        hashlib.sha256(f"{rng.random()}".encode()).hexdigest() for _ in range(max(1, round(n / 50)))
    ]
    for proj in _groups(rng, n, 50):
        ts, sid = _session_time(rng, days), f"{rng.getrandbits(32):08x}"
        name = f"session-{_stamp(ts, '%Y-%m-%dT%H-%M')}-{sid}.jsonl"
        rel = f"agent-state/gemini-home/.gemini/tmp/{slugs[proj % len(slugs)]}/chats/{name}"
        yield _jsonl(
            rel,
            "gemini",
            ts,
            {"sessionId": sid, "projectHash": slugs[proj % len(slugs)], "startTime": iso(ts)},
        )


def _plan_openclaw(rng: random.Random, n: int) -> Iterator[Spec]:
    days = max(1, n // 15)
    agents = [
        f"{rng.choice(NAME_WORDS)}-{_b62(rng, 4).lower()}" for _ in range(max(1, round(n / 100)))
    ]
    for owner in _groups(rng, n, 100):
        ts, sid = _session_time(rng, days), _uuid(rng)
        rel = f"oc-home/.openclaw/agents/{agents[owner % len(agents)]}/sessions/{sid}.jsonl"
        yield _jsonl(rel, "generic", ts, {"type": "session", "id": sid, "timestamp": iso(ts)})


def _plan_opencode(rng: random.Random, sessions: int, messages: int, parts: int) -> Iterator[Spec]:
    root = "opencode-share/opencode/storage"
    days = max(1, sessions // 10)
    projects = [
        hashlib.sha1(f"{rng.random()}".encode()).hexdigest()
        for _ in range(max(1, round(sessions / 100)))
    ]
    ses: list[tuple[str, int]] = []
    for proj in _groups(rng, sessions, 100):
        sid, ts = f"ses_{_b62(rng, 26)}", _session_time(rng, days)
        ses.append((sid, ts))
        meta = {
            "id": sid,
            "projectID": projects[proj % len(projects)],
            "title": "",
            "time": {"created": ts // 10**6},
        }
        yield Spec(
            f"{root}/session/{projects[proj % len(projects)]}/{sid}.json",
            0,
            "json",
            mode=0o644,
            mtime_ns=ts,
            elastic=False,
            header=meta,
        )
    msgs: list[tuple[str, str, int]] = []
    for owner in _groups(rng, messages, max(1, messages // max(1, sessions))):
        sid, ts = ses[owner % len(ses)]
        mid = f"msg_{_b62(rng, 26)}"
        msgs.append((sid, mid, ts))
        meta = {"id": mid, "sessionID": sid, "role": rng.choice(["user", "assistant"]), "title": ""}
        yield Spec(
            f"{root}/message/{sid}/{mid}.json", 0, "json", mtime_ns=ts, elastic=False, header=meta
        )
    for owner in _groups(rng, parts, max(1, parts // max(1, messages))):
        sid, mid, ts = msgs[owner % len(msgs)]
        pid = f"prt_{_b62(rng, 26)}"
        meta = {
            "id": pid,
            "messageID": mid,
            "sessionID": sid,
            "type": rng.choice(["text", "tool", "step-start"]),
            "text": "",
        }
        yield Spec(
            f"{root}/part/{mid}/{pid}.json", 0, "json", mtime_ns=ts, elastic=False, header=meta
        )


def _plan_hermes(rng: random.Random, n: int) -> Iterator[Spec]:
    days = max(1, n // 10)
    for _ in range(n):
        ts = _session_time(rng, days)
        sid = f"session_{_stamp(ts, '%Y%m%d_%H%M%S')}_{rng.getrandbits(24):06x}"
        rel = f"hermes/sessions/{_stamp(ts, '%Y-%m-%d')}/{sid}.json"
        header: Mapping[str, object] = {"session_id": sid, "platform": "cli", "text": ""}
        yield Spec(rel, 0, "json", mtime_ns=ts, header=header)


CONFIG_TOML = b"""model = "gpt-5-codex"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[history]
persistence = "save-all"
"""
# Small singleton files and their modes; a None body is a fresh secret.
FIXED_FILES: tuple[tuple[str, bytes | None, int], ...] = (
    ("codex-home/auth.json", None, 0o600),
    ("codex-home/config.toml", CONFIG_TOML, 0o644),
    ("codex-home/version.json", b'{"latest_version":"0.64.0"}\n', 0o644),
    ("agent-state/claude/.credentials.json", None, 0o600),
    ("agent-state/claude/settings.json", b'{"permissions":{"allow":["Bash(*)"]}}\n', 0o644),
    ("agent-state/gemini-home/.gemini/settings.json", b'{"selectedAuthType":"oauth"}\n', 0o644),
    ("agent-state/gemini-home/.gemini/projects.json", b'{"projects":{}}\n', 0o644),
    ("agent-state/gemini-home/.gemini/oauth_creds.json", None, 0o600),
    ("oc-home/.openclaw/openclaw.json", b'{"agents":{"defaults":{"model":"opus"}}}\n', 0o644),
    ("oc-home/.openclaw/credentials/oauth.json", None, 0o600),
    ("opencode-share/opencode/auth.json", None, 0o600),
    ("hermes/config.yaml", b"model:\n  default: hermes-4\nterminal:\n  backend: local\n", 0o644),
    ("hermes/.env", None, 0o600),
    ("hermes/SOUL.md", b"# Persona\n\nYou are a careful engineering agent.\n", 0o644),
    ("hermes/memories/MEMORY.md", b"# Memory\n\n- The user prefers small commits.\n", 0o644),
)
# Append-only histories, sized as a fraction of the whole tree.
HISTORIES = (
    ("codex-home/history.jsonl", "codex", 0.004),
    ("agent-state/claude/history.jsonl", "claude", 0.002),
)


def _fixed_specs(rng: random.Random, total_bytes: int) -> list[Spec]:
    """Singleton files every harness root has: config, history, credentials."""
    specs = []
    for rel, body, mode in FIXED_FILES:
        data = body or f'{{"token":"{_b62(rng, 48)}","refresh_token":"{_b62(rng, 64)}"}}\n'.encode()
        specs.append(Spec(rel, len(data), "literal", mode=mode, elastic=False, literal=data))
    for rel, flavor, frac in HISTORIES:
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
    shares = _split_counts(files - len(fixed), [c.weight for c in CATEGORIES])
    counts = {c.name: n for c, n in zip(CATEGORIES, shares, strict=True)}
    # archived_sessions is one flat directory: keep it under 200 entries.
    spill = max(0, counts["codex_archived"] - 200)
    counts["codex_archived"] -= spill
    counts["codex_rollout"] += spill
    generated = [
        *_plan_codex(rng, counts["codex_rollout"], counts["codex_archived"]),
        *_plan_claude(
            rng,
            counts["claude_transcript"],
            counts["claude_subagent"],
            counts["claude_tool_result"],
        ),
        *_plan_gemini(rng, counts["gemini_chat"]),
        *_plan_openclaw(rng, counts["openclaw_session"]),
        *_plan_opencode(
            rng, counts["opencode_session"], counts["opencode_message"], counts["opencode_part"]
        ),
        *_plan_hermes(rng, counts["hermes_session"]),
    ]
    # The planners yield files in CATEGORIES order, so slicing recovers them.
    pos = 0
    for cat in CATEGORIES:
        _natural_sizes(rng, generated[pos : pos + counts[cat.name]], cat)
        pos += counts[cat.name]
    specs = fixed + generated
    _scale_to(specs, total_bytes)
    return specs
