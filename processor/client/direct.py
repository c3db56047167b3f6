"""Publishing straight to Kafka, without the gRPC hop (issue 18 item 1).

A :class:`DirectPublisher` does what the query service's gateway does with a publish, in
the publisher's own process: it validates the message, computes its SowKey with the
topic's generator, writes it to the SowKey's partition of the topic's input log with the
same headers (expiration, correlation id, delta) and, for duplicate detection, the same
publisher name and sequence numbers, through an idempotent producer. What it returns is
what the gateway returns: the log position and the SowKey.

Acknowledgements are AMPS's: ``persisted`` (the default) once the broker has the message;
``processed`` once the query service given as ``server`` has also applied it, so a query
or subscription there sees it when the call returns (one wait per batch, a SowQuery with
the batch's positions as its ``min_position``).

It needs the broker's address and the topology the processor runs with; Python
publishers use it to skip Python gRPC's cost per call, and everyone else keeps gRPC.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from processor.client.credentials import ClientSecurity
from processor.client.sow_client import PublisherSequences, SowClient, ack_type_of
from processor.config import Settings
from processor.errors import (
    ConfigurationError,
    PositionTimeoutError,
    ServiceError,
    SowError,
    UnconfirmedWriteError,
)
from processor.log.kafka.writer import KafkaLogWriter
from processor.publish.gateway import DEFAULT_TIMEOUT_S, Gateway, PendingPublishes
from processor.publish.requests import PublishColumns, Published
from processor.topology.model import Topology

#: What a publish gives back: where it landed, or why it was refused.
Result = Published | SowError


class DirectPublisher:
    """Publishes to the input topics of ``topology`` on the broker at ``bootstrap``.

    Thread-safe. Duplicate detection as with :class:`~processor.client.sow_client.SowClient`:
    each publisher object (and each thread using it) publishes under a name of its own
    (``publisher`` plus a suffix; default: host, process and a random part) with
    sequence numbers 1, 2, 3, ...; ``publisher=""`` turns it off. ``server``: the gRPC
    address of the query service that ``processed`` acknowledgements wait for, reached
    with ``security`` (TLS and credentials, :class:`~processor.client.credentials.ClientSecurity`;
    the broker's own security is the Kafka client settings). ``kafka``: librdkafka
    properties of its producer (``security.protocol``, ``sasl.*``, ``ssl.*``: docs/security.md,
    Kafka ACLs); None: ``SOW_KAFKA_PROPERTIES``, as every client of the product.
    """

    def __init__(
        self,
        bootstrap: str,
        topology: Topology | str | Path,
        publisher: str | None = None,
        server: str | None = None,
        security: ClientSecurity | None = None,
        kafka: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(topology, Topology):
            from processor.topology.loader import load_topology

            topology = load_topology(topology)
        self.topology = topology
        if kafka is None:
            kafka = Settings.from_env().client_properties
        self._writer = KafkaLogWriter(bootstrap, **kafka)
        self._gateway = Gateway(topology, self._writer, None)
        self._sequences = PublisherSequences(publisher)
        self._service = (
            None if server is None else SowClient(server, publisher="", security=security)
        )

    def close(self) -> None:
        """Deliver what is queued, then release the producer."""
        self._writer.close()
        if self._service is not None:
            self._service.close()

    def __enter__(self) -> DirectPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(
        self,
        topic: str,
        messages: Sequence[bytes],
        *,
        text_form: bool = False,
        expiration: float = 0.0,
        correlation_id: str = "",
        sow_keys: Sequence[str] = (),
        delta: bool = False,
    ) -> PendingPublishes:
        """Hand messages to the producer without waiting (``wait``, then ``results``, on
        what it returns). The options apply to every message; ``sow_keys`` gives one
        SowKey per message for topics whose publishers provide them."""
        publisher, first = self._sequences.take(len(messages))
        return self._gateway.publish_columns(
            PublishColumns(
                topic,
                messages,
                text_form=text_form,
                publisher=publisher,
                first_sequence=first,
                expiration=expiration,
                correlation_id=correlation_id,
                sow_keys=sow_keys,
                delta=delta,
            )
        )

    def publish(
        self,
        topic: str,
        data: bytes,
        *,
        sow_key: str = "",
        text_form: bool = False,
        expiration: float = 0.0,
        correlation_id: str = "",
        delta: bool = False,
        timeout: float = DEFAULT_TIMEOUT_S,
        ack: str = "persisted",
    ) -> Published:
        """Publish one message and wait for its acknowledgement (``ack``, see the module
        docstring); its position and SowKey. A refused message raises its SowError; no
        answer from the broker within ``timeout`` raises UnconfirmedWriteError, and a
        ``processed`` one not applied by then PositionTimeoutError (publish it again in
        either case: the duplicate is discarded)."""
        processed = self._processed(ack)
        started = time.monotonic()
        pending = self.submit(
            topic,
            [data],
            text_form=text_form,
            expiration=expiration,
            correlation_id=correlation_id,
            sow_keys=[sow_key] if sow_key else (),
            delta=delta,
        )
        result = _waited(pending, timeout, topic)[0]
        if isinstance(result, SowError):
            raise result
        if processed:
            self._until_processed(topic, [result], timeout - (time.monotonic() - started))
        return result

    def publish_stream(
        self,
        topic: str,
        messages: Iterable[bytes],
        *,
        text_form: bool = False,
        expiration: float = 0.0,
        correlation_id: str = "",
        delta: bool = False,
        batch_size: int = 1000,
        window: int = 8,
        timeout: float = DEFAULT_TIMEOUT_S,
        ack: str = "persisted",
    ) -> Iterator[Result]:
        """Publish many messages; yield one result per message, in order, as each is
        acknowledged (``ack``), with up to ``window`` batches of ``batch_size`` in flight.
        ``timeout`` bounds the wait for each batch's acknowledgement."""
        processed = self._processed(ack)

        def acknowledged(pending: PendingPublishes) -> list[Result]:
            started = time.monotonic()
            results = _waited(pending, timeout, topic)
            if processed:
                left = timeout - (time.monotonic() - started)
                self._until_processed(topic, results, left)
            return results

        def submit(batch: list[bytes]) -> PendingPublishes:
            return self.submit(
                topic,
                batch,
                text_form=text_form,
                expiration=expiration,
                correlation_id=correlation_id,
                delta=delta,
            )

        in_flight: deque[PendingPublishes] = deque()
        batch: list[bytes] = []
        for message in messages:
            batch.append(message)
            if len(batch) >= batch_size:
                in_flight.append(submit(batch))
                batch = []
                if len(in_flight) >= window:
                    yield from acknowledged(in_flight.popleft())
        if batch:
            in_flight.append(submit(batch))
        while in_flight:
            yield from acknowledged(in_flight.popleft())

    def _processed(self, ack: str) -> bool:
        """Whether ``ack`` asks for ``processed`` acknowledgements (which need a server)."""
        ack_type_of(ack)  # InvalidRequestError for an ack type there is not
        if ack != "processed":
            return False
        if self._service is None:
            raise ConfigurationError(
                "a processed acknowledgement waits for the query service to apply the "
                "message: give DirectPublisher the service's gRPC address (server=...)"
            )
        return True

    def _until_processed(self, topic: str, results: list[Result], timeout: float) -> None:
        """Return once the query service has applied every published one of ``results``
        (the last position per partition covers the ones before it)."""
        last: dict[tuple[str, int], Published] = {}
        for result in results:
            if isinstance(result, Published):
                last[result.position[:2]] = result
        if not last or not self._gateway.keeps_sow(topic):
            return
        assert self._service is not None
        positions = [
            {"topic": t, "partition": p, "offset": o}
            for t, p, o in (r.position for r in last.values())
        ]
        budget = max(timeout, 0.001)
        try:
            self._service.query(
                topic,
                sow_keys=[next(iter(last.values())).sow_key],
                min_position=positions,
                timeout_seconds=budget,
                timeout=budget + 5,
            )
        except ServiceError as exc:
            if exc.code != "DEADLINE_EXCEEDED":  # unreachable, wrong topology, ...: say so
                raise type(exc)(
                    exc.code,
                    f"{exc.details} (asking whether publishes to {topic} were applied; they "
                    f"are in the log at {positions}, and publishing again is safe)",
                ) from exc
            raise PositionTimeoutError(
                f"published to {topic} (in the log at {positions}) but the query service "
                f"did not apply it within {budget:.3g}s; the processor may be behind or "
                "stopped. Publishing again is safe (duplicates are discarded)"
            ) from exc


def _waited(pending: PendingPublishes, timeout: float, topic: str) -> list[Result]:
    if not pending.wait(timeout):
        raise UnconfirmedWriteError(
            f"the broker did not confirm publishes to {topic} within {timeout:.3g}s; they "
            "may still be written. Publish them again (duplicates are discarded)"
        )
    return pending.results()
