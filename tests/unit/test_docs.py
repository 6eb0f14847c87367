"""The environment variables the docs name are the ones the code reads, and the files,
modules, classes and functions they name exist: in the Markdown, and in the docstrings
and comments of the app's, the host's and bench's Python files."""

import ast
import importlib.util
import io
import re
import tokenize
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
NOT_CODE_PATTERN = re.compile(r"messenger_realtime\.(?:[EW]\d+|E0xx|\d{4})")
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


# -- the code the docstrings and comments name exists --------------------------------

# The Python files whose docstrings and comments are read, and the modules they may name
# by their last part (`store.claim_fair`, `hub/fanout.py`): the app's, the host's, bench's.
PROSE_ROOTS = ("messenger_realtime", "project", "bench")
URL = re.compile(r"\w+://\S+")
PY_FILE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.py)\b")
REFERENCE = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
CONSTANT = re.compile(r"[A-Z][A-Z0-9_]+")
CLASS = re.compile(r"[A-Z][a-z]\w*")
# Dotted words in comments that name something other than our code.
NOT_OURS = {
    "chat.id": "a payload field",
    "media.roomName": "a payload field",
    "hub.send_overflow": "a message type the hub's server sends",
    "websocket.connect": "an ASGI message type",
    "http.disconnect": "an ASGI message type",
    "Message.objects.create": "Django's manager of the host's model",
}
# Django's check ids (`security.W009`) and the tables of the `messenger` schema.
NOT_OURS_PATTERN = re.compile(r"\w+\.[EW]\d{3}|messenger\.(?:realtime_\w+|messages)(?:\.\w+)?")


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every docstring line and comment of a Python file."""
    source = path.read_text()
    lines: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                start = node.body[0].lineno
                lines += [(start + i, text) for i, text in enumerate(doc.splitlines())]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            lines.append((token.start[0], token.string))
    return lines


def python_modules() -> dict[str, list[Path]]:
    """Each module's and package's last name -> its files (a package: its __init__.py)."""
    found: dict[str, list[Path]] = {}
    for root in PROSE_ROOTS:
        for path in (ROOT / root).rglob("*.py"):
            name = path.parent.name if path.name == "__init__.py" else path.stem
            found.setdefault(name, []).append(path)
    return found


def members(path: Path) -> dict[str, set[str]]:
    """Each class of a module -> what `Class.name` may name: its methods, class-level
    names and the attributes its methods set on `self`."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        names = found.setdefault(node.name, set())
        for item in ast.walk(node):
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(item.name)
            elif isinstance(item, ast.Name) and isinstance(item.ctx, ast.Store):
                names.add(item.id)
            elif isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                names.add(item.attr)
    return found


def resolves(path: Path, rest: list[str]) -> bool:
    """Whether `rest` names something in the module (or package) at `path`."""
    if path.name == "__init__.py" and rest:
        for candidate in (path.parent / f"{rest[0]}.py", path.parent / rest[0] / "__init__.py"):
            if candidate.is_file():
                return resolves(candidate, rest[1:])
    if not rest:
        return True
    classes = members(path)
    if rest[0] in defined_in(path) | (reexported(path) if path.name == "__init__.py" else set()):
        return len(rest) == 1 or rest[0] not in classes or rest[1] in classes[rest[0]]
    # `fanout.route`: a method named by its module, where one class holds it.
    return len(rest) == 1 and any(rest[0] in names for names in classes.values())


def reexported(path: Path) -> set[str]:
    """The names a package's __init__.py imports: its public face (`outbox.enqueue`)."""
    return {
        alias.asname or alias.name
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def is_importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def stale(token: str, modules: dict[str, list[Path]], classes: dict[str, set[str]]) -> bool:
    """Whether a dotted word names our code (a module, `module.name`, `Class.name`) that
    does not exist: a module of ours by its last name, any dotted path from the top, a
    class of ours, or `word.CONSTANT` (a constant of a module that is not there)."""
    head, *rest = token.split(".")
    if token in NOT_CODE or token in NOT_OURS:
        return False
    if NOT_CODE_PATTERN.fullmatch(token) or NOT_OURS_PATTERN.fullmatch(token):
        return False
    if head in PROSE_ROOTS:
        found = module_path(token)
        return found is None or (bool(found[1]) and not resolves(found[0], found[1].split(".")))
    if head in modules:
        return not any(resolves(path, rest) for path in modules[head])
    if CLASS.fullmatch(head) and head in classes:
        return rest[0] not in classes[head]
    if head.islower() and CONSTANT.fullmatch(rest[0]):
        return not is_importable(head)
    return False


def test_every_module_and_name_the_docstrings_and_comments_name_exists() -> None:
    files = repository_files()
    modules = python_modules()
    classes: dict[str, set[str]] = {}
    for paths in modules.values():
        for path in paths:
            for name, found in members(path).items():
                classes.setdefault(name, set()).update(found)
    missing = []
    for root in PROSE_ROOTS:
        for path in sorted((ROOT / root).rglob("*.py")):
            for number, line in prose(path):
                line = URL.sub("", line)
                where = f"{path.relative_to(ROOT)}:{number}"
                for name in PY_FILE.findall(line):
                    if not any(f == name or f.endswith("/" + name) for f in files):
                        missing.append(f"{where} {name}")
                line = FILE.sub("", line)
                for token in REFERENCE.findall(line):
                    if stale(token, modules, classes):
                        missing.append(f"{where} {token}")
    assert not missing, "\n".join(missing)
