"""Turning log records into Arrow record batches, column by column (runs on executors).

A :class:`BatchBuilder` is made once per Spark task from the read's options and the
schema Spark planned with. It takes *items*, one per log record that becomes a row,
and returns one ``pyarrow.RecordBatch`` per call. Columns are built with one list
comprehension each and converted by Arrow, never row by row, except to find the rows at
fault when a message column cannot be converted.

Corrupt records (a changelog value that is not an envelope, a message that does not
decode, a value that does not fit its column) raise CorruptRecordError naming the record,
or with ``bad_records=column`` become rows whose ``_corrupt_record`` says why, with the
record's raw value in ``message``: never dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.types import StringType, StructType

from processor.changelog import POSITION_HEADER, REASON_HEADER, Envelope, parse_position
from processor.changelog.commands import CORRELATION_HEADER, FILTER_HEADER
from processor.errors import CorruptRecordError, SowError
from processor.expr import Expression
from processor.expr import compile as compile_expression
from processor.log import Record
from processor.messages import Codec, codec_for
from processor.spark.columns import arrow_schema, arrow_type, message_fields
from processor.spark.options import CORRUPT_COLUMN, ReadOptions

_MS = pa.timestamp("ms", tz="UTC")
_US = pa.timestamp("us", tz="UTC")

#: One changelog row: the record, its envelope (None: a tombstone, reset or corrupt
#: record), what changed (publish, delete, expire, reset; None when corrupt) and why the
#: record is corrupt (None when it is not).
ChangelogItem = tuple[Record, Envelope | None, str | None, str | None]
#: One input-topic row: the record, its command (publish, delete, delete_filter).
InputItem = tuple[Record, str]


def where(record: Record) -> str:
    """A record's position, for error messages."""
    return f"{record.topic()}[{record.partition()}]@{record.offset()}"


def tombstone_change(record: Record) -> tuple[str, tuple[str, int, int] | None]:
    """What a changelog tombstone records (delete or expire) and the command's position."""
    reason, position = b"deleted", None
    for name, raw in record.headers() or ():
        if name == REASON_HEADER and raw is not None:
            reason = raw
        elif name == POSITION_HEADER and raw is not None:
            position = parse_position(raw)
    return ("expire" if reason in (b"expired", b"expire") else "delete"), position


def _times(values: list[int | None]) -> pa.Array:
    return pa.array(values, _MS).cast(_US)


