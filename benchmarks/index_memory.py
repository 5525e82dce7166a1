"""Memory of syncengine's in-memory change index for N files, without a tree.

``PYTHONPATH=. python benchmarks/index_memory.py [--n 1000000] [--reference]``
(or ``.venv/bin/python benchmarks/index_memory.py``) records N synthetic
entries with realistic relative paths (the mix of ``tree_plan``: Codex
rollouts under ``sessions/YYYY/MM/DD``, Claude transcripts and subagents,
opencode parts, ...) into ``syncengine.local.index.Index`` and reports:

- retained: what ``tracemalloc`` still holds once the index is built (the
  index's own size, path strings included), and that per entry;
- peak: the ``tracemalloc`` high-water mark while building (transients too);
- RSS delta: resident memory after minus before, measured in a fresh
  interpreter without ``tracemalloc`` (which adds its own overhead), and the
  peak RSS (``ru_maxrss``) there minus the RSS before.

Entries are generated one at a time inside the measured region, so their path
strings count only if the index keeps them. ``--reference`` adds the same
measurement for a plain ``dict`` of tuples, the naive layout, for scale.
``build_index`` is the one place that knows the engine's API.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import importlib
import itertools
import json
import multiprocessing
import os
import random
import resource
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator, Sized
from concurrent.futures import ProcessPoolExecutor
from typing import Any, NamedTuple

from tree_plan import CATEGORIES

PAGE = os.sysconf("SC_PAGE_SIZE")
NOW_NS = 1_795_824_000 * 10**9


class Entry(NamedTuple):
    path: str
    size: int
    mtime_ns: int
    ctime_ns: int
    hash64: int
    mode: int


# ---------------------------------------------------------------------------
# The one place to adapt to the engine's API.
# ---------------------------------------------------------------------------


def build_index(n: int, seed: int = 1) -> object:
    """Build syncengine's index holding ``n`` synthetic file entries."""
    from syncengine.local.index import Index

    idx = Index()
    for e in synthetic_entries(n, seed):
        idx.record(
            e.path,
            size=e.size,
            mtime_ns=e.mtime_ns,
            ctime_ns=e.ctime_ns,
            hash64=e.hash64,
            mode=e.mode,
            kind="file",
        )
    return idx


# ---------------------------------------------------------------------------


def build_reference(n: int, seed: int = 1) -> object:
    """The naive layout: one dict entry of a 5-tuple per path."""
    return {e.path: tuple(e[1:]) for e in synthetic_entries(n, seed)}


_CLAUDE = "agent-state/claude"
_OPENCODE = "opencode-share/opencode/storage"
# Per category of tree_plan: the shape of its relative paths.
PATH_TEMPLATES = {
    "codex_rollout": "codex-home/sessions/{day}/rollout-{stamp}-{uid}.jsonl",
    "codex_archived": "codex-home/archived_sessions/rollout-{stamp}-{uid}.jsonl",
    "claude_transcript": _CLAUDE + "/projects/{slug}/{uid}.jsonl",
    "claude_subagent": _CLAUDE + "/projects/{slug}/{uid}/subagents/agent-{id8}.jsonl",
    "claude_tool_result": _CLAUDE + "/tool-results/{slug}/{uid}/toolu_01{id26}.txt",
    "gemini_chat": "agent-state/gemini-home/.gemini/tmp/{hex64}/chats/session-{stamp}-{id8}.jsonl",
    "openclaw_session": "oc-home/.openclaw/agents/main-{id8}/sessions/{uid}.jsonl",
    "opencode_session": _OPENCODE + "/session/{hex40}/ses_{id26}.json",
    "opencode_message": _OPENCODE + "/message/ses_{id26}/msg_{id26b}.json",
    "opencode_part": _OPENCODE + "/part/msg_{id26}/prt_{id26b}.json",
    "hermes_session": "hermes/sessions/{date}/session_{stamp}_{id8}.json",
}


