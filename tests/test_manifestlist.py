"""The one rule for "the newest checkpoint" (syncengine/durable/manifestlist.py), as data.

Each case is the names in a manifest directory: which objects form the chain
read, which are fenced, whether that chain is a fork (a fenced object above its
last one: not the newest checkpoint), the highest seq a writer continues above,
and the newest generation named (the lease's floor).
"""

from __future__ import annotations

import pytest

from syncengine.durable import manifestlist
from syncengine.durable.store import MANIFEST_DIR
from tests.memstore import MemoryBucket


def _name(seq: int, gen: int, kind: str = "delta") -> str:
    return manifestlist.object_name(seq, kind, gen).rpartition("/")[2]


CASES = {
    # one writer after another: nothing fenced
    "handover": ([(1, 1, "base"), (2, 1), (3, 2)], [1, 2, 3], [], [], 3, 2),
    # a fenced writer's object that landed after the takeover, at a seq the new one
    # also wrote: fenced, not a fork
    "fenced late": ([(1, 1, "base"), (2, 1), (3, 1), (3, 2)], [1, 2, 3], [3], [], 3, 2),
    # objects written before leases are generation 0, and older than any lease's
    "before leases": ([(1, 0, "base"), (2, 0), (3, 1)], [1, 2, 3], [], [], 3, 1),
    # the issue-29 bucket: generations 1 and 2 wrote after generation 3's last object
    "fork": ([(1, 1, "base"), (2, 3), (3, 1, "base"), (4, 2)], [1, 2], [3, 4], [3, 4], 4, 3),
    # repaired: a full base above the fork under a new generation
    "repaired": (
        [(1, 1, "base"), (2, 3), (3, 1, "base"), (4, 2), (5, 4, "base")],
        [1, 2, 5],
        [3, 4],
        [],
        5,
        4,
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_listing(case: str) -> None:
    objects, chain, fenced, forked, top, generation = CASES[case]
    store = MemoryBucket().store("/d")
    for seq, gen, *kind in objects:
        store.put_bytes(f"{MANIFEST_DIR}/{_name(seq, gen, *kind)}", b"", if_absent=True)
    got = manifestlist.listing(store)
    assert [s for s, _k, _n in got.objects] == chain
    assert [s for s, _k, _n in got.fenced] == fenced
    assert [s for s, _k, _n in got.forked] == forked
    assert (got.top_seq, got.generation) == (top, generation)
    problem = got.fork_problem("M")
    assert (problem is not None) == bool(forked)
    if problem is not None:
        assert "is not the newest checkpoint" in problem
        assert "syncengine checkpoint --check-durable" in problem, problem
