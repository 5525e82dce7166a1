"""The local change index: what was last published for each path, and the stat seen then.

Owns the per-adapter index file in ``state_dir``.  One record per path is a
packed 36-byte value (size, mtime_ns, ctime_ns, xxh3 hash, mode, kind, absent
passes) so that a million paths fit in well under 250 MB and an idle pass
compares a file with one ``bytes.startswith`` (the first 24 bytes are the stat
signature).  A path is unchanged only when size, mtime_ns and ctime_ns all
match; a record whose copy raced a writer, or whose mtime was too close to the
scan start, is stored with ``ctime_ns = DIRTY`` so the next pass looks again
(borg's files cache does the same).  The index is a cache: when it is missing
or unreadable the engine rebuilds it from the durable manifest and file hashes.

Directories are kept apart, in `Index.dirs`: one small int per directory
(its mode, and the passes it has been missing, `DIR_ABSENT` apiece), never
among the files' records, so the per-file loops of a walk and the directory
table's order (derived from the file keys) do not change.  Both are saved
packed (`indexfile`) and become dicts on first use: an idle pass reads the
files' records in place (`packed`) and never a directory's, so it builds
neither.  A directory's change is seen by the directory table (a chmod moves
its ctime), not by a signature here.  A path is never both: recording a file, link or database at
a path drops the directory recorded there, and a directory is not recorded
while a record of another kind holds its path (see `record_dir`).
"""

from __future__ import annotations

import operator
import os
import struct
from array import array
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from syncengine.errors import local_error
from syncengine.fs import savefile
from syncengine.local import indexfile

RECORD = struct.Struct("<qqqQHBB")
SIG = struct.Struct("<qqq")
DIRTY = -1
KINDS = ("file", "symlink", "sqlite", "segments")
_KIND_CODE = {k: i for i, k in enumerate(KINDS)}
ABSENT_SINCE = "absent_since"  # meta key: path -> time of the first pass it was missing
DIR_ABSENT = 1 << 12  # Index.dirs: mode | passes missing * DIR_ABSENT (a present one is < this)
_ABSENT_MAX = 255

# The packed record is read only through these (walks, missing, the engine): its layout
# stays here.  Both are C callables, as fast in a walk's per-file loop as inline slicing.
signature: Callable[[int, int, int], bytes] = SIG.pack
"""(size, mtime_ns, ctime_ns) -> the prefix of a record with that stat: a path is
unchanged when its raw record ``startswith`` it."""
absent_passes: Callable[[bytes], int] = operator.itemgetter(-1)
"""A raw record -> the passes its path has been missing (0: present)."""
ABSENT_BYTE = RECORD.size - 1
"""Where in a record its absent passes are (what `absent_passes` reads)."""
_CTIME = slice(16, 24)
_DIRTY_CTIME = SIG.pack(0, 0, DIRTY)[_CTIME]


def settled(raw: bytes | None, size: int, mtime_ns: int, ctime_ns: int) -> bool:
    """Whether a raw record (None: not recorded) holds this stat and is not dirty."""
    return (
        raw is not None
        and raw[_CTIME] != _DIRTY_CTIME
        and raw.startswith(SIG.pack(size, mtime_ns, ctime_ns))
    )


class Record(NamedTuple):
    size: int
    mtime_ns: int
    ctime_ns: int
    hash64: int
    mode: int
    kind: str
    absent: int


