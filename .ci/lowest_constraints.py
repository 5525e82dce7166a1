"""Print pip constraints that pin each direct dependency to its pyproject lower bound.

    python3 .ci/lowest_constraints.py [EXTRA ...] > constraints.txt

Reads [project] dependencies and the named optional-dependency groups (default:
test) and prints ``name==lower`` for each, so `pip install -c constraints.txt`
installs the oldest versions pyproject claims to support.  A dependency
without a ``>=`` lower bound is an error: every claim must be testable.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")
LOWER = re.compile(r">=\s*([0-9][^,;\s]*)")


def lowest(requirements: list[str]) -> list[str]:
    pins = []
    for req in requirements:
        match = REQUIREMENT.match(req)
        bound = LOWER.search(match.group(3)) if match else None
        if match is None or bound is None:
            raise SystemExit(f"lowest_constraints: {req!r} has no '>=' lower bound in pyproject")
        pins.append(f"{match.group(1)}=={bound.group(1)}")
    return pins


def main(extras: list[str]) -> int:
    project = tomllib.loads(Path(__file__).parent.parent.joinpath("pyproject.toml").read_text())[
        "project"
    ]
    requirements = list(project.get("dependencies", []))
    for extra in extras or ["test"]:
        requirements += project["optional-dependencies"][extra]
    print("\n".join(sorted(set(lowest(requirements)))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
