"""The publish and sow_delete gateway: commands become records on the transaction log.

The gRPC service and the CLI use it; the rules (validation, SowKey computation, size
limits, duplicate-detection headers, waiting for the effect of a delete) live here once.
Nothing here writes state: the processor applies the commands in log order
(:mod:`processor.changelog.commands`). A plain topic takes publishes too: the message is
checked with its codec, the record key is the publisher's SowKey or empty (spread over
the partitions in turn), and subscribers receive it live.

Publishes never wait for a flush: records join the log writer's batches and each caller
waits only for its own acknowledgement, so concurrent publishes share produce requests.
A publish the broker has not confirmed by the caller's deadline fails with
UnconfirmedWriteError: it may still be written, which is why publishers name themselves
and number their messages (each (publisher, sequence) is applied once).

A delta_publish goes to the log as given, with header ``sow.delta``; its SowKey comes
from its own fields, so it must give the Key fields. On avro topics a delta in text form
stays JSON on the log (the processor merges it); on a plain topic it is published as is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from processor.changelog.commands import (
    DELTA_HEADER,
    FILTER_DELETE_KEY,
    FILTER_HEADER,
    PUBLISHER_HEADER,
    SEQUENCE_HEADER,
)
from processor.errors import (
    InvalidRequestError,
    PositionTimeoutError,
    SowError,
    UnconfirmedWriteError,
)
from processor.expr import compile as compile_expression
from processor.keys import partition_for, validate_user_key
from processor.log import Delivery, Headers, LogPosition, LogRecord, LogWriter
from processor.messages import Codec, codec_for
from processor.publish.entitled import WriteFilters, delete_filter, keys_filter
from processor.publish.headers import command_headers
from processor.publish.requests import (
    Deleted,
    PublishColumns,
    PublishCommand,
    Published,
    PublishFields,
)
from processor.publish.routes import (
    HEADERS_ALLOWANCE,
    PublishRoute,
    delta_form,
    delta_key,
    publish_key,
    record_partition,
    shared_headers,
    too_large,
)
from processor.security import OPEN, RequestContext
from processor.topology.model import SowTopic, Topic, Topology
from processor.topology.topics import (
    is_pattern,
    pattern_topic,
    resolve_publish_topic,
    resolve_topic,
    resolve_topics,
    restricted,
    topic_restriction,
    writable,
)

DEFAULT_TIMEOUT_S = 30.0
#: Publish routes kept at most (one per topic name a publish used).
MAX_ROUTES = 4096


class PendingPublishes:
    """Publishes handed to the log writer, in the order given; thread-safe.

    A publish refused before it reached the writer (bad message, too large, unknown
    topic) already has its error; the others complete as the broker acknowledges them.
    """

    __slots__ = ("_delivery", "_keyed", "_slots")

    def __init__(
        self, keyed: list[str | SowError], delivery: Delivery | None, slots: list[int]
    ) -> None:
        self._keyed = keyed
        self._delivery = delivery
        self._slots = slots

    @classmethod
    def refused(cls, reasons: list[SowError]) -> PendingPublishes:
        """Publishes refused before any reached the log writer, with their reasons."""
        return cls(list(reasons), None, [-1] * len(reasons))

    def __len__(self) -> int:
        return len(self._keyed)

    def wait(self, timeout_s: float) -> bool:
        """Block until every publish is acknowledged or refused; False on timeout."""
        return self._delivery is None or self._delivery.wait(timeout_s)

    def results(self) -> list[Published | SowError]:
        """Per publish: where it landed, or why it was refused (after ``wait``)."""
        delivered = [] if self._delivery is None else self._delivery.results()
        out: list[Published | SowError] = []
        made = tuple.__new__  # Published(...) without its Python-level __new__
        for keyed, slot in zip(self._keyed, self._slots, strict=True):
            if isinstance(keyed, SowError):
                out.append(keyed)
                continue
            result = delivered[slot]
            if isinstance(result, SowError):
                out.append(result)
            elif isinstance(result, Exception):
                out.append(SowError(f"the publish failed: {result!r}"))
            else:
                out.append(made(Published, (result, keyed)))
        return out


class AppliedDeletes(Protocol):
    """Where the gateway learns that delete commands were applied (the read replica)."""

    def wait_for(self, positions: Sequence[LogPosition], timeout_s: float) -> bool:
        """Block until every position is applied or the timeout; return whether it was."""
        ...

    def deleted(self, positions: Iterable[LogPosition]) -> int:
        """How many records the delete commands at these positions removed."""
        ...


class Gateway:
    """Turns publish and delete commands into log records. Thread-safe.

    The SowKey is computed here, before the record enters the log, with the same generator
    the processor uses, and the record goes to its SowKey's partition.
    """

    def __init__(
        self, topology: Topology, writer: LogWriter, replica: AppliedDeletes | None
    ) -> None:
        self.topology = topology
        self.writer = writer
        self.replica = replica
        self._routes: dict[str, PublishRoute] = {}
        self._codecs: dict[str, Codec] = {}
        self._write_filters = WriteFilters()

    def _route(self, topic_name: str) -> PublishRoute:
        route = self._routes.get(topic_name)
        if route is None:
            topic = resolve_publish_topic(self.topology, topic_name)
            if isinstance(topic, SowTopic):
                writable(topic)
            concrete = None
            if isinstance(topic, SowTopic) and topic.pattern is not None:
                concrete = topic_name
                if pattern_topic(self.topology, topic_name) is None:
                    raise InvalidRequestError(
                        f"{topic_name} is a Pattern topic: publish to a topic its pattern "
                        f"{topic.pattern!r} matches"
                    )
            route = PublishRoute(topic, self.writer.max_record_bytes, concrete)
            if concrete is not None and len(self._routes) >= MAX_ROUTES:
                # Publishers name a Pattern topic's topics freely: the routes made for
                # them are remade on demand rather than kept without bound.
                self._routes = {}
            self._routes[topic_name] = route
        return route

    def keeps_sow(self, topic_name: str) -> bool:
        """Whether publishes to the topic are applied to a SOW (False for a plain topic:
        a publish there is done once it is in the log)."""
        return not self._route(topic_name).plain

    def codec(self, topic: Topic) -> Codec:
        """The topic's codec (made once)."""
        codec = self._codecs.get(topic.name)
        if codec is None:
            codec = self._codecs[topic.name] = codec_for(topic)
        return codec

    def sow_key_for(self, topic: SowTopic, data: bytes, sow_key: str = "") -> str:
        """The SowKey of a message: generated, or validated when publisher-provided."""
        return publish_key(self._route(topic.name), data, sow_key)

    def record_for(self, command: PublishFields) -> tuple[LogRecord, str]:
        """Validate and key a publish: its log record and SowKey (raises SowError)."""
        route = self._route(command.topic)
        data = command.data
        delta = command.delta and not route.plain
        if delta:
            key = delta_key(route, data, command.text_form, command.sow_key)
        else:
            if command.text_form:
                data = route.codec.from_text(data)
            key = publish_key(route, data, command.sow_key)
        raw = key.encode()
        limit = route.limit - len(raw)
        headers: Headers | None = None
        if (
            command.expiration
            or command.correlation_id
            or command.sequence
            or command.publisher
            or delta
        ):
            headers = command_headers(command)
            if delta:
                headers.append((DELTA_HEADER, delta_form(route, command.text_form)))
            if len(data) > limit - HEADERS_ALLOWANCE:
                limit -= sum(len(name) + len(value) for name, value in headers)
        if route.extra_headers:
            headers = [*(headers or ()), *route.extra_headers]
        if len(data) > limit:
            raise too_large(route, len(data), limit)
        return (route.kafka_topic, raw or None, data, record_partition(route, raw), headers), key

    def publish_many(
        self, commands: Sequence[PublishFields], context: RequestContext = OPEN
    ) -> PendingPublishes:
        """Hand publishes to the log writer without waiting: one call for a batch, so the
        records share produce requests. Bad publishes, and those ``context``'s principal
        may not write, are refused one by one."""
        keyed: list[str | SowError] = []
        slots: list[int] = []
        records: list[LogRecord] = []
        checks: dict[str, Callable[[Any, str], None] | None] = {}
        for command in commands:
            try:
                record, key = self.record_for(command)
                if context.rights.restricted:
                    self._check_write(context, command, record[2] or b"", key, checks)
            except SowError as exc:
                keyed.append(exc)
                slots.append(-1)
                continue
            keyed.append(key)
            slots.append(len(records))
            records.append(record)
        return PendingPublishes(keyed, self.writer.submit(records), slots)

    def _check_write(
        self,
        context: RequestContext,
        command: PublishFields,
        data: bytes,
        key: str,
        checks: dict[str, Callable[[Any, str], None] | None],
    ) -> None:
        """Refuse a publish its principal may not write (publish/entitled.py)."""
        if command.topic not in checks:
            checks[command.topic] = self._write_filters.checker(context, command.topic)
        check = checks[command.topic]
        if check is not None:
            route = self._route(command.topic)
            if command.delta and not route.plain:
                check(route.codec.decode_delta(data, command.text_form), key)
            else:
                check(route.codec.decode(data), key)

    def publish_columns(
        self, batch: PublishColumns, context: RequestContext = OPEN
    ) -> PendingPublishes:
        """:meth:`publish_many` for a columnar batch: options are checked once, and each
        message costs only its decoding, SowKey and produce. A problem with the options
        refuses every message; a problem with one message refuses it alone."""
        count = len(batch.data)
        try:
            route = self._route(batch.topic)
            shared = shared_headers(batch, route, count)
            check = self._write_filters.checker(context, batch.topic)
        except SowError as exc:
            return PendingPublishes.refused([exc] * count)
        keyed: list[str | SowError] = []
        slots: list[int] = []
        kafka_topic, partitions, codec = route.kafka_topic, route.partitions, route.codec
        key_of, decode = route.key_function, codec.decode
        from_text = codec.from_text if batch.text_form else None
        delta = batch.delta and not route.plain
        if delta:
            shared = [*shared, (DELTA_HEADER, delta_form(route, batch.text_form))]
        shared = [*shared, *route.extra_headers]
        publisher = (PUBLISHER_HEADER, batch.publisher.encode()) if batch.publisher else None
        fixed = sum(len(name) + len(value) for name, value in shared)
        if publisher is not None:
            fixed += len(PUBLISHER_HEADER) + len(publisher[1]) + len(SEQUENCE_HEADER) + 20
        limit = route.limit - fixed

        def records() -> Iterator[LogRecord]:
            # Read by the writer as it produces: each record lives only until produced.
            written, sequence, shared_headers = 0, batch.first_sequence, shared or None
            for index, given in enumerate(batch.data):
                try:
                    data = given if from_text is None or delta else from_text(given)
                    message = None
                    if delta:
                        sow_key = batch.sow_keys[index] if batch.sow_keys else ""
                        key = delta_key(route, data, batch.text_form, sow_key)
                    elif key_of is not None:
                        message = decode(data)
                        key = key_of(message)
                    elif route.plain:
                        message = decode(data)
                        key = validate_user_key(batch.sow_keys[index]) if batch.sow_keys else ""
                    else:
                        key = validate_user_key(batch.sow_keys[index])
                    if check is not None:  # the write filter, on the message decoded once
                        if message is None:
                            message = (
                                route.codec.decode_delta(data, batch.text_form)
                                if delta
                                else decode(data)
                            )
                        check(message, key)
                    raw = key.encode()
                    if len(data) > limit - len(raw):
                        raise too_large(route, len(data), limit - len(raw))
                except SowError as exc:
                    keyed.append(exc)
                    slots.append(-1)
                    continue
                headers = shared_headers
                if publisher is not None:
                    numbered = (SEQUENCE_HEADER, b"%d" % (sequence + index))
                    headers = [*shared, publisher, numbered] if shared else [publisher, numbered]
                keyed.append(key)
                slots.append(written)
                written += 1
                partition = partition_for(raw, partitions) if raw else record_partition(route, raw)
                yield kafka_topic, raw or None, data, partition, headers

        return PendingPublishes(keyed, self.writer.submit(records()), slots)

    def publish(
        self,
        command: PublishCommand,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        context: RequestContext = OPEN,
    ) -> Published:
        """Publish one message and wait up to ``timeout_s`` for the broker's
        acknowledgement; return its position."""
        pending = self.publish_many([command], context)
        if not pending.wait(timeout_s):
            raise UnconfirmedWriteError(
                f"the broker did not confirm the publish to {command.topic} within "
                f"{timeout_s:.3g}s; it may still be written. Resend it with the same "
                "publisher and sequence (a duplicate is then discarded), or query to see"
            )
        result = pending.results()[0]
        if isinstance(result, SowError):
            raise result
        return result

    def delete(
        self,
        topic_name: str,
        sow_keys: Sequence[str],
        timeout_s: float = 0.0,
        context: RequestContext = OPEN,
    ) -> Deleted:
        """Delete records by SowKey (under a write filter: those of them it matches)."""
        topic = writable(resolve_topic(self.topology, topic_name))
        if not sow_keys:
            raise InvalidRequestError("sow_delete by keys needs at least one SowKey")
        keys = list(dict.fromkeys(sow_keys))
        if topic.user_keyed:
            keys = [validate_user_key(k) for k in keys]
        if delete_filter(context, topic_name, "") != "":
            return self.delete_by_filter(topic_name, keys_filter(keys), timeout_s, context)
        return self._write_deletes(
            [
                (
                    topic.kafka_topic,
                    k.encode(),
                    None,
                    partition_for(k.encode(), topic.partitions),
                    None,
                )
                for k in keys
            ],
            timeout_s,
        )

    def delete_by_filter(
        self,
        topic_name: str,
        text: str,
        timeout_s: float = 0.0,
        context: RequestContext = OPEN,
    ) -> Deleted:
        """Delete every record matching a filter (``1=1`` deletes all) in the topic, or in
        every topic a pattern matches, and the caller's write filter. The filter is
        checked before anything is written."""
        topics = resolve_topics(self.topology, topic_name)
        if len(topics) == 1:
            writable(topics[0])
        topics = [t for t in topics if not t.derived]  # a pattern's views stay as they are
        if not text.strip():
            raise InvalidRequestError("sow_delete by filter needs a filter; use 1=1 for all")
        # Build the evaluation code too, so everything the processor will do with the
        # filter is known to work before any command is written.
        _ = compile_expression(text).source
        text = restricted(text, topic_restriction(self.topology, topic_name))
        literal = len(topics) == 1 and not is_pattern(topic_name)
        headers = {
            t.name: [(FILTER_HEADER, delete_filter(context, name, text).encode())]
            for t in topics
            for name in (topic_name if literal else t.name,)
        }
        commands: list[LogRecord] = [
            (t.kafka_topic, FILTER_DELETE_KEY, None, p, headers[t.name])
            for t in topics
            for p in range(t.partitions)
        ]
        return self._write_deletes(commands, timeout_s)

    def delete_by_data(
        self,
        topic_name: str,
        data: bytes,
        timeout_s: float = 0.0,
        text_form: bool = False,
        context: RequestContext = OPEN,
    ) -> Deleted:
        """Delete the record that publishing this message would update."""
        topic = resolve_topic(self.topology, topic_name)
        if topic.user_keyed:
            raise InvalidRequestError(
                f"topic {topic.name} has publisher-provided SowKeys, so a message does not "
                "say which record it would update; delete by SowKeys instead"
            )
        route = self._route(topic_name)  # a Pattern topic's topic: keyed by its own name
        if text_form:
            data = route.codec.from_text(data)
        return self.delete(topic.name, [publish_key(route, data, "")], timeout_s, context)

    def _write_deletes(self, commands: list[LogRecord], timeout_s: float) -> Deleted:
        timeout = timeout_s or DEFAULT_TIMEOUT_S
        deadline = time.monotonic() + timeout
        delivery = self.writer.submit(commands)
        if not delivery.wait(timeout):
            raise UnconfirmedWriteError(
                f"the broker did not confirm the {len(commands)} delete commands within "
                f"{timeout:g}s; they may still be written and applied"
            )
        positions: list[LogPosition] = []
        for result in delivery.results():
            if isinstance(result, Exception):
                raise result if isinstance(result, SowError) else SowError(repr(result))
            positions.append(result)
        if self.replica is None:
            return Deleted(-1, positions)
        if not self.replica.wait_for(positions, max(deadline - time.monotonic(), 0.0)):
            raise PositionTimeoutError(
                f"the deletes were written to the log at {positions} but not applied within "
                f"{timeout:g}s; they will still be applied when the processor catches up"
            )
        return Deleted(self.replica.deleted(positions), positions)
