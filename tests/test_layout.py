"""The package's shape, checked from its source with `ast` (issues 14 and 31).

Every module stays under 400 lines, every function under 60 lines unless it
is a documented hot loop named in `LONG_FUNCTIONS`, the modules import each
other without a cycle, and no module imports one above its own layer: the
layer table of docs/DESIGN.md ("Package layout") is `LAYERS` here, and that
page's table is checked against it.  These are read from the files, not
imported, so a broken module still gets its shape checked.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "syncengine"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# Hot loops allowed to run long; each one's docstring says why it is not split.
LONG_FUNCTIONS = {"walk.listing.walk_listing"}

DESIGN = PACKAGE.parent / "docs" / "DESIGN.md"

# The layers, from the ground up (docs/DESIGN.md, "Package layout", lists the same
# rows).  A module may import modules of its own layer and of the layers below it,
# never one above, not even for typing or inside a function: a lower module that
# needs the root is missing a context the root should hand it.  A name is a package
# under syncengine/ (with everything below it) or a module at the package root;
# "syncengine" is the package's face (__init__.py).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__about__", "errors", "report", "progress", "notices", "patterns"),  # the ground floor
    ("fs",),
    ("crypt",),
    ("sqlite",),
    ("config",),
    ("durable",),
    ("local",),
    ("walk",),
    ("plan",),
    ("checkpoint",),
    ("restore",),
    ("ops",),
    ("engine",),  # the composition root
    ("daemon",),
    ("cli",),
    ("syncengine", "__main__"),
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(("syncengine", *parts))] = path
    return found


MODULES = _modules()


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _short(name: str) -> str:
    return name.removeprefix("syncengine").removeprefix(".")


def _functions(tree: ast.AST, prefix: str):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}.{node.name}"
            assert node.end_lineno is not None
            yield name, node, node.end_lineno - node.lineno + 1
            yield from _functions(node, name)
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}.{node.name}")


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _source(node: ast.ImportFrom, base: list[str]) -> str:
    """The module a ``from ... import`` reads from (`base`: the importer's package)."""
    if node.level:
        anchor = base[: len(base) - node.level + 1]
        return ".".join([*anchor, *([node.module] if node.module else [])])
    return node.module or ""


def _top_level_imports(module: str, path: Path) -> set[str]:
    """The syncengine modules `module` imports at import time."""
    is_package = path.name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]
    targets: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if not _is_type_checking(node):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody):
                    visit(block)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = _source(node, base)
                targets.add(source)
                for alias in node.names:
                    targets.add(f"{source}.{alias.name}")

    visit(_tree(path).body)
    return {target for target in targets if target in MODULES and target != module}


def _with_packages(module: str, targets: set[str]) -> set[str]:
    """`targets` and the packages importing them runs first (a.b.c runs a/__init__ and
    a/b/__init__), except `module`'s own packages: those are already being imported."""
    own = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    out = set(targets)
    for target in targets:
        parts = target.split(".")
        out.update(".".join(parts[:i]) for i in range(2, len(parts)))
    return out - own


def _import_graph() -> dict[str, set[str]]:
    return {
        module: _with_packages(module, _top_level_imports(module, path))
        for module, path in MODULES.items()
    }


def _all_imports(module: str, path: Path) -> set[str]:
    """Every syncengine module `module` imports: at the top, inside functions, and for
    typing alike."""
    is_package = path.name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _source(node, base)
            names = {f"{source}.{alias.name}" for alias in node.names}
            modules = names & MODULES.keys()
            targets |= modules if modules == names else {source, *modules}
    return {target for target in targets if target in MODULES and target != module}


def _layer(module: str) -> int:
    """The row of `LAYERS` that holds `module`."""
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else parts[0]
    for row, names in enumerate(LAYERS):
        if name in names:
            return row
    raise AssertionError(f"{module} is in no row of LAYERS: place it in the layer table")


