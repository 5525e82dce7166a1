"""The objects of a bucket prefix seen as a small `pathlib.Path`: how a test of the
``[s3]`` durable kind reads, damages and lists the durable side (tests/conftest.py
`Tree.durable`), with the same calls it makes on a directory.

`S3Path` supports what the behaviour tests do to durable files: join with ``/``,
``read_bytes``/``read_text``, ``write_bytes``/``write_text`` (one PUT), ``unlink``,
``exists``/``is_file``/``is_dir``, ``iterdir``/``rglob``/``glob``, ``stat``,
``chmod``, ``rename`` and `utime` (mode and mtime are the object's metadata, as
the engine writes them; tests.helpers.set_mtime calls `os.utime` or `utime`).
A "directory" is a key prefix: ``mkdir`` does nothing and a directory exists
while an object is under it, as on a mount of the bucket.  Raw
botocore calls: the engine's own S3 client is what the tests check, not a helper.
No ``__fspath__``: handed to code that wants a local path, it fails at once
instead of making a local ``s3:/`` directory.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import attrs


@attrs.frozen
class S3Stat:
    """What a HEAD says, in `os.stat_result` names: mode and mtime from the metadata the
    engine writes (rclone's ``mode`` and ``mtime``), else the object's Last-Modified."""

    st_size: int
    st_mtime_ns: int
    st_mode: int = 0o100644

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9

    @property
    def st_atime_ns(self) -> int:
        return self.st_mtime_ns


@attrs.frozen(eq=False)
class S3Path:
    """``s3://bucket/key`` through `client` (a botocore S3 client)."""

    client: Any = attrs.field(repr=False)
    bucket: str
    key: str = ""  # no leading or trailing "/"

    def __truediv__(self, other: str | os.PathLike[str]) -> S3Path:
        sub = os.fspath(other).strip("/")
        key = posixpath.normpath(f"{self.key}/{sub}" if self.key else sub)
        return attrs.evolve(self, key="" if key == "." else key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, S3Path) and (self.bucket, self.key) == (other.bucket, other.key)

    def __hash__(self) -> int:
        return hash((self.bucket, self.key))

    def __lt__(self, other: S3Path) -> bool:
        return self.key < other.key

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def name(self) -> str:
        return posixpath.basename(self.key)

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.key.split("/")) if self.key else ()

    @property
    def parent(self) -> S3Path:
        return attrs.evolve(self, key=posixpath.dirname(self.key))

    def relative_to(self, other: S3Path) -> PurePosixPath:
        return PurePosixPath(posixpath.relpath(self.key, other.key or "."))

    def with_name(self, name: str) -> S3Path:
        return self.parent / name

    def _keys(self) -> Iterator[tuple[str, dict[str, Any]]]:
        prefix = f"{self.key}/" if self.key else ""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                yield obj["Key"], obj

    def read_bytes(self) -> bytes:
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=self.key)["Body"].read())
        except self.client.exceptions.NoSuchKey:
            raise FileNotFoundError(str(self)) from None

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def _metadata(self) -> dict[str, str] | None:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key)
        except self.client.exceptions.ClientError:
            return None
        return dict(head.get("Metadata", {}))

    def write_bytes(self, data: bytes) -> int:
        """One PUT; an object replaced keeps its metadata (mode, mtime), as bit rot would."""
        meta = self._metadata() or {}
        self.client.put_object(Bucket=self.bucket, Key=self.key, Body=data, Metadata=meta)
        return len(data)

    def _set_metadata(self, **fields: str) -> None:
        meta = self._metadata()
        if meta is None:
            raise FileNotFoundError(str(self))
        self.client.copy_object(
            Bucket=self.bucket,
            Key=self.key,
            CopySource={"Bucket": self.bucket, "Key": self.key},
            Metadata={**meta, **fields},
            MetadataDirective="REPLACE",
        )

    def utime(self, mtime_ns: int) -> None:
        """Set the ``mtime`` metadata (what `os.utime` is to a file)."""
        self._set_metadata(mtime=f"{mtime_ns // 10**9}.{mtime_ns % 10**9:09d}")

    def chmod(self, mode: int) -> None:
        self._set_metadata(mode=f"{0o100000 | (mode & 0o7777):o}")

    def rename(self, target: S3Path) -> S3Path:
        self.client.copy_object(
            Bucket=self.bucket, Key=target.key, CopySource={"Bucket": self.bucket, "Key": self.key}
        )
        self.client.delete_object(Bucket=self.bucket, Key=self.key)
        return target

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    def unlink(self, missing_ok: bool = False) -> None:
        if not missing_ok and not self.is_file():
            raise FileNotFoundError(str(self))
        self.client.delete_object(Bucket=self.bucket, Key=self.key)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to make: a prefix exists by the objects under it."""

    def stat(self) -> S3Stat:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key)
        except self.client.exceptions.ClientError:
            raise FileNotFoundError(str(self)) from None
        meta = head.get("Metadata", {})
        mtime_ns = int(head["LastModified"].timestamp() * 10**9)
        if "mtime" in meta:
            whole, _, frac = meta["mtime"].partition(".")
            mtime_ns = int(whole) * 10**9 + int((frac + "000000000")[:9])
        mode = int(meta["mode"], 8) if "mode" in meta else 0o100644
        return S3Stat(int(head["ContentLength"]), mtime_ns, mode)

    def is_file(self) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key)
        except self.client.exceptions.ClientError:
            return False
        return True

    def is_dir(self) -> bool:
        return next(self._keys(), None) is not None

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def is_symlink(self) -> bool:
        return False

    def iterdir(self) -> Iterator[S3Path]:
        """The objects and "directories" directly under this prefix."""
        depth = len(self.key.split("/")) if self.key else 0
        seen: set[str] = set()
        for key, _ in self._keys():
            name = key.split("/")[depth]
            if name and name not in seen:
                seen.add(name)
                yield self / name

    def rglob(self, pattern: str) -> Iterator[S3Path]:
        """Objects (no "directories") below this prefix whose name matches `pattern`."""
        for key, _ in self._keys():
            if fnmatch.fnmatch(posixpath.basename(key), pattern):
                yield attrs.evolve(self, key=key)

    def glob(self, pattern: str) -> Iterator[S3Path]:
        for child in self.iterdir():
            if fnmatch.fnmatch(child.name, pattern):
                yield child

    def snapshot(self) -> dict[str, tuple[object, ...]]:
        """Relative key -> (ETag, size, Last-Modified) of every object below: equal
        snapshots mean nothing was written (tests.helpers.snapshot of a directory)."""
        return {
            posixpath.relpath(key, self.key or "."): (obj["ETag"], obj["Size"], obj["LastModified"])
            for key, obj in self._keys()
        }

    def files(self, skip: str | None = ".syncengine") -> dict[str, bytes]:
        """Relative key -> content of every object below, not entering `skip` (as
        tests.helpers.files does for a directory)."""
        out = {}
        for key, _ in self._keys():
            rel = posixpath.relpath(key, self.key or ".")
            if skip is None or skip not in rel.split("/"):
                out[rel] = (self / rel).read_bytes()
        return out
