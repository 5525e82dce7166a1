"""Encryption keys: their text form, fingerprints, and a keyring.

Owns the key text `syncengine keygen` prints and a key file holds: one key
per line, ``syncengine-key-1:`` and 32 random bytes in URL-safe base64;
blank lines and ``#`` comments are ignored.  Several keys make a keyring for
rotation: the first one seals new objects, every one opens.  A key is known
to people and to the bucket only by its fingerprint (16 hex digits of a
SHA-256 over a label and the key); nothing here ever formats the key itself,
and `Key`/`Keyring` reprs show fingerprints only.  Reads no file and no
environment: `syncengine.config.encryption` hands the text in.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets

import attrs

PREFIX = "syncengine-key-1:"
KEY_BYTES = 32  # AES-256
FINGERPRINT_BYTES = 8


class KeyTextError(ValueError):
    """Key text that is not a list of syncengine keys (the message never quotes it)."""


def _fingerprint(raw: bytes) -> bytes:
    return hashlib.sha256(b"syncengine key fingerprint\0" + raw).digest()[:FINGERPRINT_BYTES]


@attrs.frozen(repr=False)
class Key:
    """One 256-bit key; `fingerprint` names it (hex) without revealing it."""

    raw: bytes = attrs.field(repr=False)
    fp: bytes = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "fp", _fingerprint(self.raw))

    @property
    def fingerprint(self) -> str:
        return self.fp.hex()

    def __repr__(self) -> str:
        return f"Key(fingerprint={self.fingerprint})"


@attrs.frozen(repr=False)
class Keyring:
    """The keys in use: `keys[0]` seals, every key opens (rotation)."""

    keys: tuple[Key, ...]

    @property
    def writer(self) -> Key:
        return self.keys[0]

    def find(self, fp: bytes) -> Key | None:
        """The key with fingerprint `fp` (raw bytes), if this keyring holds it."""
        return next((k for k in self.keys if k.fp == fp), None)

    @property
    def fingerprints(self) -> tuple[str, ...]:
        return tuple(k.fingerprint for k in self.keys)

    def __repr__(self) -> str:
        return f"Keyring({', '.join(self.fingerprints)})"


def generate() -> str:
    """A new key's text line (`syncengine keygen`)."""
    raw = secrets.token_bytes(KEY_BYTES)
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii")


def parse(text: str) -> Keyring:
    """The keys in `text` (a key file's content or $SYNCENGINE_KEY), in order.

    Raise `KeyTextError` naming the line (never its content) when a line is not
    a key, or when there is none.
    """
    keys: list[Key] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keys.append(_one(line, number))
    if not keys:
        raise KeyTextError("holds no key (make one with `syncengine keygen > FILE`)")
    return Keyring(tuple(keys))


def _one(line: str, number: int) -> Key:
    bad = KeyTextError(
        f"line {number} is not a syncengine key ({PREFIX} and 32 bytes of base64, "
        "as `syncengine keygen` prints)"
    )
    if not line.startswith(PREFIX):
        raise bad
    try:
        raw = base64.urlsafe_b64decode(line[len(PREFIX) :].encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise bad from None
    if len(raw) != KEY_BYTES:
        raise bad
    return Key(raw)


__all__ = ["KEY_BYTES", "PREFIX", "Key", "KeyTextError", "Keyring", "generate", "parse"]
