"""The columns of each read, their Spark and Arrow types, and message schemas.

A read's schema is its *record columns* (what the log says about a record: key,
position, times, the message bytes and text) followed by its *message columns* (the
message parsed into fields: given as DDL, inferred from json messages, or derived from
the topic's Avro schema). Spark hands the reader the schema it plans with; columns are
recognised by name, so a schema given with ``.schema(...)`` may name a subset of the
record columns plus any message fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from processor.errors import ConfigurationError
from processor.spark.options import CORRUPT_COLUMN, ReadOptions

#: Record columns of a changelog read, in order, as Spark DDL types.
CHANGELOG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("sow_key", "string"),
    ("topic", "string"),
    ("message_type", "string"),
    ("change", "string"),
    ("message", "binary"),
    ("message_text", "string"),
    ("expiration", "timestamp"),
    ("publish_time", "timestamp"),
    ("apply_time", "timestamp"),
    ("correlation_id", "string"),
    ("log_topic", "string"),
    ("log_partition", "int"),
    ("log_offset", "bigint"),
    ("timestamp", "timestamp"),
    ("partition", "int"),
    ("offset", "bigint"),
)

#: Record columns of an input-topic (transaction log) read.
INPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("sow_key", "string"),
    ("topic", "string"),
    ("message_type", "string"),
    ("command", "string"),
    ("message", "binary"),
    ("message_text", "string"),
    ("filter", "string"),
    ("correlation_id", "string"),
    ("headers", "map<string,binary>"),
    ("timestamp", "timestamp"),
    ("partition", "int"),
    ("offset", "bigint"),
)

RECORD_COLUMNS = {name for name, _ in CHANGELOG_COLUMNS + INPUT_COLUMNS} | {CORRUPT_COLUMN}


def record_columns(options: ReadOptions) -> tuple[tuple[str, str], ...]:
    columns = CHANGELOG_COLUMNS if options.read == "changelog" else INPUT_COLUMNS
    if options.bad_records == "column":
        columns = (*columns, (CORRUPT_COLUMN, "string"))
    return columns


def schema_ddl(options: ReadOptions, message: StructType | None) -> str:
    """The read's schema as Spark DDL: record columns, then message columns."""
    parts = [f"`{name}` {kind}" for name, kind in record_columns(options)]
    if options.message_schema:
        parts.append(options.message_schema)
    elif message is not None:
        check_message_fields(message.fieldNames())
        parts.extend(f"`{f.name}` {f.dataType.simpleString()}" for f in message.fields)
    return ", ".join(parts)


def check_message_fields(names: Iterable[str]) -> None:
    clash = sorted(set(names) & RECORD_COLUMNS)
    if clash:
        raise ConfigurationError(
            f"message field(s) {', '.join(clash)} have the names of record columns; "
            f"give a message_schema without them (record columns: "
            f"{', '.join(sorted(RECORD_COLUMNS))})"
        )


# -- Spark -> Arrow ---------------------------------------------------------------------

_SIMPLE: Mapping[type[DataType], pa.DataType] = {
    StringType: pa.string(),
    BinaryType: pa.binary(),
    BooleanType: pa.bool_(),
    ByteType: pa.int8(),
    ShortType: pa.int16(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    FloatType: pa.float32(),
    DoubleType: pa.float64(),
    DateType: pa.date32(),
    TimestampType: pa.timestamp("us", tz="UTC"),
    TimestampNTZType: pa.timestamp("us"),
}


def arrow_type(kind: DataType) -> pa.DataType:
    """The Arrow type Spark expects for a Spark type (ConfigurationError if unsupported)."""
    simple = _SIMPLE.get(type(kind))
    if simple is not None:
        return simple
    if isinstance(kind, DecimalType):
        return pa.decimal128(kind.precision, kind.scale)
    if isinstance(kind, ArrayType):
        return pa.list_(arrow_type(kind.elementType))
    if isinstance(kind, MapType):
        return pa.map_(arrow_type(kind.keyType), arrow_type(kind.valueType))
    if isinstance(kind, StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.dataType)) for f in kind.fields])
    raise ConfigurationError(f"column type {kind.simpleString()} is not supported by sow reads")


def arrow_schema(schema: StructType) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f.dataType)) for f in schema.fields])


# -- message schemas ----------------------------------------------------------------------


def _infer_value(value: Any) -> DataType | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return BooleanType()
    if isinstance(value, int):
        return LongType()
    if isinstance(value, float):
        return DoubleType()
    if isinstance(value, str):
        return StringType()
    if isinstance(value, list):
        element: DataType | None = None
        for item in value:
            element = _merge(element, _infer_value(item))
        return ArrayType(element or StringType())
    if isinstance(value, dict):
        return infer_struct([value])
    return StringType()


def _merge(a: DataType | None, b: DataType | None) -> DataType | None:
    if a is None:
        return b
    if b is None or a == b:
        return a
    if {type(a), type(b)} == {LongType, DoubleType}:
        return DoubleType()
    if isinstance(a, StructType) and isinstance(b, StructType):
        fields: dict[str, DataType | None] = {f.name: f.dataType for f in a.fields}
        for f in b.fields:
            fields[f.name] = _merge(fields.get(f.name), f.dataType)
        return StructType([StructField(n, t or StringType()) for n, t in fields.items()])
    return StringType()


def infer_struct(messages: Iterable[Any]) -> StructType:
    """The fields of json messages (top-level objects), in first-seen order; a field
    with mixed types is a string (the reader renders other values as JSON text)."""
    fields: dict[str, DataType | None] = {}
    for message in messages:
        if not isinstance(message, dict):
            continue
        for name, value in message.items():
            fields[name] = _merge(fields.get(name), _infer_value(value))
    return StructType([StructField(n, t or StringType()) for n, t in fields.items()])


_AVRO: Mapping[str, DataType] = {
    "string": StringType(),
    "bytes": BinaryType(),
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "enum": StringType(),
    "fixed": BinaryType(),
}


def _avro_type(schema: Any, named: dict[str, DataType]) -> DataType:
    if isinstance(schema, str):
        if schema in named:
            return named[schema]
        if schema in _AVRO:
            return _AVRO[schema]
        raise ConfigurationError(f"Avro type {schema!r} has no Spark column type")
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) == 1:
            return _avro_type(branches[0], named)
        return StringType()
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType()
    if logical == "date":
        return DateType()
    if kind == "record":
        struct = StructType(
            [StructField(f["name"], _avro_type(f["type"], named)) for f in schema["fields"]]
        )
        named[schema["name"]] = struct
        return struct
    if kind == "array":
        return ArrayType(_avro_type(schema["items"], named))
    if kind == "map":
        return MapType(StringType(), _avro_type(schema["values"], named))
    if kind in ("enum", "fixed"):
        named[schema["name"]] = _AVRO[kind]
        return _AVRO[kind]
    return _avro_type(kind, named)


def avro_struct(path: str) -> StructType:
    """The message columns of an Avro record schema (.avsc file)."""
    try:
        schema = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read Avro schema {path}: {exc}") from exc
    struct = _avro_type(schema, {})
    if not isinstance(struct, StructType):
        raise ConfigurationError(f"Avro schema {path} is not a record; sow messages are records")
    return struct


def message_fields(schema: StructType) -> Sequence[StructField]:
    """The message columns of a schema Spark planned with (all but the record columns)."""
    return [f for f in schema.fields if f.name not in RECORD_COLUMNS]
