"""One writer per durable root (issue 16): the lease, its handovers, and the fence.

Real processes, each with its own local root and state dir, on one durable
root (a plain directory, the bucket emulator, and S3): they take turns in a tight
loop, one takes the root over from another that keeps writing, a SIGKILLed
holder's lease expires, and ``run`` stops its child and exits 76 once fenced.
The deciding half (`syncengine.durable.leasing`) is tested as data.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from syncengine import Engine
from syncengine.config import load_config
from syncengine.durable import lease, leasing, manifest
from syncengine.durable.lease import Found, Holder, LeaseRecord
from syncengine.durable.store import Store
from syncengine.local.leaseholder import LeaseHolder
from tests.conftest import Tree
from tests.helpers import files

pytestmark = pytest.mark.s3  # the [s3] kind too: durable_root = "s3://BUCKET/data"

ADAPTER = "x"
SE = [sys.executable, "-m", "syncengine"]
DUR = f"state/{ADAPTER}"

# One instance in a loop: each turn takes the lease (waiting for the other's release),
# restores what the other published, adds a file of its own, checkpoints, releases.
TURNS = r"""
import sys
from pathlib import Path
from syncengine.engine import Engine
from syncengine.config import load_config

conf, who, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.stdin.buffer.read(1)
for k in range(turns):
    eng = Engine(load_config(conf))
    eng.lease.acquire()
    assert eng.restore().ok
    live = eng.config.adapters[0].live
    (live / f"{who}-{k}.txt").write_text(f"{who} {k}\n")
    assert eng.checkpoint().ok
    eng.lease.release()
"""

# The old instance under load: keeps the lease and checkpoints a new file per pass
# until it is fenced; prints each k whose checkpoint completed.
UNDER_LOAD = r"""
import sys
from syncengine.engine import Engine
from syncengine.config import load_config
from syncengine.errors import LeaseLost

eng = Engine(load_config(sys.argv[1]))
eng.lease.acquire()
live = eng.config.adapters[0].live
k = 0
while True:
    (live / f"a-{k}.txt").write_text(f"a {k}\n")
    try:
        report = eng.checkpoint()
    except LeaseLost as exc:
        print("lost", exc, file=sys.stderr, flush=True)
        sys.exit(76)
    if report.ok:
        print(k, flush=True)
    k += 1
