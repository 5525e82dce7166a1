"""The input journal: every prompt kept, in order, across restarts; any bytes, any session id."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from syncengine import Journal
from syncengine.ops.journal import session_dir
from tests.conftest import CliRunner, EngineFactory, Tree

pytestmark = pytest.mark.s3

ODD = ["../x", "a/b", "..", ".", "séance 🚀", "x" * 1000, "-rf", "%2E", "\x01\x7f", "a\\b"]


def record(tree: Tree, session: str, data: bytes, *extra: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "syncengine", *extra, "journal", "record", "--session", session],
        input=data,
        capture_output=True,
        env=tree.env(),
        cwd=tree.base,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_prompts_kept_in_order_across_restart(tree: Tree, cli: CliRunner) -> None:
    big = os.urandom(3 << 20) + b"\0" * 1000 + b"\xff\xfe not utf-8"
    prompts = [b"first", b"", big, b"\0\0\n\r", "h\u00e9llo".encode("latin-1")]
    for p in prompts[:3]:
        record(tree, "s1", p)
    # a restart with a fresh state directory: the sequence continues after what is durable
    fresh = ("--state-dir", str(tree.base / "fresh-state"))
    for p in prompts[3:]:
        record(tree, "s1", p, *fresh)
    journal = Journal(tree.store("journal"), tree.base / "other-state")
    listed = journal.list("s1")
    assert [p.seq for p in listed] == [1, 2, 3, 4, 5]
    assert [data for _, data in journal.export("s1")] == prompts
    out = subprocess.run(
        [sys.executable, "-m", "syncengine", "journal", "export", "--session", "s1"],
        capture_output=True,
        env=tree.env(),
        cwd=tree.base,
        timeout=60,
        check=True,
    ).stdout
    pos = 0
    for p in prompts:  # "--- prompt SEQ TIME SIZE bytes\n" + bytes + "\n"
        header, _, rest = out[pos:].partition(b"\n")
        size = int(header.split()[4])
        assert size == len(p) and rest[:size] == p
        pos += len(header) + 1 + size + 1
    assert pos == len(out)
    lines = cli("journal", "list", "--session", "s1", check=0).stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["1", "2", "3", "4", "5"]


def test_odd_session_ids_stay_inside_the_journal(
    tree: Tree, engine: EngineFactory, cli: CliRunner
) -> None:
    journal = engine().journal()
    for i, sid in enumerate(ODD):
        journal.record(sid, b"prompt %d" % i)
    journal.record(b"\xff\x00raw", b"bytes id")
    root = tree.durable / "journal"
    dirs = sorted(d.name for d in root.iterdir() if d.name != ".syncengine")
    assert len(dirs) == len(ODD) + 1 and all(len(d) <= 200 and "/" not in d for d in dirs)
    assert all((root / d).is_dir() for d in dirs)
    for i, sid in enumerate(ODD):
        assert [data for _, data in journal.export(sid)] == [b"prompt %d" % i]
    assert session_dir("../x") != session_dir("..%2Fx")
    cli("journal", "record", "--session", "", check=2)
    assert cli("journal", "list", "--session", "a/b", check=0).stdout.count("\n") == 1


def test_concurrent_recorders_get_distinct_sequence_numbers(tree: Tree) -> None:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import os, sys\nfrom syncengine import Engine, config_from_dict\n"
                "j = Engine(config_from_dict({}, env=os.environ)).journal()\n"
                "for i in range(10): j.record('s', b'%s-%d' % (sys.argv[1].encode(), i))\n",
                tag,
            ],
            env={**tree.env(), "PYTHONPATH": os.getcwd()},
        )
        for tag in ("a", "b")
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0
    listed = Journal(tree.store("journal"), tree.base / "state").list("s")
    assert [p.seq for p in listed] == list(range(1, 21))
