"""Configuration: defaults from the design's Layout table, precedence, and bad configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncengine import ConfigError, config_from_dict, load_config
from tests.conftest import CliRunner, Tree

LAYOUT = {
    "codex": ("codex-home", "state/codex"),
    "claude": ("agent-state/claude", "state/claude"),
    "gemini": ("agent-state/gemini-home/.gemini", "state/gemini"),
    "openclaw": ("oc-home/.openclaw", "state/openclaw-backup"),
    "opencode": ("opencode-share", "state/opencode"),
    "hermes": ("hermes", "state/hermes"),
}


def test_defaults_reproduce_the_design_layout() -> None:
    cfg = load_config(env={"AM_LOCAL": "/srv/a"})
    assert cfg.durable_root == Path("/data") and cfg.interval == 15
    assert cfg.state_dir == Path("/srv/a/.syncengine")
    got = {s.name: (s.live, s.durable) for s in cfg.adapters}
    assert got == {n: (Path("/srv/a") / live, Path("/data") / dur)
                   for n, (live, dur) in LAYOUT.items()}
    codex = cfg.adapter("codex")
    # The design's exclusions, except that the databases holding user data (Codex 0.171:
    # thread names and pins in state_5, goals, memories, queued prompts) are snapshotted;
    # the logs and the rebuildable thread-history projection stay excluded.
    for pattern in ("thread_history_*.sqlite*", "logs_*.sqlite*", "*.db", "*.db-*", "*-wal",
                    "*-shm", "db-backups", "cache", ".tmp", "mcp-oauth-locks"):
        assert pattern in codex.exclude
    assert codex.sqlite == ("state_*.sqlite", "goals_*.sqlite", "memories_*.sqlite",
                            "queue_*.sqlite")


def test_precedence_env_then_file_then_flag(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('durable_root = "/from-file"\ninterval = 30\n')
    env = {"AM_LOCAL": "/l", "DATA_DIR": "/from-env", "AGENT_STATE_CHECKPOINT_SECONDS": "5"}
    cfg = load_config(conf, env=env)
    assert cfg.durable_root == Path("/from-file") and cfg.interval == 30
    assert cfg.sources["durable_root"] == f"config {conf}"
    cfg = load_config(conf, env=env, overrides={"durable_root": "/from-flag"})
    assert cfg.durable_root == Path("/from-flag")
    assert cfg.sources["durable_root"] == "flag --durable-root"
    cfg = load_config(None, env=env)
    assert cfg.interval == 5 and cfg.sources["interval"] == "env $AGENT_STATE_CHECKPOINT_SECONDS"


def test_config_file_from_environment_variable(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('local_root = "/x"\nadapters = ["codex"]\n')
    cfg = load_config(env={"SYNCENGINE_CONFIG": str(conf)})
    assert [s.name for s in cfg.adapters] == ["codex"] and cfg.local_root == Path("/x")


def test_extra_adapter_paths_relative_and_absolute() -> None:
    cfg = config_from_dict({"local_root": "/l", "durable_root": "/d", "adapters": [],
                            "adapter": [{"name": "notes", "live": "notes",
                                         "durable": "/elsewhere/notes",
                                         "exclude": ["cache/", "*.tmp"]}]}, env={})
    (spec,) = cfg.adapters
    assert spec.live == Path("/l/notes") and spec.durable == Path("/elsewhere/notes")


@pytest.mark.parametrize(("raw", "env", "needle"), [
    ({"local_rot": "/x"}, {"AM_LOCAL": "/l"}, "unknown key 'local_rot'"),
    ({}, {}, "local_root is not set: set AM_LOCAL or local_root"),
    ({"adapters": ["codex", "nope"]}, {"AM_LOCAL": "/l"}, "no built-in adapter 'nope'"),
    ({"adapter": [{"name": "codex", "live": "x", "durable": "y"}]}, {"AM_LOCAL": "/l"},
     "adapter name 'codex' is used twice"),
    ({"adapters": [], "adapter": [{"name": "n", "live": "/d/state/n/live",
                                   "durable": "/d/state/n"}]},
     {"AM_LOCAL": "/l", "DATA_DIR": "/d"}, "overlap"),
    ({"adapters": [], "adapter": [{"name": "n", "live": "n", "durable": "d", "colour": 1}]},
     {"AM_LOCAL": "/l"}, "unknown key 'colour'"),
    ({"interval": "soon"}, {"AM_LOCAL": "/l"}, "interval must be a number"),
    ({"adapters": [], "adapter": [{"name": "n", "live": "n", "durable": "d",
                                   "exclude": ["!keep"]}]}, {"AM_LOCAL": "/l"}, "negation"),
])
def test_bad_configs_are_refused_with_the_key(raw: dict[str, object], env: dict[str, str],
                                              needle: str) -> None:
    from syncengine import Engine

    with pytest.raises(ConfigError) as info:
        Engine(config_from_dict(raw, env=env))
    assert needle in str(info.value)


@pytest.mark.dir_only("fails before the durable root is used")
def test_cli_bad_config_exits_2_with_one_line(tree: Tree, cli: CliRunner) -> None:
    conf = tree.base / "bad.toml"
    conf.write_text('local_root = "/x"\nintervall = 3\n')
    out = cli("--config", str(conf), "checkpoint", check=2)
    assert out.stderr.count("\n") == 1 and "intervall" in out.stderr
    out = cli("checkpoint", env={k: v for k, v in tree.env().items() if k != "AM_LOCAL"},
              check=2)
    assert "AM_LOCAL" in out.stderr
    conf.write_text("local_root = \n")
    out = cli("--config", str(conf), "status", check=2)
    assert "invalid TOML" in out.stderr
    assert cli("frobnicate", check=2).returncode == 2


def test_status_shows_values_and_their_sources(tree: Tree, cli: CliRunner) -> None:
    tree.write("codex-home/a.json", "abc")
    cli("checkpoint", check=0)
    out = cli("--jobs", "3", "status", check=0)
    assert f"local_root    {tree.local}  (env $AM_LOCAL)" in out.stdout
    assert "jobs          3  (flag --jobs)" in out.stdout
    assert "interval      15.0  (default)" in out.stdout
    assert "live tree does not exist yet" in out.stdout
    data = json.loads(cli("status", "--json", check=0).stdout)
    codex = next(a for a in data["adapters"] if a["name"] == "codex")
    assert codex["last_files"] == 1 and codex["last_bytes"] == 3 and codex["errors"] == []
    assert codex["last_checkpoint_ns"] > 0


@pytest.mark.dir_only("prints help; the durable root is not used")
def test_help_documents_exit_codes(cli: CliRunner) -> None:
    out = cli("--help", check=0).stdout
    assert "exit codes:" in out and "2  usage or configuration error" in out
    assert "checkpoint" in out and "restore" in out and "status" in out


def test_enabled_adapter_without_live_dir_is_not_an_error(tree: Tree, cli: CliRunner) -> None:
    out = cli("checkpoint", check=0)
    assert "codex: published 0 file(s)" in out.stdout


def test_wheel_ships_the_builtin_adapters(tmp_path: Path) -> None:
    """adapters/ is data, not a package: it must be inside the wheel as syncengine/_adapters."""
    import subprocess
    import sys
    import zipfile

    from tests.conftest import REPO

    pytest.importorskip("hatchling")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--no-build-isolation", "-w", str(tmp_path), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("syncengine-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for harness in LAYOUT:
        assert f"syncengine/_adapters/{harness}.toml" in names
    assert any(n.endswith("entry_points.txt") for n in names)
