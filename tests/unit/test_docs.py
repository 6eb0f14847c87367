"""The environment variables the docs name are the ones the code reads, and the files,
modules, classes and functions they name exist."""

import ast
import re
from pathlib import Path

from messenger_realtime.conf.settings import DEFAULTS, env_name
from tests.support.runtime import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SETTINGS = (ROOT / "project" / "settings.py").read_text()


def test_every_messenger_realtime_variable_in_the_docs_is_one_the_settings_read() -> None:
    known = {env_name(key) for key in DEFAULTS}
    named = {
        m for doc in DOCS for m in re.findall(r"\bMESSENGER_REALTIME_[A-Z_]+\b", doc.read_text())
    }
    assert named and named - {"MESSENGER_REALTIME_"} <= known


def test_every_deployment_variable_in_operations_is_read_by_the_project_settings() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    named = set(re.findall(r"`((?:DJANGO|DATABASE)_[A-Z_]+|DEMO_ENABLED)`", text))
    assert len(named) > 10
    assert {n for n in named if f'"{n}"' not in SETTINGS} == set()


def test_operations_names_the_metrics_port_by_the_variable_that_sets_it() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    assert "MESSENGER_REALTIME_METRICS_PORT" in text
    assert re.findall(r"(?<!MESSENGER_REALTIME_)\bMETRICS_PORT\b", text) == []


# -- the code the docs name exists ---------------------------------------------------

APP = ROOT / "messenger_realtime"
SKIPPED_DIRS = {".venv", "node_modules", ".git", "test-artifacts", ".mypy_cache"}
FILE = re.compile(r"[\w./-]+\.(?:py|js|mjs|md|sql|yaml|yml|toml|json|sh|png|conf|template)")
# `module.name` where module is one of the app's module files (`store.claim_fair`,
# `build_thread.Builder.build`), or a whole dotted path (`messenger_realtime.uuid7.uuid7`).
DOTTED = re.compile(r"([a-z_]\w*)\.([A-Za-z_][\w.]*)")
# Backticked names that look like code paths and are not: what they are instead.
NOT_CODE = {
    "settings.MESSENGER_REALTIME": "Django's setting (the dict)",
    "media.expiresAt": "a payload field",
    "realtime_outbox.enqueued": "the owner's span event",
    "messenger_realtime.dispatch.outcomes.dispatched": "a logger's name",
}
# System check ids (`messenger_realtime.E016`) and migrations (`messenger_realtime.0006`).
NOT_CODE_PATTERN = re.compile(r"messenger_realtime\.(?:E\d+|E0xx|\d{4})")
# Paths outside the repository (the spec beside it, the system's), or made at run time.
ELSEWHERE = ("shared/", "../", ".local/", "/")


def repository_files() -> list[str]:
    return [
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*")
        if p.is_file() and not SKIPPED_DIRS & set(p.relative_to(ROOT).parts)
    ]


def defined_in(path: Path) -> set[str]:
    """Top-level names of a module, and `Class.method` for its classes' methods."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        names.add(f"{node.name}.{item.name}")
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def module_path(dotted: str) -> tuple[Path, str] | None:
    """(module file, the rest) for the longest module prefix of a dotted path."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate, ".".join(parts[cut:])
    return None


def test_every_file_module_class_and_function_the_docs_name_exists() -> None:
    files = repository_files()
    modules: dict[str, list[Path]] = {}
    for path in APP.rglob("*.py"):
        modules.setdefault(path.stem, []).append(path)
    missing = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for token in re.findall(r"`([^`\s]+)`", line):
                token = re.sub(r"\(.*\)$", "", token.rstrip(",.;:"))  # a call's arguments
                where = f"{doc.relative_to(ROOT)}:{number} `{token}`"
                if token in NOT_CODE or token.startswith(ELSEWHERE):
                    continue
                if NOT_CODE_PATTERN.fullmatch(token):
                    continue
                if FILE.fullmatch(token):
                    if not any(f == token or f.endswith("/" + token) for f in files):
                        missing.append(where)
                    continue
                if token.startswith(("messenger_realtime.", "project.")):
                    found = module_path(token)
                    if found is None or (found[1] and found[1] not in defined_in(found[0])):
                        missing.append(where)
                    continue
                dotted = DOTTED.fullmatch(token)
                if dotted and dotted.group(1) in modules:
                    name = dotted.group(2)
                    if not any(name in defined_in(p) for p in modules[dotted.group(1)]):
                        missing.append(where)
    assert not missing, "\n".join(missing)


def test_the_readmes_client_snippet_is_verbatim_from_the_example_the_e2e_tests_run() -> None:
    """The README's JavaScript under "Connecting a client" is cut from
    docs/examples/client.mjs (a `// …` line marks a cut), so it cannot drift from the
    file tests/e2e/test_client_example.py runs against a served hub."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Connecting a client\n", 1)[1].split("\n## ", 1)[0]
    snippets = re.findall(r"```js\n(.*?)```", section, re.S)
    assert snippets, "no ```js block under Connecting a client"
    example = (ROOT / "docs" / "examples" / "client.mjs").read_text()
    at = 0
    for part in snippets[0].split("// …\n"):
        found = example.find(part, at)
        assert found >= 0, f"not in docs/examples/client.mjs (in this order):\n{part}"
        at = found + len(part)
