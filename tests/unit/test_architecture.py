"""The app's layout as rules: parts depend only as the design says, no import cycles,
nothing of the host imported, modules small enough to read."""

import ast
from collections import defaultdict
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "messenger_realtime"

# Which parts each part may import (besides itself and the leaf modules exceptions and
# uuid7). The arrows of docs/architecture.md: outbox <- dispatch -> contracts, backplane;
# hub -> backplane, contracts, outbox (recovery reads the streams' entries);
# backplane -> contracts (the events it carries);
# contracts -> outbox (the enums); conf and ops depend on nothing above them.
ALLOWED: dict[str, set[str]] = {
    "conf": set(),
    "ops": set(),
    "outbox": {"conf", "ops"},
    "contracts": {"outbox", "conf", "ops"},
    "backplane": {"contracts", "conf", "ops"},
    "dispatch": {"outbox", "contracts", "backplane", "conf", "ops"},
    "hub": {"backplane", "contracts", "outbox", "conf", "ops"},
}
LEAVES = {"exceptions", "uuid7"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(APP.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module this file imports, at module level or inside functions."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def app_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in APP.rglob("*.py") if "migrations" not in p.parts}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        graph[name] |= {m for m in imports_of(path) if m in modules and m != name}
    return graph


def part(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_app_has_no_import_cycle() -> None:
    assert find_cycle(app_graph()) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("source", sorted(ALLOWED))
def test_each_part_imports_only_the_parts_the_design_allows(source: str) -> None:
    graph = app_graph()
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if part(module) == source
        for target in targets
        if part(target) not in ALLOWED[source] | LEAVES | {source}
        and not (part(target) == "models" and source in ("outbox", "dispatch"))
    )
    assert wrong == []


# Inside the hub, credentials are a leaf: every entry point (negotiate, the transports, a
# connection, the host's REST API) asks them, and they ask none of those back.
CREDENTIALS = "messenger_realtime.hub.credentials"
CREDENTIALS_MAY_IMPORT = ("messenger_realtime.hub.credentials", "messenger_realtime.hub.reads")


def test_credentials_import_nothing_of_the_hub_but_its_reads() -> None:
    graph = app_graph()
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module == CREDENTIALS or module.startswith(CREDENTIALS + ".")
        for target in targets
        if part(target) == "hub" and not target.startswith(CREDENTIALS_MAY_IMPORT)
    )
    assert graph[CREDENTIALS + ".tokens"], "the rule must see the credentials' modules"
    assert wrong == []


def test_nothing_in_the_app_imports_the_host() -> None:
    host = sorted(
        f"{module_name(p)} -> {m}"
        for p in APP.rglob("*.py")
        for m in imports_of(p)
        if m == "project" or m.startswith("project.")
    )
    assert host == []


def test_no_test_module_imports_another_test_module() -> None:
    tests = APP.parent / "tests"
    wrong = sorted(
        f"{path.relative_to(tests)} -> {module}"
        for path in tests.rglob("*.py")
        for module in imports_of_file(path)
        if module.rsplit(".", 1)[-1].startswith("test_") and module.startswith("tests.")
    )
    assert wrong == []


def imports_of_file(path: Path) -> set[str]:
    """Absolute modules a file imports from (tests use absolute imports only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found
