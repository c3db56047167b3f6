"""The package's shape (docs/architecture.md): folders are the data flow, imports go one way.

Read statically from the source (every import, including those inside functions and under
``TYPE_CHECKING``), so a circle or an upward import fails here before it can bite at run time.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "processor"

#: The rooms of the package from the bottom of the data flow to the top. A module may import
#: from its own room and from rooms listed before it, never from one listed after it.
LAYERS: list[set[str]] = [
    {"errors", "progress", "config", "wire"},
    {"expr"},
    {"topology"},
    {"security"},
    {"keys", "messages"},
    {"changelog"},
    {"log", "state"},
    {"publish"},
    {"engine"},
    {"views", "queues", "actions", "upserts"},
    {"replica", "wiring"},
    {"query", "spark", "faust"},
    {"subscriptions"},
    {"requests"},
    {"observability"},
    {"server", "client", "http"},
    {"worker"},
    {"app"},
    {"cli", "testing"},
]
RANK = {room: rank for rank, rooms in enumerate(LAYERS) for room in rooms}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "wire" not in p.parts}


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of other processor modules (a name imported from a package
    counts as the submodule when there is one)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if not node.module.startswith("processor"):
                    continue
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    edges[name].add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                edges[name].update(a.name for a in node.names if a.name.startswith("processor."))
    return edges


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_room_has_a_place_in_the_flow() -> None:
    rooms = {_room(m) for m in _modules()} - {""}
    assert rooms - RANK.keys() == set(), "add the new folder to LAYERS and docs/architecture.md"


def test_imports_only_go_down_the_flow() -> None:
    modules = _modules()
    upward = sorted(
        f"{source} imports {target}"
        for source, targets in _imports(modules).items()
        for target in targets
        if target in modules
        and _room(source)
        and _room(target)
        and RANK[_room(target)] > RANK[_room(source)]
    )
    assert upward == []


def _cycles(edges: dict[str, set[str]], nodes: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, set()) & nodes)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, set()) & nodes))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle() -> None:
    modules = _modules()
    # A package's __init__ that re-exports its submodules is not a circle with them.
    edges = {
        source: {t for t in targets if not t.startswith(source + ".")}
        for source, targets in _imports(modules).items()
    }
    assert _cycles(edges, set(modules)) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges, {"a", "b", "c", "d"}) == [["a", "b", "c"]]


#: A module outside its room allowed one part of a foreign client: the Schema Registry's
#: HTTP client (confluent_kafka.schema_registry, not the Kafka client) for the codecs of
#: its wire format (docs/schema-registry.md).
_FOREIGN_EXCEPTIONS = {"processor.messages.registry": "confluent_kafka.schema_registry"}


@pytest.mark.parametrize(
    ("banned", "allowed"),
    [
        ("confluent_kafka", {"log"}),
        ("rocksdict", {"state"}),
        ("grpc", {"server", "client", "observability", "wire"}),
        ("faust", {"faust"}),
        ("aiokafka", {"faust"}),
    ],
)
def test_foreign_clients_stay_in_their_adapters(banned: str, allowed: set[str]) -> None:
    """Mirrors the ruff banned-api rule, per room (app and cli build the adapters)."""
    offenders = []
    for name, path in _modules().items():
        room = _room(name)
        if room in allowed | {"app", "cli"}:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(
                (n == banned or n.startswith(banned + "."))
                and not n.startswith(_FOREIGN_EXCEPTIONS.get(name, "\0"))
                for n in names
            ):
                offenders.append(name)
    assert offenders == []


def test_every_error_class_is_in_the_one_tree() -> None:
    """Every exception class of the package is defined in processor/errors.py, under
    SowError (foreign exceptions are translated at the adapters)."""
    outside = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            }
            if name != "processor.errors" and any(
                b.endswith(("Error", "Exception")) for b in bases
            ):
                outside.append(f"{name}.{node.name}")
    assert outside == []

    import inspect

    from processor import errors

    for _, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, BaseException) and cls.__module__ == errors.__name__:
            assert issubclass(cls, errors.SowError), cls


def _blind(handler: ast.ExceptHandler) -> bool:
    """Catches everything and does not simply re-raise it."""
    caught = handler.type
    broad = caught is None or (
        isinstance(caught, ast.Name) and caught.id in ("Exception", "BaseException")
    )
    reraises = any(isinstance(n, ast.Raise) and n.exc is None for n in handler.body)
    return broad and not reraises


def test_every_blind_except_says_why() -> None:
    """A handler that catches everything and does not re-raise has a comment (on its line
    or the next) giving the reason."""
    silent = []
    for name, path in _modules().items():
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ExceptHandler) and _blind(node):
                line = lines[node.lineno - 1]
                following = lines[node.lineno].strip() if node.lineno < len(lines) else ""
                if "#" not in line and not following.startswith("#"):
                    silent.append(f"{name}:{node.lineno}")
    assert silent == []


def test_no_module_is_over_500_lines() -> None:
    """Small modules (STYLE.md): split a module before it grows past 500 lines."""
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > 500
    }
    assert long == {}
