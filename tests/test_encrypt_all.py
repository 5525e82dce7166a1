"""``encrypt = "all"``: every published object of the tree sealed (docs/SECRETS.md).

With a key, a token written in a plain file, a transcript and a SQLite row
appears nowhere in the durable tree (directory, emulator, S3 server); restore
gives back identical files and a valid database.  A multi-chunk object cut at a
chunk boundary or with two chunks swapped is refused; without the key each file
fails in one line and restore exits 1.  Sealing and opening 100 MB stays within
a few chunks of memory (the streaming format).
"""

from __future__ import annotations

import os
import sqlite3
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import xxhash

from syncengine import config_from_dict
from syncengine.crypt import chunked, keys
from syncengine.errors import ConfigError
from tests.conftest import CliRunner, EngineFactory, Tree, objects_holding

PLAIN, TALK, ROW = "plain-TOKEN-a81c", "transcript-TOKEN-93fe", "sqlite-TOKEN-4d07"
RAW: dict[str, Any] = {"adapters": ["codex"], "encrypt": "all"}
BIG = "codex-home/big.bin"


def _key(tree: Tree) -> str:
    path = tree.base / "key"
    path.write_text(keys.generate() + "\n")
    path.chmod(0o600)
    return str(path)


def _fill(tree: Tree) -> None:
    tree.write("codex-home/config.toml", f'model = "{PLAIN}"\n')
    tree.write("codex-home/sessions/rollout-1.jsonl", f'{{"text": "{TALK}"}}\n')
    tree.write(BIG, os.urandom(3 * chunked.CHUNK + 100))
    db = tree.local / "codex-home/state_5.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (v TEXT)")
        con.execute("INSERT INTO t VALUES (?)", (ROW,))
    con.close()


def _files(tree: Tree) -> dict[str, bytes]:
    live = tree.local / "codex-home"
    return {
        str(p.relative_to(live)): p.read_bytes()
        for p in live.rglob("*")
        if p.is_file() and not p.name.startswith("state_5")
    }


