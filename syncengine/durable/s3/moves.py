"""Renames in a bucket (migrate only): copy each object to its new key, then delete the old.

Owns `rename_new` and `unfinished`, which `S3Store` exposes for `syncengine migrate`
(a legacy directory renamed to its rollback name, a cache file moved into
quarantine).  S3 has no rename: every object under the old name (the object of
that key and those below ``KEY/``) is copied server-side (CopyObject keeps the
metadata, so mode and mtime stay), each copy confirmed by a HEAD (same size and
ETag, else the same bytes), and only when every copy is confirmed are the old
objects deleted, one by one.  A source is never deleted before its copy is
confirmed, and an object already at a new key that differs is never replaced.

Not atomic: a run killed in the middle leaves some objects under both names (or
the new name partly filled).  It is idempotent: the next run finds the new name
holding only identical copies of the old one's objects (`unfinished`), migrate
plans the same rename again, and it copies what is missing and deletes what is
left, so every object ends under the new name exactly once.  CopyObject copies
up to 5 GiB per object; a larger one stops the rename with its error (nothing
deleted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import obstore
import xxhash

from syncengine.errors import DurableError


class Bucket(Protocol):
    """What a rename uses of the store (`S3Store` is one): its client, how a key and a
    failure read in a message."""

    client: Any  # obstore's S3Store

    def where(self, key: str) -> str: ...

    def fail(self, operation: str, key: str, exc: BaseException) -> DurableError: ...


def _objects(store: Bucket, rel: str) -> dict[str, Any]:
    """The objects a rename of `rel` moves: suffix ("" or "/sub/key") -> ObjectMeta."""
    found: dict[str, Any] = {}
    try:
        found[""] = obstore.head(store.client, rel)
    except FileNotFoundError:
        pass
    except Exception as exc:
        raise store.fail("head", rel, exc) from exc
    try:
        for chunk in obstore.list(store.client, rel, chunk_size=1000):
            for meta in chunk:
                key = meta["path"]
                if key.startswith(rel + "/"):
                    found[key[len(rel) :]] = meta
    except Exception as exc:
        raise store.fail("list", rel, exc) from exc
    return found


def _digest(store: Bucket, key: str) -> int:
    h = xxhash.xxh3_64()
    try:
        for chunk in obstore.get(store.client, key).stream(min_chunk_size=1024 * 1024):
            h.update(chunk)
    except Exception as exc:
        raise store.fail("get", key, exc) from exc
    return h.intdigest()


def _same(store: Bucket, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two objects hold the same bytes: size and ETag, else (a multipart
    object's copy may get a new ETag) the bytes themselves."""
    if a["size"] != b["size"]:
        return False
    if a.get("e_tag") and a.get("e_tag") == b.get("e_tag"):
        return True
    return _digest(store, a["path"]) == _digest(store, b["path"])


def _compatible(store: Bucket, src: dict[str, Any], dst: dict[str, Any]) -> bool:
    """`dst` is what a rename of `src` killed midway leaves: one holds a subset of the
    other's names, and the objects under both names are the same."""
    if not (dst.keys() <= src.keys() or src.keys() <= dst.keys()):
        return False
    return all(_same(store, src[k], dst[k]) for k in sorted(src.keys() & dst.keys()))


def unfinished(store: Bucket, rel: str, new_rel: str) -> bool:
    """Whether `new_rel` holds an unfinished rename of `rel` that `rename_new` completes."""
    src, dst = _objects(store, rel), _objects(store, new_rel)
    return bool(src) and bool(dst) and _compatible(store, src, dst)


def rename_new(store: Bucket, rel: str, new_rel: str) -> None:
    """Move every object of `rel` to `new_rel`, a name that is free or holds an
    unfinished rename of `rel` (see the module docstring)."""
    src, dst = _objects(store, rel), _objects(store, new_rel)
    if not src:
        raise DurableError(f"rename {store.where(rel)}: no object there")
    if dst and not _compatible(store, src, dst):
        raise DurableError(
            f"rename {store.where(rel)} to {store.where(new_rel)}: other objects are there "
            "already: nothing was moved (run migrate again: it picks a free name)"
        )
    for suffix in sorted(src):
        old, new = rel + suffix, new_rel + suffix
        have = dst.get(suffix)
        if have is None:
            try:
                obstore.copy(store.client, old, new)  # under the state lock: `new` was free
                have = obstore.head(store.client, new)
            except Exception as exc:
                raise store.fail("copy to " + store.where(new), old, exc) from exc
        if not _same(store, src[suffix], have):
            raise DurableError(
                f"rename {store.where(old)} to {store.where(new)}: the copy differs from "
                "the original: nothing was deleted"
            )
    for suffix in sorted(src):  # every copy confirmed: now the old names go
        try:
            obstore.delete(store.client, rel + suffix)
        except Exception as exc:
            raise store.fail("delete", rel + suffix, exc) from exc
