"""Publishing one file sealed: streamed through the sealer, written as one closed object.

Owns `upload_sealed`, the copier's counterpart for a path the adapter seals
(its ``secrets`` match, or ``encrypt = "all"``) when a key is configured
(docs/SECRETS.md).  The file goes through `syncengine.checkpoint.copier.upload`
with the keyring's first key and the name ``ADAPTER/PATH``: checked against a
writer that may be changing it as any copy is, sealed 64 KiB at a time
(`syncengine.crypt.chunked`, never held whole), and written through the
`Store` like any object, so every durable kind gets the same bytes.  Its
plaintext never reaches the store.  The content hash recorded is the
plaintext's, as for any file; an unchanged file already sealed with the
writing key is not written again.
"""

from __future__ import annotations

from syncengine.checkpoint.copier import Copied, upload
from syncengine.crypt.secrets import Secrets
from syncengine.durable.store import Store
from syncengine.local.adapter import AdapterState


def upload_sealed(
    store: Store,
    live_root: str,
    relpath: str,
    secrets: Secrets,
    *,
    known_hash: int | None,
    known_size: int | None = None,
    sniff_sqlite: bool = False,
    recent_ns: int | None = None,
) -> Copied:
    """Publish `relpath` sealed unless the same content is already there sealed with the
    writing key (`known_hash`, `known_size`: the recorded ones when it is)."""
    assert secrets.keys is not None
    return upload(
        store,
        live_root,
        relpath,
        known_hash=known_hash,
        known_size=known_size,
        sniff_sqlite=sniff_sqlite,
        recent_ns=recent_ns,
        seal=(secrets.keys.writer, secrets.name(relpath)),
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
        if rec.kind in ("file", "segments", "sqlite")
        and not rec.absent
        and (extras.get(path) or {}).get("_local") is not True  # a database never published
        and secrets.stale(path, extras.get(path))
    )
    if not stale:
        settled.add(state.name)
    return stale


__all__ = ["stale_secrets", "upload_sealed"]
