"""Publishing one secret file sealed: read whole, encrypted, written as one closed object.

Owns `upload_sealed`, the copier's counterpart for a path the adapter's
``secrets`` match when a key is configured (docs/SECRETS.md).  The file is
read into memory (credential files are small), checked against the writer
that may be changing it as the copier checks (a file truncated or grown while
read raises `Changed`; one touched meanwhile is published but not recorded as
clean), sealed with the keyring's first key and bound to ``ADAPTER/PATH``
(`syncengine.crypt.sealed`), and written through the `Store` like any object,
so every durable kind gets the same bytes.  Its plaintext never reaches the
store.  The content hash recorded is the plaintext's, as for any file; an
unchanged file already sealed with the writing key is not written again.
"""

from __future__ import annotations

import os

import xxhash

from syncengine.checkpoint.copier import Changed, Copied, SQLiteFile, sig, unwritten
from syncengine.crypt import sealed
from syncengine.crypt.secrets import Secrets
from syncengine.durable.store import Store
from syncengine.errors import source_error
from syncengine.fs.stream import open_source
from syncengine.local.adapter import AdapterState
from syncengine.sqlite import files


def upload_sealed(
    store: Store,
    live_root: str,
    relpath: str,
    secrets: Secrets,
    *,
    known_hash: int | None,
    sniff_sqlite: bool = False,
    recent_ns: int | None = None,
) -> Copied:
    """Publish secret `relpath` sealed unless the same content is already there sealed
    with the writing key (`known_hash`: the recorded hash when it is)."""
    assert secrets.keys is not None
    key = secrets.keys.writer
    src = f"{live_root}/{relpath}"
    fd, st = open_source(src)
    try:
        if sniff_sqlite and st.st_size >= files.MIN_SIZE and files.starts_with_header(fd):
            raise SQLiteFile(relpath)
        data = _read(fd, st.st_size, src)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if len(data) != st.st_size or after.st_size != st.st_size:
        raise Changed(relpath, "its size changed while it was read")
    h = xxhash.xxh3_64_intdigest(data)
    raced = not unwritten(st, after, recent_ns)
    if known_hash == h:
        return Copied(
            False, len(data), h, st.st_mode, st.st_mtime_ns, sig(st), raced, None, key.fingerprint
        )
    blob = sealed.seal(key, data, secrets.name(relpath))
    with store.writer(relpath, mode=st.st_mode, mtime_ns=st.st_mtime_ns) as out:
        out.write(blob)
    return Copied(
        True, len(data), h, st.st_mode, st.st_mtime_ns, sig(st), raced, out.object, key.fingerprint
    )


def stale_secrets(state: AdapterState, settled: set[str]) -> frozenset[str]:
    """The adapter's published secret files not sealed with the writing key (plain, or an
    older key: turning encryption on, `syncengine rekey`).

    One look over the index per process and adapter: once none is left, the
    adapter's name goes into `settled` (kept by the caller) and later passes
    seal only what changed.
    """
    secrets = state.secrets
    if secrets is None or secrets.keys is None or state.name in settled:
        return frozenset()
    extras = state.index.extras
    stale = frozenset(
        path
        for path, rec in state.index.items()
        if rec.kind in ("file", "segments")
        and not rec.absent
        and secrets.stale(path, extras.get(path))
    )
    if not stale:
        settled.add(state.name)
    return stale


def _read(fd: int, size: int, src: str) -> bytes:
    """The file's bytes up to `size` (a short read: it shrank)."""
    chunks, total = [], 0
    try:
        while total < size:
            chunk = os.read(fd, min(1 << 20, size - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise source_error("read", src, exc) from exc
    return b"".join(chunks)


__all__ = ["stale_secrets", "upload_sealed"]
