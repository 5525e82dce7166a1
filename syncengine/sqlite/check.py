"""The one SQLite check, used by checkpoint, restore and verify alike; the library in use.

Owns which SQLite the engine runs (the one bundled in the ``apsw`` wheel, not
the one the Python interpreter happened to be built with), opening a database
read-only, and the verdict on a database file: ``ok``, ``corrupt``, or
``unchecked`` (could not check).

Why three verdicts: a database written by a newer SQLite, or by an
application that registers its own functions, collations or virtual-table
modules, can use what this library lacks.  That is not corruption, and
calling it corruption is how OpenClaw's session store (``octet_length()`` in a
CHECK constraint, SQLite 3.43) was never published under Python's SQLite
3.40.  So the check

- reads the header first: no SQLite magic is ``corrupt``; a file format or
  schema format newer than this library knows is ``unchecked``;
- runs ``PRAGMA quick_check`` on a read-only connection (which does not
  compile CHECK constraints, so their functions are never needed);
- when SQLite cannot parse the schema, re-runs it with ``writable_schema``
  (schema errors ignored, every page still checked): ``unchecked`` when the
  file was last written by a newer SQLite than this one, ``corrupt`` when not
  (an older or equal SQLite cannot write what this one cannot read);
- when quick_check stops at a missing function, collation or module, checks
  each table on its own: a table that reports damage makes it ``corrupt``,
  the tables that need the missing piece are named as ``unchecked``.

The caller decides what ``unchecked`` means (see the SQLite section of
docs/STATE.md): a checkpoint publishes it, a restore keeps or restores it, verify
notes it; none of them ever accepts ``corrupt``.  Never open a database on
the durable mount with this module: check a local copy.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from syncengine.sqlite.files import HEADER

if TYPE_CHECKING:
    import apsw

WAL_RESET_BUG = ((3, 7, 0), (3, 51, 2))  # fixed in 3.51.3
OK, CORRUPT, UNCHECKED = "ok", "corrupt", "unchecked"
_MISSING = re.compile(
    r"(?:unknown function: |no such function: )(\S+?)(?:\(\))?$"
    r"|no such collation sequence: (\S+)$|no such module: (\S+)$"
)
_WHAT = ("function {}()", "collation {}", "virtual-table module {}")


class CheckFailed(Exception):
    """The check could not run at all (the file is locked, unreadable or gone)."""

    def __init__(self, reason: str, *, locked: bool = False) -> None:
        super().__init__(reason)
        self.locked = locked


@attrs.frozen
class Verdict:
    """What the check found; `message` names the database, both versions and the fix."""

    state: str  # OK, CORRUPT or UNCHECKED
    detail: str  # quick_check's answer, or what is missing
    writer: int | None  # SQLITE_VERSION_NUMBER of the library that last wrote the file
    library: int

    @property
    def ok(self) -> bool:
        return self.state == OK

    @property
    def corrupt(self) -> bool:
        return self.state == CORRUPT

    def message(self, name: str) -> str:
        """One line for logs and errors about the database `name`."""
        if self.state == OK:
            return f"{name}: passes quick_check"
        if self.state == CORRUPT:
            return f"{name}: fails quick_check ({self.detail})"
        newer = self.writer is not None and self.writer > self.library
        fix = (
            f"install a newer apsw (SQLite >= {version_text(self.writer)}) next to syncengine"
            if newer and self.writer is not None
            else "nothing to fix in syncengine if the application that writes it defines this "
            "itself; otherwise install a newer apsw"
        )
        return (
            f"{name}: could not check ({self.detail}; written by SQLite "
            f"{version_text(self.writer)}, checked with SQLite "
            f"{version_text(self.library)}); not a sign of corruption; {fix}"
        )


def version_text(number: int | None) -> str:
    """3054001 -> "3.54.1" (None: "unknown")."""
    if not number:
        return "unknown"
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def library_number() -> int:
    import apsw

    major, minor, patch = (int(p) for p in apsw.sqlite_lib_version().split(".")[:3])
    return major * 1_000_000 + minor * 1000 + patch


def library_version() -> dict[str, Any]:
    """The SQLite library in use (bundled with apsw), and whether it has the WAL-reset bug."""
    import apsw

    version = apsw.sqlite_lib_version()
    parts = tuple(int(p) for p in version.split(".")[:3])
    low, high = WAL_RESET_BUG
    bug = low <= parts <= high
    return {
        "version": version,
        "library": f"apsw {apsw.apsw_version()}",
        "bundled": bool(apsw.using_amalgamation),
        "wal_reset_bug": bug,
        "warning": (
            f"SQLite {version} has the WAL-reset corruption bug (3.7.0 to 3.51.2, "
            "fixed in 3.51.3): install the apsw wheel, which bundles a newer SQLite"
        )
        if bug
        else None,
    }


# -- opening ------------------------------------------------------------------


def read_header(path: str) -> bytes:
    """The first 100 bytes of the file (fewer for a short file); OSError if unreadable."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return os.pread(fd, 100, 0)
    finally:
        os.close(fd)


