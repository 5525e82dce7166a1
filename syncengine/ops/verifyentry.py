"""Verify's check of one manifest entry against its durable object.

Owns `EntryChecker`: a file's object is there with its size (and, when
sampled, read back and hashed); a segment chain resolves as restore
resolves it, each object with its length; a SQLite snapshot is copied to a
local temp file and checked as checkpoint and restore check it.  A copy that
differs from its entry is judged by restore's rule (`recorded.judge`, with
`Unrecorded` asking whether an interrupted checkpoint may have left a newer
one).  Walking the manifest, sampling, resuming and reporting are
`syncengine.ops.verify`'s.  A secret file (docs/SECRETS.md) is read back and
opened with the adapter's keys as a stream, as restore opens it; with a key
configured, a secret file the manifest records plain is a problem
(`PLAIN_SECRET`), and with ``encrypt = "all"`` any entry recorded plain.  Never
writes to the durable side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from syncengine.checkpoint import sqlite
from syncengine.crypt import chunked, sealed
from syncengine.crypt.secrets import Secrets, sealed_with
from syncengine.durable import chain, chainread, recorded
from syncengine.durable.manifest import Entry
from syncengine.durable.store import ObjectInfo, Store
from syncengine.errors import DurableError, SourceError, UnsafePath
from syncengine.fs.stream import stream
from syncengine.local.index import Index
from syncengine.sqlite.check import UNCHECKED, CheckFailed

PLAIN_SECRET = (
    "a secret file stored plain in the bucket: run `syncengine checkpoint` with the key "
    "configured (it seals it), then `syncengine gc --apply` collects the plain copy"
)


def _size_problem(st: ObjectInfo | None, size: int, what: str) -> str | None:
    if st is None:
        return f"{what} is missing on the durable side"
    if st.kind != "file":
        return f"{what} is not a regular file on the durable side"
    if size >= 0 and st.size != size:
        how = "truncated" if st.size < size else "larger"
        return f"{what} has {st.size} bytes, the manifest says {size} ({how})"
    return None


def _check_chain(
    store: Store, entry: Entry, sample: bool, notes: list[str]
) -> tuple[list[str], int | None]:
    resolved = chain.load(store, entry)  # the objects restore would use, or SourceError
    out = []
    for i, piece in enumerate(resolved.pieces):
        st = store.head(piece.name)
        problem = _size_problem(st, piece.length, f"segment {piece.name}")
        torn = st is not None and st.size < piece.length and i == len(resolved.pieces) - 1
        if problem and torn and i >= resolved.recorded:
            notes.append(
                f"{entry.path}: last segment {piece.label} is cut short and no "
                "manifest lists it (a killed publish): restore ends before it"
            )
        elif problem:
            out.append(problem)
    if out or not sample:
        return out, None
    read, _ = chainread.read(resolved, store, None)
    return [], read.size


@attrs.define
class Unrecorded:
    """`recorded.unrecorded_possible` for verify, asked only when a copy differs; asked
    again each time until it is yes, since a checkpoint may run while verify reads."""

    marker: Path
    index_path: Path
    seq: int
    known: bool = False

    def __call__(self) -> bool:
        if not self.known:
            self.known = recorded.unrecorded_possible(self.marker, self._meta, self.seq)
        return self.known

    def _meta(self) -> dict[str, Any]:
        index = Index.load(self.index_path)
        return index.meta if index is not None else {}


@attrs.frozen
class EntryChecker:
    """Checks one adapter's entries (problems returned, notes appended)."""

    store: Store
    state_dir: Path
    notes: list[str]
    unrecorded: Unrecorded
    secrets: Secrets | None = None

    def entry(self, entry: Entry, sample: bool) -> tuple[list[str], int | None]:
        """(problems, bytes read back or None) for one manifest entry."""
        try:
            if entry.kind in ("symlink", "dir"):
                return [], None  # recorded in the manifest only: no durable object
            if entry.kind == "segments":
                found = _check_chain(self.store, entry, sample, self.notes)
                return self._plain_in_all(entry) + found[0], found[1]
            if entry.kind == "file":
                return self._file(entry, sample)
            if entry.kind == "sqlite":
                return self._sqlite(entry)
        except UnsafePath as exc:
            return [f"unsafe name in the manifest ({exc.reason})"], None
        except SourceError as exc:
            return [exc.reason], None
        except OSError as exc:
            return [f"cannot read: {exc.strerror or exc}"], None
        self.notes.append(
            f"{entry.path}: kind {entry.kind!r} not known to this version, not checked"
        )
        return [], None

    def _judged(
        self, entry: Entry, what: str, size: int, st: ObjectInfo, digest: int | None
    ) -> list[str]:
        verdict = recorded.judge(entry, size, st.mtime_ns, digest, unrecorded=self.unrecorded)
        if verdict.newer:
            self.notes.append(
                f"{entry.path}: {what} is a newer complete version than the "
                "manifest records (an interrupted checkpoint); restore takes it "
                "and the next checkpoint records it"
            )
        return [f"{what} {verdict.problem}"] if verdict.problem else []

    def _file(self, entry: Entry, sample: bool) -> tuple[list[str], int | None]:
        st = self.store.head(entry.location)
        problem = _size_problem(st, -1, entry.location)
        if problem or st is None:
            return [problem or ""], None
        secrets = self.secrets
        if sealed_with(entry.extra) or (secrets is not None and secrets.secret(entry.path)):
            return self._secret(entry, st, secrets)
        if not sample:
            return self._judged(entry, entry.location, st.size, st, None), None
        try:
            with self.store.open(entry.location) as obj:
                n, h = stream(obj.file, None, None, src_name=entry.location)
        except DurableError as exc:  # this object only, as an OSError was before
            return [f"cannot read: {exc}"], None
        return self._judged(entry, entry.location, n, st, h), n

    def _plain_in_all(self, entry: Entry) -> list[str]:
        """`PLAIN_SECRET` for an entry not sealed in an ``encrypt = "all"`` tree."""
        s = self.secrets
        plain = s is not None and s.everything and s.keys is not None
        return [PLAIN_SECRET] if plain and not sealed_with(entry.extra) else []

    def _secret(
        self, entry: Entry, st: ObjectInfo, secrets: Secrets | None
    ) -> tuple[list[str], int | None]:
        """A secret file's object, always read: opened as a stream, then judged as any."""
        keys = secrets.keys if secrets is not None else None
        out = [PLAIN_SECRET] if keys is not None and not sealed_with(entry.extra) else []
        name = secrets.name(entry.path) if secrets is not None else entry.path
        try:
            with self.store.open(entry.location) as obj:
                marked = bool(sealed_with(entry.extra))
                plain = chunked.reader(obj.file, keys, name, marked=marked)
                n, digest = stream(plain, None, None, src_name=entry.location)
        except DurableError as exc:
            return [f"cannot read: {exc}"], None
        except sealed.SealError as exc:
            if keys is None:
                self.notes.append(f"{entry.path}: sealed, not opened (no key is configured)")
                return out, None
            return [*out, f"{entry.location}: {exc}"], None
        return out + self._judged(entry, entry.location, n, st, digest), n

    def _sqlite(self, entry: Entry) -> tuple[list[str], int | None]:
        """The same check as checkpoint and restore: ``unchecked`` is a note, not a problem."""
        where = f"snapshot {entry.location}"
        st = self.store.head(entry.location)
        problem = _size_problem(st, -1, where)
        if problem or st is None:
            return [problem or ""], None
        try:
            n, h, verdict = sqlite.check_durable_copy(
                self.store, entry.location, self.state_dir / "verify", entry, self.secrets
            )
        except CheckFailed as exc:
            return [f"{where}: could not be checked: {exc}"], None
        except DurableError as exc:  # this object only, as an OSError was before
            return [f"cannot read: {exc}"], None
        out = self._plain_in_all(entry)
        out += [f"{where}: fails quick_check ({verdict.detail})"] if verdict.corrupt else []
        if verdict.state == UNCHECKED:
            self.notes.append(verdict.message(where))
        return out + self._judged(entry, where, n, st, h), n