"""


def _config(tree: Tree, who: str, **extra: float | str) -> Path:
    local = tree.base / f"local-{who}"
    (local / ADAPTER).mkdir(parents=True, exist_ok=True)
    lines = [
        f"local_root = {json.dumps(str(local))}",
        f"durable_root = {json.dumps(str(tree.durable))}",  # s3://BUCKET/data for s3
        f"state_dir = {json.dumps(str(tree.base / f'state-{who}'))}",
        "adapters = []",
        *(f"{k} = {json.dumps(v)}" for k, v in extra.items()),
        "[[adapter]]",
        f'name = "{ADAPTER}"',
        f'live = "{ADAPTER}"',
        f'durable = "{DUR}"',
    ]
    conf = tree.base / f"{who}.toml"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _probe(tree: Tree, conf: Path) -> None:
    code = (
        "import sys; from syncengine.engine import Engine; from syncengine.config import "
        "load_config; e = Engine(load_config(sys.argv[1])); "
        "e.durable.writable_store(e.config.durable_root).barrier()"
    )
    subprocess.run([sys.executable, "-c", code, str(conf)], env=tree.env(), check=True)


def _live(tree: Tree, who: str) -> Path:
    return tree.base / f"local-{who}" / ADAPTER


def _se(tree: Tree, conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``syncengine --config CONF ARGS`` in a child process; its output captured."""
    return subprocess.run(
        [*SE, "--config", str(conf), *args],
        env=tree.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _restored(tree: Tree) -> dict[str, bytes]:
    """A fresh instance's restore of the durable root (its own state dir)."""
    conf = _config(tree, "check")
    out = _se(tree, conf, "restore")
    assert out.returncode == 0, out.stderr
    return files(_live(tree, "check"))


def _chain_checks(tree: Tree) -> manifest.Listing:
    """No manifest object overwritten or forked: every header names the seq and lease
    generation of its own name, and the current chain has one object per seq."""
    store = tree.store(DUR)
    listed = manifest.listing(store)
    seqs = [seq for seq, _k, _n in listed.objects]
    assert len(seqs) == len(set(seqs)), f"fork: {listed.objects}"
    for seq, _kind, name in listed.objects + listed.fenced:
        header, _ = manifest.decode(store.read_bytes(f"{manifest.MANIFEST_DIR}/{name}"))
        assert header["seq"] == seq
        assert f".g{header['lease']:012d}." in name, (name, header)
    return listed


def test_two_instances_take_turns_in_a_tight_loop(tree: Tree) -> None:
    turns = 15  # each: 30 handovers between the two, alternating as the lease allows
    confs = {who: _config(tree, who) for who in ("a", "b")}
    for conf in confs.values():  # one at a time: each probes the mount once (cached)
        _probe(tree, conf)
    procs = {
        who: subprocess.Popen(
            [sys.executable, "-c", TURNS, str(conf), who, str(turns)],
            env=tree.env(),
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who, conf in confs.items()
    }
    for proc in procs.values():  # started together: they race for every generation
        assert proc.stdin is not None
        proc.stdin.write("x")
        proc.stdin.flush()
    errs = {who: proc.communicate(timeout=120)[1] for who, proc in procs.items()}
    for who, proc in procs.items():
        assert proc.returncode == 0, (who, errs[who])
        assert "two writers share" not in errs[who]
    listed = _chain_checks(tree)
    assert listed.fenced == []  # clean handovers: nobody published after losing
    everything = {f"{w}-{k}.txt": f"{w} {k}\n".encode() for w in "ab" for k in range(turns)}
    restored = _restored(tree)
    assert restored == everything  # nothing lost, nothing half
    # the last holder's tree is what a restore gives
    generation = lease.read(tree.store("")).generation
    assert generation >= 2 * turns
    last = max(procs, key=lambda w: len(files(_live(tree, w))))
    assert files(_live(tree, last)) == restored


def test_takeover_under_load_fences_the_old_instance(tree: Tree) -> None:
    old = subprocess.Popen(
        [sys.executable, "-c", UNDER_LOAD, str(_config(tree, "a"))],
        env=tree.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert old.stdout is not None
    for _ in range(3):  # the old instance is publishing
        assert old.stdout.readline().strip().isdigit()
    new = _config(tree, "b")
    out = _se(tree, new, "-v", "restore", "--takeover")
    assert out.returncode == 0, out.stderr
    assert "lease.acquired" in out.stderr and "takeover from" in out.stderr
    (_live(tree, "b") / "b-0.txt").write_text("b 0\n")
    assert _se(tree, new, "checkpoint").returncode == 0
    _rest, err = old.communicate(timeout=60)
    assert old.returncode == 76, err
    assert "lease.lost" in err
    holder_tree = files(_live(tree, "b"))
    assert _restored(tree) == holder_tree  # nothing the fenced instance added after
    assert b"b 0\n" in holder_tree.values()
    _chain_checks(tree)


def _wait_for(predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_killed_holders_lease_expires_and_the_next_instance_takes_over(tree: Tree) -> None:
    short = {"lease_seconds": 2, "lease_wait": 30, "interval": 0.2}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "syncengine",
            "--config",
            str(_config(tree, "a", **short)),
            "run",
            "--",
            "sleep",
            "600",
        ],
        env=tree.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: lease.read(tree.store("")).record is not None)
        _wait_for(lambda: (tree.base / "state-a" / "daemon.json").exists())
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the holder and its child: no release
        holder.wait(timeout=10)
    record = lease.read(tree.store("")).record
    assert record is not None and not record.released
    t0 = time.monotonic()
    out = _se(tree, _config(tree, "b", **short), "-v", "restore")
    assert out.returncode == 0, out.stderr
    assert "lease.waiting" in out.stderr and "lease.free expired" in out.stderr
    assert time.monotonic() - t0 < 15
    # the restore took nothing; the new instance's first checkpoint takes the next
    # generation, without --takeover
    conf_b = _config(tree, "b", **short)
    (_live(tree, "b") / "new.txt").write_text("the new instance's\n")
    cli = [sys.executable, "-m", "syncengine", "--config", str(conf_b), "checkpoint"]
    assert subprocess.run(cli, env=tree.env(), timeout=60).returncode == 0
    after = lease.read(tree.store(""))
    assert after.generation == record.generation + 1
    assert after.record is not None and after.record.released  # the command released it
    assert after.record.holder.pid != record.holder.pid


def _daemon(tree: Tree, conf: Path) -> subprocess.Popen[bytes]:
    """``syncengine run -- sleep 600`` (its own process group), once it holds the lease."""
    proc = subprocess.Popen(
        [*SE, "--config", str(conf), "run", "--", "sleep", "600"],
        env=tree.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_for(lambda: _holder_pid(tree) == proc.pid)
    return proc


def _holder_pid(tree: Tree) -> int | None:
    record = lease.read(tree.store("")).record
    return None if record is None or record.released else record.holder.pid


def test_the_command_after_a_killed_one_releases_its_lease(tree: Tree) -> None:
    """A process of the same state dir keeps a killed taker's lease and releases it at its
    end (the next instance need not wait for the expiry); beside a live daemon, a command
    shares the daemon's lease and leaves it held."""
    conf = _config(tree, "a")
    checkpoint = [*SE, "--config", str(conf), "checkpoint"]
    killed = _daemon(tree, conf)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=10)
    generation = lease.read(tree.store("")).generation
    (_live(tree, "a") / "f.txt").write_text("after the kill\n")
    subprocess.run(checkpoint, env=tree.env(), check=True, capture_output=True, timeout=60)
    after = lease.read(tree.store(""))
    assert after.generation == generation
    assert after.record is not None and after.record.released
    daemon = _daemon(tree, conf)
    try:
        (_live(tree, "a") / "g.txt").write_text("beside the daemon\n")
        subprocess.run(checkpoint, env=tree.env(), check=True, capture_output=True, timeout=60)
        assert _holder_pid(tree) == daemon.pid  # still the daemon's, not released
    finally:
        daemon.terminate()
        assert daemon.wait(timeout=60) == 128 + signal.SIGTERM  # the child's, forwarded
    assert _holder_pid(tree) is None  # its final checkpoint released it


def test_checkpoint_and_restore_exit_77_while_another_instance_holds_it(tree: Tree) -> None:
    conf = _config(tree, "a", lease_wait=0.5)
    store = tree.store("")
    other = LeaseRecord(3, 0, Holder("other", "elsewhere", 1, 0), time.time() + 3600)
    assert lease.create(store, other)
    (_live(tree, "a") / "f.txt").write_text("f\n")
    for command in ("checkpoint", "restore"):
        out = _se(tree, conf, command)
        assert out.returncode == 77, (command, out.stderr)
        assert "is leased to elsewhere pid 1 (id other)" in out.stderr
        assert "restore --takeover" in out.stderr
    assert lease.read(store).record == other  # nothing taken, nothing renewed
    out = _se(tree, conf, "restore", "--takeover")
    assert out.returncode == 0, out.stderr
    after = lease.read(store)
    assert after.generation == 4 and after.record is not None and after.record.released


def test_a_new_durable_root_under_the_same_state_dir_gets_everything(tree: Tree) -> None:
    """DATA_DIR changed, state dir kept: the indexes describe the old root, so the first
    checkpoint to the new one starts from its (empty) manifest and publishes it all;
    before, it said "unchanged" and published nothing."""
    conf = _config(tree, "a")
    (_live(tree, "a") / "f.txt").write_text("written before the move\n")
    assert _se(tree, conf, "checkpoint").returncode == 0
    new_root = f"{tree.durable}/moved"
    if not new_root.startswith("s3://"):
        Path(new_root).mkdir()  # a new mount, say
    moved = tree.base / "moved.toml"
    moved.write_text(conf.read_text().replace(json.dumps(str(tree.durable)), json.dumps(new_root)))
    out = _se(tree, moved, "checkpoint")
    assert out.returncode == 0, out.stderr
    assert "published 1 file(s)" in out.stdout
    assert "index.rebuilt" in out.stderr and "wrote another durable root last" in out.stderr
    check = tree.base / "check.toml"
    check.write_text(
        _config(tree, "check")
        .read_text()
        .replace(json.dumps(str(tree.durable)), json.dumps(new_root))
    )
    assert _se(tree, check, "restore").returncode == 0
    assert files(_live(tree, "check")) == {"f.txt": b"written before the move\n"}


def test_an_adapters_new_durable_tree_under_the_same_state_dir_gets_everything(
    tree: Tree,
) -> None:
    """The adapter's durable tree changed (``durable = ...``), state dir kept: that
    adapter's index describes the old tree, so the next checkpoint publishes it all to the
    new one; before, it said "unchanged" and the new tree stayed empty."""
    conf = _config(tree, "a")
    (_live(tree, "a") / "f.txt").write_text("written before the move\n")
    assert _se(tree, conf, "checkpoint").returncode == 0
    moved = tree.base / "moved.toml"
    moved.write_text(conf.read_text().replace(f'durable = "{DUR}"', 'durable = "state/moved"'))
    out = _se(tree, moved, "checkpoint")
    assert out.returncode == 0, out.stderr
    assert "published 1 file(s)" in out.stdout
    assert "index.rebuilt" in out.stderr and "durable tree of" in out.stderr
    again = _se(tree, moved, "checkpoint")
    assert "index.rebuilt" not in again.stderr and "published 0 file(s)" in again.stdout
    check = tree.base / "check.toml"
    check.write_text(
        _config(tree, "check").read_text().replace(f'durable = "{DUR}"', 'durable = "state/moved"')
    )
    assert _se(tree, check, "restore").returncode == 0
    assert files(_live(tree, "check")) == {"f.txt": b"written before the move\n"}


def test_a_restore_keeps_its_index_only_while_nobody_wrote_since(tree: Tree) -> None:
    """A new instance's separate ``restore`` then ``checkpoint``: the restore's index
    (which knows the object it found missing) stays when the next take follows the
    generation it restored; when another instance published in between, it is rebuilt
    from the manifest, and the chain does not fork."""
    a, b = _config(tree, "a"), _config(tree, "b")
    (_live(tree, "a") / "f.txt").write_text("f\n")
    (_live(tree, "a") / "g.txt").write_text("g\n")
    assert _se(tree, a, "checkpoint").returncode == 0
    (tree.raw / DUR / "g.txt").unlink()  # lost on the durable side
    assert _se(tree, b, "restore").returncode == 1  # g.txt missing, named
    (_live(tree, "b") / "g.txt").write_text("g\n")
    out = _se(tree, b, "checkpoint")
    assert out.returncode == 0, out.stderr
    assert "published 1 file(s)" in out.stdout and "index.rebuilt" not in out.stderr
    assert _restored(tree) == {"f.txt": b"f\n", "g.txt": b"g\n"}

    assert _se(tree, a, "restore").returncode == 0  # a's turn: b released generation 2
    (_live(tree, "a") / "h.txt").write_text("h\n")
    assert _se(tree, a, "checkpoint").returncode == 0
    assert _se(tree, b, "restore", "--dry-run").returncode == 0  # b's index stays behind
    (_live(tree, "b") / "i.txt").write_text("i\n")
    out = _se(tree, b, "checkpoint")
    assert out.returncode == 0, out.stderr
    assert "index.rebuilt" in out.stderr
    _chain_checks(tree)
    # a's h.txt stays: an index rebuilt from the manifest never drops what is not local
    want = {"f.txt": b"f\n", "g.txt": b"g\n", "h.txt": b"h\n", "i.txt": b"i\n"}
    assert _restored(tree) == want


EMBEDDED = r"""
import sys
from syncengine import Engine
from syncengine.config import load_config

eng = Engine(load_config(sys.argv[1]))
(eng.config.adapters[0].live / "e.txt").write_text("embedded\n")
assert eng.checkpoint().ok
print(eng.lease.holder.current is not None, flush=True)
if sys.argv[2] == "close":
    with eng:
        pass
    print(eng.lease.holder.current is not None, flush=True)
"""


@pytest.mark.parametrize("end", ["close", "exit"])
def test_an_embedded_engine_releases_at_close_or_at_exit(tree: Tree, end: str) -> None:
    conf = _config(tree, "a")
    out = subprocess.run(
        [sys.executable, "-c", EMBEDDED, str(conf), end],
        env=tree.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    # held after checkpoint(); released by close(), or by the interpreter's exit
    assert out.stdout.split() == (["True", "False"] if end == "close" else ["True"])
    found = lease.read(tree.store(""))
    assert found.generation == 1 and found.record is not None and found.record.released


def _child(marker: Path) -> str:
    """A COMMAND for `run` that creates `marker` when SIGTERMed, then exits 0."""
    return (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(marker)!r}, 'w').close(), "
        "sys.exit(0)))\n"
        "time.sleep(600)\n"
    )


def test_run_exits_76_after_stopping_its_child_once_fenced(tree: Tree) -> None:
    marker = tree.base / "child-stopped"
    child = _child(marker)
    conf_a = _config(tree, "a", lease_seconds=3, interval=0.1)
    (_live(tree, "a") / "before.txt").write_text("published before the takeover\n")
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "syncengine",
            "--config",
            str(conf_a),
            "-v",
            "run",
            "--",
            sys.executable,
            "-c",
            child,
        ],
        env=tree.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(lambda: (tree.base / "state-a" / "daemon.json").exists())
    _wait_for(lambda: bool(manifest.list_objects(tree.store(DUR))))
    out = _se(tree, _config(tree, "b"), "restore", "--takeover")
    assert out.returncode == 0, out.stderr
    # past the window in which a's last confirmation lets a pass write without asking
    # (`leasing.fresh`): the time passing is the condition, there is no event to await
    time.sleep(3 * leasing.FRESH)
    (_live(tree, "a") / "after.txt").write_text("written after the takeover\n")
    _, err = run.communicate(timeout=60)
    assert run.returncode == 76, err
    assert "lease.lost" in err
    assert marker.exists()  # SIGTERM forwarded to the child
    assert "after.txt" not in files(tree.raw / DUR)  # not even copied
    assert _restored(tree) == {"before.txt": b"published before the takeover\n"}


