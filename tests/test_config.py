"""Configuration: defaults from the design's Layout table, precedence, and bad configs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncengine import ConfigError, config_from_dict, load_config
from tests.conftest import CliRunner, Tree
from tests.helpers import snapshot

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
    assert got == {
        n: (Path("/srv/a") / live, Path("/data") / dur) for n, (live, dur) in LAYOUT.items()
    }
    codex = cfg.adapter("codex")
    # The design's exclusions, except that the databases holding user data (Codex 0.171:
    # thread names and pins in state_5, goals, memories, queued prompts) are snapshotted;
    # the logs and the rebuildable thread-history projection stay excluded.
    for pattern in (
        "thread_history_*.sqlite*",
        "logs_*.sqlite*",
        "*.db",
        "*.db-*",
        "*-wal",
        "*-shm",
        "db-backups",
        "cache",
        ".tmp",
        "mcp-oauth-locks",
    ):
        assert pattern in codex.exclude
    assert codex.sqlite == (
        "state_*.sqlite",
        "goals_*.sqlite",
        "memories_*.sqlite",
        "queue_*.sqlite",
    )


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
    cfg = config_from_dict(
        {
            "local_root": "/l",
            "durable_root": "/d",
            "adapters": [],
            "adapter": [
                {
                    "name": "notes",
                    "live": "notes",
                    "durable": "/elsewhere/notes",
                    "exclude": ["cache/", "*.tmp"],
                }
            ],
        },
        env={},
    )
    (spec,) = cfg.adapters
    assert spec.live == Path("/l/notes") and spec.durable == Path("/elsewhere/notes")


@pytest.mark.parametrize(
    ("raw", "env", "needle"),
    [
        ({"local_rot": "/x"}, {"AM_LOCAL": "/l"}, "unknown key 'local_rot'"),
        ({}, {}, "local_root is not set: set AM_LOCAL or local_root"),
        ({"adapters": ["codex", "nope"]}, {"AM_LOCAL": "/l"}, "no built-in adapter 'nope'"),
        (
            {"adapter": [{"name": "codex", "live": "x", "durable": "y"}]},
            {"AM_LOCAL": "/l"},
            "adapter name 'codex' is used twice",
        ),
        (
            {
                "adapters": [],
                "adapter": [{"name": "n", "live": "/d/state/n/live", "durable": "/d/state/n"}],
            },
            {"AM_LOCAL": "/l", "DATA_DIR": "/d"},
            "overlap",
        ),
        (
            {"adapters": [], "adapter": [{"name": "n", "live": "n", "durable": "d", "colour": 1}]},
            {"AM_LOCAL": "/l"},
            "unknown key 'colour'",
        ),
        ({"interval": "soon"}, {"AM_LOCAL": "/l"}, "interval must be a number"),
        (
            {
                "adapters": [],
                "adapter": [{"name": "n", "live": "n", "durable": "d", "exclude": ["!keep"]}],
            },
            {"AM_LOCAL": "/l"},
            "negation",
        ),
    ],
)
def test_bad_configs_are_refused_with_the_key(
    raw: dict[str, object], env: dict[str, str], needle: str
) -> None:
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
    out = cli("checkpoint", env={k: v for k, v in tree.env().items() if k != "AM_LOCAL"}, check=2)
    assert "AM_LOCAL" in out.stderr
    conf.write_text("local_root = \n")
    out = cli("--config", str(conf), "status", check=2)
    assert "invalid TOML" in out.stderr
    assert cli("frobnicate", check=2).returncode == 2


def test_status_shows_values_and_their_sources(tree: Tree, cli: CliRunner) -> None:
    tree.write("codex-home/a.json", "abc")
    cli("checkpoint", check=0)
    out = cli("--jobs", "3", "status", "--settings", check=0)
    shown = " ".join(out.stdout.split())  # the column width follows the longest key
    assert f"local_root {tree.local} (env $AM_LOCAL)" in shown
    assert "jobs 3 (flag --jobs)" in shown
    assert "interval 15.0 (default)" in shown
    assert "live tree does not exist yet" in out.stdout
    data = json.loads(cli("status", "--json", check=0).stdout)
    codex = next(a for a in data["adapters"] if a["name"] == "codex")
    assert codex["last_files"] == 1 and codex["last_bytes"] == 3 and codex["errors"] == []
    assert codex["last_checkpoint"].endswith("Z") and "total_files" not in codex


@pytest.mark.dir_only("prints help; the durable root is not used")
def test_help_documents_exit_codes(cli: CliRunner) -> None:
    out = cli("--help", check=0).stdout
    assert "exit codes:" in out and "2  usage or configuration error" in out
    assert "checkpoint" in out and "restore" in out and "status" in out


def test_enabled_adapter_without_live_dir_is_not_an_error(tree: Tree, cli: CliRunner) -> None:
    out = cli("checkpoint", check=0)
    assert "no live tree yet (nothing to checkpoint): " in out.stdout
    assert "codex" in out.stdout.split("no live tree yet", 1)[1].splitlines()[0]


def test_wheel_ships_the_builtin_adapters(tmp_path: Path) -> None:
    """adapters/ is data, not a package: it must be inside the wheel as syncengine/_adapters."""
    import subprocess
    import sys
    import zipfile

    from tests.conftest import REPO

    pytest.importorskip("hatchling")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("agent_state_checkpoints-*.whl")  # the distribution name (pyproject)
    names = set(zipfile.ZipFile(wheel).namelist())
    for harness in LAYOUT:
        assert f"syncengine/_adapters/{harness}.toml" in names
    assert any(n.endswith("entry_points.txt") for n in names)


# -- nonsense is refused: exit 2, one line naming the key, nothing written --------------

NONSENSE = [  # (config file text, the key the message must name)
    ("interval = inf", "interval"),  # the timer thread died: no periodic checkpoints
    ("interval = nan", "interval"),
    ("interval = -5", "interval"),
    ("interval = 0", "interval"),  # a busy loop
    ("interval = true", "interval"),
    ('interval = "15"', "interval"),
    ('jobs = "8"', "jobs"),  # TOML values have their TOML type; only env vars are text
    ("jobs = 2.7", "jobs"),
    ("jobs = true", "jobs"),
    ("jobs = 0", "jobs"),
    ("jobs = 100000", "jobs"),
    ('sqlite_busy_timeout = "2"', "sqlite_busy_timeout"),
    ("sqlite_busy_timeout = -1.0", "sqlite_busy_timeout"),
    ("rescan_interval = inf", "rescan_interval"),
    ('require_mount = "yes"', "require_mount"),
    ("local_root = 5", "local_root"),
    ('state_dir = ""', "state_dir"),
    ('durable_root = "a\\u0000b"', "durable_root"),
    ("adapters = []", "adapters"),  # no adapter at all
    ('adapters = "codex"', "adapters"),
    ("adapter = [1, 2]", "adapter"),
    ("[gc]\ngrace_seconds = nan", "grace_seconds"),
    ("[gc]\nabsent_passes = 2.5", "absent_passes"),
    ("[gc]\nabsent_passes = 1000", "absent_passes"),  # the index counts up to 255
    ("[gc]\nmin_present_ratio = -0.5", "min_present_ratio"),
    ('[[adapter]]\nname = "n"\nlive = "n"\ndurable = "d"\nexclude = ["a\\u0000"]', "exclude"),
]


def _refused(
    tree: Tree, cli: CliRunner, *args: str, key: str, env: dict[str, str] | None = None
) -> str:
    before = snapshot(tree.base)
    out = cli(*args, env=env, check=2)
    assert out.stderr.count("\n") == 1, out.stderr  # one line, no traceback
    assert out.stderr.startswith("syncengine: ") and key in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert snapshot(tree.base) == before  # nothing written
    return out.stderr


@pytest.mark.dir_only("fails before the durable root is used")
@pytest.mark.parametrize(("text", "key"), NONSENSE, ids=[t for t, _ in NONSENSE])
def test_nonsense_in_the_config_file_exits_2_naming_the_key(
    tree: Tree, cli: CliRunner, text: str, key: str
) -> None:
    conf = tree.base / "c.toml"
    conf.write_text(text + "\n")
    _refused(tree, cli, "--config", str(conf), "checkpoint", key=key)


@pytest.mark.dir_only("fails before the durable root is used")
def test_a_string_number_says_how_to_write_it(tree: Tree, cli: CliRunner) -> None:
    conf = tree.base / "c.toml"
    conf.write_text('jobs = "8"\n')
    err = _refused(tree, cli, "--config", str(conf), "checkpoint", key="jobs")
    assert "write jobs = 8 without quotes" in err


@pytest.mark.dir_only("fails before the durable root is used")
def test_a_config_file_that_is_not_utf8_exits_2(tree: Tree, cli: CliRunner) -> None:
    conf = tree.base / "latin1.toml"
    conf.write_bytes('local_root = "/srv/agents/caf\xe9"\n'.encode("latin-1"))
    err = _refused(tree, cli, "--config", str(conf), "status", key="UTF-8")
    assert str(conf) in err


@pytest.mark.dir_only("fails before the durable root is used")
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e999", "soon", "15s"])
def test_garbage_in_the_interval_variable_exits_2(tree: Tree, cli: CliRunner, value: str) -> None:
    err = _refused(
        tree, cli, "checkpoint", key="interval", env=tree.env(AGENT_STATE_CHECKPOINT_SECONDS=value)
    )
    assert "AGENT_STATE_CHECKPOINT_SECONDS" in err


@pytest.mark.dir_only("fails before the durable root is used")
@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("run", "--interval", "0", "--", "true"), "interval"),  # was a busy loop
        (("run", "--interval", "inf", "--", "true"), "interval"),
        (("--jobs", "0", "checkpoint"), "jobs"),
        (("checkpoint", "--jobs", "-3"), "jobs"),
    ],
)
def test_nonsense_flags_exit_2(tree: Tree, cli: CliRunner, args: tuple[str, ...], key: str) -> None:
    err = _refused(tree, cli, *args, key=key)
    assert "flag --" in err


def test_relative_paths_in_a_config_file_are_relative_to_its_folder(tmp_path: Path) -> None:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    conf = conf_dir / "syncengine.toml"
    conf.write_text(
        'local_root = "../live"\ndurable_root = "bucket"\nstate_dir = "~/st"\njournal_dir = "j"\n'
    )
    cfg = load_config(conf, env={})
    assert cfg.local_root == tmp_path / "live"
    assert cfg.durable_root == conf_dir / "bucket"
    assert cfg.state_dir == Path(os.path.expanduser("~/st"))  # ~ is expanded, not joined
    assert cfg.journal_dir == conf_dir / "j"
    # from the environment or a flag a relative path is relative to the current directory
    cfg = load_config(None, env={"AM_LOCAL": "rel"}, overrides={"durable_root": "d"})
    assert cfg.local_root == Path.cwd() / "rel" and cfg.durable_root == Path.cwd() / "d"


_BAD_VALUES = {  # for each key, values of the wrong TOML type or out of range
    "interval": st.one_of(
        st.text(max_size=5),
        st.booleans(),
        st.floats(max_value=0.09),
        st.floats(min_value=86400.5),
        st.just(float("nan")),
        st.lists(st.integers(), max_size=2),
    ),
    "jobs": st.one_of(
        st.text(max_size=5),
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(max_value=0),
        st.integers(min_value=257),
    ),
    "sqlite_busy_timeout": st.one_of(
        st.text(max_size=5), st.booleans(), st.floats(max_value=0.0), st.floats(min_value=3600.5)
    ),
    "rescan_interval": st.one_of(
        st.booleans(), st.floats(max_value=0.99), st.floats(min_value=604800.5), st.text(max_size=3)
    ),
    "local_root": st.one_of(
        st.integers(),
        st.booleans(),
        st.just(""),
        st.text(min_size=1, max_size=5).map(lambda t: t + "\x00"),
    ),
    "durable_root": st.one_of(st.floats(), st.lists(st.text(max_size=3), max_size=2)),
    "require_mount": st.one_of(st.integers(), st.text(max_size=5)),
    "adapters": st.one_of(
        st.just([]), st.text(max_size=5), st.lists(st.integers(), min_size=1, max_size=2)
    ),
}


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return (
            "nan"
            if value != value
            else ("inf" if value > 0 else "-inf")
            if value in (float("inf"), float("-inf"))
            else repr(value)
        )
    if isinstance(value, str):
        # JSON escapes are TOML escapes; TOML also refuses a literal DEL
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


@given(data=st.data())
@settings(max_examples=150, deadline=None)
def test_any_bad_value_exits_2_with_one_line_and_no_traceback(data: st.DataObject) -> None:
    import contextlib
    import io
    import logging
    import tempfile

    from syncengine.cli import main

    key = data.draw(st.sampled_from(sorted(_BAD_VALUES)))
    value = data.draw(_BAD_VALUES[key])
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "local").mkdir()
        conf = base / "c.toml"
        conf.write_text(f"{key} = {_toml(value)}\n")
        err = io.StringIO()
        env = {"AM_LOCAL": str(base / "local"), "DATA_DIR": str(base)}
        logger = logging.getLogger("syncengine")
        saved = (logger.handlers[:], logger.level, logger.propagate)  # main() sets them up
        try:
            with (
                contextlib.redirect_stderr(err),
                contextlib.redirect_stdout(io.StringIO()),
                mock.patch.dict(os.environ, env),
            ):
                rc = main(["--config", str(conf), "checkpoint"])
        finally:
            logger.handlers[:] = saved[0]
            logger.setLevel(saved[1])
            logger.propagate = saved[2]
        assert rc == 2, (key, value, err.getvalue())
        assert err.getvalue().count("\n") == 1 and key in err.getvalue(), err.getvalue()
        assert sorted(p.name for p in base.iterdir()) == ["c.toml", "local"]
        assert not any((base / "local").iterdir())


# The design's per-harness variables (scripts/agent-state.sh), with where each one puts
# the adapter's tree: (adapter, "live" or "durable", variable).
DESIGN_VARIABLES = [
    ("codex", "live", "CODEX_HOME"),
    ("codex", "durable", "CODEX_DURABLE"),
    ("claude", "live", "CLAUDE_CONFIG_DIR"),
    ("claude", "durable", "CLAUDE_DURABLE"),
    ("gemini", "live", "GEMINI_LIVE"),
    ("gemini", "durable", "GEMINI_DURABLE"),
    ("openclaw", "live", "OPENCLAW_STATE_DIR"),
    ("openclaw", "durable", "OPENCLAW_DURABLE"),
    ("opencode", "live", "OPENCODE_LIVE"),
    ("opencode", "durable", "OPENCODE_DURABLE"),
    ("hermes", "live", "HERMES_LIVE"),
    ("hermes", "durable", "HERMES_DURABLE"),
]


def test_the_design_variables_place_each_harness_tree() -> None:
    env = {"AM_LOCAL": "/l", "DATA_DIR": "/d"}
    env.update({var: f"/elsewhere/{var.lower()}" for _, _, var in DESIGN_VARIABLES})
    cfg = load_config(env=env)
    for name, key, var in DESIGN_VARIABLES:
        assert getattr(cfg.adapter(name), key) == Path(f"/elsewhere/{var.lower()}"), var
        assert cfg.sources[f"{key}.{name}"] == f"env ${var}"
    # GEMINI_LIVE defaults to $GEMINI_CLI_HOME/.gemini; an empty variable is not set
    cfg = load_config(
        env={"AM_LOCAL": "/l", "GEMINI_CLI_HOME": "/g", "GEMINI_LIVE": "", "CODEX_HOME": ""}
    )
    assert cfg.adapter("gemini").live == Path("/g/.gemini")
    assert cfg.sources["live.gemini"] == "env $GEMINI_CLI_HOME/.gemini"
    assert cfg.adapter("codex").live == Path("/l/codex-home")
    assert cfg.sources["live.codex"] == "default"
    both = load_config(env={"AM_LOCAL": "/l", "GEMINI_CLI_HOME": "/g", "GEMINI_LIVE": "/x"})
    assert both.adapter("gemini").live == Path("/x")


def test_adapter_trees_precedence_env_then_file_then_flag(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('[live]\ncodex = "codex-here"\n[durable]\nhermes = "/file/hermes"\n')
    env = {
        "AM_LOCAL": "/l",
        "CODEX_HOME": "/env/codex",
        "HERMES_DURABLE": "/env/hermes",
        "CLAUDE_CONFIG_DIR": "/env/claude",
    }
    cfg = load_config(conf, env=env)
    assert cfg.adapter("codex").live == tmp_path / "codex-here", "relative to the file's folder"
    assert cfg.sources["live.codex"] == f"config {conf}"
    assert cfg.adapter("hermes").durable == Path("/file/hermes")
    assert cfg.adapter("claude").live == Path("/env/claude")
    cfg = load_config(conf, env=env, overrides={"live": {"codex": "/flag/codex"}})
    assert cfg.adapter("codex").live == Path("/flag/codex")
    assert cfg.sources["live.codex"] == "flag --live"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"live": {"nope": "/x"}}, "no enabled adapter 'nope'"),
        ({"live": "codex=/x"}, "live must be a table"),
        ({"durable": {"codex": 3}}, "[durable] codex must be a non-empty path"),
        (
            {
                "adapters": [],
                "adapter": [{"name": "n", "live": "n", "durable": "d", "live_env": ["NOT A NAME"]}],
            },
            "live_env must be a list",
        ),
        (
            {
                "adapters": [],
                "adapter": [{"name": "n", "live": "n", "durable": "d", "live_env": "N_LIVE"}],
            },
            "live_env must be a list",
        ),
    ],
)
def test_bad_adapter_trees_are_refused(raw: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw, env={"AM_LOCAL": "/l"})
    assert needle in str(info.value)


def test_an_extra_adapter_names_its_own_variables() -> None:
    raw = {
        "adapters": [],
        "adapter": [
            {"name": "notes", "live": "notes", "durable": "s/n", "live_env": ["NOTES_HOME/inner"]}
        ],
    }
    cfg = config_from_dict(raw, env={"AM_LOCAL": "/l", "NOTES_HOME": "/n"})
    assert cfg.adapter("notes").live == Path("/n/inner")
    cfg = config_from_dict(raw, env={"AM_LOCAL": "/l"})
    assert cfg.adapter("notes").live == Path("/l/notes")


@pytest.mark.dir_only("status reads local state only")
def test_status_shows_each_tree_with_its_source_and_warns_on_a_missing_one(
    tree: Tree, cli: CliRunner
) -> None:
    codex = tree.base / "codex-live"
    codex.mkdir()
    env = tree.env(
        CODEX_HOME=str(codex),
        CLAUDE_CONFIG_DIR=str(tree.base / "typo"),
        HERMES_DURABLE=str(tree.base / "hd"),
    )
    out = cli(
        "--durable",
        f"claude={tree.base / 'cd'}",
        "status",
        "--live",
        f"openclaw={tree.base / 'oc'}",
        env=env,
        check=0,
    ).stdout  # before and after
    assert f"openclaw: {tree.base}/oc (flag --live) -> " in out
    assert f"codex: {codex} (env $CODEX_HOME) -> {tree.data}/state/codex (default)" in out
    assert (
        f"claude: {tree.base}/typo (env $CLAUDE_CONFIG_DIR) -> {tree.base}/cd (flag --durable)"
    ) in out
    assert f"hermes: {tree.local}/hermes (default) -> {tree.base}/hd (env $HERMES_DURABLE)" in out
    warnings = [line for line in out.splitlines() if "WARNING" in line]
    assert len(warnings) == 2 and f"{tree.base}/typo does not exist" in warnings[0]
    assert "env $CLAUDE_CONFIG_DIR names it" in warnings[0]
    assert "flag --live names it" in warnings[1]
    data = json.loads(cli("status", "--json", env=env, check=0).stdout)
    claude = next(a for a in data["adapters"] if a["name"] == "claude")
    assert claude["live_source"] == "env $CLAUDE_CONFIG_DIR" and claude["warning"]
    assert data["config"]["home"] == [str(tree.base / "home"), "env $HOME"]


def test_durable_trees_from_every_layer_are_in_the_bucket_of_an_s3_root(tmp_path: Path) -> None:
    """A relative name from a variable, ``[durable]`` or a flag is under the s3:// root (as
    ``[[adapter]] durable`` is), not under the current directory; a local path is refused."""
    env = {"AM_LOCAL": "/l", "DATA_DIR": "s3://bkt/data", "HOME": str(tmp_path)}
    raw = {"adapters": ["codex", "claude", "gemini"], "durable": {"claude": "cl"}}
    cfg = config_from_dict(
        raw,
        env={**env, "CODEX_DURABLE": "cx"},
        overrides={"durable": {"gemini": "s3://bkt/elsewhere/gm"}},
        base_dir=tmp_path,
    )
    root = cfg.durable_root
    assert cfg.adapter("codex").durable == root / "cx"
    assert cfg.adapter("claude").durable == root / "cl"
    assert cfg.adapter("gemini").durable == root.parent / "elsewhere/gm"
    with pytest.raises(ConfigError, match=r"^env \$CODEX_DURABLE: /data/state/codex is a local"):
        config_from_dict({}, env={**env, "CODEX_DURABLE": "/data/state/codex"})
    with pytest.raises(ConfigError, match="s3://other/x is not in the bucket of durable_root"):
        config_from_dict({}, env=env, overrides={"durable": {"codex": "s3://other/x"}})
