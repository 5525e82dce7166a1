"""Each real harness CLI resumes from a restored tree, the way an operator runs it.

For every harness (versions in versions.toml): two turns, ``syncengine
checkpoint``, a container restart, ``syncengine restore``, a resumed third turn
whose request must carry the first two turns' prompts and replies; the same
across two lives of ``syncengine run``; and after a SIGKILL of every process
while a turn is in flight.  The first scenario also takes an inventory of what
the harness wrote (inventory.py) and checks harness-specific state: Codex's
thread names and goals, opencode's snapshot repositories; and a fake login (a
credential file at one of the adapter's secret paths) whose token must be in no
file of the durable root and comes back byte for byte.

Each test gathers every problem it finds and fails once, listing them all, with
the commands' output and the model server's request log.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness import checks, inventory
from tests.harness.lab import TURN_TIMEOUT, Lab, Turn, carries
from tests.harness.profiles import PROFILES

pytestmark = pytest.mark.harness


@pytest.fixture(params=list(PROFILES))
def harness(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def problems(lab: Lab) -> Iterator[list[str]]:
    found: list[str] = []
    yield found
    lab.stop_all()


def _turned(lab: Lab, turn: Turn, what: str) -> None:
    """A turn that failed leaves nothing to check after it: stop here."""
    assert turn.returncode == 0, f"{what} exited {turn.returncode}\n{lab.report()}"


def _ok(lab: Lab, problems: list[str], args: tuple[str, ...], life_n: int) -> None:
    done = lab.syncengine(lab.lives[life_n - 1], *args)
    if done.returncode != 0:
        problems.append(
            f"life {life_n}: syncengine {' '.join(args)} exited {done.returncode}:"
            f" {done.stderr.strip()[-1500:]}"
        )


def _resumed(lab: Lab, problems: list[str], turn: Turn, earlier: list[Turn]) -> None:
    if turn.returncode != 0:
        problems.append(f"resumed turn {turn.prompt} exited {turn.returncode}")
    missing = carries(turn, earlier)
    if missing:
        problems.append(missing)


def _fail_on(lab: Lab, problems: list[str]) -> None:
    assert not problems, "\n".join(f"- {p}" for p in problems) + f"\n\n{lab.report()}"


def test_checkpoint_restart_restore_resume(lab: Lab, problems: list[str]) -> None:
    one = lab.new_life()
    login, token, written = lab.fake_login(one)
    t1 = lab.turn(one, 1, resume=False)
    _turned(lab, t1, "turn 1")
    # Turn 2 is held in flight while a checkpoint runs: runtime files of a live
    # process (a process registry, lock databases) are on disk at that moment.
    with lab.server.stalled() as held:
        pending = lab.start_turn(one, 2, resume=True)
        assert held.wait(TURN_TIMEOUT), f"turn 2 never asked the model\n{lab.report()}"
        _ok(lab, problems, ("checkpoint",), 1)
    t2 = lab.finish(pending)
    _turned(lab, t2, "turn 2")
    if lab.profile.name == "codex":
        checks.codex_name_threads(lab, one)
        threads = checks.codex_threads(lab, one)
    _ok(lab, problems, ("checkpoint",), 1)
    decisions = inventory.explain(lab, one)
    before = inventory.snapshot(one, lab)
    problems += inventory.recorded(decisions, inventory.manifest(lab, one), before)
    problems += checks.token_hits(lab, token)

    two = lab.new_life()
    _ok(lab, problems, ("restore",), 2)
    problems += inventory.restored(decisions, before, inventory.snapshot(two, lab))
    problems += checks.login_restored(lab, two, login, written)
    if lab.profile.name == "opencode":
        problems += checks.opencode_repos(lab, two)
    if lab.profile.name == "codex":
        after = checks.codex_threads(lab, two)
        if after != threads:
            problems.append(f"codex session list after restore {after}, before {threads}")
    _resumed(lab, problems, lab.turn(two, 3, resume=True), [t1, t2])
    _fail_on(lab, problems)


def _first_life_under_run(lab: Lab) -> Turn:
    one = lab.new_life()
    t1 = lab.turn(one, 1, resume=False, run=True)
    _turned(lab, t1, "turn 1 under syncengine run")
    return t1


def test_run_supervises_two_lives(lab: Lab, problems: list[str]) -> None:
    t1 = _first_life_under_run(lab)
    two = lab.new_life()
    _resumed(lab, problems, lab.turn(two, 2, resume=True, run=True), [t1])
    _fail_on(lab, problems)


def test_sigkill_mid_turn_then_restore_and_resume(lab: Lab, problems: list[str]) -> None:
    t1 = _first_life_under_run(lab)
    two = lab.new_life()
    with lab.server.stalled() as held:
        pending = lab.start_turn(two, 2, resume=True, run=True)
        assert held.wait(TURN_TIMEOUT), f"turn 2 never asked the model\n{lab.report()}"
        # a checkpoint while the turn is in flight (the operator's timer), then the
        # container dies: every process of the tree, SIGKILL, each by pid
        _ok(lab, problems, ("checkpoint",), 2)
        killed = lab.kill(pending)
    if len(killed) < 2:
        problems.append(f"the kill found {killed}: not syncengine run and the harness")
    three = lab.new_life()
    _ok(lab, problems, ("restore",), 3)
    _resumed(lab, problems, lab.turn(three, 3, resume=True), [t1])
    _fail_on(lab, problems)
