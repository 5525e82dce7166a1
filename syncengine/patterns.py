"""Gitignore-style exclusion patterns, compiled once into two regular expressions.

Owns the meaning of an adapter's ``exclude`` list.  Supported: ``*``, ``?``,
``[...]``, ``**`` across directories, a trailing ``/`` for directories only,
and a ``/`` at the start or in the middle to anchor a pattern at the tree's
root.  A pattern without a slash matches a name at any depth.  Negation
(``!``) is refused with a clear error rather than half-supported.  Which
paths are SQLite databases (an adapter's ``sqlite`` globs) is
`syncengine.sqlite.files`'s.
"""

from __future__ import annotations

import re

import attrs

from syncengine.errors import ConfigError


def _translate(glob: str) -> str:
    """Translate one glob (no leading slash) into a regex over a relative path."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = glob[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@attrs.frozen
class Matcher:
    """Decides whether a path relative to a tree's root is excluded."""

    patterns: tuple[str, ...]
    _any: re.Pattern[str] | None
    _dirs_only: re.Pattern[str] | None

    def excluded(self, relpath: str, is_dir: bool) -> bool:
        if self._any is not None and self._any.match(relpath):
            return True
        return is_dir and self._dirs_only is not None and bool(self._dirs_only.match(relpath))

    def __bool__(self) -> bool:
        return bool(self.patterns)


def compile_patterns(patterns: tuple[str, ...] | list[str], *, where: str = "exclude") -> Matcher:
    """Compile gitignore-style patterns; raise ConfigError naming a bad one."""
    any_parts: list[str] = []
    dir_parts: list[str] = []
    for raw in patterns:
        pat = raw.strip()
        if not pat or pat.startswith("#"):
            continue
        if pat.startswith("!"):
            raise ConfigError(
                f"{where}: pattern {raw!r}: negation (!) is not supported; "
                "list only what to exclude"
            )
        dir_only = pat.endswith("/")
        pat = pat.rstrip("/")
        anchored = "/" in pat
        pat = pat.lstrip("/")
        if not pat:
            raise ConfigError(f"{where}: pattern {raw!r} matches nothing; remove it")
        body = _translate(pat)
        prefix = "" if anchored else "(?:.*/)?"
        try:
            re.compile(body)
        except re.error as exc:
            raise ConfigError(f"{where}: pattern {raw!r} is invalid: {exc}") from exc
        (dir_parts if dir_only else any_parts).append(prefix + body)
    return Matcher(
        patterns=tuple(patterns),
        any=re.compile("(?:" + "|".join(any_parts) + r")\Z", re.S) if any_parts else None,
        dirs_only=re.compile("(?:" + "|".join(dir_parts) + r")\Z", re.S) if dir_parts else None,
    )
