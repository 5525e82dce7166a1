"""One manifest entry: what a path was when it was published, validated field by field.

Owns `Entry` and its JSON form (the manifest's entry lines, manifest.py owns
the objects around them).  An entry with a field of the wrong type or out of
range is that path's problem: `row_entry` turns it into an `INVALID`
placeholder naming the path, so the other entries stay usable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

INVALID = "invalid"  # the kind of a placeholder for an entry that failed validation
_HASH = re.compile(r"xxh3_64:([0-9a-fA-F]{16})\Z")
_KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}\Z")
_INT64 = 1 << 63


def format_hash(h: int) -> str:
    return f"xxh3_64:{h:016x}"


def parse_hash(text: object) -> int | None:
    """The hash of a manifest field: None when absent; ValueError when malformed."""
    if text is None:
        return None
    m = _HASH.match(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"hash {text!r} is not 'xxh3_64:' and 16 hex digits")
    return int(m.group(1), 16)


@attrs.frozen
class Entry:
    """One published path.  `object` is where its bytes are, relative to the store."""

    path: str
    kind: str = "file"
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0o644
    hash: int | None = None
    target: str | None = None
    object: str | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict, eq=False)

    @property
    def location(self) -> str:
        return self.object or self.path

    @property
    def problem(self) -> str | None:
        """Why the manifest's record of this path is unusable (an `INVALID` placeholder)."""
        return str(self.extra.get("problem")) if self.kind == INVALID else None

    def index_extra(self) -> dict[str, Any] | None:
        """What the local index keeps beside the record (`Index.extras`) for this entry."""
        extra = dict(self.extra)
        if self.object:
            extra["object"] = self.object
        return extra or None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(path=self.path, kind=self.kind, mtime_ns=self.mtime_ns)
        if self.kind == "symlink":
            out["target"] = self.target
        elif self.kind == "dir":
            del out["mtime_ns"]
            out["mode"] = self.mode
        else:
            out.update(size=self.size, mode=self.mode)
            if self.hash is not None:
                out["hash"] = format_hash(self.hash)
        if self.object:
            out["object"] = self.object
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Entry:
        """Validate one entry line; raise ValueError naming the field that is wrong."""
        path = _name(data.get("path"), "path")
        kind = data.get("kind", "file")
        if not isinstance(kind, str) or not _KIND.match(kind) or kind == INVALID:
            raise ValueError(f"kind {kind!r} is not a known or well-formed entry kind")
        symlink = kind == "symlink"
        extra = (
            {}
            if data.keys() <= _KNOWN
            else {k: v for k, v in data.items() if k not in _KNOWN and not k.startswith("_")}
        )
        if kind == "dir":  # a mode is all it records: it must be there, and valid
            if "mode" not in data:
                raise ValueError("mode is missing (a directory entry records its mode)")
            return cls(path=path, kind=kind, mode=_int(data, "mode", 0, 0, 0o7777 + 1), extra=extra)
        return cls(
            path=path,
            kind=kind,
            size=0 if symlink else _int(data, "size", 0, 0, _INT64),
            mtime_ns=_int(data, "mtime_ns", 0, -_INT64 + 1, _INT64),
            mode=0o644 if symlink else _int(data, "mode", 0o644, 0, 0o7777 + 1),
            hash=None if symlink else parse_hash(data.get("hash")),
            target=_name(data.get("target"), "symlink target") if symlink else None,
            object=None if data.get("object") is None else _name(data["object"], "object"),
            extra=extra,
        )

    @classmethod
    def invalid(cls, path: str, problem: str) -> Entry:
        """A placeholder for an entry that failed validation: restore and verify report it."""
        return cls(path, INVALID, extra={"problem": problem})


_KNOWN = frozenset({"path", "kind", "size", "mtime_ns", "mode", "hash", "target", "object"})


def _int(data: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = data.get(key, default)
    if type(value) is not int:  # a bool or a float is not a size, a time or a mode
        raise ValueError(f"{key} {value!r} is not an integer")
    if not low <= value < high:
        raise ValueError(f"{key} {value} is out of range")
    return value


def _name(value: object, what: str) -> str:
    """A name from the manifest that the OS can take (safety is checked where it is used)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} {value!r} is missing or not a non-empty string")
    if value.isascii() and "\0" not in value:  # the common name, without an encode
        return value
    if "\0" in value:
        raise ValueError(f"{what} {value!r} contains NUL")
    try:
        os.fsencode(value)
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} {value!r} is not a valid file name") from exc
    return value


def row_entry(row: object, label: str) -> Entry:
    """An Entry, or an INVALID placeholder named by the path (or by `label`)."""
    if not isinstance(row, dict):
        return Entry.invalid(label, "an entry line is not a JSON object")
    try:
        return Entry.from_json(row)
    except ValueError as exc:
        path = row.get("path")
        try:
            named = _name(path, "path")
        except ValueError:
            named = label
        return Entry.invalid(named, f"malformed manifest entry ({exc})")


__all__ = ["INVALID", "Entry", "format_hash", "parse_hash", "row_entry"]
