"""No import cycles inside gemmtune: the modules under src/gemmtune, read with `ast` (no import runs),
form a graph with no cycle.

Every import counts, wherever it stands: at module level, inside `if TYPE_CHECKING:`, inside a
function (an import moved into a function to dodge a cycle is still a cycle, only a later one), and
`importlib.import_module` with a literal name. `from . import name` imports the submodule `name`
when there is one, else the package. The implicit import of a parent package is not an edge.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "gemmtune"
ROOT = Path(__file__).resolve().parent.parent / "src" / PACKAGE


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the package (a package is its __init__.py)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = (PACKAGE, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _base(module: str, is_package: bool, level: int) -> str:
    """The package a relative import of `level` dots in `module` starts from."""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    return ".".join(parts[:len(parts) - (level - 1)])


def _join(*parts: str | None) -> str:
    return ".".join(p for p in parts if p)


def imported_names(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The gemmtune modules one file imports, anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _join(_base(module, is_package, node.level), node.module) if node.level else node.module
            for alias in node.names:
                found.add(_join(target, alias.name) if _join(target, alias.name) in modules else target)
        elif _is_import_module(node) and isinstance(node.args[0], ast.Constant):
            name = str(node.args[0].value)
            found.add(_join(_base(module, is_package, len(name) - len(name.lstrip("."))), name.lstrip("."))
                      if name.startswith(".") else name)
    return {_owning_module(name, modules) for name in found} - {None, module}


def _is_import_module(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and bool(node.args) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module")


def _owning_module(name: str, modules: set[str]) -> str | None:
    """`name` itself when it is a gemmtune module, else the longest gemmtune module prefix (None outside)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = module_files(root)
    names = set(files)
    return {module: imported_names(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py", names)
            for module, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(step) == 1:
                return path[path.index(step):] + [step]
            elif not state.get(step):
                state[step] = 1
                path.append(step)
                stack.append(iter(sorted(graph.get(step, ()))))
    return None


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "gemmtune.spec" in graph["gemmtune.build"]  # module level, relative
    assert "gemmtune.tune.db" in graph["gemmtune.export.config_source"]  # importlib.import_module("...")
    assert any("gemmtune.device" in targets for targets in graph.values())  # function level


def test_a_cycle_is_found_and_printed() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_relative_imports_resolve() -> None:
    names = {"gemmtune.kernels", "gemmtune.kernels.wgmma", "gemmtune.kernels.wgmma.config", "gemmtune.spec"}
    tree = ast.parse("from .config import X\nfrom ... import spec\nfrom .. import Family\n"
                     "def f():\n    import gemmtune.spec\n")
    assert imported_names(tree, "gemmtune.kernels.wgmma", True, names) == {
        "gemmtune.kernels.wgmma.config", "gemmtune.spec", "gemmtune.kernels"}


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
