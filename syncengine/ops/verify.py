"""Verify: check the durable side against the manifest, trusting neither.

Owns `syncengine verify`.  Per adapter: every manifest entry's object exists
with the recorded size (for a segment chain, every object of the chain as
restore resolves it, with its length;
for a SQLite snapshot, the snapshot); a deterministic sample (seeded by the
manifest's sequence number, so a rerun checks the same paths and
``sample=100`` checks all) is read back and hashed (a chain is rebuilt and
hashed as restore would); every SQLite snapshot is copied to a local temp
file and checked as checkpoint and restore check it (`syncengine.sqlite.check`: corrupt
is a problem, "could not check" a note; SQLite is never opened on the mount);
files on the durable side that no entry names are listed, and fail the run
only when `strict`.  A copy that differs from its entry is judged by the rule
restore uses (`recorded.judge`): a newer complete version left by an
interrupted checkpoint is a note, anything else a problem.  Manifest objects
restore could not use and invalid entries are problems too: verify fails
where restore would be incomplete.  So is a durable side *behind* this
machine's index (behind.py): a manifest that ends before the object the
index recorded, or an object a write-back mount acknowledged and the bucket
does not hold; the index is read before the manifest, so a checkpoint
running meanwhile cannot look like one.

Resumable: progress (the manifest sequence, the sample, the last path
checked in sorted order, the problems so far) is saved in
``<state_dir>/verify/<adapter>.json`` every few hundred entries and when a
run stops at its `limit`; the next run continues after that path unless the
manifest changed or `restart` is asked.  A finished adapter removes its file.
Packs are checked once a run completes (`syncengine.ops.verifypacks`).
It never writes to the durable side and does not take the state lock.
Checking one entry is `syncengine.ops.verifyentry`'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import xxhash

from syncengine.crypt.secrets import Secrets
from syncengine.durable import manifest
from syncengine.durable.manifest import Entry
from syncengine.durable.store import MANIFEST_DIR, Store
from syncengine.errors import DurableError
from syncengine.fs import savefile
from syncengine.local import behind
from syncengine.local.index import Index
from syncengine.local.status import index_path, staging_marker
from syncengine.ops import verifypacks
from syncengine.ops.verifyentry import EntryChecker, Unrecorded
from syncengine.progress import SILENT, Progress, Reporter

log = logging.getLogger("syncengine")
SAVE_EVERY = 500  # entries between progress saves
NO_CHECKPOINT = "no durable checkpoint yet"  # an adapter's only note: one line for all such


@attrs.frozen
class Problem:
    """One thing wrong on the durable side, named by path."""

    adapter: str
    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.adapter}: {self.path}: {self.what}"


@attrs.frozen
class AdapterVerify:
    """What verify found for one adapter."""

    name: str
    seq: int = 0
    entries: int = 0
    checked: int = 0  # entries whose objects were checked (this run and resumed ones)
    hashed: int = 0  # entries read back and hashed
    bytes_read: int = 0
    problems: tuple[Problem, ...] = ()
    unlisted: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # unreadable manifest objects skipped, unknown kinds
    complete: bool = True  # False: stopped at the limit; run again to continue
    resumed_after: str | None = None
    fatal: str | None = None


@attrs.frozen
class VerifyReport:
    adapters: tuple[AdapterVerify, ...]
    sample: float
    strict: bool

    @property
    def ok(self) -> bool:
        return all(
            not a.problems and a.fatal is None and not (self.strict and a.unlisted)
            for a in self.adapters
        )

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "sample": self.sample,
            "strict": self.strict,
            "adapters": [
                {
                    **attrs.asdict(a, recurse=False),
                    "problems": [attrs.asdict(p) for p in a.problems],
                    "unlisted": list(a.unlisted),
                    "notes": list(a.notes),
                }
                for a in self.adapters
            ],
        }

    def lines(self, *, quiet: bool = False) -> list[str]:
        """The report as text; `quiet` (``-q``): only problems, unlisted files and notes,
        and the verdict when it is not OK (nothing at all when everything is)."""
        out = []
        none = [a.name for a in self.adapters if a.notes == (NO_CHECKPOINT,) and not a.fatal]
        for a in self.adapters:
            if a.name in none:  # all of them in one line below
                continue
            if a.fatal:
                out.append(f"{a.name}: FAILED: {a.fatal}")
                continue
            out.extend(f"PROBLEM {p}" for p in a.problems)
            out.extend(
                f"{'PROBLEM' if self.strict else 'unlisted'} {a.name}: {u}: "
                "on the durable side but in no manifest entry"
                for u in a.unlisted
            )
            out.extend(f"note {a.name}: {n}" for n in a.notes)
            if quiet:
                continue
            state = "" if a.complete else " (stopped at the limit: run again to continue)"
            resumed = f", resumed after {a.resumed_after}" if a.resumed_after else ""
            out.append(
                f"{a.name}: manifest seq {a.seq}, {a.entries} entries, {a.checked} "
                f"checked, {a.hashed} read back ({a.bytes_read} bytes){resumed}; "
                f"{len(a.problems)} problem(s), {len(a.unlisted)} unlisted{state}"
            )
        if none and not quiet:
            out.append(f"{NO_CHECKPOINT} (nothing to verify): {', '.join(none)}")
        if not (quiet and self.ok):
            out.append("verify: OK" if self.ok else "verify: PROBLEMS FOUND")
        return out


def sampled(path: str, seq: int, percent: float) -> bool:
    """Whether `path` is in the read-back sample (deterministic for one manifest seq)."""
    if percent >= 100:
        return True
    return xxhash.xxh3_64_intdigest(path.encode(), seed=seq) % 10000 < percent * 100


def always_sampled(entries: Iterable[Entry], seq: int) -> str | None:
    """The file or log read back at any sample, so that a sample is never empty when
    there are any: the one whose path hashes lowest (deterministic like `sampled`)."""
    readable = [e.path for e in entries if e.kind in ("file", "segments")]
    if not readable:
        return None
    return min(readable, key=lambda p: xxhash.xxh3_64_intdigest(p.encode(), seed=seq))


@attrs.define
class _Progress:
    seq: int
    sample: float
    cursor: str = ""
    checked: int = 0
    hashed: int = 0
    bytes_read: int = 0
    problems: list[list[str]] = attrs.field(factory=list)

    @classmethod
    def resume(cls, path: Path, seq: int, sample: float, *, restart: bool) -> _Progress:
        """The saved progress for this manifest and sample, or a fresh start."""
        old = None if restart else cls.load(path)
        if old is not None and (old.seq != seq or old.sample != sample):
            old = None  # the manifest changed (or the sample): start over
        return old or cls(seq, sample)

    @classmethod
    def load(cls, path: Path) -> _Progress | None:
        try:
            data = json.loads(path.read_bytes())
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        savefile.write_file(path, json.dumps(attrs.asdict(self)).encode(), fsync=False)


def verify_adapter(
    name: str,
    store: Store,
    state_dir: Path,
    *,
    sample: float,
    restart: bool = False,
    limit: int | None = None,
    progress: Reporter = SILENT,
    secrets: Secrets | None = None,
) -> AdapterVerify:
    """Check one adapter's durable side; see the module docstring."""
    progress_path = state_dir / "verify" / f"{name}.json"
    index = Index.load(index_path(state_dir, name))  # first: a pass saves it after the manifest
    if not store.exists():
        lost = tuple(_behind(name, store, index, 0))
        return AdapterVerify(name, problems=lost, notes=() if lost else (NO_CHECKPOINT,))
    state = manifest.load(store)
    entries = sorted(state.entries.values(), key=lambda e: e.path)
    prog = _Progress.resume(progress_path, state.last_seq, sample, restart=restart)
    resumed = prog.cursor or None
    todo = [e for e in entries if e.path > prog.cursor] if prog.cursor else entries
    problems = [Problem(name, p, w) for p, w in prog.problems]
    if not resumed:
        problems += _manifest_problems(name, store, index, state)
    notes = [f"manifest: {w}" for w in state.warnings]
    check = attrs.evolve(_checker(name, store, state_dir, notes, state.last_seq), secrets=secrets)
    first = always_sampled(entries, prog.seq)

    def picked(path: str) -> bool:
        return path == first or sampled(path, prog.seq, prog.sample)

    meter = progress.start("verify", name, len(todo), sum(e.size for e in todo if picked(e.path)))
    with store.batch():
        complete = _check_all(
            name, todo, check, prog, problems, progress_path, meter, limit, picked
        )
    meter.finish()
    unlisted: tuple[str, ...] = ()
    if complete:
        unlisted = tuple(unlisted_files(store, [*state.entries.values(), *state.invalid.values()]))
        problems += [Problem(name, key, what) for key, what in verifypacks.check(store, notes)]
        if unlisted and not state.last_seq:
            notes.append("no manifest yet (old layout): files stay unlisted until a checkpoint")
        progress_path.unlink(missing_ok=True)
    return AdapterVerify(
        name,
        state.last_seq,
        len(entries),
        prog.checked,
        prog.hashed,
        prog.bytes_read,
        tuple(problems),
        unlisted,
        tuple(notes),
        complete=complete,
        resumed_after=resumed,
    )


