"""The command line tells the truth: flags anywhere, refused nonsense, errors said once."""

from __future__ import annotations

import pytest

from tests.conftest import CliRunner, Tree
from tests.helpers import snapshot

CODEX = "codex-home"


@pytest.mark.dir_only("fails before the durable root is used")
def test_checkpoint_with_a_missing_local_root_fails_and_creates_nothing(
    tree: Tree, cli: CliRunner
) -> None:
    typo = tree.base / "lcoal"  # a typo in AM_LOCAL must not look like success
    before = snapshot(tree.base)
    out = cli("checkpoint", env=tree.env(AM_LOCAL=str(typo)), check=2)
    assert str(typo) in out.stderr and "AM_LOCAL" in out.stderr
    assert out.stderr.count("\n") == 1 and out.stdout == ""
    assert not typo.exists() and snapshot(tree.base) == before
    out = cli("--local-root", str(typo), "gc", check=2)
    assert "--local-root" in out.stderr and not typo.exists()


@pytest.mark.dir_only("points DATA_DIR at a path that does not exist; data/ is not used")
def test_restore_with_a_missing_durable_root_says_it_once_and_claims_nothing(
    tree: Tree, cli: CliRunner
) -> None:
    missing = tree.base / "not-mounted"
    out = cli("restore", env=tree.env(DATA_DIR=str(missing)), check=1)
    assert "restored" not in out.stdout  # no success line for a stopped adapter
    assert out.stderr.count("does not exist") == 1, out.stderr
    assert "codex, claude" in out.stderr or "claude, codex" in out.stderr
    assert not missing.exists()


def test_global_flags_work_after_the_subcommand(tree: Tree, cli: CliRunner) -> None:
    tree.write(f"{CODEX}/a.json", "a")
    env = {k: v for k, v in tree.env().items() if k not in ("AM_LOCAL", "DATA_DIR")}
    out = cli(
        "checkpoint",
        "codex",
        "--local-root",
        str(tree.local),
        "--durable-root",
        str(tree.data),
        "-v",
        env=env,
        check=0,
    )
    assert "codex: published 1 file(s)" in out.stdout
    assert "checkpoint.manifest" in out.stderr  # -v after the command counts too
    assert (tree.data / "state/codex/a.json").read_text() == "a"
    out = cli(
        "status", "--settings", "--jobs", "3", env=env | {"AM_LOCAL": str(tree.local)}, check=0
    )
    assert "jobs 3 (flag --jobs)" in " ".join(out.stdout.split())


@pytest.mark.dir_only("argument errors: nothing is run")
@pytest.mark.parametrize(
    "args",
    [
        ("verify", "--sample", "500"),
        ("verify", "--sample", "0"),
        ("verify", "--sample", "nan"),
        ("verify", "--max-entries", "0"),
        ("run", "--grace", "-1", "--", "true"),
        ("run", "--stop-timeout", "inf", "--", "true"),
    ],
)
def test_out_of_range_arguments_exit_2(tree: Tree, cli: CliRunner, args: tuple[str, ...]) -> None:
    before = snapshot(tree.base)
    out = cli(*args, check=2)
    assert args[1] in out.stderr and "Traceback" not in out.stderr
    assert snapshot(tree.base) == before


@pytest.mark.dir_only("argument errors: nothing is run")
def test_a_commands_option_before_the_command_is_named(tree: Tree, cli: CliRunner) -> None:
    """Fails with argparse's "invalid choice: 'abc'" (the option's value read as the
    command)."""
    out = cli("--interval", "abc", "checkpoint", check=2)
    assert out.stderr.splitlines()[-1] == (
        "syncengine: error: --interval is an option of run only, not of syncengine "
        "itself: give it after the command (syncengine run --interval ...)"
    )
    out = cli("checkpoint", "--interval", "5", check=2)  # after another command
    assert out.stderr.splitlines()[-1] == (
        "syncengine: error: --interval is an option of run only, not of checkpoint: "
        "syncengine run --interval ..."
    )
    out = cli("-q", "--jobs", "2", "--dry-run", "x", "checkpoint", check=2)
    assert "--dry-run is an option of checkpoint, restore, migrate," in out.stderr
    out = cli("--bogus", "x", "status", check=2)
    assert "unrecognized option --bogus" in out.stderr and "invalid choice" not in out.stderr


@pytest.mark.dir_only("reads the configuration lines of status, which no store changes")
def test_status_lines_up_the_configuration_and_names_unset_keys(tree: Tree, cli: CliRunner) -> None:
    assert "configuration:\n" not in cli("status", check=0).stdout  # only with --settings
    out = cli("status", "--settings", check=0).stdout
    lines = out.split("configuration:\n", 1)[1].splitlines()
    columns = {len(line) - len(line[2:].split(" ", 1)[1].lstrip()) for line in lines}
    assert len(lines) > 5 and len(columns) == 1, lines  # every value starts in one column
    assert any(line.split()[:2] == ["write_back", "auto"] for line in lines), lines
    assert "None" not in out