@pytest.mark.s3
def test_nothing_in_the_durable_tree_is_plain_and_restore_gives_it_back(
    tree: Tree, engine: EngineFactory
) -> None:
    key = _key(tree)
    _fill(tree)
    assert engine(RAW, SYNCENGINE_KEY_FILE=key).checkpoint().ok
    with open(tree.local / "codex-home/sessions/rollout-1.jsonl", "a") as f:
        f.write(f'{{"text": "more {TALK}"}}\n')  # a grown log: published whole, sealed
    assert engine(RAW, SYNCENGINE_KEY_FILE=key).checkpoint().ok
    for token in (PLAIN, TALK, ROW):
        assert objects_holding(tree.raw, token) == [], token
    before = _files(tree)
    for path in sorted((tree.local / "codex-home").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    rep = engine(RAW, SYNCENGINE_KEY_FILE=key).restore()
    assert rep.ok, rep.errors
    assert _files(tree) == before
    with sqlite3.connect(tree.local / "codex-home/state_5.sqlite") as con:
        assert con.execute("SELECT v FROM t").fetchall() == [(ROW,)]
    con.close()
    assert engine(RAW, SYNCENGINE_KEY_FILE=key).verify().ok


@pytest.mark.dir_only(reason="edits the durable object in place, as an attacker would")
@pytest.mark.parametrize("damage", ["cut at a chunk boundary", "swap two chunks"])
def test_a_damaged_multi_chunk_object_is_refused(
    tree: Tree, engine: EngineFactory, damage: str
) -> None:
    key = _key(tree)
    _fill(tree)
    assert engine(RAW, SYNCENGINE_KEY_FILE=key).checkpoint().ok
    obj = tree.backing / "state/codex/big.bin"
    data, step, at = obj.read_bytes(), chunked.CHUNK + 16, chunked.HEADER2_BYTES
    if damage == "cut at a chunk boundary":
        obj.write_bytes(data[: at + 2 * step])
    else:
        obj.write_bytes(
            data[:at]
            + data[at + step : at + 2 * step]
            + data[at : at + step]
            + data[at + 2 * step :]
        )
    (tree.local / BIG).unlink()
    rep = engine(RAW, SYNCENGINE_KEY_FILE=key).restore()
    failed = {e.path: e.reason for e in rep.errors}
    assert list(failed) == ["big.bin"], failed
    assert "fails authentication" in failed["big.bin"] or "truncated" in failed["big.bin"]
    assert not (tree.local / BIG).exists()
    assert not [p for p in (tree.local / "codex-home").iterdir() if "big" in p.name]


@pytest.mark.dir_only(reason="the command's lines and exit status")
def test_without_the_key_each_file_fails_in_one_line(tree: Tree, cli: CliRunner) -> None:
    conf = tree.base / "syncengine.toml"
    conf.write_text('encrypt = "all"\n')
    _fill(tree)
    old = time.time() - 3600  # settled: the sealing checkpoint must reseal unchanged files
    for path in (tree.local / "codex-home").rglob("*"):
        os.utime(path, (old, old))
    env = tree.env(SYNCENGINE_CONFIG=str(conf), SYNCENGINE_KEY_FILE=_key(tree))
    cli("checkpoint", "codex", env=tree.env(), check=0)  # published plain first
    out = cli("verify", "codex", env=env, check=1)
    assert "stored plain" in out.stdout + out.stderr, out
    cli("checkpoint", "codex", env=env, check=0)  # every plain object sealed
    cli("verify", "codex", env=env, check=0)
    assert objects_holding(tree.backing, PLAIN) == objects_holding(tree.backing, ROW) == []
    # the transcript's old plain segments: unreferenced now, gc collects them after the grace
    assert all("/.syncengine/segments/" in p for p in objects_holding(tree.backing, TALK))
    for path in ("config.toml", "big.bin", "state_5.sqlite"):
        (tree.local / "codex-home" / path).unlink()
    out = cli("restore", "codex", env=tree.env(SYNCENGINE_CONFIG=str(conf)), check=1)
    lines = [ln for ln in out.stderr.splitlines() if "no key is configured" in ln]
    for path in ("config.toml", "big.bin", "state_5.sqlite"):
        assert len([ln for ln in lines if f"restore {path}:" in ln]) == 1, out.stderr
        assert not (tree.local / "codex-home" / path).exists()


@pytest.mark.dir_only(reason="the command's line and exit status")
def test_without_a_key_nothing_is_published_plain(tree: Tree, cli: CliRunner) -> None:
    """Fails when ``encrypt = "all"`` without a key publishes every file plain (exit 0)."""
    conf = tree.base / "syncengine.toml"
    conf.write_text('adapters = ["codex"]\nencrypt = "all"\n')
    _fill(tree)
    env, started = tree.env(SYNCENGINE_CONFIG=str(conf)), tree.base / "started"
    for args in (("checkpoint",), ("run", "--", "touch", str(started))):
        out = cli(*args, env=env, check=2)
        assert out.stderr.splitlines() == [
            f'syncengine: config {conf}: encrypt = "all" (codex) and no key is configured: '
            "nothing published; "
            "set SYNCENGINE_KEY_FILE (or key_file) to a key file (`syncengine keygen > FILE`), "
            "or SYNCENGINE_KEY to the key"
        ], out.stderr
    assert not started.exists() and objects_holding(tree.backing, PLAIN) == []
    cli("restore", env=env, check=0)  # a restore, status and verify still work
    cli("status", env=env, check=0)
    cli("verify", env=env, check=0)


def test_sealing_and_opening_100_mb_streams(tmp_path: Path) -> None:
    key = keys.parse(keys.generate())
    piece, total, path = os.urandom(1 << 20), 100, tmp_path / "big.sealed"
    with open(path, "wb") as out:
        tracemalloc.start()
        sealer = chunked.Sealer(key.writer, "codex/big", out.write)
        for _ in range(total):
            sealer.write(memoryview(piece))
        sealer.end()
        seal_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert path.stat().st_size == chunked.sealed_size(total << 20)
    with open(path, "rb") as src:
        tracemalloc.start()
        plain, h, n = chunked.opener(key, src, "codex/big"), xxhash.xxh3_64(), 0
        while part := plain.read(1 << 20):
            h.update(part)
            n += len(part)
        open_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert n == total << 20 and h.intdigest() == xxhash.xxh3_64(piece * total).intdigest()
    print(f"100 MB: seal peak {seal_peak / 1e6:.2f} MB, open peak {open_peak / 1e6:.2f} MB")
    assert seal_peak < 4 << 20 and open_peak < 4 << 20


def test_encrypt_takes_secrets_or_all(tmp_path: Path) -> None:
    env = {"AM_LOCAL": str(tmp_path / "l"), "DATA_DIR": str(tmp_path / "d"), "HOME": str(tmp_path)}
    raw: dict[str, Any] = {"adapters": ["codex", "claude"], "encrypt": "all"}
    assert {s.encrypt for s in config_from_dict(raw, env=env).adapters} == {"all"}
    assert {s.encrypt for s in config_from_dict({}, env=env).adapters} == {"secrets"}
    with pytest.raises(ConfigError, match='encrypt must be "secrets" or "all"'):
        config_from_dict({"encrypt": "everything"}, env=env)