def _check_all(
    name: str,
    todo: list[Entry],
    check: EntryChecker,
    prog: _Progress,
    problems: list[Problem],
    progress_path: Path,
    meter: Progress,
    limit: int | None,
    picked: Callable[[str], bool],
) -> bool:
    """Check `todo` in order, saving progress every `SAVE_EVERY` entries; False: stopped
    at `limit` (progress saved), to be resumed after `prog.cursor`."""
    for done, entry in enumerate(todo):
        if limit is not None and done >= limit:
            prog.problems = [[p.path, p.what] for p in problems]
            prog.save(progress_path)
            return False
        found, read = check.entry(entry, picked(entry.path))
        problems.extend(Problem(name, entry.path, w) for w in found)
        prog.checked += 1
        prog.hashed += read is not None
        prog.bytes_read += read or 0
        prog.cursor = entry.path
        meter.advance(1, read or 0)
        if (done + 1) % SAVE_EVERY == 0:
            prog.problems = [[p.path, p.what] for p in problems]
            prog.save(progress_path)
    return True


def _checker(
    name: str, store: Store, state_dir: Path, notes: list[str], last_seq: int
) -> EntryChecker:
    """The entry checker for one adapter; it asks whether an interrupted checkpoint may
    have left newer copies from the adapter's staging marker and index."""
    marker, index_file = staging_marker(state_dir, name), index_path(state_dir, name)
    return EntryChecker(store, state_dir, notes, Unrecorded(marker, index_file, last_seq))