class BatchBuilder:
    """Builds the Arrow batches of one read. Not thread-safe (one per task)."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = arrow_schema(schema)
        self.names = schema.fieldNames()
        self.fields = message_fields(schema)
        self.codec: Codec = codec_for(options.topic)
        self.expression: Expression | None = (
            compile_expression(options.filter) if options.filter else None
        )
        self.keep_corrupt = options.bad_records == "column"
        self.needs_message = bool(self.fields) or self.expression is not None
        #: The message column: the message's text form (JSON; the text itself for fix,
        #: nvfix and xml; Base64 for binary).
        self.text_of: Callable[[bytes], str] = lambda data: self.codec.to_text(data).decode(
            "utf-8", "replace"
        )

    # -- decoding and filtering ------------------------------------------------------

    def corrupt(self, record: Record, reason: str) -> str:
        """The corrupt-record text for a record; raises unless bad_records=column."""
        text = f"{where(record)}: {reason}"
        if not self.keep_corrupt:
            raise CorruptRecordError(
                f"corrupt record {text}; fix or remove the record, or read with "
                f'.option("bad_records", "column") to get it as a row with {CORRUPT_COLUMN}'
            )
        return text

    def _decode(self, record: Record, data: bytes | None) -> tuple[Any, str | None]:
        """The decoded message (None when there is none) and the corrupt reason."""
        if data is None or not self.needs_message:
            return None, None
        try:
            return self.codec.decode(data), None
        except SowError as exc:
            return None, self.corrupt(record, f"the message does not decode: {exc}")

    # -- changelog -------------------------------------------------------------------

    def changelog_batch(self, items: Sequence[ChangelogItem]) -> pa.RecordBatch:
        """One batch of changelog rows (filter applied to publishes)."""
        messages: list[Any] = []
        kept: list[ChangelogItem] = []
        expression = self.expression
        for item in items:
            record, envelope, change, bad = item
            message, bad_message = self._decode(record, envelope.data if envelope else None)
            if bad_message is not None:
                kept.append((record, envelope, change, bad_message))
                messages.append(None)
                continue
            if (
                expression is not None
                and bad is None
                and (envelope is None or not expression.matches(message, envelope.context()))
            ):
                continue
            kept.append(item)
            messages.append(message)
        return self._changelog_columns(kept, messages)

    def _changelog_columns(
        self, items: Sequence[ChangelogItem], messages: list[Any]
    ) -> pa.RecordBatch:
        envelopes = [i[1] for i in items]
        records = [i[0] for i in items]
        corrupt = [i[3] for i in items]
        topic = self.options.topic
        positions: list[tuple[str, int, int] | None] = [
            None if e is not None or i[2] not in ("delete", "expire") else tombstone_change(r)[1]
            for r, e, i in zip(records, envelopes, items, strict=True)
        ]
        builders: dict[str, Callable[[], Any]] = {
            "sow_key": lambda: [
                e.sow_key if e is not None else _key_text(r)
                for r, e in zip(records, envelopes, strict=True)
            ],
            "topic": lambda: [topic.name] * len(items),
            "message_type": lambda: [topic.message_type] * len(items),
            "change": lambda: [i[2] for i in items],
            "message": lambda: [
                e.data if e is not None else (r.value() if c else None)
                for r, e, c in zip(records, envelopes, corrupt, strict=True)
            ],
            "message_text": lambda: [
                None if e is None else self.text_of(e.data) for e in envelopes
            ],
            "expiration": lambda: _times([e.expiration_ms if e else None for e in envelopes]),
            "publish_time": lambda: _times([e.publish_time_ms if e else None for e in envelopes]),
            "apply_time": lambda: _times([e.apply_time_ms if e else None for e in envelopes]),
            "correlation_id": lambda: [e.correlation_id if e else None for e in envelopes],
            "log_topic": lambda: [
                e.log_topic if e else (p[0] if p else None)
                for e, p in zip(envelopes, positions, strict=True)
            ],
            "log_partition": lambda: [
                e.log_partition if e else (p[1] if p else None)
                for e, p in zip(envelopes, positions, strict=True)
            ],
            "log_offset": lambda: [
                e.log_offset if e else (p[2] if p else None)
                for e, p in zip(envelopes, positions, strict=True)
            ],
            "timestamp": lambda: _times([r.timestamp()[1] for r in records]),
            "partition": lambda: [r.partition() for r in records],
            "offset": lambda: [r.offset() for r in records],
            CORRUPT_COLUMN: lambda: corrupt,
        }
        return self._assemble(builders, records, messages, corrupt)

    # -- input topic -----------------------------------------------------------------

    def input_batch(self, items: Sequence[InputItem]) -> pa.RecordBatch:
        """One batch of transaction-log rows (filter applied to publishes)."""
        records: list[Record] = []
        commands: list[str] = []
        messages: list[Any] = []
        corrupt: list[str | None] = []
        expression = self.expression
        for record, command in items:
            message, bad = self._decode(record, record.value())
            if (
                expression is not None
                and bad is None
                and (command != "publish" or not expression.matches(message))
            ):
                continue
            records.append(record)
            commands.append(command)
            messages.append(message)
            corrupt.append(bad)
        topic = self.options.topic
        headers = [r.headers() for r in records]
        builders: dict[str, Callable[[], Any]] = {
            "sow_key": lambda: [
                None if c == "delete_filter" else _key_text(r)
                for r, c in zip(records, commands, strict=True)
            ],
            "topic": lambda: [topic.name] * len(records),
            "message_type": lambda: [topic.message_type] * len(records),
            "command": lambda: commands,
            "message": lambda: [r.value() for r in records],
            "message_text": lambda: [
                None if (v := r.value()) is None else self.text_of(v) for r in records
            ],
            "filter": lambda: [_header_text(h, FILTER_HEADER) for h in headers],
            "correlation_id": lambda: [_header_text(h, CORRELATION_HEADER) for h in headers],
            "headers": lambda: headers,
            "timestamp": lambda: _times([r.timestamp()[1] for r in records]),
            "partition": lambda: [r.partition() for r in records],
            "offset": lambda: [r.offset() for r in records],
            CORRUPT_COLUMN: lambda: corrupt,
        }
        return self._assemble(builders, records, messages, corrupt)

    # -- columns ---------------------------------------------------------------------

    def _assemble(
        self,
        builders: dict[str, Callable[[], Any]],
        records: Sequence[Record],
        messages: list[Any],
        corrupt: list[str | None],
    ) -> pa.RecordBatch:
        parsed = {
            f.name: self._message_column(f.name, f.dataType, records, messages, corrupt)
            for f in self.fields
        }
        arrays = []
        for name, field in zip(self.names, self.schema, strict=True):
            if name in parsed:
                arrays.append(parsed[name])
                continue
            values = builders[name]()
            arrays.append(values if isinstance(values, pa.Array) else pa.array(values, field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _message_column(
        self,
        name: str,
        kind: Any,
        records: Sequence[Record],
        messages: list[Any],
        corrupt: list[str | None],
    ) -> pa.Array:
        """One message field as a column; a value that does not fit is a corrupt record
        (or, for a string column, rendered as JSON text)."""
        target = arrow_type(kind)
        values = [m.get(name) if m.__class__ is dict else None for m in messages]
        try:
            return pa.array(values, target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
        fitted: list[Any] = []
        for i, raw in enumerate(values):
            value = raw
            if value is not None and isinstance(kind, StringType) and not isinstance(value, str):
                value = orjson.dumps(value).decode()
            try:
                pa.array([value], target)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                reason = f"message field {name}={value!r:.80} does not fit column type {kind}"
                corrupt[i] = corrupt[i] or self.corrupt(records[i], reason)
                value = None
            fitted.append(value)
        return pa.array(fitted, target)


def _key_text(record: Record) -> str | None:
    key = record.key()
    return None if key is None else key.decode("utf-8", "replace")


def _header_text(headers: list[tuple[str, bytes]] | None, name: str) -> str | None:
    for key, raw in headers or ():
        if key == name and raw is not None:
            return raw.decode("utf-8", "replace")
    return None
