"""The exception hierarchy: one root, subclasses split by consequence.

Owns the mapping from a failure to what happens next and to the process exit
code.  A usage or configuration problem stops before any work (exit 2); a
problem with one source file is reported and the run goes on, ending
"incomplete" (exit 1); a problem with the durable side, or with the local state
directory, stops the run (exit 1).  `OSError` is translated into these at the
boundary where the path and the operation are known (see `durable_error`,
`local_error` and `source_error`), always raised ``from`` the original.
"""

from __future__ import annotations

import errno
import os


class SyncEngineError(Exception):
    """Root of every error syncengine raises on purpose."""

    exit_code = 1


class ConfigError(SyncEngineError):
    """The configuration or the command line is unusable: nothing was done."""

    exit_code = 2


class SourceError(SyncEngineError):
    """One local file could not be read or written; the run continues."""

    exit_code = 1

    def __init__(self, path: str, operation: str, reason: str) -> None:
        super().__init__(f"{operation} {path}: {reason}")
        self.path = path
        self.operation = operation
        self.reason = reason


class UnsafePath(SourceError):
    """A name that would leave the tree (absolute, ``..``, or through a symlink): from the
    live tree, or a key of the durable side (`syncengine.durable.store`)."""


class PathConflict(SourceError):
    """The durable side keeps another kind of entry where one path must go (a file
    where a directory is needed, or the reverse): that path is skipped, the run
    continues and ends incomplete.  Deletions are never propagated, so a local
    file replaced by a directory of the same name (or the reverse) meets its old
    durable copy."""


_CONFLICTS = (errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST)


class CommitRefused(SourceError):
    """The durable mount refused one object when it was closed: closing is the commit
    on an object-store mount, and an error there is how such mounts refuse what they
    cannot do (rclone without a VFS cache: EPERM).  That object was not written and
    its previous version stays; the path is retried next pass, the run goes on and
    ends incomplete."""


# Errors at close that say the mount itself is unusable, not that it refused one object.
_MOUNT_DOWN = (errno.ENOTCONN, errno.EROFS, errno.ENOSPC, errno.EDQUOT)


class DurableError(SyncEngineError):
    """The durable side failed (read-only, full, gone): the run stops."""

    exit_code = 1


class NameTaken(DurableError):
    """An object meant to be new (a manifest name, used once) already exists: this
    writer's sequence is behind what the durable side holds."""


class SharedRoot(DurableError):
    """A manifest name this writer had just found free was taken before its object landed
    there: another process writes to the same durable root."""


class LeaseLost(DurableError):
    """Another instance took this durable root's lease over: this one publishes nothing
    more (`syncengine.local.leaseholder`).  `syncengine run` exits `exit_code` after
    stopping its child."""

    exit_code = 76


class LeaseHeld(DurableError):
    """Another instance holds this durable root's lease and it did not expire or get
    released within `lease_wait`: nothing was written."""

    exit_code = 77


class LocalError(SyncEngineError):
    """The local side failed (the state directory: index, status, lock; or the live root):
    the run stops.  What is durable stays valid; the next run recovers."""

    exit_code = 1


class LockBusy(SyncEngineError):
    """Another checkpoint or restore holds the state directory lock."""

    exit_code = 1


class Incomplete(SyncEngineError):
    """The run finished, but some items failed; the report names them."""

    exit_code = 1


def _describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


def _advice(exc: OSError) -> str:
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return "; check that the durable root is mounted read-write and writable by this user"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "; free space on the durable side or raise its quota"
    if exc.errno == errno.ENOTCONN:
        return "; the mount is gone: remount it (fusermount3 -uz, then mount again)"
    return ""


def _local_advice(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            "; free space on the local disk that holds it (or move state_dir with "
            "--state-dir); the next run recovers"
        )
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return "; make it writable by this user, or point state_dir at a writable local directory"
    return "; check the local disk; the next run retries"


def local_error(operation: str, path: str | os.PathLike[str], exc: OSError) -> LocalError:
    """Translate an OSError on the local side (state directory, live root) into a
    run-stopping error that names the path and what to do."""
    return LocalError(f"{operation} {os.fspath(path)}: {_describe(exc)}{_local_advice(exc)}")


def durable_error(operation: str, path: str | os.PathLike[str], exc: OSError) -> DurableError:
    """Translate an OSError on the durable side into a run-stopping error."""
    return DurableError(f"{operation} {os.fspath(path)}: {_describe(exc)}{_advice(exc)}")


def publish_error(
    relpath: str, target: str | os.PathLike[str], exc: OSError
) -> PathConflict | DurableError:
    """Translate a failed rename into place: a conflict of kinds is this path's
    problem only; anything else stops the run."""
    if exc.errno not in _CONFLICTS:
        return durable_error("publish", target, exc)
    return PathConflict(
        relpath,
        "publish",
        (
            f"the durable side keeps a file where this path needs a directory, or a directory "
            f"where it needs a file ({_describe(exc)}): a deleted local path stays durable. To "
            f"publish this path, move the old entry under {os.fspath(target)} aside, or exclude "
            "this path"
        ),
    )


def commit_error(
    relpath: str, target: str | os.PathLike[str], exc: OSError
) -> CommitRefused | DurableError:
    """Translate an error at close (the commit): the mount refused this object (that
    path's error), or the mount is gone, read-only or full (the run stops)."""
    if exc.errno in _MOUNT_DOWN:
        return durable_error("close (commit)", target, exc)
    return CommitRefused(
        relpath,
        "close (commit)",
        (
            f"the durable mount refused the object at close ({_describe(exc)}): it was not "
            f"written and the previous version of {os.fspath(target)}, if any, is kept; "
            "retried next pass"
        ),
    )


def source_error(operation: str, path: str, exc: OSError) -> SourceError:
    """Translate an OSError on one local file into a per-path error."""
    return SourceError(path, operation, _describe(exc))


def side_error(
    operation: str,
    exc: OSError,
    *,
    durable_root: str | os.PathLike[str],
    default_path: str | os.PathLike[str],
) -> DurableError | LocalError:
    """An OSError that no lower layer translated, as the error of the side its path is on
    (a path under `durable_root`: durable; anything else, or no path: local)."""
    path = os.fspath(exc.filename) if exc.filename else os.fspath(default_path)
    root = os.fspath(durable_root)
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return durable_error(operation, path, exc)
    return local_error(operation, path, exc)