def _manifest_problems(
    name: str, store: Store, index: Index | None, state: manifest.ManifestState
) -> list[Problem]:
    """What the manifest itself lost, entries nothing can restore, and a durable side
    behind this machine's index: checked once per run, not again when resuming."""
    return [
        *(Problem(name, MANIFEST_DIR, p) for p in state.problems),
        *(Problem(name, e.path, e.problem or "") for e in state.invalid.values()),
        *_behind(name, store, index, state.last_seq),
    ]


def _behind(name: str, store: Store, index: Index | None, last_seq: int) -> list[Problem]:
    """The durable side lacks what this machine's index records as published."""
    if index is None:
        return []
    fix = (
        "the durable side is behind this machine's index (a write-back mount that lost "
        "its uploads?); run `syncengine checkpoint`: it publishes it again"
    )
    seq = int(index.meta.get("manifest_seq", 0))
    out = []
    if seq > last_seq:
        out.append(
            Problem(
                name,
                MANIFEST_DIR,
                f"the newest manifest object is {last_seq:012d}, "
                f"the local index recorded {seq:012d}: {fix}",
            )
        )
    for path, what in behind.audit(store, index, None).missing.items():
        out.append(Problem(name, path, f"{what}: {fix}"))
    return out


def unlisted_files(store: Store, entries: Iterable[Entry]) -> list[str]:
    """Durable files (outside ``.syncengine/``) that no manifest entry names."""
    listed = set()
    for e in entries:
        listed.add(e.path)
        listed.add(e.location)
    return sorted(info.key for info in store.list() if info.key not in listed)


def verify(
    adapters: Mapping[str, Store],
    state_dir: Path,
    *,
    sample: float = 10.0,
    strict: bool = False,
    restart: bool = False,
    limit: int | None = None,
    progress: Reporter = SILENT,
    secrets: Mapping[str, Secrets] | None = None,
) -> VerifyReport:
    """Verify each named store (`secrets`: each adapter's secret files and keys); a failing
    durable side stops only that adapter."""
    results = []
    for name, store in adapters.items():
        try:
            results.append(
                verify_adapter(
                    name,
                    store,
                    state_dir,
                    sample=sample,
                    restart=restart,
                    limit=limit,
                    progress=progress,
                    secrets=(secrets or {}).get(name),
                )
            )
        except DurableError as exc:
            results.append(AdapterVerify(name, fatal=str(exc)))
    return VerifyReport(tuple(results), sample, strict)