class Index:
    """Published state per relative path, plus small side tables."""

    def __init__(self) -> None:
        self._records: dict[str, bytes] | None = {}  # None: still packed, as loaded
        self._packed: tuple[list[str], bytes] = ([], b"")
        self.links: dict[str, str] = {}
        self.extras: dict[str, dict[str, Any]] = {}
        self.meta: dict[str, Any] = {}
        self.changed = False
        self.absent = 0  # records with a non-zero absent count (kept in meta on save)
        self._dirs: dict[str, int] | None = {}  # None: still packed, as loaded
        self._packed_dirs: tuple[bytes, bytes] = (b"", b"")
        self.dirs_absent = 0  # directories with a non-zero absent count
        self.file_sig: tuple[int, int, int] | None = None  # the index file as last read/written

    def __len__(self) -> int:
        return len(self._packed[0]) if self._records is None else len(self._records)

    @property
    def records(self) -> dict[str, bytes]:
        """Path -> packed record (`RECORD`), in recording order (unpacked on first use)."""
        if self._records is None:
            keys, blob = self._packed
            n = RECORD.size
            raws = [blob[i : i + n] for i in range(0, len(blob), n)]
            self._records = dict(zip(keys, raws, strict=True))
            self._packed = ([], b"")
        return self._records

    @records.setter
    def records(self, value: dict[str, bytes]) -> None:
        self._records, self._packed = value, ([], b"")

    def packed(self) -> tuple[list[str], bytes]:
        """(paths, their `RECORD`s end to end in the same order), not unpacking them."""
        if self._records is None:
            return self._packed
        return list(self._records), b"".join(self._records.values())

    def record_view(self) -> Mapping[str, bytes]:
        """`records` for a walk: unpacked only if the walk looks a path up."""
        return _RecordView(self)

    @property
    def dirs(self) -> dict[str, int]:
        """Directory -> mode | absent passes * DIR_ABSENT (unpacked on first use)."""
        if self._dirs is None:
            self._dirs = indexfile.unpack_dirs(*self._packed_dirs)
        return self._dirs

    def dir_count(self) -> int:
        """How many directories are recorded (without unpacking them)."""
        if self._dirs is None:
            return len(self._packed_dirs[1]) // array("I").itemsize
        return len(self._dirs)

    def dir_view(self) -> Mapping[str, int]:
        """`dirs` for a walk, unpacked only if the walk reads a record."""
        return _DirView(self)

    def __contains__(self, path: str) -> bool:
        return path in self.records

    def record(
        self,
        path: str,
        *,
        size: int,
        mtime_ns: int,
        ctime_ns: int,
        hash64: int,
        mode: int,
        kind: str = "file",
        target: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Remember that `path` was published (or verified) with this content."""
        old = self.records.get(path)
        if old is not None and old[-1]:
            self.absent -= 1
        if path in self.dirs:  # a file (link, database) here now: the directory is gone
            self._drop_dir(path)
        self.records[path] = RECORD.pack(
            size,
            mtime_ns,
            ctime_ns,
            hash64 & 0xFFFFFFFFFFFFFFFF,
            mode & 0xFFFF,
            _KIND_CODE[kind],
            0,
        )
        if target is not None:
            self.links[path] = target
        else:
            self.links.pop(path, None)
        if extra is not None:
            self.extras[path] = extra
        self.changed = True

    def record_dir(self, path: str, mode: int) -> bool:
        """Remember that directory `path` is recorded with `mode`; False (nothing recorded)
        while a record of another kind holds the path (a file replaced by a directory:
        its tombstone must reach gc first, whose deletion then lets the directory in)."""
        if path in self.records:
            return False
        old = self.dirs.get(path)
        if old is not None and old >= DIR_ABSENT:
            self.dirs_absent -= 1
        self.dirs[path] = mode & 0o7777
        self.changed = True
        return True

    def dir_record(self, path: str) -> tuple[int, int] | None:
        """(mode, passes missing) of a recorded directory, or None."""
        value = self.dirs.get(path)
        return None if value is None else (value & 0o7777, value // DIR_ABSENT)

    def _drop_dir(self, path: str) -> None:
        if self.dirs.pop(path) >= DIR_ABSENT:
            self.dirs_absent -= 1
        self.changed = True

    def get(self, path: str) -> Record | None:
        raw = self.records.get(path)
        if raw is None:
            return None
        size, mtime, ctime, h, mode, kind, absent = RECORD.unpack(raw)
        return Record(size, mtime, ctime, h, mode, KINDS[kind], absent)

    def unchanged(self, path: str, size: int, mtime_ns: int, ctime_ns: int) -> bool:
        raw = self.records.get(path)
        return raw is not None and raw.startswith(SIG.pack(size, mtime_ns, ctime_ns))

    def mark_dirty(self, path: str) -> None:
        """Make the next pass look at `path` again (hash, then copy only if it differs)."""
        rec = self.get(path)
        if rec is not None and rec.ctime_ns != DIRTY:
            self.records[path] = RECORD.pack(
                rec.size,
                rec.mtime_ns,
                DIRTY,
                rec.hash64,
                rec.mode,
                _KIND_CODE[rec.kind],
                rec.absent,
            )
            self.changed = True

    def mark_absent(self, path: str, now_ns: int | None = None) -> int:
        """Count one more pass in which `path` was missing locally; return the count.

        With `now_ns`, the time of the first missing pass of this run of
        absences is kept in ``meta["absent_since"]`` (gc's grace period starts
        there); a path that reappears starts over at its next absence.
        """
        rec = self.get(path)
        if rec is None:
            return self._mark_dir_absent(path, now_ns)
        absent = min(rec.absent + 1, _ABSENT_MAX)
        if now_ns is not None:
            since = self.meta.setdefault(ABSENT_SINCE, {})
            if absent == 1 or path not in since:
                since[path] = now_ns
        if not rec.absent:
            self.absent += 1
        self.records[path] = RECORD.pack(
            rec.size, rec.mtime_ns, DIRTY, rec.hash64, rec.mode, _KIND_CODE[rec.kind], absent
        )
        self.changed = True
        return absent

    def _mark_dir_absent(self, path: str, now_ns: int | None) -> int:
        value = self.dirs.get(path)
        if value is None:
            return 0
        absent = min(value // DIR_ABSENT + 1, _ABSENT_MAX)
        if absent == 1:
            self.dirs_absent += 1
        if now_ns is not None:
            since = self.meta.setdefault(ABSENT_SINCE, {})
            if absent == 1 or path not in since:
                since[path] = now_ns
        self.dirs[path] = (value & 0o7777) | absent * DIR_ABSENT
        self.changed = True
        return absent

    def forget(self, path: str) -> None:
        """Drop `path` entirely (gc deleted its durable copy)."""
        raw = self.records.pop(path, None)
        if raw is None:
            if path in self.dirs:
                self._drop_dir(path)
                self.meta.get(ABSENT_SINCE, {}).pop(path, None)
            return
        if raw[-1]:
            self.absent -= 1
        self.links.pop(path, None)
        self.extras.pop(path, None)
        self.meta.get(ABSENT_SINCE, {}).pop(path, None)
        self.changed = True

    def present_count(self) -> int:
        return len(self) - self.absent

    def items(self) -> Iterator[tuple[str, Record]]:
        for path in self.records:
            rec = self.get(path)
            assert rec is not None
            yield path, rec

    def dir_items(self) -> Iterator[tuple[str, int, int]]:
        """(path, mode, passes missing) of every recorded directory."""
        for path, value in self.dirs.items():
            yield path, value & 0o7777, value // DIR_ABSENT

    # -- persistence ----------------------------------------------------
    def dumps(self) -> bytes:
        dirs = self._packed_dirs if self._dirs is None else indexfile.pack_dirs(self._dirs)
        side = {"links": self.links, "extras": self.extras, "meta": self.meta}
        side.update(absent=self.absent, dirs=dirs, dirs_absent=self.dirs_absent)
        return indexfile.encode(*self.packed(), side)

    @classmethod
    def loads(cls, data: bytes) -> Index:
        payload = indexfile.decode(data, RECORD.size)
        idx = cls()
        if "records" in payload:  # saved by an older version
            idx.records = payload["records"]
        else:
            idx._records, idx._packed = None, (payload["keys"], payload["blob"])
        idx.links = payload["links"]
        idx.extras = payload["extras"]
        idx.meta = payload["meta"]
        idx.absent = payload["absent"]
        packed = payload.get("dirs")  # none in an index saved before directories were
        if packed and packed[1]:  # recorded
            idx._dirs, idx._packed_dirs = None, (packed[0], packed[1])
        idx.dirs_absent = payload.get("dirs_absent", 0)
        return idx

    def save(self, path: str | os.PathLike[str]) -> None:
        """Replace the index file; raise LocalError (naming it) when the state dir refuses."""
        try:
            savefile.write_file(path, self.dumps(), mode=0o600, fsync=True)
        except OSError as exc:
            raise local_error("save index", path, exc) from exc
        self.changed = False
        self.file_sig = file_signature(path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Index | None:
        """The saved index, or None when it is missing or unreadable (rebuild it)."""
        try:
            with open(path, "rb") as f:
                idx = cls.loads(f.read())
                idx.file_sig = _sig(os.fstat(f.fileno()))
                return idx
        except FileNotFoundError:
            return None
        except (OSError, ValueError, EOFError, TypeError, KeyError):
            return None


class _RecordView(Mapping[str, bytes]):
    """`Index.records`, read through: its length and `packed` need no dict."""

    def __init__(self, index: Index) -> None:
        self.index = index

    def __getitem__(self, path: str) -> bytes:
        return self.index.records[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self.index.records)

    def __len__(self) -> int:
        return len(self.index)


def packed(records: Mapping[str, bytes]) -> tuple[list[str], bytes]:
    """(paths, records end to end) of a walk's records: in place for an index's view."""
    if isinstance(records, _RecordView):
        return records.index.packed()
    return list(records), b"".join(records.values())


def unpacked(records: Mapping[str, bytes]) -> Mapping[str, bytes]:
    """The dict behind an index's view (unpacked now), for lookups in a per-file loop."""
    return records.index.records if isinstance(records, _RecordView) else records


class _DirView(Mapping[str, int]):
    """`Index.dirs`, read through: a walk that looks at no directory never unpacks them."""

    def __init__(self, index: Index) -> None:
        self._index = index

    def __getitem__(self, path: str) -> int:
        return self._index.dirs[path]

    def get(self, path: str, default: Any = None) -> Any:
        return self._index.dirs.get(path, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.dirs)

    def __len__(self) -> int:
        return self._index.dir_count()


def _sig(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


def file_signature(path: str | os.PathLike[str]) -> tuple[int, int, int] | None:
    """Identity of the index file on disk: another process saved it when this changes."""
    try:
        return _sig(os.stat(path))
    except FileNotFoundError:
        return None
