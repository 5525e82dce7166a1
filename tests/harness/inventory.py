"""The inventory: every path a harness wrote is published, appended, snapshotted or excluded
by a named rule; none is missed, none comes back after the harness deleted it, modes match.

Reads what the engine decided from ``syncengine explain ADAPTER --json`` (the
engine's own matchers), what it recorded from the durable manifest, and what a
restore brought back from the new life's tree.  Each function returns a list
of problems (empty when sound), so a test reports all of them at once.
"""

from __future__ import annotations

import json
from typing import Any

from syncengine.config import load_config
from syncengine.durable.manifest import load as load_manifest
from syncengine.durable.posix.store import Store
from tests.harness.lab import Lab, Life, Node, tree

# explain's action -> the manifest entry kind it must produce
KINDS = {
    "publish": "file",
    "segments": "segments",
    "snapshot": "sqlite",
    "unlisted-db": "sqlite",
    "link": "symlink",
    "dir": "dir",
}


def explain(lab: Lab, life: Life) -> dict[str, dict[str, str]]:
    done = lab.syncengine(life, "explain", lab.profile.name, "--json")
    assert done.returncode == 0, f"syncengine explain failed:\n{done.stderr}"
    return {d["path"]: d for d in json.loads(done.stdout)["paths"]}


def manifest(lab: Lab, life: Life) -> dict[str, Any]:
    spec = load_config(env={"AM_LOCAL": str(life.local), "DATA_DIR": str(lab.durable)}).adapter(
        lab.profile.name
    )
    store = Store(spec.durable)
    return dict(load_manifest(store).entries) if store.exists() else {}


def recorded(
    decisions: dict[str, dict[str, str]], entries: dict[str, Any], live: dict[str, Node]
) -> list[str]:
    """Problems of a checkpoint: unnamed databases, published paths the manifest lacks."""
    problems = []
    for path, d in sorted(decisions.items()):
        action = d["action"]
        if action == "unlisted-db":
            problems.append(
                f"unlisted database {path}: the adapter must list it under sqlite or exclude it"
            )
        want = KINDS.get(action)
        entry = entries.get(path)
        if want is None:
            if entry is not None:
                problems.append(f"{path}: {action} by {d['rule']!r} but the manifest lists it")
            continue
        if entry is None:
            problems.append(f"{path}: {action} ({d['rule']}) but missing from the manifest")
        elif entry.kind != want:
            problems.append(f"{path}: manifest kind {entry.kind}, expected {want}")
        elif want != "symlink" and path in live and entry.mode != live[path].mode:
            problems.append(f"{path}: manifest mode {entry.mode:o}, live {live[path].mode:o}")
    return problems


def restored(
    decisions: dict[str, dict[str, str]], before: dict[str, Node], after: dict[str, Node]
) -> list[str]:
    """Problems of a restore, comparing the new life's tree with the old one's last state."""
    problems = []
    dirs: dict[str, list[str]] = {"not restored": [], "restored with another mode": []}
    for path, d in sorted(decisions.items()):
        old, new = before.get(path), after.get(path)
        action = d["action"]
        if old is None or action not in KINDS:
            continue
        if action == "dir" and (new is None or new.mode != old.mode):
            dirs["not restored" if new is None else "restored with another mode"].append(
                f"{path} ({old.mode:o}{'' if new is None else f' -> {new.mode:o}'})"
            )
        elif new is None:
            problems.append(f"{path}: not restored ({action}, {d['rule']})")
        elif new.kind != old.kind or new.mode != old.mode:
            problems.append(
                f"{path}: restored as {new.kind} {new.mode:o}, was {old.kind} {old.mode:o}"
            )
        elif action in ("publish", "segments", "link") and new.digest != old.digest:
            problems.append(f"{path}: restored content differs ({action})")
    for what, paths in dirs.items():
        if paths:  # one line for all of them: a tree can hold thousands
            more = f", ... ({len(paths) - 6} more)" if len(paths) > 6 else ""
            problems.append(
                f"{len(paths)} director{'y' if len(paths) == 1 else 'ies'} "
                f"{what}: {', '.join(paths[:6])}{more}"
            )
    for path in sorted(set(after) - set(before)):
        problems.append(f"{path}: resurrected (restored, but the harness had removed it)")
    return problems


def snapshot(life: Life, lab: Lab) -> dict[str, Node]:
    return tree(lab.profile.live_dir(life.where))
