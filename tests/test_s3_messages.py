"""What the commands print against an s3:// root (issue 28): the root is named by its URL,
never by the placeholder path ``/s3:/BUCKET/...`` the configuration uses inside; and the
adapters with nothing durable yet share one quiet line instead of a line each.

One moto server on 127.0.0.1 (tests/s3server.py), the real command as a child process.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import Tree, run_cli
from tests.s3server import S3Server

NONE_YET = "claude, gemini, hermes, openclaw, opencode"  # every built-in adapter but codex


def test_messages_name_the_bucket_by_its_url_and_idle_adapters_share_one_line(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """Fails on a ``/s3:`` in any output (a log line at -v, an error, status), and when
    restore, verify or gc print a line per adapter that has no checkpoint."""
    local, data = tmp_path / "local", tmp_path / "data"
    local.mkdir()
    data.mkdir()
    tree = Tree(tmp_path, local, data, kind="s3", s3=(s3_server, s3_server.bucket()))
    tree.write("codex-home/sessions/a.jsonl", '{"a": 1}\n')
    tree.write("codex-home/config.toml", "x = 1\n")
    said: list[subprocess.CompletedProcess[str]] = []

    def run(*args: str, code: int = 0, **env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "syncengine", *args],
            capture_output=True,
            text=True,
            env=tree.env(**env),
            cwd=tree.base,
            timeout=120,
            check=False,
        )
        said.append(done)
        assert done.returncode == code, f"{args}: {done.stdout}{done.stderr}"
        return done.stdout

    run("-v", "checkpoint")
    for args in (
        ("-v", "checkpoint", "--dry-run"),
        ("status",),
        ("status", "--json"),
        ("status", "--settings"),
        ("-v", "verify", "--sample", "100"),
        ("verify", "--json"),
        ("explain", "codex", "codex-home/config.toml"),
        ("export", "--adapter", "codex", "config.toml"),
        ("journal", "record", "--session", "s1"),
        ("journal", "list", "--session", "s1"),
        ("migrate", "--dry-run"),
        ("-v", "gc", "--apply"),
        ("run", "--", sys.executable, "-c", "pass"),
    ):
        run(*args)
    gc = run("gc")
    verify = run("verify")
    shutil.rmtree(local / "codex-home")
    assert run("-q", "restore") == ""
    shutil.rmtree(local / "codex-home")
    restore = run("-v", "restore")
    clash = tmp_path / "clash.toml"  # an extra adapter on codex's durable directory
    clash.write_text('[[adapter]]\nname = "notes"\nlive = "notes"\ndurable = "state/codex"\n')
    assert "s3://" in run("--config", str(clash), "status", code=2) + said[-1].stderr
    run("checkpoint", code=1, DATA_DIR=f"s3://no-such-bucket-{tmp_path.name.lower()}/data")

    for done in said:
        assert "/s3:" not in done.stdout + done.stderr, f"{done.args}:\n{done.stdout}{done.stderr}"
    assert f"s3://{tree.s3[1] if tree.s3 else ''}/data/state/codex" in said[2].stdout  # status
    assert restore.splitlines()[1:] == [
        f"no durable checkpoint yet (nothing to restore): {NONE_YET}"
    ]
    assert verify.splitlines()[1:] == [
        f"no durable checkpoint yet (nothing to verify): {NONE_YET}",
        "verify: OK",
    ]
    assert gc.splitlines() == [
        "nothing to delete: claude, codex, gemini, hermes, openclaw, opencode"
    ]


def test_durable_flag_names_a_tree_in_the_bucket(tmp_path: Path, s3_server: S3Server) -> None:
    """``--durable codex=NAME`` with an s3:// root is NAME under the root, as ``[[adapter]]
    durable`` is; fails when it resolves against the current directory (a local path the
    store then refuses) or when a local path is taken without one clear line."""
    (tmp_path / "local").mkdir()
    tree = Tree(tmp_path, tmp_path / "local", tmp_path / "data", kind="s3")
    tree.s3 = (s3_server, s3_server.bucket())
    tree.write("codex-home/a.json", "a")

    def run(*args: str, code: int) -> subprocess.CompletedProcess[str]:
        return run_cli(tree, *args, check=code)

    run("--durable", "codex=state/elsewhere", "checkpoint", "codex", code=0)
    assert (tree.durable / "state/elsewhere/a.json").read_text() == "a"
    url = f"s3://{tree.s3[1]}/data"
    status = run("status", "--durable", f"codex={url}/other", code=0).stdout
    assert f"-> {url}/other (flag --durable)" in status
    refused = run("--durable", "codex=/srv/codex", "checkpoint", code=2).stderr
    assert refused.splitlines() == [
        f"syncengine: flag --durable codex=/srv/codex: /srv/codex is a local path, but "
        f"durable_root is the bucket {url}: name the durable tree relative to it "
        "(state/NAME) or as an s3:// URL in that bucket"
    ]
