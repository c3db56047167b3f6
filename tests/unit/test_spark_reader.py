"""The Spark reader's pieces that need no JVM: options, latest state, Arrow batches,
push-down. (tests/integration/test_spark.py runs them in Spark against the broker.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark", reason="the spark extra is not installed")
from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNull
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
)

from processor.changelog import (
    POSITION_HEADER,
    PROGRESS_KEY,
    REASON_HEADER,
    RESET_KEY,
    Envelope,
    encode,
)
from processor.errors import ConfigurationError, CorruptRecordError
from processor.spark import pushdown
from processor.spark.batches import BatchBuilder
from processor.spark.options import parse_options
from processor.spark.scan import changelog_items, latest_state
from tests.unit.log_records import LogRecord

CHANGELOG = "ORDERS.sow-changelog"
BASE = {"bootstrap": "localhost:1", "topic": "ORDERS"}


def envelope(key: str, message: dict[str, Any], offset: int = 0) -> bytes:
    return encode(
        Envelope("ORDERS", "json", "ORDERS", 0, offset, key, json.dumps(message).encode(), 5, 6)
    )


# -- options ---------------------------------------------------------------------------


def test_options_name_what_is_wrong() -> None:
    with pytest.raises(ConfigurationError, match="option bootstrap is required"):
        parse_options({"topic": "ORDERS"})
    with pytest.raises(ConfigurationError, match="unknown option 'mdoe'"):
        parse_options({**BASE, "mdoe": "latest"})
    with pytest.raises(ConfigurationError, match="option mode='newest' is not one of"):
        parse_options({**BASE, "mode": "newest"})
    with pytest.raises(ConfigurationError, match="option filter="):
        parse_options({**BASE, "filter": "/a = = 1"})
    with pytest.raises(ConfigurationError, match="apply to the changelog"):
        parse_options({**BASE, "read": "input", "mode": "latest"})
    with pytest.raises(ConfigurationError, match=r"names changelog 'X\.sow-changelog'"):
        parse_options({**BASE, "as_of": '[["X.sow-changelog", 0, 3]]'})


def test_as_of_takes_times_and_position_vectors() -> None:
    at_time = parse_options({**BASE, "as_of": "2026-11-23T10:00:00Z"})
    assert at_time.as_of_ms == 1795428000000
    assert at_time.latest
    assert parse_options({**BASE, "as_of": "1795428000000"}).as_of_ms == 1795428000000
    vector = parse_options({**BASE, "as_of": f'[["{CHANGELOG}", 0, 3], ["{CHANGELOG}", 1, 9]]'})
    assert vector.as_of_positions == {0: 3, 1: 9}
    assert parse_options({**BASE, "as_of": "0:3,1:9"}).as_of_positions == {0: 3, 1: 9}
    history = parse_options({**BASE, "as_of": "0:3,1:9", "mode": "changelog"})
    assert not history.latest


# -- latest state ----------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 5)),
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("progress"), st.just(0)),
        st.tuples(st.just("reset"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_latest_state_applies_changes_like_the_replica(ops: list[tuple[str, int]]) -> None:
    records: list[LogRecord] = []
    model: dict[bytes, int] = {}
    committed: dict[bytes, int] = {}
    for offset, (op, key_number) in enumerate(ops):
        key = f"k{key_number}".encode()
        if op == "put":
            records.append(LogRecord(CHANGELOG, 0, offset, key, envelope(key.decode(), {})))
            model[key] = offset
        elif op == "delete":
            records.append(LogRecord(CHANGELOG, 0, offset, key, None))
            model.pop(key, None)
        elif op == "progress":
            records.append(LogRecord(CHANGELOG, 0, offset, PROGRESS_KEY, b'{"log":[]}'))
            committed = dict(model)
        else:
            records.append(LogRecord(CHANGELOG, 0, offset, RESET_KEY, None))
            model.clear()
            committed = {}
    closed = latest_state([records], closed=True)
    assert {k: r.offset() for k, r in closed.items()} == model
    cut = latest_state([records], closed=False)
    assert {k: r.offset() for k, r in cut.items()} == committed


# -- Arrow batches -----------------------------------------------------------------------

SCHEMA = StructType(
    [
        StructField("sow_key", StringType()),
        StructField("change", StringType()),
        StructField("log_offset", LongType()),
        StructField("offset", LongType()),
        StructField("qty", LongType()),
        StructField("_corrupt_record", StringType()),
    ]
)


def test_batches_carry_changes_deletes_and_corrupt_records() -> None:
    options = parse_options({**BASE, "bad_records": "column"})
    builder = BatchBuilder(options, SCHEMA)
    tombstone_headers = [(REASON_HEADER, b"expired"), (POSITION_HEADER, b"ORDERS/0/41")]
    records = [
        LogRecord(CHANGELOG, 0, 0, b"a", envelope("a", {"qty": 3}, offset=40)),
        LogRecord(CHANGELOG, 0, 1, b"a", None, tombstone_headers),
        LogRecord(CHANGELOG, 0, 2, b"b", b"\x02junk"),
        LogRecord(CHANGELOG, 0, 3, b"c", envelope("c", {"qty": "many"})),
        LogRecord(CHANGELOG, 0, 4, PROGRESS_KEY, b'{"log":[]}'),
    ]
    batch = builder.changelog_batch(changelog_items(records, builder)).to_pydict()
    assert batch["sow_key"] == ["a", "a", "b", "c"]
    assert batch["change"] == ["publish", "expire", None, "publish"]
    assert batch["log_offset"] == [40, 41, None, 0]
    assert batch["qty"] == [3, None, None, None]
    corrupt = batch["_corrupt_record"]
    assert corrupt[:2] == [None, None]
    assert "ORDERS.sow-changelog[0]@2: not an envelope" in corrupt[2]
    assert "message field qty='many' does not fit column type LongType()" in corrupt[3]


def test_a_corrupt_record_fails_the_read_by_default() -> None:
    builder = BatchBuilder(parse_options(BASE), SCHEMA[:5])
    records = [LogRecord(CHANGELOG, 1, 7, b"b", b"\x02junk")]
    with pytest.raises(CorruptRecordError, match=r"corrupt record ORDERS.sow-changelog\[1\]@7"):
        changelog_items(records, builder)


def test_filter_keeps_matching_publishes() -> None:
    builder = BatchBuilder(parse_options({**BASE, "filter": "/qty > 2"}), SCHEMA[:5])
    records = [
        LogRecord(CHANGELOG, 0, 0, b"a", envelope("a", {"qty": 3})),
        LogRecord(CHANGELOG, 0, 1, b"b", envelope("b", {"qty": 1})),
        LogRecord(CHANGELOG, 0, 2, b"a", None),
    ]
    batch = builder.changelog_batch(changelog_items(records, builder)).to_pydict()
    assert batch["sow_key"] == ["a"]


# -- push-down -----------------------------------------------------------------------------


def test_pushdown_prunes_partitions_and_preselects_with_amps() -> None:
    options = parse_options(BASE)
    schema = StructType([*SCHEMA.fields, StructField("partition", LongType())])
    filters = [
        In(("partition",), (0, 2)),
        EqualTo(("partition",), 2),
        GreaterThan(("qty",), 5),
        IsNull(("sow_key",)),
    ]
    pushed = pushdown.push(options, schema, filters)
    assert pushed.partitions == [2]
    assert pushed.options.filter == "/qty > 5"
    assert pushed.remaining == filters[2:]
    with_filter = pushdown.push(parse_options({**BASE, "filter": "/a = 1"}), schema, filters)
    assert with_filter.options.filter == "(/a = 1) AND /qty > 5"


def test_avro_messages_get_columns_from_their_schema(tmp_path: Any) -> None:
    from processor.messages.avro import AvroCodec
    from processor.spark.columns import avro_struct, infer_struct

    schema = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "orderId", "type": "long"},
            {"name": "region", "type": ["null", "string"]},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
    path = tmp_path / "order.avsc"
    path.write_text(json.dumps(schema))
    struct = avro_struct(str(path))
    assert struct.simpleString() == "struct<orderId:bigint,region:string,tags:array<string>>"
    options = parse_options({**BASE, "message_type": "avro", "avro_schema": str(path)})
    columns = StructType([SCHEMA["sow_key"], StructField("message_text", StringType())])
    builder = BatchBuilder(options, StructType([*columns.fields, *struct.fields]))
    data = AvroCodec(schema).encode_json({"orderId": 7, "region": "EU", "tags": ["a"]})
    record = encode(Envelope("ORDERS", "avro", "ORDERS", 0, 0, "k", data, 5, 6))
    items = changelog_items([LogRecord(CHANGELOG, 0, 0, b"k", record)], builder)
    batch = builder.changelog_batch(items).to_pydict()
    assert (batch["orderId"], batch["region"], batch["tags"]) == ([7], ["EU"], [["a"]])
    assert json.loads(batch["message_text"][0]) == {"orderId": 7, "region": "EU", "tags": ["a"]}
    inferred = infer_struct([{"a": 1, "b": "x"}, {"a": 2.5, "c": {"d": True}}, {"b": 3}])
    assert inferred.simpleString() == "struct<a:double,b:string,c:struct<d:boolean>>"


def test_input_batches_are_the_commands_in_order() -> None:
    from processor.changelog.commands import CORRELATION_HEADER, FILTER_DELETE_KEY, FILTER_HEADER
    from processor.spark.scan import input_items

    options = parse_options({**BASE, "read": "input"})
    schema = StructType(
        [
            StructField("sow_key", StringType()),
            StructField("command", StringType()),
            StructField("filter", StringType()),
            StructField("correlation_id", StringType()),
            StructField("offset", LongType()),
            StructField("qty", LongType()),
        ]
    )
    builder = BatchBuilder(options, schema)
    records = [
        LogRecord("ORDERS", 0, 0, b"a", b'{"qty": 1}', [(CORRELATION_HEADER, b"c-1")]),
        LogRecord("ORDERS", 0, 1, b"a", None),
        LogRecord("ORDERS", 0, 2, FILTER_DELETE_KEY, None, [(FILTER_HEADER, b"/qty > 0")]),
    ]
    batch = builder.input_batch(input_items(records)).to_pydict()
    assert batch == {
        "sow_key": ["a", "a", None],
        "command": ["publish", "delete", "delete_filter"],
        "filter": [None, None, "/qty > 0"],
        "correlation_id": ["c-1", None, None],
        "offset": [0, 1, 2],
        "qty": [1, None, None],
    }