def _back_up(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """The imports that run back up the layers: importer -> the modules above it."""
    found = {
        module: sorted(t for t in targets if _layer(t) > _layer(module))
        for module, targets in graph.items()
    }
    return {module: targets for module, targets in found.items() if targets}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if target == node or state.get(target) == 2:
                continue
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            found = visit(target)
            if found:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_modules_are_at_most_400_lines() -> None:
    long = {
        _short(module): lines
        for module, path in MODULES.items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_functions_are_at_most_60_lines_unless_a_documented_hot_loop() -> None:
    long = {}
    seen = set()
    for module, path in MODULES.items():
        for name, node, lines in _functions(_tree(path), _short(module)):
            if name in LONG_FUNCTIONS:
                seen.add(name)
                assert ast.get_docstring(node), f"{name} is allowed to be long: say why"
            elif lines > MAX_FUNCTION_LINES:
                long[name] = lines
    assert long == {}
    assert seen == LONG_FUNCTIONS, "an allowed long function no longer exists"


def test_no_import_cycle() -> None:
    cycle = _cycle(_import_graph())
    assert cycle is None, " -> ".join(_short(m) for m in cycle or [])


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def test_no_import_runs_up_a_layer() -> None:
    graph = {
        module: _with_packages(module, _all_imports(module, p)) for module, p in MODULES.items()
    }
    offenders = {
        _short(module) or "syncengine": [_short(t) for t in targets]
        for module, targets in _back_up(graph).items()
    }
    assert offenders == {}


def test_the_layer_finder_finds_an_import_running_up() -> None:
    # Guard the layer test itself: a graph with one arrow back up is caught.
    graph = {
        "syncengine.local.index": {"syncengine.fs.savefile"},
        "syncengine.walk.missing": {"syncengine.local.index", "syncengine.checkpoint.sqlite"},
    }
    assert _back_up(graph) == {"syncengine.walk.missing": ["syncengine.checkpoint.sqlite"]}
    with pytest.raises(AssertionError, match="no row of LAYERS"):
        _layer("syncengine.nowhere")


def test_design_doc_lists_the_layers_of_the_test() -> None:
    """The "Package layout" table of docs/DESIGN.md has one row per layer, in this
    order, each naming the packages and root modules of that layer."""
    text = DESIGN.read_text(encoding="utf-8").split("## Package layout", 1)[1]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    named = [
        tuple(
            "syncengine" if name == "__init__" else name
            for name in re.findall(r"`(?:syncengine/)?([a-z_]+)(?:/|\.py)?`", row.split("|")[1])
        )
        for row in rows
    ]
    assert named == list(LAYERS)


def test_the_import_graph_sees_imports() -> None:
    # Guard the walker itself: a graph with no edges would pass the cycle test.
    graph = _import_graph()
    assert "syncengine.errors" in graph["syncengine.config"]
    assert sum(len(targets) for targets in graph.values()) > 100


def test_the_cycle_finder_finds_a_cycle() -> None:
    # Guard the cycle test itself: today's package has none, so show it can see one.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# The composition root (issue 31): only these know the `Engine`.  engine.py is it;
# the package faces re-export it on first use; the CLI and the daemon are its callers.
# Everything else, the root's own parts included (context, durableroot, rootlease,
# adapterstates, passes), is handed a `Context` and callbacks instead.
ENGINE_MODULE = "syncengine.engine.engine"
KNOWS_THE_ENGINE = (
    "syncengine",
    "syncengine.engine",
    ENGINE_MODULE,
    "syncengine.cli",
    "syncengine.daemon",
)


def _imports_the_engine(module: str, tree: ast.Module) -> list[int]:
    """The lines where `module` imports engine.py or the name `Engine`: at the top,
    inside a function or for typing alike."""
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hit = any(alias.name == ENGINE_MODULE for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _source(node, base)
            names = {alias.name for alias in node.names}
            hit = source == ENGINE_MODULE or (
                source in ("syncengine", "syncengine.engine") and bool(names & {"Engine", "engine"})
            )
        else:
            hit = isinstance(node, ast.Constant) and node.value == ENGINE_MODULE
        if hit:
            lines.append(getattr(node, "lineno", 0))
    return lines


def _engine_importers(trees: dict[str, ast.Module]) -> dict[str, list[int]]:
    """Modules outside `KNOWS_THE_ENGINE` that import it: module -> lines."""
    found = {}
    for module, tree in trees.items():
        if module in KNOWS_THE_ENGINE or module.startswith(
            ("syncengine.cli.", "syncengine.daemon.")
        ):
            continue
        if lines := _imports_the_engine(module, tree):
            found[_short(module)] = lines
    return found


def test_only_the_root_and_its_callers_import_the_engine() -> None:
    trees = {module: _tree(path) for module, path in MODULES.items()}
    assert _engine_importers(trees) == {}


def test_the_engine_finder_finds_an_import_of_the_engine() -> None:
    # Guard the rule itself: a part of the root importing the Engine for typing is caught,
    # and so is ops/ importing engine.py inside a function.
    typing_only = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from syncengine.engine import Engine\n"
    )
    inside = "def f():\n    from syncengine.engine.engine import Engine\n"
    trees = {
        "syncengine.engine.passes": ast.parse(typing_only),
        "syncengine.ops.gc": ast.parse(inside),
        "syncengine.cli.commands": ast.parse(inside),
    }
    assert _engine_importers(trees) == {"engine.passes": [3], "ops.gc": [2]}
