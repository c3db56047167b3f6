"""What publishing to one topic needs, worked out once (:class:`PublishRoute`: codec, key
generator, partitions, the size limit of a message), and the rules the gateway applies
with it: SowKeys generated or validated, delta keys, partitions, size refusals, the
headers a columnar batch shares."""

from __future__ import annotations

import itertools

from processor.changelog.commands import DELTA_NATIVE, DELTA_TEXT, TOPIC_HEADER
from processor.errors import InvalidRequestError, MessageTooLargeError, MissingKeyError
from processor.keys import FieldKeyGenerator, key_function, partition_for, validate_user_key
from processor.log import Headers
from processor.messages import codec_for
from processor.publish.headers import option_headers, sequence_headers
from processor.publish.requests import PublishColumns
from processor.topology.model import SowTopic, Topic

#: What a changelog envelope adds to a message besides the names and the SowKey
#: (version, partition, offset, lengths, two times, expiration; see processor.changelog).
ENVELOPE_FIXED_BYTES = 64
#: Headers are measured exactly only for messages this close to the limit.
HEADERS_ALLOWANCE = 4096


class PublishRoute:
    """What publishing to one topic needs, worked out once: codec, key generator,
    partition count and the size limit of a message."""

    def __init__(self, topic: Topic, max_record_bytes: int, concrete: str | None = None) -> None:
        self.topic = topic
        self.codec = codec_for(topic)
        #: A plain topic: the SowKey is optional and the message is checked by decoding.
        self.plain = not isinstance(topic, SowTopic)
        self.key_function = key_function(topic) if isinstance(topic, SowTopic) else None
        #: Headers every record carries: a Pattern topic's records name their own topic,
        #: whose name is their SowKeys' domain.
        self.extra_headers: Headers = []
        if concrete is not None and isinstance(topic, SowTopic):
            self.key_function = FieldKeyGenerator(concrete, topic.keys)
            self.extra_headers = [(TOPIC_HEADER, concrete.encode())]
        self.keys = topic.keys if isinstance(topic, SowTopic) else ()
        #: The partitions records without a key go to, in turn (plain topics).
        self.spread = itertools.cycle(range(topic.partitions))
        self.kafka_topic = topic.kafka_topic
        self.partitions = topic.partitions
        self.limit = max_record_bytes
        if isinstance(topic, SowTopic):  # the processor writes it again, in an envelope
            names = len(topic.name) + len(topic.message_type) + len(topic.repartition_topic)
            self.limit -= names + ENVELOPE_FIXED_BYTES
        if concrete is not None:
            self.limit -= len(concrete) * 2 + len(TOPIC_HEADER)


def publish_key(route: PublishRoute, data: bytes, sow_key: str) -> str:
    function = route.key_function
    if route.plain:
        route.codec.decode(data)  # subscribers' filters read it: refuse what cannot be
        return validate_user_key(sow_key) if sow_key else ""
    if function is None:
        return validate_user_key(sow_key)
    if sow_key:
        raise generated_keys(route)
    return function(route.codec.decode(data))


def delta_key(route: PublishRoute, data: bytes, text_form: bool, sow_key: str) -> str:
    """The SowKey of a delta_publish to a SOW topic, computed from the delta's own fields
    (or the publisher's SowKey); raises SowError when the delta cannot be merged."""
    fields = route.codec.decode_delta(data, text_form)
    function = route.key_function
    if function is None:
        return validate_user_key(sow_key)
    if sow_key:
        raise generated_keys(route)
    try:
        return function(fields)
    except MissingKeyError as exc:
        raise MissingKeyError(
            f"a delta_publish to {route.topic.name} must give the record's Key fields "
            f"({', '.join(route.keys)}), which say which record it merges into: {exc}"
        ) from exc


def delta_form(route: PublishRoute, text_form: bool) -> bytes:
    """How a delta travels: as given, or as JSON text when given as text to a type whose
    text form is not its payload (a partial Avro record, a bson or msgpack delta written
    as JSON, a composite one with parts left out)."""
    text_payload = route.codec.traits.text_payload
    return DELTA_TEXT if text_form and not text_payload else DELTA_NATIVE


def record_partition(route: PublishRoute, raw: bytes) -> int:
    """The partition of a record: its SowKey's, or for a plain topic's record without a
    key, the next partition in turn."""
    if raw or not route.plain:
        return partition_for(raw, route.partitions)
    return next(route.spread)


def too_large(route: PublishRoute, size: int, limit: int) -> MessageTooLargeError:
    return MessageTooLargeError(
        f"the message is {size:,} bytes; topic {route.topic.name} accepts at most "
        f"{limit:,} (the log's record limit less the key, headers and changelog "
        "envelope); split it or store large payloads elsewhere"
    )


def shared_headers(batch: PublishColumns, route: PublishRoute, count: int) -> Headers:
    """The headers every message of a columnar batch carries (all but the sequence);
    raises SowError when the batch's options are wrong."""
    if batch.sow_keys and route.key_function is not None:
        raise generated_keys(route)
    optional = route.plain and not batch.sow_keys
    if route.key_function is None and not optional and len(batch.sow_keys) != count:
        raise InvalidRequestError(
            f"topic {route.topic.name} takes publisher-provided SowKeys: give one per message "
            f"(got {len(batch.sow_keys)} for {count} messages)"
        )
    if batch.publisher or batch.first_sequence:
        sequence_headers(batch.publisher, batch.first_sequence)  # validates both
    return option_headers(batch.expiration, batch.correlation_id)


def generated_keys(route: PublishRoute) -> InvalidRequestError:
    return InvalidRequestError(
        f"topic {route.topic.name} generates its SowKeys "
        f"({', '.join(route.keys) or 'custom key generator'}); do not pass a SowKey"
    )
