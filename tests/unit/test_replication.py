"""Replication of every topic the product creates (issue 33, point 2): the copies chosen
from the cluster's size (processor/log/replication.py), the settings that pin them, the
embedded cluster's refusal on Tansu, and acks=all with idempotence for every producer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from processor.config import Settings
from processor.errors import ConfigurationError
from processor.log.broker import start_broker
from processor.log.kafka.settings import producer_settings
from processor.log.replication import Replication

PACKAGE = Path(__file__).resolve().parents[2] / "processor"


@pytest.mark.parametrize(
    ("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (4, (3, 2)), (5, (3, 2))]
)
def test_unset_the_copies_follow_the_cluster_up_to_three(
    brokers: int, expected: tuple[int, int]
) -> None:
    assert Replication().resolve(brokers) == expected


@pytest.mark.parametrize(
    ("replication", "brokers", "expected"),
    [
        (Replication(1), 3, (1, 1)),
        (Replication(2), 3, (2, 1)),
        (Replication(3), 3, (3, 2)),
        (Replication(5), 5, (5, 2)),
        (Replication(3, 3), 5, (3, 3)),
        (Replication(3, 1), 3, (3, 1)),
        (Replication(min_insync=1), 3, (3, 1)),
        (Replication(min_insync=2), 2, (2, 2)),
    ],
)
def test_explicit_values_win(
    replication: Replication, brokers: int, expected: tuple[int, int]
) -> None:
    assert replication.resolve(brokers) == expected


@pytest.mark.parametrize(
    ("replication", "brokers", "said"),
    [
        (
            Replication(3),
            2,
            "the replication factor is 3 but the cluster has 2 brokers: set "
            "SOW_REPLICATION_FACTOR to at most 2, or add brokers",
        ),
        (
            Replication(2),
            1,
            "the replication factor is 2 but the cluster has 1 broker: set "
            "SOW_REPLICATION_FACTOR to at most 1, or add brokers",
        ),
        (
            Replication(2, 3),
            3,
            "min in-sync replicas (3) exceed the replication factor (2): no write could ever "
            "succeed; set SOW_MIN_INSYNC_REPLICAS to at most 2",
        ),
        (  # the factor left to a single broker: one copy, which two in sync cannot be
            Replication(min_insync=2),
            1,
            "min in-sync replicas (2) exceed the replication factor (1)",
        ),
    ],
)
def test_what_no_cluster_could_give_is_refused_saying_what_to_set(
    replication: Replication, brokers: int, said: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        replication.resolve(brokers)
    assert said in str(refused.value)


def test_the_settings_read_the_replication_variables() -> None:
    unset = Settings.from_env({})
    assert (unset.embedded_brokers, unset.replication_factor, unset.min_insync_replicas) == (
        1,
        None,
        None,
    )
    given = Settings.from_env(
        {
            "SOW_EMBEDDED_BROKERS": "3",
            "SOW_REPLICATION_FACTOR": " 2 ",
            "SOW_MIN_INSYNC_REPLICAS": "1",
        }
    )
    assert (given.embedded_brokers, given.replication_factor, given.min_insync_replicas) == (
        3,
        2,
        1,
    )
    # A child process (the processor of sow serve) gets them back from its environment.
    assert Settings.from_env(given.environment()) == given
    assert "SOW_REPLICATION_FACTOR" not in unset.environment()  # unset stays unset


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("SOW_EMBEDDED_BROKERS", "0", "between 1 and 5 brokers"),
        ("SOW_EMBEDDED_BROKERS", "6", "between 1 and 5 brokers"),
        ("SOW_EMBEDDED_BROKERS", "three", "a whole number of brokers"),
        ("SOW_REPLICATION_FACTOR", "0", "between 1 and 32 replicas"),
        ("SOW_REPLICATION_FACTOR", "33", "between 1 and 32 replicas"),
        ("SOW_REPLICATION_FACTOR", "2.5", "a whole number of replicas"),
        ("SOW_MIN_INSYNC_REPLICAS", "0", "between 1 and 32 replicas"),
        ("SOW_MIN_INSYNC_REPLICAS", "-1", "between 1 and 32 replicas"),
    ],
)
def test_the_replication_variables_keep_their_bounds(variable: str, value: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match=said) as refused:
        Settings.from_env({variable: value})
    assert repr(value) in str(refused.value)


def test_an_embedded_tansu_cluster_is_refused_naming_what_to_do() -> None:
    """Tansu runs one node: three embedded brokers need the embedded Apache Kafka, and no
    broker is started to find that out."""
    with pytest.raises(ConfigurationError) as refused:
        start_broker(embedded="tansu", nodes=3)
    said = str(refused.value)
    assert "Tansu broker runs one node" in said
    assert "SOW_EMBEDDED_BROKER=kafka" in said
    assert "Java 17+" in said


def test_producer_settings_are_idempotent_with_acks_all() -> None:
    settings = producer_settings("127.0.0.1:9092", **{"client.id": "x", "linger.ms": 1})
    assert settings["enable.idempotence"] is True
    assert settings["acks"] == "all"


def _producer_calls(tree: ast.Module) -> list[tuple[ast.Call, ast.AST]]:
    """Every ``Producer(...)`` call and the function (or module) it is made in."""
    calls: list[tuple[ast.Call, ast.AST]] = []

    def visit(node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else scope
            if isinstance(child, ast.Call):
                func = child.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name == "Producer":
                    calls.append((child, scope))
            visit(child, inner)

    visit(tree, tree)
    return calls


def _is_producer_settings(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "producer_settings"
    )


def _made_by_producer_settings(argument: ast.AST, scope: ast.AST) -> bool:
    """``argument`` is ``producer_settings(...)``, or a name every assignment of which in
    ``scope`` is ``producer_settings(...)``."""
    if _is_producer_settings(argument):
        return True
    if not isinstance(argument, ast.Name):
        return False
    values = [
        node.value
        for node in ast.walk(scope)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == argument.id for t in node.targets)
    ]
    return bool(values) and all(_is_producer_settings(value) for value in values)


def test_every_producer_gets_its_settings_from_producer_settings() -> None:
    """No producer can be made without acks=all and idempotence: each ``Producer(`` in
    processor/ is given ``producer_settings(...)``'s map (directly, or through a variable
    assigned only from it), no other producer class is imported, and no module but the
    one that defines them names ``acks`` or ``enable.idempotence`` (so no ``extra`` sets
    them otherwise)."""
    made: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text, str(path))
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("confluent_kafka", "aiokafka", "kafka")
            ):
                for alias in node.names:
                    if "Producer" in alias.name:
                        only = "only confluent_kafka.Producer, built from producer_settings"
                        assert alias.name == "Producer", f"{where}: imports {alias.name}: {only}"
                        assert alias.asname is None, f"{where}: renames Producer: {only}"
        for call, scope in _producer_calls(tree):
            assert call.args, f"{where}:{call.lineno}: Producer() without settings"
            assert not call.keywords, f"{where}:{call.lineno}: Producer(..., keywords)"
            argument = call.args[0]
            assert _made_by_producer_settings(argument, scope), (
                f"{where}:{call.lineno}: a Producer whose settings do not come from "
                "producer_settings (processor/log/kafka/settings.py), which makes it "
                "idempotent with acks=all"
            )
            made.append(f"{where}:{call.lineno}")
        if where != Path("processor/log/kafka/settings.py"):
            for literal in ('"acks"', "'acks'", "enable.idempotence"):
                assert literal not in text, f"{where} sets {literal} outside producer_settings"
    # the publisher, the processor's transactional producer, the static fence
    assert len(made) >= 3, made


@pytest.mark.parametrize(
    "properties",
    [{"enable.idempotence": "false"}, {"acks": "1"}, {"request.required.acks": "0"}],
)
def test_deployment_properties_cannot_weaken_the_producers_acks(
    properties: dict[str, str],
) -> None:
    from processor.log.kafka.settings import use_client_properties

    with pytest.raises(ConfigurationError, match="acks=all"):
        use_client_properties(properties)
    use_client_properties({"acks": "all", "enable.idempotence": "true"})
    use_client_properties({})
