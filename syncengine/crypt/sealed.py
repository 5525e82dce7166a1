"""The sealed object format: one secret file's bytes, encrypted and bound to its name.

Owns `seal` and `unseal`.  A sealed object is a 29-byte header, then the
AES-256-GCM ciphertext and its 16-byte tag (`cryptography`'s `AESGCM`; no
home-made crypto):

    magic "SYNCSEAL" (8) | version 1 (1) | key fingerprint (8) | nonce (12)

The nonce is 12 fresh random bytes per object (`os.urandom`).  The associated
data is the header followed by the object's name, ``ADAPTER/PATH`` (UTF-8),
so an object copied or swapped to another path, another adapter, or given
another header fails authentication like a tampered or truncated one.  Nothing
is returned unless the tag verified.  `cryptography` is imported on first use
(the optional ``[encrypt]`` extra): `require` says how to install it.
"""

from __future__ import annotations

import os
from typing import Any

from syncengine.crypt.keys import FINGERPRINT_BYTES, Key, Keyring

MAGIC = b"SYNCSEAL"
VERSION = 1
NONCE_BYTES = 12
TAG_BYTES = 16
HEADER_BYTES = len(MAGIC) + 1 + FINGERPRINT_BYTES + NONCE_BYTES
OVERHEAD = HEADER_BYTES + TAG_BYTES  # a sealed object's size is its plaintext's plus this
INSTALL = "pip install -e '.[encrypt]' in the clone (the cryptography package)"


class SealError(Exception):
    """A sealed object that cannot be opened: `why` says why, `fix` what to do."""

    def __init__(self, why: str, fix: str) -> None:
        super().__init__(f"{why}: {fix}")
        self.why = why
        self.fix = fix


def require() -> None:
    """Raise ImportError with the install line when `cryptography` is missing."""
    _aesgcm()


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise ImportError(f"encryption needs the cryptography package: {INSTALL}") from exc
    return AESGCM


def is_sealed(data: bytes) -> bool:
    return data[: len(MAGIC)] == MAGIC


def seal(key: Key, plaintext: bytes, name: str) -> bytes:
    """`plaintext` sealed with `key` for the object named `name` (``ADAPTER/PATH``)."""
    header = MAGIC + bytes([VERSION]) + key.fp + os.urandom(NONCE_BYTES)
    nonce = header[-NONCE_BYTES:]
    return header + bytes(_aesgcm()(key.raw).encrypt(nonce, plaintext, header + name.encode()))


def key_for(keys: Keyring | None, fp: bytes) -> Key:
    """The key of fingerprint `fp` (raw bytes); raise `SealError` saying what to set."""
    key = keys.find(fp) if keys is not None else None
    if key is None:
        have = "no key is configured" if keys is None else "the configured keys do not include it"
        raise SealError(
            f"encrypted with key {fp.hex()} and {have}",
            "set SYNCENGINE_KEY_FILE (or key_file) to a key file holding that key",
        )
    return key


def unseal(keys: Keyring | None, data: bytes, name: str) -> bytes:
    """The plaintext of the sealed object `data` named `name`; raise `SealError`.

    Refused: not a sealed object, an unknown version, no key or not the key it
    was sealed with, and any object whose tag does not verify (tampered,
    truncated, or moved from another name).
    """
    if not is_sealed(data):
        raise SealError("not a sealed object", "the bucket copy was replaced; checkpoint again")
    if len(data) < HEADER_BYTES + TAG_BYTES or data[len(MAGIC)] != VERSION:
        raise SealError(
            "the sealed object is truncated or of an unknown version",
            "checkpoint the file again from a machine that has it",
        )
    header = data[:HEADER_BYTES]
    key = key_for(keys, header[len(MAGIC) + 1 : len(MAGIC) + 1 + FINGERPRINT_BYTES])
    from cryptography.exceptions import InvalidTag

    try:
        return bytes(
            _aesgcm()(key.raw).decrypt(
                header[-NONCE_BYTES:], data[HEADER_BYTES:], header + name.encode()
            )
        )
    except InvalidTag:
        raise SealError(
            "the sealed object fails authentication (tampered, truncated, or moved "
            "from another path)",
            "checkpoint the file again from a machine that has it",
        ) from None


__all__ = [
    "HEADER_BYTES",
    "MAGIC",
    "OVERHEAD",
    "SealError",
    "is_sealed",
    "key_for",
    "require",
    "seal",
    "unseal",
]
