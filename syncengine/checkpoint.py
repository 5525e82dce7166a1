"""Doing a checkpoint of one adapter: carry out the plan, then record it.

Owns the order that makes a checkpoint safe: publish every changed file as a
closed object (in parallel, so per-file latency on the mount overlaps), flush
the durable filesystem once, write one manifest object naming what was
published, and only then update the local index.  If the durable side fails
part-way, the index is not advanced, so the next pass takes the same files
again; nothing already durable is lost.  An idle pass touches neither the
durable side nor the index file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from syncengine import manifest
from syncengine.copier import Copied, NotRegular, Vanished, link_hash, upload
from syncengine.errors import DurableError, SourceError
from syncengine.index import DIRTY, Index
from syncengine.manifest import Entry
from syncengine.plan import CheckpointAction, MarkAbsent, RecordLink, SkipSpecial, Upload
from syncengine.report import AdapterReport, PathError
from syncengine.scan import ScanResult
from syncengine.store import Store

log = logging.getLogger("syncengine")

# A file whose mtime is this close to the scan start may still change within
# the same timestamp tick: publish it but look again next pass (borg files cache).
GRANULARITY_NS = 2_000_000_000
_ABSENT_CAP = 255


@attrs.define
class AdapterState:
    """One adapter at run time: its live root, store and loaded index."""

    name: str
    live: Path
    store: Store
    index: Index
    index_path: Path
    staging_marker: Path


@attrs.frozen
class _Done:
    """The outcome of one action, applied to the index after the manifest is durable."""

    path: str
    copied: Copied | None = None
    link_target: str | None = None
    link_sig: tuple[int, int, int, int] | None = None


def find_missing(state: AdapterState, scan: ScanResult) -> list[str]:
    """Published paths not present in the live tree this pass."""
    index = state.index
    changed = {s.path for s in scan.changed}
    need_lstat = scan.known < index.present_count()
    out: list[str] = []
    for path, raw in index.records.items():
        absent = raw[-1]
        if absent:
            if absent < _ABSENT_CAP and path not in changed:
                out.append(path)
        elif need_lstat and path not in changed:
            try:
                os.lstat(state.live / path)
            except FileNotFoundError:
                out.append(path)
            except OSError:
                pass
    return out


def run(state: AdapterState, actions: Sequence[CheckpointAction], *, started_ns: int,
        jobs: int) -> AdapterReport:
    """Carry out a checkpoint plan for one adapter and return what happened."""
    done: list[_Done] = []
    errors: list[PathError] = []
    counts = {"unchanged": 0, "skipped": 0}
    fatal: str | None = None
    uploads = [a for a in actions if isinstance(a, Upload)]
    # A run that was killed (or stopped by the durable side) may have renamed new versions
    # into place without recording them: the index's hashes are then not what the durable
    # paths hold, so this run copies every changed file instead of trusting them.
    trust_hashes = not state.staging_marker.exists()
    if uploads:
        _prepare_staging(state)
    try:
        for action, result in _execute_uploads(state, uploads, jobs, trust_hashes):
            _collect(state, action, result, done, errors, counts)
    except DurableError as exc:
        fatal = str(exc)
        log.error("checkpoint.durable-failed adapter=%s error=%s", state.name, exc)
    for other in actions:
        if isinstance(other, RecordLink):
            _record_link(state, other.path, done, errors, counts)
        elif isinstance(other, MarkAbsent):
            state.index.mark_absent(other.path)
        elif isinstance(other, SkipSpecial):
            counts["skipped"] += 1
            log.info("scan.skip-special adapter=%s path=%s", state.name, other.path)
    published = [d for d in done if d.copied is None or d.copied.published]
    name = None
    if fatal is None and published:
        try:
            name = _write_manifest(state, published, started_ns)
        except DurableError as exc:
            fatal = str(exc)
            log.error("checkpoint.manifest-failed adapter=%s error=%s", state.name, exc)
    if fatal is None:
        _apply(state.index, done, started_ns)
        if uploads:
            _finish_staging(state)
    else:  # keep verified-equal results; published ones are taken again next pass
        _apply(state.index, [d for d in done if d.copied and not d.copied.published], started_ns)
    if state.index.changed:
        state.index.save(state.index_path)
    copied = [d.copied for d in published if d.copied is not None]
    return AdapterReport(
        name=state.name, files=len(copied) if fatal is None else 0,
        bytes=sum(c.size for c in copied) if fatal is None else 0,
        unchanged=counts["unchanged"], skipped=counts["skipped"],
        links=sum(1 for d in published if d.copied is None) if fatal is None else 0,
        manifest=name, errors=tuple(errors), fatal=fatal,
    )


def _execute_uploads(state: AdapterState, uploads: list[Upload], jobs: int,
                     trust_hashes: bool) -> Iterable[tuple[Upload, Copied | Exception]]:
    def one(action: Upload) -> Copied | Exception:
        rec = state.index.get(action.path)
        known = trust_hashes and rec is not None and rec.kind == "file"
        try:
            return upload(state.store, os.fspath(state.live), action.path,
                          known_hash=rec.hash64 if known and rec else None,
                          known_size=rec.size if known and rec else None)
        except (SourceError, Vanished, NotRegular) as exc:
            return exc

    if len(uploads) <= 1 or jobs <= 1:
        for action in uploads:
            yield action, one(action)
        return
    with ThreadPoolExecutor(max_workers=min(jobs, len(uploads)),
                            thread_name_prefix="syncengine-copy") as pool:
        futures = [(a, pool.submit(one, a)) for a in uploads]
        try:
            for action, fut in futures:
                yield action, fut.result()
        finally:
            for _, fut in futures:
                fut.cancel()


def _collect(state: AdapterState, action: Upload, result: Copied | Exception,
             done: list[_Done], errors: list[PathError], counts: dict[str, int]) -> None:
    if isinstance(result, Copied):
        done.append(_Done(action.path, copied=result))
        if not result.published:
            counts["unchanged"] += 1
        else:
            log.debug("copy.published adapter=%s path=%s bytes=%d", state.name, action.path,
                      result.size)
    elif isinstance(result, Vanished):
        counts["skipped"] += 1
        log.info("copy.vanished adapter=%s path=%s", state.name, action.path)
    elif isinstance(result, NotRegular):
        counts["skipped"] += 1
        log.info("copy.not-regular adapter=%s path=%s", state.name, action.path)
    elif isinstance(result, SourceError):
        errors.append(PathError(state.name, action.path, result.operation, result.reason))
        log.warning("copy.failed adapter=%s path=%s error=%s", state.name, action.path,
                    result.reason)


def _record_link(state: AdapterState, path: str, done: list[_Done],
                 errors: list[PathError], counts: dict[str, int]) -> None:
    full = state.live / path
    try:
        st = os.lstat(full)
        target = os.readlink(full)
    except FileNotFoundError:
        counts["skipped"] += 1
        return
    except OSError as exc:
        errors.append(PathError(state.name, path, "readlink", exc.strerror or str(exc)))
        return
    if state.index.links.get(path) == target:
        state.index.record(path, size=st.st_size, mtime_ns=st.st_mtime_ns,
                           ctime_ns=st.st_ctime_ns, hash64=link_hash(target),
                           mode=st.st_mode, kind="symlink", target=target)
        counts["unchanged"] += 1
        return
    done.append(_Done(path, link_target=target,
                      link_sig=(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)))


def _entry(done: _Done) -> Entry:
    if done.copied is not None:
        c = done.copied
        return Entry(done.path, "file", c.size, c.mtime_ns, c.mode & 0o7777, c.hash64,
                     object=c.object)
    assert done.link_sig is not None
    return Entry(done.path, "symlink", mtime_ns=done.link_sig[1], target=done.link_target)


def index_entries(index: Index) -> Iterable[Entry]:
    """Every published entry the index knows, for a base manifest."""
    for path, rec in index.items():
        extra: dict[str, Any] = dict(index.extras.get(path, {}))
        obj = extra.pop("object", None)
        yield Entry(path, rec.kind, rec.size, rec.mtime_ns, rec.mode & 0o7777, rec.hash64,
                    target=index.links.get(path), object=obj, extra=extra)


def _write_manifest(state: AdapterState, published: list[_Done], now_ns: int) -> str:
    meta = state.index.meta
    seq = int(meta.get("manifest_seq", 0)) + 1
    state.store.barrier()
    compact = not meta.get("base_seq") or int(meta.get("deltas", 0)) >= manifest.COMPACT_AFTER
    if compact:
        merged = {e.path: e for e in index_entries(state.index)}
        merged.update((d.path, _entry(d)) for d in published)
        name = manifest.write(state.store, state.name, seq, "base", merged.values(),
                              created_ns=now_ns)
        meta.update(manifest_seq=seq, base_seq=seq, deltas=0)
    else:
        name = manifest.write(state.store, state.name, seq, "delta",
                              (_entry(d) for d in published), created_ns=now_ns)
        meta.update(manifest_seq=seq, deltas=int(meta.get("deltas", 0)) + 1)
    state.index.changed = True
    log.info("checkpoint.manifest adapter=%s object=%s entries=%d", state.name, name,
             len(published))
    return name


def _apply(index: Index, done: Iterable[_Done], started_ns: int) -> None:
    for d in done:
        if d.copied is not None:
            c = d.copied
            size, mtime, ctime = c.stat_before
            too_recent = mtime >= started_ns - GRANULARITY_NS
            extra = None
            if c.published:  # a new version: its object (or none: at the path) replaces the old
                extra = {k: v for k, v in index.extras.get(d.path, {}).items() if k != "object"}
                if c.object:
                    extra["object"] = c.object
            index.record(d.path, size=c.size, mtime_ns=c.mtime_ns,
                         ctime_ns=DIRTY if c.raced or too_recent or size != c.size else ctime,
                         hash64=c.hash64, mode=c.mode, extra=extra)
        elif d.link_sig is not None and d.link_target is not None:
            size, mtime, ctime, mode = d.link_sig
            index.record(d.path, size=size, mtime_ns=mtime, ctime_ns=ctime,
                         hash64=link_hash(d.link_target), mode=mode, kind="symlink",
                         target=d.link_target)


def _prepare_staging(state: AdapterState) -> None:
    """Sweep temp objects of a killed run, known from a local marker (no listing otherwise)."""
    if state.staging_marker.exists():
        removed = state.store.sweep_staging()
        if removed:
            log.info("checkpoint.swept-staging adapter=%s files=%d", state.name, removed)
    else:
        state.staging_marker.parent.mkdir(parents=True, exist_ok=True)
        state.staging_marker.touch()


def _finish_staging(state: AdapterState) -> None:
    state.staging_marker.unlink(missing_ok=True)
