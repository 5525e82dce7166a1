"""An option given where it does not belong (before the command, or after a command that
does not take it): one line that says which command takes it.

Owns `Parser`, the top-level parser's class.  argparse reads ``syncengine
--interval 5 checkpoint`` as an unknown option followed by the command "5" and
answers "invalid choice: '5'"; when parsing fails and an option before the
command is not one of the global options, the error names that option and the
commands that take it instead.  ``syncengine checkpoint --interval 5``
(an option of another command) gets "unrecognized arguments: --interval"; the
error names the commands that take it.  It changes no grammar: only the message of a
command line argparse refuses anyway.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose error names a command's option given before the command."""

    _argv: Sequence[str] = ()

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override, unused-ignore]
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        super().error(
            misplaced(self, self._argv) or other_commands(self, self._argv, message) or message
        )


def other_commands(
    parser: argparse.ArgumentParser, argv: Sequence[str], message: str
) -> str | None:
    """What is wrong with the first unrecognized option after the command, when another
    command takes it (None: argparse's `message` says it as well)."""
    lead = "unrecognized arguments: "
    if not message.startswith(lead):
        return None
    options = [t.split("=", 1)[0] for t in message[len(lead) :].split() if t.startswith("-")]
    commands = dict(_commands(parser))
    command = next((t for t in argv if t in commands), None)
    if not options or command is None:
        return None
    takers = [cmd for cmd, sub in commands.items() if options[0] in sub._option_string_actions]
    if not takers or command in takers:
        return None
    only = " only" if len(takers) == 1 else ""
    return (
        f"{options[0]} is an option of {', '.join(takers)}{only}, not of {command}: "
        f"syncengine {takers[0]} {options[0]} ..."
    )


def misplaced(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """What is wrong with the first option before the command that `parser` does not take
    (None: every option before the command is a global one)."""
    known = parser._option_string_actions  # argparse keeps no public table
    tokens = iter(argv)
    for token in tokens:
        if token == "--" or not token.startswith("-") or token == "-":
            return None  # the command: the global options end here
        name = token.split("=", 1)[0]
        if _short_flags(token, known):
            continue
        action = known.get(name) or _abbreviated(name, known)
        if action is not None:
            if action.nargs != 0 and "=" not in token:
                next(tokens, None)  # its value
            continue
        if any(o.startswith(name) for o in known if name.startswith("--")):
            return None  # an ambiguous abbreviation: argparse's own message says so
        takers = [cmd for cmd, sub in _commands(parser) if name in sub._option_string_actions]
        if not takers:
            return f"unrecognized option {name} (syncengine --help lists the options)"
        only = " only" if len(takers) == 1 else ""
        return (
            f"{name} is an option of {', '.join(takers)}{only}, not of syncengine itself: "
            f"give it after the command (syncengine {takers[0]} {name} ...)"
        )
    return None


def _abbreviated(name: str, known: dict[str, argparse.Action]) -> argparse.Action | None:
    """The option a unique prefix stands for (argparse takes ``--loc`` for ``--local-root``)."""
    found = {known[o] for o in known if name.startswith("--") and o.startswith(name)}
    return found.pop() if len(found) == 1 else None


def _short_flags(token: str, known: dict[str, argparse.Action]) -> bool:
    """Short flags that take no value, one or run together (``-v``, ``-vq``)."""
    return not token.startswith("--") and all(
        f"-{c}" in known and known[f"-{c}"].nargs == 0 for c in token[1:]
    )


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    return [
        (name, sub)
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    ]
