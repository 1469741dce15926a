"""The package's house plan, drawn from its own imports: no import cycle between modules, and its
rooms (each top-level folder or module of ``kafka_batch_provider``) stacked in at most ten floors,
each room importing only rooms below it (docs/code.md is the map).

Every import counts, also one inside a function (it still ties the two modules together), except
one under ``if TYPE_CHECKING:``; an import of a package counts as one of its ``__init__``.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = "kafka_batch_provider"
ROOT = Path(__file__).resolve().parents[2] / "provider" / PACKAGE
MAX_FLOORS = 10


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def imported(name: str, path: Path) -> set[str]:
    """The package's modules ``name`` imports (a name imported from a module is that module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {  # imports under ``if TYPE_CHECKING:`` never run
        id(inner)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
        for inner in ast.walk(block)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # kafka_batch_provider.core.plan.Plan -> ...core.plan
                target = target.rpartition(".")[0]
            if target.startswith(PACKAGE) and target != name:
                found.add(target)
    return found


GRAPH = {name: imported(name, path) for name, path in MODULES.items()}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_imports_were_read():
    assert len(MODULES) > 100 and sum(map(len, GRAPH.values())) > 300, (
        f"expected the package's modules and imports, found {len(MODULES)} modules"
    )


def test_no_import_cycle_between_modules():
    try:
        tuple(TopologicalSorter(GRAPH).static_order())
    except CycleError as cycle:
        raise AssertionError(f"expected no import cycle, found {' -> '.join(cycle.args[1])}") from None


def test_rooms_stack_in_at_most_ten_floors_with_no_import_back_up():
    rooms: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        rooms.setdefault(room(module), set()).update(room(t) for t in targets if room(t) != room(module))
    try:
        order = tuple(TopologicalSorter(rooms).static_order())
    except CycleError as cycle:
        raise AssertionError(f"expected rooms to import only rooms below, found a circle {cycle.args[1]}") from None
    floor: dict[str, int] = {}
    for name in order:  # each room one floor above the highest room it imports
        floor[name] = 1 + max((floor[r] for r in rooms[name]), default=0)
    top = max(floor.values())
    assert top <= MAX_FLOORS, f"expected at most {MAX_FLOORS} floors, found {top}: " + ", ".join(
        f"{name} {n}" for name, n in sorted(floor.items(), key=lambda item: -item[1])[:5]
    )


def test_no_module_outside_output_branches_on_an_output_format():
    # What makes a format itself lives in its own module (output/kinds/): a `format == "delta"` test
    # elsewhere is a second place to change when an output is added.
    names = {"parquet", "delta", "iceberg", "postgres"}

    def a_format(node: ast.AST) -> bool:
        text = ast.unparse(node)
        return text in ("format", "output_format") or text.endswith((".format", ".output_format"))

    def a_format_name(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, ast.Name):
            return node.id.lower() in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(a_format_name(e) for e in node.elts)
        return False

    found = []
    for name, path in sorted(MODULES.items()):
        if name.startswith(f"{PACKAGE}.output."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(a_format(o) for o in operands) and any(a_format_name(o) for o in operands):
                    found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "branches on an output format outside output/ (ask output.kinds.kind_of):\n" + "\n".join(found)