def is_wal(header: bytes) -> bool:
    """The header says WAL mode (read and write versions 2)."""
    return len(header) >= 20 and header[18] == 2 and header[19] == 2


def uri(path: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"mode": "ro", **params}.items())
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?{query}"


@contextlib.contextmanager
def connect(
    path: str, *, timeout: float, readonly: bool = True, params: Mapping[str, str] | None = None
) -> Iterator[apsw.Connection]:
    """A connection to `path` (read-only by default, URI `params` added), closed after.

    The parameter ``vfs`` names the VFS to open it with instead.
    """
    import apsw

    if readonly:
        query = dict(params or {})
        vfs = query.pop("vfs", None)
        con = apsw.Connection(
            uri(path, **query), vfs=vfs, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        )
    else:
        con = apsw.Connection(path)
    try:
        con.set_busy_timeout(int(timeout * 1000))
        yield con
    finally:
        con.close()


def quiet_params(path: str, header: bytes) -> dict[str, str]:
    """URI parameters that open a database nobody is using without creating files beside it.

    A WAL-mode database without a ``-wal`` is all in its main file: ``immutable``
    reads it with no ``-wal``/``-shm`` created (a read-only connection cannot
    remove them again).  Only for files no process writes (copies, a tree
    before its harness starts).
    """
    return {"immutable": "1"} if is_wal(header) and not os.path.lexists(path + "-wal") else {}


# -- checking -----------------------------------------------------------------


def check(path: str, *, timeout: float = 2.0, recover: bool = False) -> Verdict:
    """The verdict on the database at `path`; raise CheckFailed if it cannot be read.

    `recover`: a database that needs a hot journal rolled back or a WAL
    recovered cannot be opened read-only; allow a read-write connection then
    (restore's local databases only: a checkpoint never writes a live tree).
    """
    import apsw

    library = library_number()
    try:
        header = read_header(path)
    except FileNotFoundError as exc:
        raise CheckFailed(f"gone: {exc.strerror}") from exc
    except OSError as exc:
        raise CheckFailed(f"cannot read: {exc.strerror or exc}") from exc
    writer = writer_version(header)
    early = _header_verdict(header)
    if early is not None:
        return Verdict(early[0], early[1], writer, library)
    try:
        try:
            state, detail = _quick_check(
                path, timeout, writer, library, quiet_params(path, header), readonly=True
            )
        except apsw.ReadOnlyError:
            if not recover:
                raise
            state, detail = _quick_check(path, timeout, writer, library, {}, readonly=False)
    except (apsw.BusyError, apsw.LockedError) as exc:
        raise CheckFailed(
            f"locked by another process for {timeout:g}s ({exc})", locked=True
        ) from exc
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        return Verdict(CORRUPT, str(exc), writer, library)
    except apsw.Error as exc:
        raise CheckFailed(f"cannot open it ({exc})") from exc
    return Verdict(state, detail, writer, library)