def test_lease_lost_keep_leaves_the_child_running_unprotected(tree: Tree) -> None:
    marker = tree.base / "child-stopped"
    child = _child(marker)
    conf_a = _config(tree, "a", lease_seconds=3, interval=0.1, lease_lost="keep")
    (_live(tree, "a") / "before.txt").write_text("before\n")
    run = subprocess.Popen(
        [*SE, "--config", str(conf_a), "run", "--", sys.executable, "-c", child],
        env=tree.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    daemon = tree.base / "state-a" / "daemon.json"
    _wait_for(lambda: bool(manifest.list_objects(tree.store(DUR))))
    restore = [*SE, "--config", str(_config(tree, "b")), "restore", "--takeover"]
    subprocess.run(restore, env=tree.env(), check=True, capture_output=True, timeout=60)
    (_live(tree, "a") / "after.txt").write_text("after\n")
    _wait_for(lambda: daemon.exists() and json.loads(daemon.read_text()).get("lease_lost"))
    assert run.poll() is None and not marker.exists()  # COMMAND runs on
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 76, err
    assert marker.exists()
    assert "after.txt" not in _restored(tree)


def test_status_shows_the_lease_and_release_force_frees_it(tree: Tree) -> None:
    conf = _config(tree, "a")
    (_live(tree, "a") / "f.txt").write_text("f\n")
    py = [sys.executable, "-m", "syncengine", "--config", str(conf)]
    env = tree.env()
    status = subprocess.run([*py, "status"], env=env, capture_output=True, text=True, check=True)
    assert "lease: none yet" in status.stdout
    # a holder that never released (as if killed): status names it, --force frees it
    store = tree.store("")
    dead = LeaseRecord(7, 0, Holder("dead", "elsewhere", 42, 0), time.time() + 3600)
    assert lease.create(store, dead)
    status = subprocess.run([*py, "status"], env=env, capture_output=True, text=True, check=True)
    assert "lease: generation 7 held by elsewhere pid 42 (id dead), expires " in status.stdout
    out = subprocess.run([*py, "lease", "release", "--force"], env=env, capture_output=True)
    assert out.returncode == 0 and b"released generation 7" in out.stdout
    subprocess.run([*py, "checkpoint"], env=env, check=True, capture_output=True, timeout=60)
    assert lease.read(store).generation == 8


# -- deciding, as data ----------------------------------------------------------


def _found(holder: str, *, expires: float, released: bool = False, gen: int = 3) -> Found:
    record = LeaseRecord(gen, 1, Holder(holder, "h", 1, 0), expires, released)
    return Found(record, gen, (record.name,))


@pytest.mark.dir_only(reason="pure decisions: no durable side")
@pytest.mark.parametrize(
    ("found", "takeover", "want"),
    [
        (Found(None, 0, ()), False, "take generation 1: no lease yet"),
        (_found("me", expires=50), False, "keep generation 3 (ours)"),
        (
            _found("me", expires=50, released=True),
            False,
            "take generation 4: released by h pid 1 (id me)",
        ),
        (_found("other", expires=200), False, "wait: held by h pid 1 (id other) until 200"),
        (_found("other", expires=200), True, "take generation 4: takeover from h pid 1 (id other)"),
        (
            _found("other", expires=99),
            False,
            "take generation 4: expired, held by h pid 1 (id other)",
        ),
        (Found(None, 5, ("k",), unreadable="k"), False, "wait: held by an unreadable k until 130"),
    ],
)
def test_decide(found: Found, takeover: bool, want: str, durable_kind: str) -> None:
    got = leasing.decide(found, "me", 100.0, takeover=takeover, unreadable_until=130.0, last=3)
    assert str(got) == want


@pytest.mark.dir_only(reason="pure decisions: no durable side")
def test_a_generation_released_by_another_copy_of_our_state_dir_is_foreign(
    durable_kind: str,
) -> None:
    found = _found("me", expires=50, released=True, gen=5)
    assert leasing.decide(found, "me", 100.0, takeover=False, unreadable_until=0, last=5) == (
        leasing.Take(6, foreign=False, why="released by h pid 1 (id me)")
    )
    taken = leasing.decide(found, "me", 100.0, takeover=False, unreadable_until=0, last=4)
    assert isinstance(taken, leasing.Take) and taken.foreign


NAMED = (
    "generation 3 is named by a manifest or was listed before (its lease objects were lost: "
    "a write-back mount?)"
)
NONE = Found(None, 0, ())
OVER_NONE = f"take generation 4: no lease object, but {NAMED}"
OVER_TWO = f"take generation 4: generation 2's lease, but {NAMED}"
HELD = "wait: held by generation 3, named by a manifest or listed until 130"


@pytest.mark.dir_only(reason="pure decisions: no durable side")
@pytest.mark.parametrize(
    ("found", "floor", "last", "takeover", "now", "want", "foreign"),
    [
        # the issue-29 stack: no lease object left, this state dir held generation 4 last
        (NONE, 3, 4, False, 100.0, OVER_NONE, False),
        (NONE, 3, 3, False, 100.0, OVER_NONE, False),  # it held the floor's generation
        # another state dir's generation 3 may be alive (its lease object lost, a cached
        # listing): held like an unreadable object until lease_seconds after first seen
        (NONE, 3, 1, False, 100.0, HELD, None),
        (NONE, 3, 1, False, 130.0, OVER_NONE, True),
        (NONE, 3, 1, True, 100.0, OVER_NONE, True),
        # an older lease object, ours or another's, live or unreadable, is superseded
        (_found("me", expires=500, gen=2), 3, 3, False, 100.0, OVER_TWO, False),
        (_found("other", expires=500, gen=2), 3, 2, False, 100.0, HELD, None),
        (Found(None, 2, ("k",), unreadable="k"), 3, 3, False, 100.0, OVER_TWO, False),
        # a floor at or below the lease changes nothing
        (
            _found("me", expires=50, released=True, gen=3),
            3,
            3,
            False,
            100.0,
            "take generation 4: released by h pid 1 (id me)",
            False,
        ),
        (
            _found("other", expires=500, gen=5),
            3,
            5,
            False,
            100.0,
            "wait: held by h pid 1 (id other) until 500",
            None,
        ),
        (_found("me", expires=500, gen=5), 5, 5, False, 100.0, "keep generation 5 (ours)", None),
    ],
)
def test_a_generation_is_never_taken_at_or_below_one_a_manifest_names(
    found: Found,
    floor: int,
    last: int,
    takeover: bool,
    now: float,
    want: str,
    foreign: bool | None,
    durable_kind: str,
) -> None:
    got = leasing.decide(
        found, "me", now, takeover=takeover, unreadable_until=130.0, last=last, floor=floor
    )
    assert str(got) == want
    if foreign is not None:
        assert isinstance(got, leasing.Take) and got.foreign is foreign


# -- the lease limits of issue 29 ------------------------------------------------


def _engine(tree: Tree, conf: Path) -> Engine:
    return Engine(load_config(conf, env=tree.env()))


@pytest.mark.parametrize("then", ["checkpoint", "close"])
def test_a_checkpoint_beside_the_daemon_that_finds_the_lease_object_lost_keeps_it_for_it(
    tree: Tree, then: str
) -> None:
    """The durable side loses the daemon's lease object (a write-back mount restarted);
    a ``syncengine checkpoint`` typed beside the daemon (same state dir) is the first to
    see it: it takes the next generation for the daemon (`lease.vanished`) and leaves
    it held at its end, and the daemon goes on under it instead of being fenced by its
    own state dir; its close releases it, also without a pass since (else the next
    instance would wait for it to expire)."""
    conf = _config(tree, "a")
    daemon = _engine(tree, conf)
    daemon.lease.acquire()
    (_live(tree, "a") / "d1.txt").write_text("the daemon's\n")
    assert daemon.checkpoint().ok
    store = tree.store("")
    lease.remove(store, [key for _g, _r, key in lease.names(store)])  # lost with the uploads
    (_live(tree, "a") / "c.txt").write_text("the command's\n")
    out = _se(tree, conf, "-v", "checkpoint")
    assert out.returncode == 0 and "lease.vanished" in out.stderr, out.stderr
    found = lease.read(store)
    assert found.generation == 2 and found.record is not None and not found.record.released
    assert found.record.holder.pid == os.getpid()  # taken for the daemon, in its name
    written = {"d1.txt", "c.txt"}
    if then == "checkpoint":
        (_live(tree, "a") / "d2.txt").write_text("the daemon's again\n")
        assert daemon.checkpoint().ok  # not LeaseLost
        written.add("d2.txt")
    daemon.close()
    found = lease.read(store)
    assert found.generation == 2 and found.record is not None and found.record.released
    assert set(_restored(tree)) == written


def test_a_fenced_engine_writes_no_released_renewal_at_its_end(
    tree: Tree, caplog: pytest.LogCaptureFixture
) -> None:
    """An engine whose lease another instance took over while it was not looking (no
    pass checked since) does not write a released renewal of its old generation when it
    closes: beside the newer generation it would be junk (and on S3 its create could
    fail, logged as ``lease.release-failed`` at interpreter exit)."""
    a = _engine(tree, _config(tree, "a"))
    (_live(tree, "a") / "a.txt").write_text("a\n")
    assert a.checkpoint().ok  # takes generation 1 and keeps it until close
    took = _se(tree, _config(tree, "b"), "restore", "--takeover")
    assert took.returncode == 0, took.stderr
    caplog.set_level("INFO", logger="syncengine")
    a.close()
    assert {g for g, _r, _k in lease.names(tree.store(""))} == {2}
    assert "lease.not-released generation=1" in caplog.text
    assert "lease.release-failed" not in caplog.text


@pytest.mark.parametrize("held_by", ["unreadable object", "manifest generation"])
def test_an_unknown_holder_holds_the_lease_for_lease_seconds_at_most(
    tree: Tree, held_by: str
) -> None:
    """A limit, stated in docs/OPERATING.md: a newest lease object that cannot be read (a holder
    killed while creating it on a mount without rename), or a generation a manifest names
    above every lease object left (its objects lost; written by another state dir), may
    be a live holder's, so every other instance waits, but `lease_seconds` at most from
    its first sight (1 s here), then takes the generation above it; ``--takeover`` waits
    not at all."""
    store = tree.store("")
    if held_by == "unreadable object":
        store.put_bytes(lease.name_of(5, 0), b'{"generation": 5, "exp', if_absent=True)
        want = 6
    else:
        conf_b = _config(tree, "b")
        (_live(tree, "b") / "b.txt").write_text("b\n")  # generation 1 writes a manifest
        assert _se(tree, conf_b, "checkpoint").returncode == 0
        lease.remove(store, [key for _g, _r, key in lease.names(store)])
        want = 2
    conf = _config(tree, "a", lease_seconds=1, lease_wait=30)
    (_live(tree, "a") / "a.txt").write_text("a\n")
    t0 = time.monotonic()
    out = _se(tree, conf, "checkpoint")  # without -v: the wait is said at once
    waited = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    assert "lease.waiting" in out.stderr and "waiting up to 30s" in out.stderr, out.stderr
    assert 1.0 <= waited < 8.0, waited
    assert lease.read(store).generation == want
    store.put_bytes(lease.name_of(want + 5, 0), b"{", if_absent=True)
    took = _se(tree, conf, "-v", "restore", "--takeover")
    assert took.returncode == 0 and "lease.waiting" not in took.stderr, took.stderr


@pytest.mark.dir_only(reason="the holder's loop against a directory's lease objects")
def test_a_listing_that_goes_back_waits_and_takes_above_what_it_saw(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease objects a holder listed vanish while it waits (a write-back mount lost
    them, or the mount went away): the next listing shows no lease.  The holder must not
    take a generation at or below one it listed (nor spin on the take it refuses, which
    it did at 100% CPU forever); it waits like for an unknown holder, `lease_seconds` at
    most, sleeping between looks, then takes the generation above the one it saw."""
    store = tree.store("")
    other = LeaseRecord(6, 0, Holder("other", "h", 1, 0), expires=time.time() + 3600)
    assert lease.create(store, other)
    now = [time.time()]
    sleeps: list[float] = []
    listings = [0]
    names = lease.names

    def counted(store_: Store) -> list[tuple[int, int, str]]:  # a spin never sleeps
        listings[0] += 1
        assert listings[0] < 1000, "the holder lists the lease without end"
        return names(store_)

    monkeypatch.setattr(lease, "names", counted)

    def sleep(seconds: float) -> None:
        if not sleeps:  # lost while it waits for the other holder
            lease.remove(store, [other.name])
        sleeps.append(seconds)
        assert len(sleeps) < 200, "the holder spins"
        now[0] += seconds

    holder = _holder(tree, store, lease_seconds=2.0, clock=lambda: now[0], sleep=sleep)
    holder.acquire()
    assert holder.generation == 7
    assert 2.0 <= sum(sleeps) < 10.0, sleeps  # waited for the vanished holder, then took


def _holder(tree: Tree, store: Store, **how: Any) -> LeaseHolder:
    """A lease holder of `tree`'s state dir on `store` (waits up to a minute)."""
    return LeaseHolder(lambda: store, tree.state, str(tree.data), lease_wait=60.0, **how)


def _take_first_lease(tree: Tree) -> list[float]:
    """Acquire the lease of a fresh root; the sleeps the holder asked for."""
    sleeps: list[float] = []
    holder = _holder(tree, tree.store(""), lease_seconds=60.0, sleep=sleeps.append)
    holder.acquire()
    assert holder.generation == 1
    return sleeps


def test_a_root_that_refuses_replaces_is_taken_without_a_wait(tree: Tree) -> None:
    """S3's If-None-Match and a mount's RENAME_NOREPLACE refuse a second taker's
    replace: reading the new generation back later proves nothing more, and that wait
    was twice the first write (the mount's probe included) on every start."""
    assert _take_first_lease(tree) == []


@pytest.mark.dir_only(reason="a filesystem without RENAME_NOREPLACE, as some mounts are")
def test_a_root_that_cannot_refuse_a_replace_reads_the_lease_back_after_a_wait(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    from syncengine.fs import savefile

    monkeypatch.setattr(savefile, "_rename_noreplace", lambda *args: False)
    sleeps = _take_first_lease(tree)
    assert len(sleeps) == 1 and sleeps[0] >= 0.02, sleeps