def _path(rng: random.Random, category: str, ts: int) -> str:
    """A unique relative path shaped like the generator's for ``category``."""
    when = time.gmtime(ts // 10**9)
    uid = uuid.UUID(int=rng.getrandbits(128), version=4)
    ident = f"{rng.getrandbits(256):064x}"
    return PATH_TEMPLATES[category].format(
        day=time.strftime("%Y/%m/%d", when),
        date=time.strftime("%Y-%m-%d", when),
        stamp=time.strftime("%Y-%m-%dT%H-%M-%S", when),
        uid=uid,
        slug=f"-home-agent-src-{ident[:6]}-project",
        id8=ident[:8],
        id26=ident[8:34],
        id26b=ident[34:60],
        hex40=ident[:40],
        hex64=uid.hex * 2,
    )


def synthetic_entries(n: int, seed: int = 1) -> Iterator[Entry]:
    """``n`` distinct entries, one at a time, in the generator's category mix."""
    rng = random.Random(f"{seed}:index")
    names = [c.name for c in CATEGORIES]
    cumulative = list(itertools.accumulate(c.weight for c in CATEGORIES))
    for _ in range(n):
        category = names[bisect.bisect(cumulative, rng.random() * cumulative[-1])]
        ts = NOW_NS - rng.randrange(400 * 86_400 * 10**9)
        size = int(rng.lognormvariate(9.0, 1.6))
        yield Entry(_path(rng, category, ts), size, ts, ts + 1000, rng.getrandbits(64), 0o100644)


BUILDERS: dict[str, Callable[[int], object]] = {
    "syncengine.local.index.Index": build_index,
    "dict of tuples (reference)": build_reference,
}


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_rss(build: Callable[[int], object], n: int) -> dict[str, float]:
    """Build once without tracemalloc: wall time, RSS delta, peak RSS delta."""
    gc.collect()
    rss0, start = _rss(), time.perf_counter()
    built = build(n)
    seconds = time.perf_counter() - start
    gc.collect()
    rss1 = _rss()
    _check_count(built, n)
    del built
    gc.collect()
    return {
        "seconds": seconds,
        "rss_delta_mb": (rss1 - rss0) / 2**20,
        "peak_rss_delta_mb": (_maxrss() - rss0) / 2**20,
    }


def measure_traced(build: Callable[[int], object], n: int) -> dict[str, float]:
    """Build once under tracemalloc: retained and peak Python allocations."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    built = build(n)
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    _check_count(built, n)
    del built
    gc.collect()
    return {
        "retained_mb": (current - base) / 2**20,
        "bytes_per_entry": (current - base) / n,
        "peak_mb": (peak - base) / 2**20,
    }


def _rss_in_fresh_process(name: str, n: int) -> dict[str, float]:
    """``measure_rss`` in a new interpreter, so earlier passes leave no peak behind."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_measure_rss_by_name, name, n).result()


def _measure_rss_by_name(name: str, n: int) -> dict[str, float]:
    importlib.import_module("syncengine.local.index")  # its import is not the index's size
    return measure_rss(BUILDERS[name], n)


def _check_count(built: object, n: int) -> None:
    """Catch a builder that dropped or merged entries (e.g. a path collision)."""
    if isinstance(built, Sized) and len(built) != n:
        raise RuntimeError(f"the index holds {len(built)} entries, expected {n}")


def _has_index() -> str:
    """Empty if ``syncengine.local.index.Index`` exists, else why not."""
    try:
        module = importlib.import_module("syncengine.local.index")
    except ImportError as exc:
        return (
            f"cannot import syncengine.local.index ({exc}); run from the repository root with "
            "PYTHONPATH=. or with the virtualenv's python (.venv/bin/python)"
        )
    if not hasattr(module, "Index"):
        return f"{module.__file__} has no Index class: adapt build_index() in {__file__}"
    return ""


def measure_table(n: int) -> dict[str, float]:
    """The directory table for the same ``n`` entries: what a walk holds beside the index.

    Retained: one 8-byte signature per directory (kept between passes in the
    ``.dirs`` file, loaded per walk).  Transient, during a walk: the key and
    record lists the workers slice, and the directories' order derived from
    the keys (path strings).
    """
    from array import array

    from syncengine.local import dirtable

    idx: Any = build_index(n)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    keys, vals = list(idx.records), list(idx.records.values())
    order = dirtable.derive(keys)
    sigs = array("Q", bytes(8 * len(order)))
    walk_mb = (tracemalloc.get_traced_memory()[0] - base) / 2**20
    peak_mb = (tracemalloc.get_traced_memory()[1] - base) / 2**20
    dirs = len(order)
    del keys, vals, order
    gc.collect()
    kept_mb = (tracemalloc.get_traced_memory()[0] - base) / 2**20
    tracemalloc.stop()
    del sigs
    return {"directories": dirs, "retained_mb": kept_mb, "walk_mb": walk_mb, "peak_mb": peak_mb}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Measure the memory of syncengine's change index.")
    p.add_argument("--n", type=int, default=1_000_000, help="entries (1000000)")
    p.add_argument("--reference", action="store_true", help="also measure a dict of tuples")
    p.add_argument("--json", help="write the numbers to this file")
    p.add_argument(
        "--table",
        action="store_true",
        help="also measure the directory table (retained and during a walk)",
    )
    args = p.parse_args(argv)
    why = _has_index()
    if why:
        print(f"index_memory: {why}", file=sys.stderr)
        return 2
    names = [*BUILDERS] if args.reference else [next(iter(BUILDERS))]
    results = {name: {**_rss_in_fresh_process(name, args.n)} for name in names}
    for name in names:
        results[name].update(measure_traced(BUILDERS[name], args.n))
    print(_table(args.n, results))
    if args.table:
        t = measure_table(args.n)
        results["directory table"] = t
        print(
            f"\nDirectory table for the same entries: {t['directories']:,.0f} directories; "
            f"retained {t['retained_mb']:.1f} MB; during a walk {t['walk_mb']:.1f} MB more "
            f"(keys, records and the derived order; tracemalloc peak {t['peak_mb']:.1f} MB)"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"n": args.n, "python": sys.version.split()[0], "results": results}, fh)
    return 0


def _table(n: int, results: dict[str, dict[str, float]]) -> str:
    head = (
        f"Index memory for {n:,} entries (Python {sys.version.split()[0]})\n\n"
        "| structure | retained MB | bytes/entry | tracemalloc peak MB "
        "| RSS delta MB | peak RSS delta MB | build s |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    rows = [
        f"| {name} | {r['retained_mb']:.1f} | {r['bytes_per_entry']:.0f} | {r['peak_mb']:.1f} "
        f"| {r['rss_delta_mb']:.1f} | {r['peak_rss_delta_mb']:.1f} | {r['seconds']:.2f} |"
        for name, r in results.items()
    ]
    return "\n".join([head, *rows])


if __name__ == "__main__":
    sys.exit(main())