def writer_version(header: bytes) -> int | None:
    """SQLITE_VERSION_NUMBER of the library that last wrote the file (offset 96), if valid.

    Valid only while the "version-valid-for" number (offset 92) equals the
    change counter (offset 24): both are written with it.
    """
    if len(header) < 100 or header[92:96] != header[24:28]:
        return None
    number = int(struct.unpack(">I", header[96:100])[0])
    return number if 3_000_000 <= number < 4_000_000 else None


def _header_verdict(header: bytes) -> tuple[str, str] | None:
    if not header:
        return None  # an empty file is an empty database
    if len(header) < 100 or not header.startswith(HEADER):
        return CORRUPT, "not a SQLite database: no SQLite header"
    page = struct.unpack(">H", header[16:18])[0]
    if (
        not (page == 1 or (512 <= page <= 32768 and page & (page - 1) == 0))
        or header[21:24] != b"\x40\x20\x20"
    ):
        return CORRUPT, "damaged header (page size or payload fractions)"
    if header[19] > 2 or header[18] > 2:
        return UNCHECKED, f"file format version {header[18]}/{header[19]}, newer than 2"
    schema_format = struct.unpack(">I", header[44:48])[0]
    if schema_format > 4:
        return UNCHECKED, f"schema format {schema_format}, newer than 4"
    return None


def _quick_check(
    path: str,
    timeout: float,
    writer: int | None,
    library: int,
    params: dict[str, str],
    *,
    readonly: bool,
) -> tuple[str, str]:
    import apsw

    with connect(path, timeout=timeout, readonly=readonly, params=params) as con:
        try:
            return _rows_verdict(_rows(con, "PRAGMA quick_check"))
        except apsw.CorruptError as exc:
            if "malformed database schema" not in str(exc):
                raise
            if writer is None or writer <= library:
                return CORRUPT, f"{exc} (written by a SQLite no newer than this one)"
            con.execute("PRAGMA writable_schema=ON")  # schema errors ignored, pages checked
            state, detail = _rows_verdict(_rows(con, "PRAGMA quick_check"))
            if state == CORRUPT:
                return state, detail
            return UNCHECKED, f"a schema this SQLite cannot parse: {exc}"
        except apsw.SQLError as exc:
            if _missing(str(exc)) is None:
                raise
            return _per_table(con, str(exc))


def _rows(con: apsw.Connection, sql: str) -> list[str]:
    return [str(r[0]) for r in con.execute(sql)]


def _rows_verdict(rows: list[str]) -> tuple[str, str]:
    return (OK, "ok") if rows == ["ok"] else (CORRUPT, "; ".join(rows[:5]))


def _missing(message: str) -> str | None:
    m = _MISSING.search(message)
    if m is None:
        return None
    kind, name = next((i, g) for i, g in enumerate(m.groups()) if g)
    return _WHAT[kind].format(name)


def _per_table(con: apsw.Connection, first: str) -> tuple[str, str]:
    """quick_check each table on its own: damage anywhere is corrupt; name what was skipped."""
    import apsw

    tables = _rows(con, "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
    skipped: dict[str, list[str]] = {}
    for table in tables:
        quoted = table.replace('"', '""')
        try:
            state, detail = _rows_verdict(_rows(con, f'PRAGMA quick_check("{quoted}")'))
        except apsw.SQLError as exc:
            what = _missing(str(exc))
            if what is None:
                raise
            skipped.setdefault(what, []).append(table)
            continue
        if state == CORRUPT:
            return CORRUPT, f"table {table}: {detail}"
    if not skipped:  # quick_check of the whole file needed it, no single table did
        return UNCHECKED, f"uses {_missing(first)}, which this SQLite lacks"
    uses = "; ".join(f"{what} in table(s) {', '.join(t)}" for what, t in skipped.items())
    return UNCHECKED, f"uses {uses}, which this SQLite lacks; every other table passes"


__all__ = [
    "CORRUPT",
    "OK",
    "UNCHECKED",
    "CheckFailed",
    "Verdict",
    "check",
    "connect",
    "is_wal",
    "library_version",
    "quiet_params",
    "read_header",
    "uri",
    "version_text",
]
