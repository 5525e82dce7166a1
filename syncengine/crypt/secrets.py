"""Which of an adapter's files are secret, and the rules every stage applies to them.

Owns `Secrets` (an adapter's ``secrets`` patterns, compiled, or every path
with ``encrypt = "all"``, and the keyring:
whether a path is sealed when published, and under which name) and the
manifest mark of a sealed entry (``"sealed": FINGERPRINT``, `SEALED`), so
checkpoint, restore, verify, gc and status read one rule.  `may_pack` is the
packer's question: a secret file, sealed or plain, never goes into a pack (a
pack mixes files, and its index would name it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import attrs

from syncengine.crypt.keys import Keyring
from syncengine.patterns import Matcher, compile_patterns

SEALED = "sealed"  # the manifest field of a sealed entry: the key's fingerprint (hex)


@attrs.frozen
class Secrets:
    """One adapter's secret files and the keys that seal them (None: none configured)."""

    adapter: str
    patterns: tuple[str, ...] = ()
    keys: Keyring | None = None
    everything: bool = False  # ``encrypt = "all"``: every path is sealed
    matcher: Matcher = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "matcher", compile_patterns(self.patterns, where="secrets"))

    def secret(self, path: str) -> bool:
        """Whether `path` (relative, `/`-separated) matches the adapter's secrets."""
        if self.everything:
            return True
        return bool(self.patterns) and self.matcher.excluded(path, False)

    def seals(self, path: str) -> bool:
        """Whether a checkpoint seals `path` (a secret, and a key is configured)."""
        return self.keys is not None and self.secret(path)

    def name(self, path: str) -> str:
        """The name a sealed object is bound to: ``ADAPTER/PATH``."""
        return f"{self.adapter}/{path}"

    def stale(self, path: str, extra: Mapping[str, Any] | None) -> bool:
        """Whether the published copy of secret `path` (its manifest/index extras) is not
        sealed with the writing key: plain, or sealed with an older key (rekey)."""
        if self.keys is None or not self.secret(path):
            return False
        return sealed_with(extra) != self.keys.writer.fingerprint


class Named(Protocol):
    """What `of_adapters` reads of an adapter (`syncengine.config.AdapterSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def secrets(self) -> tuple[str, ...]: ...

    @property
    def encrypt(self) -> str: ...


def of_adapters(specs: Iterable[Named], keys: Keyring | None) -> dict[str, Secrets]:
    """Each adapter's `Secrets`, by name."""
    return {s.name: Secrets(s.name, s.secrets, keys, s.encrypt == "all") for s in specs}


def sealed_with(extra: Mapping[str, Any] | None) -> str | None:
    """The fingerprint an entry's extras say it is sealed with (None: plain)."""
    value = (extra or {}).get(SEALED)
    return value if isinstance(value, str) else None


def may_pack(path: str, extra: Mapping[str, Any] | None, secrets: Secrets | None) -> bool:
    """Whether an entry may go into a pack: never a sealed one, never a secret path."""
    if sealed_with(extra) is not None:
        return False
    return secrets is None or not secrets.secret(path)


__all__ = ["SEALED", "Secrets", "may_pack", "of_adapters", "sealed_with"]
