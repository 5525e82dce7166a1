"""Fixtures of the harness suite: installed CLIs, the fake model server, a lab per test.

The suite runs only when selected (``python -m pytest -m harness``;
docs/HARNESSES.md).  A CLI that cannot be installed (no registry reachable) skips its
tests on a developer's machine, with the reason, and fails them in CI
(``CI`` set), where a skip would hide that nothing ran.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest

from tests.harness import install
from tests.harness.fakemodel import FakeModel
from tests.harness.lab import Lab
from tests.harness.profiles import PROFILES

RUNS = install.HOME / "runs"  # outside /tmp, like a deployment's paths (Codex cares)

_installed: dict[str, install.Installed | str] = {}


def installed(name: str) -> install.Installed:
    """The harness's CLI, installed once per session (and reused across sessions)."""
    if name not in _installed:
        try:
            _installed[name] = install.install_all([name])[name]
        except install.InstallError as exc:
            _installed[name] = str(exc)
    got = _installed[name]
    if isinstance(got, str):
        if os.environ.get("CI"):
            pytest.fail(f"cannot install {name} (CI must run the harness suite): {got}")
        pytest.skip(f"cannot install {name} (no package registry?): {got}")
    return got


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def lab(request: pytest.FixtureRequest, harness: str) -> Iterator[Lab]:
    inst = installed(harness)
    base = RUNS / f"{request.node.name.replace('/', '_')}-{uuid.uuid4().hex[:6]}"
    with FakeModel() as server:
        lab = Lab(base=base, profile=PROFILES[harness], installed=inst, server=server)
        yield lab
    if request.node.stash.get(_FAILED, True) and os.environ.get("SYNCENGINE_HARNESS_KEEP"):
        print(f"kept {base} (SYNCENGINE_HARNESS_KEEP)")
        return
    shutil.rmtree(base, ignore_errors=True)
