"""The one SQLite check: ok, corrupt, or could not check, the same on all three sides.

The databases are real SQLite files.  "Written by a newer SQLite" is made the
way a newer library writes it: a feature the old library lacks (``octet_length()``
in a CHECK constraint, as OpenClaw's Node writes it; a schema the checking
library cannot parse; a function, collation or module the writing application
registered), and the header's SQLITE_VERSION_NUMBER at offset 96 where a
newer writer would put it.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import struct
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from syncengine.sqlite import check as sqlite_check
from syncengine.sqlite.check import CORRUPT, OK, UNCHECKED, check
from tests.conftest import CliRunner, Tree
from tests.helpers import query_closed_db

pytestmark = pytest.mark.s3

FUTURE = 3_099_000  # what a SQLite 3.99.0 would write at offset 96


@pytest.fixture
def con_factory() -> Iterator[list[apsw.Connection]]:
    opened: list[apsw.Connection] = []
    yield opened
    for con in opened:
        con.close()


def make(path: Path, *sql: str, wal: bool = True, rows: int = 50) -> Path:
    """A database with table `t` of `rows` rows, then `sql`, written by the bundled SQLite.

    `myfn()`, `mycoll` and the module `myvt` exist only in this writer, as an
    application registers them.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    con = apsw.Connection(str(path))
    try:
        con.create_scalar_function("myfn", lambda a: len(str(a)), 1, deterministic=True)
        con.create_collation("mycoll", lambda a, b: (a > b) - (a < b))
        if wal:
            con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT)")
        with con:
            for i in range(rows):
                con.execute("INSERT INTO t(body) VALUES (?)", (f"row {i} " + "x" * 300,))
        for statement in sql:
            with con:
                con.execute(statement)
    finally:
        con.close()
    return path


def set_writer(path: Path, number: int) -> None:
    """Put `number` where SQLite records the version that last wrote the file."""
    with open(path, "r+b") as f:
        header = f.read(100)
        f.seek(92)
        f.write(header[24:28] + struct.pack(">I", number))  # valid-for = change counter


def unparsable_view(path: Path) -> None:
    """A view in a syntax no released SQLite has: what a newer SQLite may write."""
    con = apsw.Connection(str(path))
    try:
        con.execute("CREATE VIEW v AS SELECT id FROM t")
        con.execute("PRAGMA writable_schema=ON")
        con.execute(
            "UPDATE sqlite_schema SET sql = 'CREATE VIEW v AS SELECT id FROM t "
            "QUALIFY id WITHIN FUTURE' WHERE name = 'v'"
        )
    finally:
        con.close()


def damage_table(path: Path, table: str) -> None:
    """Overwrite the middle of the root page of `table` (a real b-tree corruption)."""
    con = apsw.Connection(
        f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        con.execute("PRAGMA writable_schema=ON")  # read a schema it cannot parse, too
        root = con.execute(
            "SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)
        ).fetchall()[0][0]
        page = con.execute("PRAGMA page_size").fetchall()[0][0]
    finally:
        con.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page + 8)
        f.write(b"\xa5" * 64)


# -- verdicts ------------------------------------------------------------------


def test_octet_length_check_constraint_is_ok(tmp_path: Path) -> None:
    db = make(
        tmp_path / "openclaw-agent.sqlite",
        "CREATE TABLE s(id INTEGER PRIMARY KEY, body TEXT CHECK (octet_length(body) < 1e6))",
        "INSERT INTO s(body) VALUES ('hello')",
    )
    verdict = check(str(db))
    assert verdict.state == OK, verdict
    assert verdict.writer == sqlite_check.library_number()
    assert sorted(os.listdir(tmp_path)) == ["openclaw-agent.sqlite"]  # nothing created beside


