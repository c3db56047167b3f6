"""Entitlements (processor/security/entitlements.py): the file's checks, the union of a
principal's grants, deny by default, the filters of reads and writes, and reloads."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from processor.errors import ConfigurationError, NotEntitledError
from processor.expr import MessageContext
from processor.expr import compile as compile_expression
from processor.security import ALL_RIGHTS, Principal
from processor.security.entitlements import Definitions, Entitlements
from processor.security.reads import entitled, read_restriction
from processor.topology.model import SowTopic, Topology

DEFINITIONS = {
    "roles": {
        "fx": {
            "logon": True,
            "read": [{"topic": "orders", "filter": "/desk = 'FX'"}, {"topic": "prices.*"}],
            "write": [{"topic": "orders", "filter": "/desk = 'FX'"}],
        },
        "rates": {"logon": True, "read": [{"topic": "orders", "filter": "/desk = 'RATES'"}]},
        "queue-workers": {"logon": True, "read": ["work"], "acknowledge": ["work"]},
    },
    "principals": {
        "auditor": {"logon": True, "read": [{"topic": ".*"}]},
        "carol": {"roles": ["fx"]},
        "mute": {"read": [{"topic": ".*"}]},
    },
}


def _reads(rights: Any, topic: str) -> bool:
    """Whether ``rights`` may read ``topic`` (its read filter, else NotEntitledError)."""
    try:
        rights.read_filter(topic)
    except NotEntitledError:
        return False
    return True


def definitions(data: object = None) -> Definitions:
    return Definitions.parse(DEFINITIONS if data is None else data, "entitlements.yaml")


def test_a_principal_without_an_entry_or_a_role_may_do_nothing() -> None:
    rights = definitions().rights_for(Principal("stranger"))
    with pytest.raises(NotEntitledError, match="may not log on"):
        rights.check_logon()
    with pytest.raises(NotEntitledError, match="not entitled to read 'orders'"):
        rights.read_filter("orders")
    with pytest.raises(NotEntitledError, match="not entitled to write 'orders'"):
        rights.write_filter("orders")
    with pytest.raises(NotEntitledError, match="acknowledge"):
        rights.check_acknowledge("work")


def test_logon_is_a_right_of_its_own() -> None:
    rights = definitions().rights_for(Principal("mute"))
    assert rights.read_filter("orders") is None
    with pytest.raises(NotEntitledError, match="logon: true"):
        rights.check_logon()


def test_roles_come_from_the_principal_and_from_its_entry() -> None:
    by_token = definitions().rights_for(Principal("dave", frozenset({"fx"})))
    by_entry = definitions().rights_for(Principal("carol"))
    for rights in (by_token, by_entry):
        rights.check_logon()
        assert rights.read_filter("orders") == "/desk = 'FX'"
        assert rights.read_filter("prices.eur") is None
        assert rights.write_filter("orders") == "/desk = 'FX'"
        assert not _reads(rights, "trades")


def test_grants_of_several_roles_add_up_and_an_unfiltered_grant_wins() -> None:
    both = definitions().rights_for(Principal("erin", frozenset({"fx", "rates"})))
    assert both.read_filter("orders") == "(/desk = 'FX') OR (/desk = 'RATES')"
    everything = definitions().rights_for(Principal("auditor", frozenset({"fx"})))
    assert everything.read_filter("orders") is None


def test_a_topic_pattern_matches_the_whole_name() -> None:
    rights = definitions().rights_for(Principal("dave", frozenset({"fx"})))
    assert not _reads(rights, "orders-archive")  # "orders" is the topic orders only
    assert _reads(rights, "prices")
    assert _reads(rights, "prices.usd")


def test_a_read_over_a_pattern_keeps_each_record_to_its_own_topics_grants() -> None:
    rights = definitions().rights_for(Principal("dave", frozenset({"fx"})))
    expression = compile_expression(rights.pattern_read_filter() or "")

    def sees(topic: str, message: dict[str, object]) -> bool:
        return expression.matches(message, MessageContext(topic=topic))

    assert sees("orders", {"desk": "FX"})
    assert not sees("orders", {"desk": "RATES"})
    assert sees("prices.gbp", {"desk": "RATES"})
    assert not sees("trades", {"desk": "FX"})
    assert not sees("orders-archive", {"desk": "FX"})


def test_read_restriction_refuses_a_literal_topic_and_filters_a_pattern() -> None:
    topology = Topology(
        {
            name: SowTopic(name=name, kafka_topic=name, keys=("/id",))
            for name in ("orders", "trades", "prices.eur")
        }
    )
    rights = definitions().rights_for(Principal("dave", frozenset({"fx"})))
    assert read_restriction(rights, topology, "orders") == "/desk = 'FX'"
    assert read_restriction(rights, topology, "prices.eur") is None
    with pytest.raises(NotEntitledError, match="'trades'"):
        read_restriction(rights, topology, "trades")
    assert "TOPIC_NAME()" in (read_restriction(rights, topology, "^(orders|trades)$") or "")
    assert read_restriction(ALL_RIGHTS, topology, "trades") is None
    assert entitled("/qty > 1", "/desk = 'FX'") == "(/qty > 1) AND (/desk = 'FX')"
    assert entitled("", "/desk = 'FX'") == "/desk = 'FX'"
    assert entitled("/qty > 1", None) == "/qty > 1"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"roles": {"r": {"reed": []}}}, r"roles\.r: unknown keys \['reed'\]"),
        ({"roles": {"r": {"read": [{"topic": "("}]}}}, r"roles\.r\.read\[0\]: topic '\('"),
        (
            {"roles": {"r": {"read": [{"topic": "a", "filter": "/x = "}]}}},
            r"roles\.r\.read\[0\]: filter '/x = ' is invalid",
        ),
        ({"principals": {"p": {"roles": ["ghost"]}}}, r"unknown roles \['ghost'\]"),
        ({"users": {}}, r"unknown sections \['users'\]"),
        ({"roles": {"r": {"write": "orders"}}}, r"roles\.r\.write: expected a list"),
    ],
)
def test_a_wrong_file_is_refused_naming_the_entry(data: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        definitions(data)


def _write(path: Path, data: object) -> None:
    path.write_text(yaml.safe_dump(data))
    # A later write within the same clock tick must still look changed.
    stamp = time.time_ns() + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def test_a_changed_file_is_reloaded_and_a_broken_one_keeps_what_is_in_force(
    tmp_path: Path,
) -> None:
    path = tmp_path / "entitlements.yaml"
    _write(path, DEFINITIONS)
    entitlements = Entitlements.load(path)
    reloads: list[int] = []
    entitlements.on_reload(lambda: reloads.append(entitlements.generation))
    dave = Principal("dave", frozenset({"fx"}))
    assert entitlements.rights_for(dave).read_filter("orders") == "/desk = 'FX'"
    assert not entitlements.reload()  # unchanged: nothing to do

    narrower = {"roles": {"fx": {"logon": True, "read": [{"topic": "prices.*"}]}}}
    _write(path, narrower)
    assert entitlements.reload()
    assert reloads == [2]
    assert not _reads(entitlements.rights_for(dave), "orders")

    path.write_text("roles: [not, a, mapping")
    os.utime(path, ns=(time.time_ns() + 3_000_000_000,) * 2)
    assert not entitlements.reload()
    assert entitlements.generation == 2
    assert _reads(entitlements.rights_for(dave), "prices.eur")


def test_the_watcher_reloads_without_being_asked(tmp_path: Path) -> None:
    path = tmp_path / "entitlements.yaml"
    _write(path, DEFINITIONS)
    entitlements = Entitlements.load(path)
    entitlements.watch(interval_s=0.05)
    try:
        _write(path, {"principals": {"dave": {"logon": False}}})
        deadline = time.monotonic() + 5
        while entitlements.generation == 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert entitlements.generation == 2
    finally:
        entitlements.close()
