"""The bytes of a change index file (``<state_dir>/index/<adapter>.idx``).

Owns the file format, not what a record means (`index` does): an 8-byte magic,
then one marshalled dict.  SYNCIDX2 keeps the paths in one string, NUL-separated
(no path holds NUL; marshal keeps the lone surrogates of undecodable names), and
their records end to end in one blob, in the index's order, so a load makes no
object per path but its name (marshal of a 100,000-entry dict: about 25 ms;
this: about 5).  SYNCIDX1, written by older versions, kept the records as one
dict: it is still read, and written again as SYNCIDX2 at the next save.  The
directory records are packed the same way (`pack_dirs`).  Must not do I/O.
"""

from __future__ import annotations

import marshal
from array import array
from typing import Any

MAGIC = b"SYNCIDX2"
_MAGIC_V1 = b"SYNCIDX1"  # the records as one marshalled dict (read, never written)


def encode(keys: list[str], blob: bytes, side: dict[str, Any]) -> bytes:
    """The file for these paths, their records (`blob`) and the side tables."""
    return MAGIC + marshal.dumps({"keys": "\0".join(keys), "blob": blob, **side})


def decode(data: bytes, record_size: int) -> dict[str, Any]:
    """The saved dict; its paths as ``keys`` (a list) and ``blob``, or, from a
    SYNCIDX1 file, as the dict ``records``.  ValueError (and marshal's errors)
    for anything else."""
    if not data.startswith((MAGIC, _MAGIC_V1)):
        raise ValueError("not a syncengine index")
    payload = marshal.loads(memoryview(data)[len(MAGIC) :])  # no copy of the file
    if not isinstance(payload, dict):
        raise ValueError("not a syncengine index")
    if data.startswith(MAGIC):
        blob = payload["blob"]
        keys = payload["keys"].split("\0") if blob else []
        if len(keys) * record_size != len(blob):
            raise ValueError("index records do not match their paths")
        payload["keys"] = keys
    return payload


def pack_dirs(dirs: dict[str, int]) -> tuple[bytes, bytes]:
    """(names joined by NUL, which no name holds; the ints as 32-bit array bytes)."""
    names = "\0".join(dirs).encode("utf-8", "surrogateescape")
    return names, array("I", dirs.values()).tobytes()


def unpack_dirs(names: bytes, values: bytes) -> dict[str, int]:
    ints = array("I")
    ints.frombytes(values)
    if not ints:
        return {}
    return dict(zip(names.decode("utf-8", "surrogateescape").split("\0"), ints, strict=True))