def test_missing_function_is_unchecked_and_other_tables_are_checked(tmp_path: Path) -> None:
    db = make(
        tmp_path / "gen.db",
        "CREATE TABLE g(a TEXT, n INT GENERATED ALWAYS AS (myfn(a)) VIRTUAL NOT NULL)",
        "INSERT INTO g(a) VALUES ('abc')",
    )
    verdict = check(str(db))
    assert verdict.state == UNCHECKED, verdict
    assert "function myfn()" in verdict.detail and "table(s) g" in verdict.detail
    message = verdict.message("agent/gen.db")
    lib = sqlite_check.version_text(sqlite_check.library_number())
    assert "agent/gen.db" in message and f"checked with SQLite {lib}" in message
    assert "written by SQLite" in message and "not a sign of corruption" in message
    damage_table(db, "t")  # a damaged table beside the unchecked one is still found
    assert check(str(db)).state == CORRUPT


def test_missing_collation_is_unchecked(tmp_path: Path) -> None:
    db = make(
        tmp_path / "coll.db",
        "CREATE TABLE c(a TEXT COLLATE mycoll)",
        "CREATE INDEX ci ON c(a)",
        "INSERT INTO c VALUES ('b'), ('a')",
    )
    verdict = check(str(db))
    assert verdict.state == UNCHECKED and "collation mycoll" in verdict.detail, verdict


def test_schema_from_a_newer_sqlite_is_unchecked_from_an_older_one_corrupt(tmp_path: Path) -> None:
    db = make(tmp_path / "newer.db", wal=False)
    unparsable_view(db)
    set_writer(db, FUTURE)
    verdict = check(str(db))
    assert verdict.state == UNCHECKED, verdict
    assert "cannot parse" in verdict.detail
    assert "written by SQLite 3.99.0" in verdict.message("newer.db")
    assert "install a newer apsw (SQLite >= 3.99.0)" in verdict.message("newer.db")
    damage_table(db, "t")  # pages are still checked with the schema errors ignored
    assert check(str(db)).state == CORRUPT
    older = make(tmp_path / "older.db", wal=False)
    unparsable_view(older)  # written by this SQLite: it could parse its own schema
    assert check(str(older)).state == CORRUPT


def test_newer_file_format_is_unchecked(tmp_path: Path) -> None:
    db = make(tmp_path / "format.db", wal=False)
    with open(db, "r+b") as f:
        f.seek(18)
        f.write(b"\x03\x03")
    verdict = check(str(db))
    assert verdict.state == UNCHECKED and "file format version 3/3" in verdict.detail


@pytest.mark.parametrize(
    "content", [b"garbage, not a database " * 400, b"SQLite format 3\x00" + b"\xff" * 4000]
)
def test_not_a_database_is_corrupt(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "x.db").write_bytes(content)
    assert check(str(tmp_path / "x.db")).state == CORRUPT


def test_damaged_table_is_corrupt_and_empty_file_ok(tmp_path: Path) -> None:
    db = make(tmp_path / "d.db", rows=300)
    damage_table(db, "t")
    verdict = check(str(db))
    assert verdict.state == CORRUPT and verdict.detail
    (tmp_path / "empty.db").write_bytes(b"")
    assert check(str(tmp_path / "empty.db")).ok


@pytest.mark.skipif(
    sqlite3.sqlite_version_info >= (3, 43, 0),
    reason="the stdlib SQLite knows octet_length(): no older library to show",
)
def test_stdlib_sqlite_was_fooled_by_octet_length(tmp_path: Path) -> None:
    """The premise of the issue: a read-write check with Python's own SQLite fails."""
    db = make(tmp_path / "oc.db", "CREATE TABLE s(b TEXT CHECK (octet_length(b) < 9))")
    con = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.OperationalError, match="octet_length"):
            con.execute("PRAGMA quick_check").fetchall()
    finally:
        con.close()


# -- the three sides: checkpoint, restore, verify ----------------------------

CONFIG = """
adapters = []
[[adapter]]
name = "oc"
live = "oc"
durable = "state/oc"
sqlite = ["agents/*/agent/*.sqlite"]
"""


