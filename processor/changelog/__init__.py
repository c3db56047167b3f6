"""The changelog record format, shared by the processor, the query service and readers.

Standard library only (no heavy imports), so the Spark reader and Faust integrations can use
it anywhere. The value of an upsert record is the Avro binary encoding of
``schemas/changelog_envelope.avsc``, written and read here by hand for speed; tests check
it byte for byte against fastavro.

Record kinds in a changelog topic partition (key, value, headers):

* upsert: key = SowKey, value = envelope.
* delete: key = SowKey, value = None (a tombstone), headers ``sow.reason`` (``deleted``,
  or ``expired`` for an expiry) and ``sow.position`` (``topic/partition/offset`` of the
  command; none for the engine's expiry of a record, which no command caused).
* control records, key starting with NUL, never a SowKey:
  ``PROGRESS_KEY`` (value: JSON ``{"log": [[topic, partition, next_offset], ...]}``, the
  processor's input progress as of the end of a transaction, for every input of the
  partition it has a position for: compaction keeps only the latest), ``RESET_KEY`` (the
  partition's state restarts empty from here, written when a transient topic rebuilds) and
  ``PUBLISHER_PREFIX + name`` (value: the highest sequence applied for that publisher, in
  decimal; one per publisher whose sequence a transaction changed, before its PROGRESS
  record; compaction keeps the latest per publisher) and ``STATE_PREFIX + key`` (value:
  opaque bytes, None to delete: the state a derived topic such as a view keeps beside its
  records, e.g. a group's members, restored into the store's meta column under the same
  key). Readers must treat every key that starts with ``CONTROL_PREFIX`` as control,
  including kinds they do not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from processor.errors import EnvelopeError, ValueFormatError

if TYPE_CHECKING:
    from processor.expr import MessageContext

ENVELOPE_VERSION = 1
CONTROL_PREFIX = b"\x00"
PROGRESS_KEY = b"\x00sow:progress"
RESET_KEY = b"\x00sow:reset"
PUBLISHER_PREFIX = b"\x00sow:publisher:"
STATE_PREFIX = b"\x00sow:state:"
REASON_HEADER = "sow.reason"
POSITION_HEADER = "sow.position"
#: The ``sow.reason`` of a delete's tombstone and of an expiry's.
DELETED = b"deleted"
EXPIRED = b"expired"


@dataclass(slots=True)
class Envelope:
    """One decoded changelog value (see the schema for each field's contract). Not
    frozen: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, five times slower, and one is built for every record a query
    returns and every change a subscription sends; treat it as immutable all the same."""

    topic: str
    message_type: str
    log_topic: str
    log_partition: int
    log_offset: int
    sow_key: str
    data: bytes
    publish_time_ms: int
    apply_time_ms: int
    expiration_ms: int | None = None
    correlation_id: str | None = None
    version: int = ENVELOPE_VERSION

    def context(self) -> MessageContext:
        """What expressions can read about this record besides its message
        (``SOW_KEY()``, ``TOPIC_NAME()``, ``LAST_UPDATED()``, ...)."""
        from processor.expr import MessageContext

        return MessageContext(
            sow_key=self.sow_key,
            topic=self.topic,
            correlation_id=self.correlation_id,
            message_size=len(self.data),
            last_updated=self.apply_time_ms / 1000.0,
        )


def _long(n: int) -> bytes:
    """Avro zig-zag varint of a 64-bit signed integer."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: Encodings of 0 .. 2**14-1: lengths and small numbers take one lookup, not a loop.
_SMALL = tuple(_long(n) for n in range(1 << 14))


def _ulong(n: int) -> bytes:
    """``_long`` for a non-negative number, unrolled up to 2**27 (offsets, lengths)."""
    if n < 16384:
        return _SMALL[n]
    z = n << 1
    if z < 0x200000:
        return bytes((z & 0x7F | 0x80, (z >> 7) & 0x7F | 0x80, z >> 14))
    if z < 0x10000000:
        return bytes((z & 0x7F | 0x80, (z >> 7) & 0x7F | 0x80, (z >> 14) & 0x7F | 0x80, z >> 21))
    return _long(n)


def _string(text: str) -> bytes:
    raw = text.encode()
    return _long(len(raw)) + raw


def _bytes(raw: bytes) -> bytes:
    return _long(len(raw)) + raw


class EnvelopeWriter:
    """Encodes envelopes for one (SOW topic, message type, log topic, log partition).

    The fields that never change for a partition are encoded once; ``encode`` writes the
    rest and remembers the last times it encoded: one writer per thread.
    """

    __slots__ = ("_apply", "_apply_bytes", "_prefix", "_time", "_time_bytes")

    def __init__(self, topic: str, message_type: str, log_topic: str, log_partition: int):
        self._prefix = (
            _long(ENVELOPE_VERSION)
            + _string(topic)
            + _string(message_type)
            + _string(log_topic)
            + _long(log_partition)
        )
        self._time: int | None = None  # no time encoded yet (-1 is a valid time)
        self._time_bytes = b""
        self._apply: int | None = None  # the same for the apply time (one per batch)
        self._apply_bytes = b""

    def encode(
        self,
        log_offset: int,
        sow_key: bytes,
        data: bytes,
        publish_time_ms: int,
        apply_time_ms: int,
        expiration_ms: int | None = None,
        correlation_id: str | None = None,
    ) -> bytes:
        """The envelope bytes; ``sow_key`` is the UTF-8 SowKey.

        Times repeat from record to record within a batch (the apply time is the batch's),
        so the last encoding of each is kept; numbers are non-negative here except in
        hand-built envelopes.
        """
        if publish_time_ms == self._time:
            publish = self._time_bytes
        else:
            publish = _long(publish_time_ms)
            self._time, self._time_bytes = publish_time_ms, publish
        if apply_time_ms == self._apply:
            apply = self._apply_bytes
        elif apply_time_ms == publish_time_ms:
            apply = publish
        else:
            apply = _long(apply_time_ms)
            self._apply, self._apply_bytes = apply_time_ms, apply
        if expiration_ms is None and correlation_id is None:
            tail = b"\x00\x00"
        else:
            tail = (b"\x00" if expiration_ms is None else b"\x02" + _long(expiration_ms)) + (
                b"\x00" if correlation_id is None else b"\x02" + _string(correlation_id)
            )
        size = len(data)
        return b"".join(
            (
                self._prefix,
                _ulong(log_offset) if log_offset >= 0 else _long(log_offset),
                _SMALL[len(sow_key)],
                sow_key,
                _SMALL[size] if size < 16384 else _long(size),
                data,
                publish,
                apply,
                tail,
            )
        )


def encode(envelope: Envelope) -> bytes:
    """Encode one envelope (convenience over EnvelopeWriter)."""
    writer = EnvelopeWriter(
        envelope.topic, envelope.message_type, envelope.log_topic, envelope.log_partition
    )
    return writer.encode(
        envelope.log_offset,
        envelope.sow_key.encode(),
        envelope.data,
        envelope.publish_time_ms,
        envelope.apply_time_ms,
        envelope.expiration_ms,
        envelope.correlation_id,
    )


def _long_at(buf: bytes, pos: int) -> tuple[int, int]:
    """The Avro long at ``pos`` and the position after it (IndexError past the end)."""
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise EnvelopeError("varint longer than 10 bytes")


def _raw_at(buf: bytes, pos: int) -> tuple[bytes, int]:
    """The Avro bytes/string field at ``pos`` and the position after it."""
    size, pos = _long_at(buf, pos)
    end = pos + size
    if size < 0 or end > len(buf):
        raise EnvelopeError("envelope ends inside a string or bytes field")
    return buf[pos:end], end


def _optional_at(buf: bytes, pos: int) -> tuple[bool, int]:
    branch, pos = _long_at(buf, pos)
    if branch not in (0, 1):
        raise EnvelopeError(f"union branch {branch} out of range")
    return branch == 1, pos


def _check_version(buf: bytes) -> int:
    version, pos = _long_at(buf, 0)
    if version != ENVELOPE_VERSION:
        raise EnvelopeError(f"envelope version {version} is not supported (expected 1)")
    return pos


def log_offset_of(value: bytes) -> int:
    """The log offset of an envelope, without decoding the rest (EnvelopeError: not one)."""
    try:
        pos = _check_version(value)
        for _ in range(3):  # topic, message type, log topic
            _, pos = _raw_at(value, pos)
        _, pos = _long_at(value, pos)  # log partition
        offset, _ = _long_at(value, pos)
        return offset
    except (IndexError, ValueError) as exc:
        raise EnvelopeError(f"not an envelope: {exc}") from None


def decode(value: bytes) -> Envelope:
    """Decode an envelope; raise EnvelopeError if it is not one.

    Written as straight-line code over positions: it runs for every record a query
    returns."""
    try:
        pos = _check_version(value)
        topic, pos = _raw_at(value, pos)
        message_type, pos = _raw_at(value, pos)
        log_topic, pos = _raw_at(value, pos)
        log_partition, pos = _long_at(value, pos)
        log_offset, pos = _long_at(value, pos)
        sow_key, pos = _raw_at(value, pos)
        data, pos = _raw_at(value, pos)
        publish_time_ms, pos = _long_at(value, pos)
        apply_time_ms, pos = _long_at(value, pos)
        present, pos = _optional_at(value, pos)
        expiration_ms = None
        if present:
            expiration_ms, pos = _long_at(value, pos)
        present, pos = _optional_at(value, pos)
        correlation_id = None
        if present:
            raw, pos = _raw_at(value, pos)
            correlation_id = raw.decode()
        if pos != len(value):
            raise EnvelopeError(f"{len(value) - pos} bytes left over after the envelope")
        return Envelope(
            topic.decode(),
            message_type.decode(),
            log_topic.decode(),
            log_partition,
            log_offset,
            sow_key.decode(),
            data,
            publish_time_ms,
            apply_time_ms,
            expiration_ms,
            correlation_id,
            ENVELOPE_VERSION,
        )
    except IndexError:
        raise EnvelopeError("envelope ends inside a number") from None
    except UnicodeDecodeError as exc:
        raise EnvelopeError(f"string field is not UTF-8: {exc}") from exc


def data_of(value: bytes) -> bytes:
    """Only the message bytes of an envelope (skips the other fields without building an
    :class:`Envelope`); raise EnvelopeError if it is not one."""
    # Fast path: the version, the three names, the partition and the SowKey's length
    # fit one varint byte each (names under 64 bytes, partitions under 64), which is
    # every envelope in practice; the general path below handles the rest.
    try:
        if value[0] == 2:  # version 1, zigzag-encoded
            pos = 1
            size = value[pos]
            if size < 0x80:
                pos += 1 + (size >> 1)
                size = value[pos]
                if size < 0x80:
                    pos += 1 + (size >> 1)
                    size = value[pos]
                    if size < 0x80 and value[pos + 1 + (size >> 1)] < 0x80:
                        pos += 2 + (size >> 1)  # log topic, then log partition
                        while value[pos] >= 0x80:  # log offset
                            pos += 1
                        size = value[pos + 1]
                        if size < 0x80:
                            pos += 2 + (size >> 1)  # SowKey
                            return _raw_at(value, pos)[0]
    except IndexError:
        raise EnvelopeError("envelope ends inside a number") from None
    try:
        return _raw_at(value, _to_data(value))[0]
    except IndexError:
        raise EnvelopeError("envelope ends inside a number") from None


def expiration_of(value: bytes) -> int | None:
    """Only the expiration instant of an envelope (ms since the epoch, None for never),
    skipping the other fields without copying them; raise EnvelopeError if it is not
    one."""
    try:
        pos = _to_data(value)
        size, pos = _long_at(value, pos)
        return _expiration_at(value, pos + size)[0]
    except IndexError:
        raise EnvelopeError("envelope ends inside a number") from None


def data_and_correlation_of(value: bytes) -> tuple[bytes, str | None]:
    """Only the message bytes and the correlation id of an envelope (what a delta_publish
    merges with), without building an :class:`Envelope`; raise EnvelopeError if it is not
    one."""
    try:
        data, pos = _raw_at(value, _to_data(value))
        _, pos = _expiration_at(value, pos)
        present, pos = _optional_at(value, pos)
        if not present:
            return data, None
        return data, _raw_at(value, pos)[0].decode()
    except IndexError:
        raise EnvelopeError("envelope ends inside a number") from None
    except UnicodeDecodeError as exc:
        raise EnvelopeError(f"string field is not UTF-8: {exc}") from exc


def _to_data(value: bytes) -> int:
    """The position of an envelope's message bytes: past the version, the three names,
    the log partition and offset and the SowKey (IndexError past the end)."""
    pos = _check_version(value)
    for _ in range(3):  # topic, message type, log topic
        size, pos = _long_at(value, pos)
        pos += size
    pos = _skip_long(value, _skip_long(value, pos))  # log partition, log offset
    size, pos = _long_at(value, pos)  # SowKey
    return pos + size


def _expiration_at(value: bytes, pos: int) -> tuple[int | None, int]:
    """The expiration after the two times at ``pos``, and the position after it."""
    pos = _skip_long(value, _skip_long(value, pos))  # publish time, apply time
    present, pos = _optional_at(value, pos)
    if not present:
        return None, pos
    return _long_at(value, pos)


def _skip_long(buf: bytes, pos: int) -> int:
    """The position after the Avro long at ``pos`` (IndexError past the end)."""
    while buf[pos] >= 0x80:
        pos += 1
    return pos + 1


def encode_progress(positions: list[tuple[str, int, int]]) -> bytes:
    """Value of a PROGRESS_KEY record: (log topic, partition, next offset) triples."""
    return json.dumps({"log": [list(p) for p in positions]}, separators=(",", ":")).encode()


def decode_progress(value: bytes) -> list[tuple[str, int, int]]:
    """The positions of a PROGRESS_KEY record (see :func:`encode_progress`)."""
    return [(str(t), int(p), int(o)) for t, p, o in json.loads(value)["log"]]


def decode_progress_publishers(value: bytes) -> dict[str, int]:
    """The duplicate-detection map that PROGRESS records of earlier releases carried
    (``"publishers": {name: sequence}``); empty for current ones, which carry none."""
    found = json.loads(value).get("publishers") or {}
    return {str(name): int(sequence) for name, sequence in found.items()}


def publisher_record(publisher: str, sequence: int) -> tuple[bytes, bytes]:
    """The (key, value) of a publisher control record."""
    return PUBLISHER_PREFIX + publisher.encode(), str(sequence).encode()


def parse_publisher_record(key: bytes, value: bytes) -> tuple[str, int]:
    """Inverse of :func:`publisher_record`; ValueError when it is not one."""
    if not key.startswith(PUBLISHER_PREFIX) or not value.isdigit():
        raise ValueFormatError(f"not a publisher control record: {key!r} = {value!r}")
    return key[len(PUBLISHER_PREFIX) :].decode(), int(value)


def format_position(topic: str, partition: int, offset: int) -> bytes:
    """The ``sow.position`` header value."""
    return f"{topic}/{partition}/{offset}".encode()


def parse_position(value: bytes) -> tuple[str, int, int]:
    """Inverse of :func:`format_position`."""
    topic, partition, offset = value.decode().rsplit("/", 2)
    return topic, int(partition), int(offset)
