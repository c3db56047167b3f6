"""SowKey generation: pinned values, determinism, unambiguity, validation."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import ConfigurationError, InvalidSowKeyError, MissingKeyError
from processor.keys import (
    FieldKeyGenerator,
    checksum_key,
    key_function,
    parse_path,
    partition_for,
    validate_user_key,
)
from processor.topology.model import KeyGeneratorSpec, SowTopic

# Pinned: these must never change between releases (stores and clients depend on them).
PINNED = [
    ("ORDERS", (1,), "3079173882856986590"),
    ("ORDERS", (2,), "17927390825128479335"),
]


@pytest.mark.parametrize(("domain", "values", "expected"), PINNED)
def test_generated_keys_are_pinned(domain: str, values: tuple[object, ...], expected: str) -> None:
    assert checksum_key(domain, values) == expected
    generator = FieldKeyGenerator(domain, ("/orderId",))
    assert generator({"orderId": values[0]}) == expected


def test_same_key_in_another_process() -> None:
    code = "from processor.keys import checksum_key; print(checksum_key('ORDERS', (1,)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == PINNED[0][2]


def test_value_and_its_text_give_one_key() -> None:
    generator = FieldKeyGenerator("T", ("/id",))
    assert generator({"id": 1}) == generator({"id": "1"})
    assert generator({"id": True}) == generator({"id": "true"})


def test_composite_and_nested_paths() -> None:
    generator = FieldKeyGenerator("ORDERS", ("/invoice", "/customer/id"))
    a = generator({"invoice": 1, "customer": {"id": "a"}})
    b = generator({"invoice": 1, "customer": {"id": "b"}})
    assert a != b
    assert a == checksum_key("ORDERS", (1, "a"))
    with pytest.raises(MissingKeyError, match="/customer/id"):
        generator({"invoice": 1})


def test_missing_or_null_key_field_is_an_error() -> None:
    generator = FieldKeyGenerator("ORDERS", ("/orderId",))
    with pytest.raises(MissingKeyError, match="/orderId"):
        generator({"price": 1})
    with pytest.raises(MissingKeyError):
        generator({"orderId": None})


@given(st.lists(st.text(), min_size=1, max_size=4), st.lists(st.text(), min_size=1, max_size=4))
def test_separator_is_unambiguous(a: list[str], b: list[str]) -> None:
    if a != b:
        assert checksum_key("D", tuple(a)) != checksum_key("D", tuple(b))


@given(st.one_of(st.integers(), st.text(), st.floats(allow_nan=False)))
def test_keys_are_stable_decimal_u64(value: object) -> None:
    key = checksum_key("D", (value,))
    assert key == checksum_key("D", (value,))
    assert key.isdigit()
    assert 0 <= int(key) < 2**64


def test_key_domain_shares_keys_across_topics() -> None:
    shipping = key_function(SowTopic("ShippingStatus", keys=("/orderId",), key_domain="orders"))
    open_orders = key_function(SowTopic("OpenOrders", keys=("/orderId",), key_domain="orders"))
    other = key_function(SowTopic("Other", keys=("/orderId",)))
    assert shipping
    assert open_orders
    assert other
    message = {"orderId": 42}
    assert shipping(message) == open_orders(message) != other(message)


def test_user_keys_must_be_base64() -> None:
    assert validate_user_key(b"YWJj+/==") == "YWJj+/=="
    for bad in (None, b"", "has space", "dash-ed", "\x00"):
        with pytest.raises(InvalidSowKeyError):
            validate_user_key(bad)


def custom_factory(topic: SowTopic, options: dict[str, object]) -> object:
    prefix = str(options.get("prefix", ""))
    return lambda message: f"{prefix}{message['a']}"


def test_custom_generator_by_dotted_path() -> None:
    topic = SowTopic(
        "T", key_generator=KeyGeneratorSpec("tests.unit.test_keys:custom_factory", {"prefix": "x"})
    )
    function = key_function(topic)
    assert function is not None
    assert function({"a": 1}) == "x1"
    with pytest.raises(ConfigurationError, match="cannot import"):
        key_function(SowTopic("T", key_generator=KeyGeneratorSpec("no.such.module:f")))


def test_paths_and_partitions() -> None:
    assert parse_path("/a/b") == ("a", "b")
    for bad in ("a", "/", "/a//b"):
        with pytest.raises(ValueError, match="field path"):
            parse_path(bad)
    assert all(0 <= partition_for(str(i).encode(), 3) < 3 for i in range(100))
