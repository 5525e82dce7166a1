"""The built-in adapters against the files the current harness releases write.

Each row is a path seen on the real CLI (tests/harness/, issue 20) or read from
its source, and what a checkpoint must do with it, as ``syncengine explain``
(the engine's own matchers) decides it.  The harness suite checks the same on
trees the real CLIs wrote; this table keeps the decisions in the default run.
"""

from __future__ import annotations

import pytest

from syncengine.ops import explain
from tests.conftest import EngineFactory, Tree

UUID = "5ead71be-8917-4c86-9b4f-d0b425846dbc"
ROWS = {
    "codex": {
        "sessions/2026/12/02/rollout-2026-12-02T00-27-09-x.jsonl": "segments",
        "session_index.jsonl": "publish",
        "state_5.sqlite": "snapshot",  # thread names, pins, read receipts
        "queue_1.sqlite": "snapshot",  # prompts queued with `codex queue`
        "goals_1.sqlite": "snapshot",
        "memories_1.sqlite": "snapshot",
        "thread_history_1.sqlite": "exclude",  # projection with rollout byte offsets
        "logs_2.sqlite": "exclude",
        "tmp/arg0-linux/codex-arg0xDil6Z/apply_patch": "exclude",
        "thread-writer-locks/01a2.lock": "exclude",
        "shell_snapshots/01a2.1796.sh": "exclude",
        "session_index.jsonl.lock": "exclude",
    },
    "claude": {
        "projects/-work/789ea6aa.jsonl": "segments",
        ".credentials.json": "publish",
        "sessions/13356.json": "exclude",  # the process registry
        "sessions/13356.74da8cb7.key": "exclude",  # a peer token
        "ide/40000.lock": "exclude",
    },
    "gemini": {
        "tmp/work/chats/session-2026-12-02T00-29-6da9fe2e.jsonl": "segments",
        "tmp/work/chats/session-2026-12-02T00-29-6da9fe2e.jsonl.tmp-4242": "exclude",
        f"projects.json.{UUID}.tmp": "exclude",
        f"trustedFolders.json.tmp.{UUID}": "exclude",
        "policies/auto.toml.0a1b2c3d.tmp": "exclude",
        "projects.json.lock/owner": "exclude",
        "projects.json": "publish",
        "settings.json": "publish",
    },
    "opencode": {
        "opencode.db": "snapshot",
        "log/opencode.log": "exclude",
        "snapshot/796c/c507/HEAD": "publish",
    },
    "openclaw": {
        "agents/main/agent/openclaw-agent.sqlite": "snapshot",
        "state/openclaw.sqlite": "snapshot",
        f"agents/main/agent/openclaw-agent.sqlite.memory-reindex-{UUID}": "exclude",
        f"agents/main/agent/openclaw-agent.sqlite.memory-reindex-{UUID}-wal": "exclude",
        "agents/main/agent/openclaw-agent.sqlite.reindex-lock.sqlite": "exclude",
        "agents/main/agent/openclaw-agent.sqlite.generation-lock.sqlite": "exclude",
        "state/openclaw.sqlite.generation-writer.sqlite": "exclude",
        "tmp/openclaw-0/gateway.89464d6e.lock.sqlite": "exclude",
        "state/openclaw-quarantine.sqlite": "exclude",
        "agents/main/sessions/legacy.jsonl": "publish",
        "openclaw.json": "publish",
    },
    "hermes": {
        "state.db": "snapshot",
        "logs/agent.log": "segments",
        "logs/curator/run.log": "segments",
        "auth.lock": "exclude",
        "config.yaml": "publish",
    },
}
LIVE = {
    "codex": "codex-home",
    "claude": "agent-state/claude",
    "gemini": "agent-state/gemini-home/.gemini",
    "opencode": "opencode-share",
    "openclaw": "oc-home/.openclaw",
    "hermes": "hermes",
}


@pytest.mark.parametrize("adapter", sorted(ROWS))
def test_builtin_adapter_decides_what_the_harness_writes(
    tree: Tree, engine: EngineFactory, adapter: str
) -> None:
    for path in ROWS[adapter]:
        tree.write(f"{LIVE[adapter]}/{path}", "x")
    eng = engine()
    got = {d.path: d.action for d in explain.explain(eng, adapter, list(ROWS[adapter]))}
    assert got == ROWS[adapter]