@pytest.fixture
def cfg(tree: Tree) -> str:
    path = tree.base / "syncengine.toml"
    path.write_text(CONFIG)
    return str(path)


def rows_of(path: Path) -> list[tuple[object, ...]]:
    return query_closed_db(path, "SELECT id, body FROM t ORDER BY id")


def newer_databases(live: Path) -> dict[str, Path]:
    """One database per way a newer or richer SQLite writes what this one lacks."""
    agent = live / "agents" / "main" / "agent"
    dbs = {
        "octet": make(
            agent / "openclaw-agent.sqlite",
            "CREATE TABLE s(b TEXT CHECK (octet_length(b) < 1000000))",
            "INSERT INTO s(b) VALUES ('hi')",
        ),
        "function": make(
            agent / "gen.sqlite",
            "CREATE TABLE g(a TEXT, n INT GENERATED ALWAYS AS (myfn(a)) VIRTUAL)",
            "INSERT INTO g(a) VALUES ('abc')",
        ),
        "schema": make(agent / "schema.sqlite", wal=False),
    }
    unparsable_view(dbs["schema"])
    set_writer(dbs["schema"], FUTURE)
    return dbs


def test_newer_databases_are_snapshotted_restored_and_verified(
    tree: Tree, cli: CliRunner, cfg: str
) -> None:
    dbs = newer_databases(tree.local / "oc")
    before = {k: rows_of(p) for k, p in dbs.items()}
    proc = cli("--config", cfg, "checkpoint", check=0)
    assert "sqlite.unchecked" in proc.stderr and "function myfn()" in proc.stderr
    assert "a schema this SQLite cannot parse" in proc.stderr
    published = tree.durable / "state/oc/checkpoints/agents/main/agent"
    assert sorted(p.name for p in published.iterdir()) == [
        "gen.sqlite",
        "openclaw-agent.sqlite",
        "schema.sqlite",
    ]
    out = cli("--config", cfg, "verify", "--sample", "100", check=0).stdout
    assert "verify: OK" in out and "could not check" in out and "0 problem(s)" in out
    shutil.rmtree(tree.local / "oc")
    shutil.rmtree(tree.state)
    proc = cli("--config", cfg, "restore", check=0)
    assert "sqlite.restore-unchecked" in proc.stderr
    assert {k: rows_of(p) for k, p in dbs.items()} == before
    assert check(str(dbs["octet"])).ok
    proc = cli("--config", cfg, "restore", check=0)  # a hot restart keeps them, unchecked too
    assert "sqlite.restore-kept-unchecked" in proc.stderr


def test_corrupt_database_is_refused_on_all_three_sides(
    tree: Tree, cli: CliRunner, cfg: str
) -> None:
    db = make(tree.local / "oc/agents/main/agent/a.sqlite", wal=False, rows=300)
    cli("--config", cfg, "checkpoint", check=0)
    obj = tree.durable / "state/oc/checkpoints/agents/main/agent/a.sqlite"
    good = obj.read_bytes()
    damage_table(db, "t")  # the live database: checkpoint refuses it, keeps the snapshot
    proc = cli("--config", cfg, "checkpoint", check=1)
    assert "a.sqlite" in proc.stderr and "fails quick_check" in proc.stderr
    assert obj.read_bytes() == good
    bad = tree.base / "bad.sqlite"
    bad.write_bytes(good)
    damage_table(bad, "t")
    obj.write_bytes(bad.read_bytes())  # the durable snapshot: verify and restore refuse it
    out = cli("--config", cfg, "verify", "--sample", "100", check=1).stdout
    assert "PROBLEM oc: agents/main/agent/a.sqlite" in out and "fails quick_check" in out
    db.unlink()
    proc = cli("--config", cfg, "restore", check=1)
    # refused before quick_check: its hash differs from the manifest's (recorded.judge)
    assert "a.sqlite" in proc.stderr and "corrupt" in proc.stderr
    assert not db.exists()
