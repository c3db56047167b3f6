"""The public Python API (``import processor``, docs/client.md) stays what users build on.

Every name of ``processor.__all__`` must import from the top level, with a docstring and
typed signatures, and the names with their signatures must equal the record kept in
``tests/data/public_api.txt``: removing a name, renaming a parameter or moving a class so
that the top level loses it fails here. A deliberate change of the API rewrites the record:

    python tests/unit/test_public_api.py
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import processor

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "data" / "public_api.txt"
#: The user-facing pages whose Python examples must use only the public API.
PAGES = [
    ROOT / "README.md",
    *(ROOT / "docs" / f for f in ("client.md", "security.md", "subscriptions.md")),
]


#: Classes the package builds and hands out, never built by users: their constructors are
#: not part of the API.
HANDED_OUT = {
    "Application",
    "BookmarkSubscription",
    "QueueStream",
    "SubscriptionSession",
    "SubscriptionStream",
    "BookmarkStore",  # a Protocol: a store of your own implements its methods
}


def _public_members(cls: type) -> Iterator[tuple[str, Any]]:
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_") and (name != "__init__" or cls.__name__ in HANDED_OUT):
            continue
        function = member.__func__ if isinstance(member, staticmethod | classmethod) else member
        if inspect.isfunction(function) or isinstance(function, property):
            yield name, function


def _signature(function: Any) -> str:
    return str(inspect.signature(function))


def describe() -> list[str]:
    """One line per public name, and per public method or property of a public class."""
    lines = []
    for name in sorted(n for n in processor.__all__ if n != "__version__"):
        value = getattr(processor, name)
        if inspect.isclass(value):
            bases = ", ".join(b.__name__ for b in value.__bases__)
            lines.append(f"class {name}({bases})")
            for member_name, member in _public_members(value):
                if isinstance(member, property):
                    lines.append(f"    {name}.{member_name}: property")
                else:
                    lines.append(f"    {name}.{member_name}{_signature(member)}")
        else:
            lines.append(f"def {name}{_signature(value)}")
    return lines


def test_every_public_name_imports_from_the_top_level() -> None:
    for name in processor.__all__:
        assert getattr(processor, name) is not None, name
    namespace: dict[str, Any] = {}
    exec("from processor import *", namespace)
    assert set(processor.__all__) <= namespace.keys()


def test_an_unknown_name_says_where_the_public_names_are() -> None:
    with pytest.raises(AttributeError, match=r"processor\.__all__"):
        processor.NotAName  # noqa: B018


def test_all_lists_every_name_the_package_loads() -> None:
    assert sorted(processor.__all__) == sorted(["__version__", *processor._HOMES])


def test_the_public_names_and_signatures_equal_the_record() -> None:
    recorded = RECORD.read_text().splitlines()
    now = describe()
    assert now == recorded, (
        "the public API changed (tests/data/public_api.txt); if that is deliberate, say so "
        "in docs/client.md and run: python tests/unit/test_public_api.py"
    )


def test_every_public_name_has_a_docstring_and_typed_signatures() -> None:
    missing = []
    for name in processor.__all__:
        value = getattr(processor, name)
        if name == "__version__":
            continue
        if not inspect.getdoc(value):
            missing.append(f"{name}: no docstring")
        functions = [(name, value)] if inspect.isfunction(value) else []
        if inspect.isclass(value):
            functions = [
                (f"{name}.{member_name}", member)
                for member_name, member in _public_members(value)
                if not isinstance(member, property) and value.__module__.startswith("processor")
            ]
        for where, function in functions:
            if function.__qualname__.split(".")[0] not in (name, function.__name__):
                continue  # inherited from a base class outside the public names' own code
            signature = inspect.signature(function)
            for parameter in signature.parameters.values():
                if (
                    parameter.name not in ("self", "cls")
                    and parameter.annotation is parameter.empty
                ):
                    missing.append(f"{where}: parameter {parameter.name} has no type")
            if signature.return_annotation is signature.empty:
                missing.append(f"{where}: no return type")
    assert missing == []


def test_importing_the_package_loads_no_client_until_a_name_is_used() -> None:
    code = (
        "import sys, processor\n"
        "assert 'grpc' not in sys.modules, 'import processor loaded grpc'\n"
        "processor.SowClient\n"
        "assert 'grpc' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _python_blocks(page: Path) -> Iterator[tuple[int, str]]:
    text = page.read_text()
    for match in re.finditer(r"```python\n(.*?)```", text, re.S):
        yield text.count("\n", 0, match.start()) + 2, match.group(1)


def test_the_readme_and_the_client_page_use_only_the_public_api() -> None:
    found = []
    blocks = 0
    for page in PAGES:
        for line, block in _python_blocks(page):
            blocks += 1
            tree = ast.parse(block)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "processor."
                ):
                    found.append(f"{page.name}:{line + node.lineno - 1}: from {node.module}")
                if isinstance(node, ast.Import):
                    found.extend(
                        f"{page.name}:{line + node.lineno - 1}: import {a.name}"
                        for a in node.names
                        if a.name.startswith("processor.")
                    )
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and _dotted(node).startswith("processor."):
                    head = _dotted(node).split(".")[1]
                    if head not in processor.__all__:
                        found.append(f"{page.name}:{line + node.lineno - 1}: processor.{head}")
    assert blocks >= 3, "the pages lost their examples"
    assert found == [], "use `import processor` / `from processor import ...` in the docs"


def test_the_client_page_testing_example_runs(tmp_path: Path, monkeypatch: Any) -> None:
    """The "Testing without a broker" example of docs/client.md, run as written (the
    real processor, replica and gRPC service on the memory log)."""
    page = ROOT / "docs" / "client.md"
    (example,) = [block for _, block in _python_blocks(page) if "start_memory" in block]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    exec(compile(example, f"{page}:testing-example", "exec"), {})


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


if __name__ == "__main__":
    RECORD.write_text("\n".join(describe()) + "\n")
    print(f"wrote {RECORD.relative_to(ROOT)} ({len(describe())} lines)")
