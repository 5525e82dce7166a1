"""``syncengine explain``: each path's action and the rule that decided it, as a checkpoint
decides it.

The agreement test runs a real checkpoint on the same tree and checks that what
explain calls published is exactly what the manifest lists, with the same kind.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from syncengine.durable import manifest
from syncengine.fs.savefile import TEMP_SUFFIX
from tests.conftest import CliRunner, Tree

pytestmark = pytest.mark.s3

CONFIG = """\
adapters = []
[[adapter]]
name = "app"
live = "app"
durable = "state/app"
exclude = ["cache/", "*.tmp", "locks/**/*.lock"]
sqlite = ["data/*.db"]
segments = ["logs/*.jsonl"]
"""


def _db(path: Path, rows: int = 3) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (x)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(rows)])
    con.commit()
    con.close()


def _layout(tree: Tree) -> Path:
    conf = tree.base / "conf.toml"
    conf.write_text(CONFIG)
    tree.write("app/notes.txt", "n")
    tree.write("app/auth.json", "{}", mode=0o600)
    tree.write("app/logs/a.jsonl", '{"a": 1}\n')
    tree.write("app/cache/blob", "x")
    tree.write("app/draft.tmp", "x")
    tree.write("app/locks/x/y.lock", "")
    tree.write(f"app/half{TEMP_SUFFIX}", "x")
    _db(tree.local / "app/data/main.db")
    _db(tree.local / "app/other.sqlite")  # not listed: found by its header
    (tree.local / "app/other.sqlite-journal").write_bytes(b"")  # its companion
    (tree.local / "app/data/main.db-wal").write_bytes(b"")  # a listed database's companion
    os.symlink("notes.txt", tree.local / "app/link")
    os.mkfifo(tree.local / "app/pipe")
    return conf


def _explain(cli: CliRunner, conf: Path, *paths: str, check: int = 0) -> dict[str, Any]:
    out = cli("--config", str(conf), "explain", "--json", "app", *paths, check=check)
    return {d["path"]: d for d in json.loads(out.stdout)["paths"]} if check == 0 else {}


def test_each_path_has_its_action_and_rule(tree: Tree, cli: CliRunner) -> None:
    conf = _layout(tree)
    got = {p: (d["action"], d["rule"]) for p, d in _explain(cli, conf).items()}
    assert got == {
        "auth.json": ("publish", "not excluded"),
        "notes.txt": ("publish", "not excluded"),
        "logs": ("dir", "walked; recorded with its mode"),
        "logs/a.jsonl": ("segments", "logs/*.jsonl"),
        "cache": ("exclude", "cache/"),
        "draft.tmp": ("exclude", "*.tmp"),
        "locks": ("dir", "walked; recorded with its mode"),
        "locks/x": ("dir", "walked; recorded with its mode"),
        "locks/x/y.lock": ("exclude", "locks/**/*.lock"),
        f"half{TEMP_SUFFIX}": ("internal", f"*{TEMP_SUFFIX}"),
        "data": ("dir", "walked; recorded with its mode"),
        "data/main.db": ("snapshot", "data/*.db"),
        "data/main.db-wal": ("companion", "/data/*.db-wal"),
        "other.sqlite": ("unlisted-db", "SQLite header, not in the adapter's sqlite list"),
        "other.sqlite-journal": ("companion", "companion of unlisted database other.sqlite"),
        "link": ("link", "-> notes.txt"),
        "pipe": ("special", "not a regular file or symlink"),
    }
    sources = {d["source"] for d in _explain(cli, conf).values()}
    assert f"exclude in config {conf}" in sources and f"sqlite in config {conf}" in sources


def test_text_output_names_the_rule_and_its_file(tree: Tree, cli: CliRunner) -> None:
    conf = _layout(tree)
    out = cli("--config", str(conf), "explain", "app", check=0).stdout
    assert f"exclude     draft.tmp  [*.tmp (exclude in config {conf})]" in out
    assert "dir         logs/  [walked; recorded with its mode]" in out


def test_published_paths_are_what_a_checkpoint_records(tree: Tree, cli: CliRunner) -> None:
    conf = _layout(tree)
    os.unlink(tree.local / "app/pipe")  # a FIFO is skipped; keep the run's exit 0
    decisions = _explain(cli, conf)
    cli("--config", str(conf), "checkpoint", check=0)
    entries = manifest.load(tree.store("state/app")).entries
    kinds = {
        "publish": "file",
        "segments": "segments",
        "snapshot": "sqlite",
        "unlisted-db": "sqlite",
        "link": "symlink",
        "dir": "dir",
    }
    expected = {p: kinds[d["action"]] for p, d in decisions.items() if d["action"] in kinds}
    assert {p: e.kind for p, e in entries.items()} == expected


def test_paths_inside_excluded_directories_and_outside_the_tree(tree: Tree, cli: CliRunner) -> None:
    conf = _layout(tree)
    full = str(tree.local / "app/cache/blob")
    got = _explain(cli, conf, full, "missing.txt")
    assert got["cache/blob"]["action"] == "exclude"
    assert got["cache/blob"]["rule"] == "inside cache/: cache/"
    assert got["missing.txt"]["action"] == "absent"
    out = cli("--config", str(conf), "explain", "app", str(tree.base), check=2)
    assert "is not inside the live tree" in out.stderr
    out = cli("--config", str(conf), "explain", "nope", check=2)
    assert "unknown adapter 'nope'" in out.stderr


def test_builtin_adapter_names_its_toml(tree: Tree, cli: CliRunner) -> None:
    tree.write("codex-home/tmp/arg0-linux/codex-arg0X/apply_patch", "x")
    tree.write("codex-home/sessions/2026/01/01/rollout-1.jsonl", "{}\n")
    out = cli("explain", "codex", "--json", check=0).stdout
    got = {d["path"]: d for d in json.loads(out)["paths"]}
    assert got["tmp"]["action"] == "exclude"
    assert got["tmp"]["source"] == "exclude in built-in codex.toml"
    assert got["sessions/2026/01/01/rollout-1.jsonl"]["action"] == "segments"
