"""The user documentation stays true to the code it describes (issue 28).

Checked from the code, so a new command, option or configuration key that is
not documented fails here rather than rotting silently:

- the Commands block of docs/OPERATING.md names every command and every option
  of the command line (walked from `build_parser`, subcommands included);
- the configuration example of docs/CONFIGURATION.md is valid TOML holding every
  key the configuration loader accepts (top level, ``[gc]``, ``[[adapter]]``),
  and docs/MIGRATING.md's step example every ``[[migrate]]`` action and key;
- every relative markdown link of README.md and docs/*.md resolves: the file
  exists, and an ``#anchor`` names a heading of it;
- README.md stays a page a newcomer reads in a few minutes.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from syncengine.cli.args import build_parser
from syncengine.config import GC_KEYS, TOP_KEYS, Config, GcConfig
from syncengine.config.adapterspec import ADAPTER_KEYS
from syncengine.config.migratespec import MIGRATE_ACTIONS

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 200

FENCE = re.compile(r"^```[^\n]*\n.*?^```", re.M | re.S)
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")


def _section(page: Path, heading: str) -> str:
    """The text under `heading` (a whole heading line), up to the next heading of its level."""
    text = page.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    end = re.search(rf"^{level} ", text[start:], re.M)
    return text[start : start + end.start()] if end else text[start:]


def _first_block(text: str, lang: str = "") -> str:
    """The body of the first fenced block in `text` (of language `lang`, if given)."""
    match = re.search(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)
    assert match, f"no ```{lang} block"
    return match.group(1)


# --- (a) the Commands block -----------------------------------------------------------


def _commands_block() -> str:
    return _first_block(_section(DOCS / "OPERATING.md", "## Commands"))


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _words(action: argparse.Action) -> list[str]:
    """What the block must show for `action`: its option strings, or a positional's choices."""
    if action.option_strings:
        return list(action.option_strings)
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return [str(c) for c in action.choices]
    return []


def _grammar() -> Iterator[tuple[tuple[str, ...], str]]:
    """(command path, word) for every option and fixed positional word, walking subcommands.

    The global options, which every command also takes after its name, belong to
    the top (empty) path only."""
    top = build_parser()
    globals_ = {w for a in top._actions for w in _words(a)}

    def walk(
        parser: argparse.ArgumentParser, path: tuple[str, ...]
    ) -> Iterator[tuple[tuple[str, ...], str]]:
        for action in parser._actions:
            for word in _words(action):
                if not path or word not in globals_:
                    yield path, word
        for name, sub in _subparsers(parser).items():
            yield from walk(sub, (*path, name))

    yield from walk(top, ())


def _block_lines(block: str) -> dict[tuple[str, ...], str]:
    """The block's lines by command: the header lines (empty path), then each command's
    line and its continuation lines (indented deeper than the command names)."""
    lines: dict[tuple[str, ...], str] = {(): ""}
    current: tuple[str, ...] = ()
    for line in block.splitlines():
        match = re.match(r"  (\w[\w-]*) ", line)
        if match:
            current = (match.group(1),)
            lines[current] = ""
        elif not line.startswith("   "):
            current = ()
        lines[current] += line + "\n"
    return lines


def _has_word(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def test_the_commands_block_names_every_command_and_option() -> None:
    by_command = _block_lines(_commands_block())
    missing = []
    for path, word in _grammar():
        command = path[:1]  # nested subcommands (none today) are listed on their command's line
        if command not in by_command:
            missing.append(f"command {' '.join(path)!r}")
        elif not _has_word(by_command[command], word):
            missing.append(f"{' '.join(path) or 'syncengine'} {word}")
    for name in _subparsers(build_parser()):
        if (name,) not in by_command:
            missing.append(f"command {name!r}")
    assert not missing, f"docs/OPERATING.md Commands block lacks: {sorted(set(missing))}"


def test_the_commands_block_names_only_real_commands() -> None:
    real = set(_subparsers(build_parser()))
    listed = {path[0] for path in _block_lines(_commands_block()) if path}
    assert listed <= real, f"not commands of syncengine: {sorted(listed - real)}"


# --- (b) the configuration example ----------------------------------------------------


def _config_example() -> dict[str, Any]:
    block = _first_block(_section(DOCS / "CONFIGURATION.md", "## The config file"), "toml")
    return tomllib.loads(block)


def test_the_configuration_example_lists_every_key() -> None:
    example = _config_example()
    assert set(example) == TOP_KEYS, (
        f"docs/CONFIGURATION.md example: missing {sorted(TOP_KEYS - set(example))}, "
        f"unknown {sorted(set(example) - TOP_KEYS)}"
    )
    assert set(example["gc"]) == GC_KEYS, f"[gc]: missing {sorted(GC_KEYS - set(example['gc']))}"
    adapter_keys = {key for table in example["adapter"] for key in table}
    assert adapter_keys == ADAPTER_KEYS, (
        f"[[adapter]]: missing {sorted(ADAPTER_KEYS - adapter_keys)}, "
        f"unknown {sorted(adapter_keys - ADAPTER_KEYS)}"
    )


def _plain_defaults(cls: type) -> dict[str, object]:
    return {
        f.name: f.default
        for f in attrs.fields(cls)
        if isinstance(f.default, int | float | str) and not isinstance(f.default, attrs.Factory)
    }


def test_the_configuration_example_shows_the_defaults() -> None:
    """Where a key has a fixed default, the example sets it to that value (the page
    says so), so a changed default shows up in the reference too."""
    example = _config_example()
    wrong = [
        f"{name} = {shown!r} (default {default!r})"
        for table, cls in ((example, Config), (example["gc"], GcConfig))
        for name, default in _plain_defaults(cls).items()
        if name in table and (shown := table[name]) != default
    ]
    assert not wrong, f"docs/CONFIGURATION.md example: {wrong}"


def test_the_migration_example_lists_every_step_and_key() -> None:
    text = _section(DOCS / "MIGRATING.md", "## Migrating from the rsync layout")
    steps = tomllib.loads(_first_block(text, "toml"))["migrate"]
    shown = {step["action"]: set(step) - {"action"} for step in steps}
    assert set(shown) == set(MIGRATE_ACTIONS)
    for action, (required, optional) in MIGRATE_ACTIONS.items():
        assert shown[action] == required | optional, f"[[migrate]] action = {action!r}"


# --- (c) links ------------------------------------------------------------------------


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives `page`'s headings (lower case, punctuation dropped,
    spaces to hyphens; a repeated heading gets -1, -2...)."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _links(page: Path) -> Iterator[str]:
    prose = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text()))
    for target in LINK.findall(prose):
        if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            yield target


def _broken(page: Path, target: str) -> str | None:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
        return f"{target}: no such file"
    if anchor and (dest.suffix != ".md" or anchor not in _anchors(dest)):
        return f"{target}: no heading for #{anchor} in {dest.relative_to(REPO)}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = [b for t in _links(page) if (b := _broken(page, t))]
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_the_link_checker_sees_links_and_anchors() -> None:
    """The checker itself: it finds links, and GitHub's anchors for these headings."""
    assert "docs/OPERATING.md#commands" in set(_links(README))
    operating = _anchors(DOCS / "OPERATING.md")
    assert {"straight-to-s3-no-mount", "one-writer-per-durable-root-the-lease"} <= operating
    assert "switching-from-agent-statesh" in _anchors(DOCS / "MIGRATING.md")


# --- (d) the README stays short -------------------------------------------------------


def test_the_readme_stays_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines < README_MAX_LINES, (
        f"README.md has {lines} lines: keep it a newcomer's page, move the rest into docs/"
    )
