"""Secret files sealed before they leave the machine (issue 30, docs/SECRETS.md).

The token a fake login writes must appear nowhere in the bucket (the durable
directory, the emulator's backing directory, the S3 server's objects) once a key
is configured; a restore with the key gives the file back, one without it (or with
another key) fails that file alone, in one line, and writes nothing for it.
Tampered, truncated and swapped objects are refused.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from syncengine import Engine, config_from_dict
from syncengine.crypt import keys, sealed
from syncengine.crypt.secrets import Secrets, may_pack
from syncengine.durable import manifest
from syncengine.errors import ConfigError
from syncengine.local import behind
from syncengine.local.index import Index
from tests.conftest import CliRunner, EngineFactory, Tree, objects_holding

TOKEN = "sk-live-TOKEN-5f1e0c9a7b"
OTHER = "oauth-OTHER-77aa01"
RAW: dict[str, Any] = {"adapters": ["codex"]}


def _key_file(tree: Tree, name: str, *texts: str) -> Path:
    path = tree.base / name
    path.write_text("# syncengine keys, first one seals\n" + "\n".join(texts) + "\n")
    path.chmod(0o600)
    return path


def _login(tree: Tree) -> None:
    tree.write("codex-home/auth.json", json.dumps({"tokens": {"access": TOKEN}}), mode=0o600)
    tree.write("codex-home/.credentials.json", json.dumps({"mcp": OTHER}), mode=0o600)
    tree.write("codex-home/history.jsonl", '{"text": "hello"}\n')
    tree.write("codex-home/sessions/rollout-1.jsonl", '{"turn": 1}\n')


def _durable(tree: Tree) -> Path:
    return tree.backing / "state/codex"


@pytest.mark.s3
def test_secret_files_are_sealed_in_the_bucket_and_restored_with_the_key(
    tree: Tree, engine: EngineFactory
) -> None:
    key = _key_file(tree, "key", keys.generate())
    _login(tree)
    assert engine(RAW, SYNCENGINE_KEY_FILE=str(key)).checkpoint().ok
    assert objects_holding(tree.raw, TOKEN) == [] and objects_holding(tree.raw, OTHER) == []
    assert objects_holding(tree.raw, "hello")  # everything else stays a plain, readable object
    before = {p: (tree.local / "codex-home" / p).read_bytes() for p in ("auth.json",)}
    for path in tree.local.glob("codex-home/*"):
        if path.is_file():
            path.unlink()
    out = io.BytesIO()
    engine(RAW, SYNCENGINE_KEY_FILE=str(key)).export("auth.json", out, adapter="codex")
    assert out.getvalue() == before["auth.json"]
    rep = engine(RAW, SYNCENGINE_KEY_FILE=str(key)).restore()
    assert rep.ok, rep.errors
    auth = tree.local / "codex-home/auth.json"
    assert auth.read_bytes() == before["auth.json"]
    assert auth.stat().st_mode & 0o777 == 0o600


@pytest.mark.dir_only(reason="the command's lines; every kind is covered above")
def test_restore_without_or_with_another_key_fails_that_file_alone(
    tree: Tree, cli: CliRunner
) -> None:
    key_text = cli("keygen", check=0).stdout
    assert key_text.startswith(keys.PREFIX) and len(key_text.splitlines()) == 1
    key = _key_file(tree, "key", key_text.strip())
    other = _key_file(tree, "other", keys.generate())
    _login(tree)
    cli("checkpoint", "codex", env=tree.env(SYNCENGINE_KEY_FILE=str(key)), check=0)
    for env in (tree.env(), tree.env(SYNCENGINE_KEY_FILE=str(other))):
        live = tree.local / "codex-home"
        for name in ("auth.json", ".credentials.json", "history.jsonl"):
            (live / name).unlink(missing_ok=True)
        out = cli("restore", "codex", env=env, check=1)
        lines = [ln for ln in out.stderr.splitlines() if ln.startswith("syncengine: codex: ")]
        assert len([ln for ln in lines if "auth.json" in ln]) == 1, out.stderr
        assert "SYNCENGINE_KEY_FILE" in lines[0] and "not restored" in lines[0]
        assert key_text.strip() not in out.stderr + out.stdout
        assert (live / "history.jsonl").read_text() == '{"text": "hello"}\n'  # the rest
        assert sorted(os.listdir(live)) == ["history.jsonl", "sessions"]  # no temp, no blob
    status = cli("status", env=tree.env(SYNCENGINE_KEY_FILE=str(key)), check=0).stdout
    fingerprint = keys.parse(key_text).writer.fingerprint
    assert f"encrypted with key {fingerprint}: .credentials.json, auth.json" in status
    assert key_text.strip() not in status


@pytest.mark.dir_only(reason="edits the durable objects in place, as an attacker would")
@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "swap"])
def test_tampered_truncated_and_swapped_objects_are_refused(
    tree: Tree, engine: EngineFactory, damage: str
) -> None:
    key = _key_file(tree, "key", keys.generate())
    _login(tree)
    assert engine(RAW, SYNCENGINE_KEY_FILE=str(key)).checkpoint().ok
    auth, creds = _durable(tree) / "auth.json", _durable(tree) / ".credentials.json"
    data = auth.read_bytes()
    if damage == "flip a byte":
        auth.write_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    elif damage == "truncate":
        auth.write_bytes(data[:-1])
    else:  # each object is sealed for its own path
        other = creds.read_bytes()
        auth.write_bytes(other)
        creds.write_bytes(data)
    (tree.local / "codex-home/auth.json").unlink()
    (tree.local / "codex-home/.credentials.json").unlink()
    rep = engine(RAW, SYNCENGINE_KEY_FILE=str(key)).restore()
    failed = {e.path: e.reason for e in rep.errors}
    assert "auth.json" in failed and "fails authentication" in failed["auth.json"]
    assert not (tree.local / "codex-home/auth.json").exists()
    assert (".credentials.json" in failed) == (damage == "swap")


@pytest.mark.dir_only(reason="the sealing rules; the kinds are covered above")
def test_turning_encryption_on_then_rotating_the_key(
    tree: Tree, engine: EngineFactory, cli: CliRunner
) -> None:
    _login(tree)
    assert engine(RAW).checkpoint().ok  # no key: stored plain, as before
    assert objects_holding(tree.data, TOKEN)
    old = keys.generate()
    key = _key_file(tree, "key", old)
    verify = engine(RAW, SYNCENGINE_KEY_FILE=str(key)).verify(sample=100)
    problems = [p for a in verify.adapters for p in a.problems]
    assert [p.path for p in problems if "stored plain in the bucket" in p.what] == [
        ".credentials.json",
        "auth.json",
    ]
    assert engine(RAW, SYNCENGINE_KEY_FILE=str(key)).checkpoint().ok  # republished sealed
    assert objects_holding(tree.data, TOKEN) == [] and objects_holding(tree.data, OTHER) == []
    assert engine(RAW, SYNCENGINE_KEY_FILE=str(key)).verify(sample=100).ok
    # rotation: a new first key; the old one still opens what it sealed
    new = keys.generate()
    _key_file(tree, "key", new, old)
    (tree.local / "codex-home/auth.json").unlink()
    assert engine(RAW, SYNCENGINE_KEY_FILE=str(key)).restore().ok
    cli("rekey", "codex", env=tree.env(SYNCENGINE_KEY_FILE=str(key)), check=0)
    entry = _manifest_entry(tree, "auth.json")
    assert entry["sealed"] == keys.parse(new).writer.fingerprint
    _key_file(tree, "key", new)  # the old key dropped
    for name in ("auth.json", ".credentials.json"):
        (tree.local / "codex-home" / name).unlink()
    assert engine(RAW, SYNCENGINE_KEY_FILE=str(key)).restore().ok
    assert TOKEN in (tree.local / "codex-home/auth.json").read_text()


def _manifest_entry(tree: Tree, path: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for obj in sorted((_durable(tree) / ".syncengine/manifest").iterdir()):
        for line in obj.read_text().splitlines():
            row = json.loads(line)
            if row.get("path") == path:
                found = row
    return found


class Clock:
    def __init__(self) -> None:
        self.now = time.time_ns()

    def __call__(self) -> int:
        return self.now


@pytest.mark.dir_only(reason="runs its own mount without rename")
def test_gc_collects_the_plain_copy_on_a_mount_without_rename(
    tree: Tree, bucket_factory: Any
) -> None:
    mount = bucket_factory(rename=False)
    key = _key_file(tree, "key", keys.generate())
    clock = Clock()

    def make(**env: str) -> Engine:
        config = config_from_dict(RAW, env=tree.env(DATA_DIR=str(mount.mountpoint), **env))
        return Engine(config, clock=clock)

    _login(tree)
    assert make().checkpoint().ok
    clock.now += 10**9
    assert make(SYNCENGINE_KEY_FILE=str(key)).checkpoint().ok
    assert objects_holding(mount.backing, TOKEN)  # the plain version stays for gc
    report = make(SYNCENGINE_KEY_FILE=str(key)).gc(apply=True)
    assert report.ok and objects_holding(mount.backing, TOKEN)  # within the grace period
    clock.now += 8 * 86400 * 10**9
    assert make(SYNCENGINE_KEY_FILE=str(key)).gc(apply=True).ok
    assert (
        objects_holding(mount.backing, TOKEN) == [] and objects_holding(mount.backing, OTHER) == []
    )
    (tree.local / "codex-home/auth.json").unlink()
    assert make(SYNCENGINE_KEY_FILE=str(key)).restore().ok
    assert TOKEN in (tree.local / "codex-home/auth.json").read_text()


@pytest.mark.dir_only(reason="the planning rule; every kind is covered above")
def test_a_secret_that_is_also_a_log_is_sealed_whole(tree: Tree, engine: EngineFactory) -> None:
    key = _key_file(tree, "key", keys.generate())
    raw = {**RAW, "secrets": {"codex": ["/sessions/rollout-1.jsonl"]}}
    _login(tree)
    log = tree.write("codex-home/sessions/rollout-1.jsonl", f'{{"said": "{TOKEN}"}}\n')
    assert engine(raw, SYNCENGINE_KEY_FILE=str(key)).checkpoint().ok
    with log.open("a") as f:
        f.write(f'{{"said": "{OTHER}"}}\n')
    assert engine(raw, SYNCENGINE_KEY_FILE=str(key)).checkpoint(final=True).ok
    assert objects_holding(tree.data, TOKEN) == [] and objects_holding(tree.data, OTHER) == []
    content = log.read_bytes()
    log.unlink()
    assert engine(raw, SYNCENGINE_KEY_FILE=str(key)).restore().ok
    assert log.read_bytes() == content


@pytest.mark.dir_only(reason="the index's bookkeeping, the same on every kind")
def test_a_write_back_mounts_check_expects_the_sealed_size(
    tree: Tree, engine: EngineFactory
) -> None:
    """The start-up check of a write-back mount heads each unconfirmed object: a sealed
    one is larger than the file it holds, and is not "missing" for that."""
    key = _key_file(tree, "key", keys.generate())
    _login(tree)
    assert engine(RAW, SYNCENGINE_KEY_FILE=str(key)).checkpoint().ok
    index = Index.load(tree.state / "index/codex.idx")
    assert index is not None
    entries = [e for e in manifest.load(tree.store("state/codex")).entries.values()]
    assert any(e.extra.get("sealed") for e in entries)
    behind.after_pass(index, entries, False, "mount-1", keeps_mtime=True)
    assert behind.audit(tree.store("state/codex"), index, None).missing == {}


def test_sealed_objects_and_keys() -> None:
    ring = keys.parse(keys.generate() + "\n" + keys.generate())
    a = sealed.seal(ring.writer, b"secret", "codex/auth.json")
    b = sealed.seal(ring.writer, b"secret", "codex/auth.json")
    assert a != b and len(a) == len(b"secret") + sealed.OVERHEAD  # a fresh nonce per object
    assert sealed.unseal(ring, a, "codex/auth.json") == b"secret"
    with pytest.raises(sealed.SealError, match="fails authentication"):
        sealed.unseal(ring, a, "claude/auth.json")  # bound to the adapter and the path
    with pytest.raises(sealed.SealError, match="do not include"):
        sealed.unseal(keys.parse(keys.generate()), a, "codex/auth.json")
    text = keys.generate()
    with pytest.raises(keys.KeyTextError) as bad:
        keys.parse(text[:-3])
    assert text[len(keys.PREFIX) : -3] not in str(bad.value)  # never quotes a key
    assert text[len(keys.PREFIX) :] not in repr(keys.parse(text))
    secrets = Secrets("codex", ("/auth.json",), ring)
    assert not may_pack("auth.json", None, secrets)  # a secret path, sealed or not
    assert not may_pack("x.json", {"sealed": "00"}, secrets)
    assert may_pack("history.jsonl", None, secrets)


def test_a_bad_key_is_a_configuration_error(tmp_path: Path) -> None:
    env = {"AM_LOCAL": str(tmp_path), "DATA_DIR": str(tmp_path / "d")}
    with pytest.raises(ConfigError, match="line 1 is not a syncengine key"):
        config_from_dict({}, env={**env, "SYNCENGINE_KEY": "hunter2"})
    with pytest.raises(ConfigError, match="cannot read"):
        config_from_dict({"key_file": str(tmp_path / "none")}, env=env)
    config = config_from_dict(
        {"secrets": {"codex": ["/my-token.txt"]}},
        env={**env, "SYNCENGINE_KEY": keys.generate()},
    )
    assert config.keys is not None
    assert "/my-token.txt" in config.adapter("codex").secrets
    assert "/auth.json" in config.adapter("codex").secrets
