"""Two writers on one durable root never replace each other's manifest objects silently.

Two processes that checkpoint different trees into one durable root (each with
its own state dir) take turns through the root's lease (issue 16): the second
waits until the first released it, then starts from the durable manifest.
Each trial starts both at once (they import first and wait on stdin); whatever
the interleaving, both exit 0 and the manifest lists every file of both.
Before the lease, 2 to 9 trials in 30 ended with both at exit 0 and one
writer's files gone; with exclusive manifest names alone, one of the two
failed (exit 1, "two writers share the durable root").  15 trials per kind,
on the directory and the emulator: 30 racing starts, beside test_lease's 30
handovers per kind in a tight loop, which the same lease bugs fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from syncengine.durable.manifest import load
from syncengine.durable.posix.store import Store
from tests.conftest import Tree

TRIALS = 15
FILES = 3
START_TOGETHER = r"""
import sys
from syncengine.cli import main
sys.stdin.buffer.read(1)
sys.exit(main(sys.argv[1:]))
"""


def _config(tree: Tree, who: str) -> Path:
    """A writer's config: its own local root and state dir, the shared durable root, and one
    adapter per trial (a fresh manifest each time, a probe cached after the warm-up)."""
    local = tree.base / f"local-{who}"
    lines = [
        f"local_root = {json.dumps(str(local))}",
        f"durable_root = {json.dumps(str(tree.data))}",
        f"state_dir = {json.dumps(str(tree.base / f'state-{who}'))}",
        "adapters = []",
    ]
    for name in ["warm", *(f"t{i}" for i in range(TRIALS))]:
        lines += ["[[adapter]]", f'name = "{name}"', f'live = "{name}"', f'durable = "{name}"']
        for n in range(FILES):
            path = local / name / f"{who}-{n}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{who} {n}\n")
    conf = tree.base / f"{who}.toml"
    conf.write_text("\n".join(lines) + "\n")
    return conf


@pytest.mark.slow
def test_two_writers_racing_for_a_manifest_name(tree: Tree) -> None:
    confs = {who: _config(tree, who) for who in ("a", "b")}
    env = tree.env()
    for conf in confs.values():  # one writer at a time: each probes the mount once
        subprocess.run(
            [sys.executable, "-m", "syncengine", "--config", str(conf), "checkpoint", "warm"],
            env=env,
            check=True,
            capture_output=True,
        )
    outcomes: dict[str, int] = {}
    for i in range(TRIALS):
        procs = {
            who: subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    START_TOGETHER,
                    "--config",
                    str(conf),
                    "checkpoint",
                    f"t{i}",
                ],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for who, conf in confs.items()
        }
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.write("x")
            proc.stdin.flush()
        done = {who: proc.communicate(timeout=120) for who, proc in procs.items()}
        listed = set(load(Store(tree.data / f"t{i}")).entries)
        for who, proc in procs.items():
            _, err = done[who]
            mine = {f"{who}-{n}.txt" for n in range(FILES)}
            assert proc.returncode == 0, (i, who, err)  # the lease: one after the other
            assert mine <= listed, (i, who, sorted(listed), err)
            key = f"{who}:{proc.returncode}"
            outcomes[key] = outcomes.get(key, 0) + 1
    print(f"outcomes over {TRIALS} trials: {outcomes}")


def test_a_manifest_name_taken_after_the_check_is_never_replaced(tree: Tree) -> None:
    """The window itself, made deterministic: the name is taken after put_bytes looked."""
    from syncengine.fs import savefile

    root = tree.data / "w"
    root.mkdir()
    (root / "m.jsonl").write_bytes(b"the other writer's manifest\n")
    with savefile.staged(str(root)) as tmp:
        tmp.write(b"ours\n")
        tmp.close()
        with pytest.raises(FileExistsError):
            tmp.publish_new(str(root / "m.jsonl"))
    assert (root / "m.jsonl").read_bytes() == b"the other writer's manifest\n"
    assert sorted(p.name for p in root.iterdir()) == ["m.jsonl"]  # our temp is gone
