"""Helpers for the replica tests: changelog transactions written as the processor writes
them, and a replica following them on a thread."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import orjson

from processor import changelog
from processor.changelog import PROGRESS_KEY, encode_progress
from processor.log import TopicSpec
from processor.log.kafka.readers import KafkaChangelogTail
from processor.log.kafka.settings import ensure_topics
from processor.log.kafka.transactional import KafkaTransactionalLog
from processor.replica.replica import Replica
from processor.replica.table import SowTable
from processor.topology.model import SowTopic, Topology

#: (SowKey, message or None for a delete)
Change = tuple[str, dict[str, object] | None]


class ChangelogWriter:
    """Writes changelog transactions for one SOW topic the way the processor does: the
    changes, then one PROGRESS record per touched partition, in one Kafka transaction."""

    def __init__(self, bootstrap: str, topic: SowTopic, transactional_id: str) -> None:
        ensure_topics(bootstrap, [TopicSpec(topic.changelog_topic, topic.partitions, {})])
        self.topic = topic
        self.producer = KafkaTransactionalLog(bootstrap, transactional_id)
        self.log_offset = 0

    def transaction(self, partition: int, changes: Sequence[Change]) -> None:
        writer = changelog.EnvelopeWriter(
            self.topic.name, "json", self.topic.kafka_topic, partition
        )
        self.producer.begin()
        for sow_key, message in changes:
            key = sow_key.encode()
            if message is None:
                position = changelog.format_position(
                    self.topic.kafka_topic, partition, self.log_offset
                )
                headers = [("sow.reason", b"deleted"), ("sow.position", position)]
                self.producer.produce(self.topic.changelog_topic, None, key, partition, headers)
            else:
                envelope = writer.encode(self.log_offset, key, orjson.dumps(message), 1, 1)
                self.producer.produce(self.topic.changelog_topic, envelope, key, partition)
            self.log_offset += 1
        progress = [(self.topic.kafka_topic, partition, self.log_offset)]
        self.producer.produce_tracked(
            self.topic.changelog_topic, encode_progress(progress), PROGRESS_KEY, partition
        )
        self.producer.commit()

    def close(self) -> None:
        self.producer.close()


@contextlib.contextmanager
def following(replica: Replica) -> Iterator[Replica]:
    """Run the replica's applier on a thread for the block; stop and join it after."""
    replica.start_catching_up()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            replica.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield replica
    finally:
        replica.stop()
        thread.join(30)
    assert not errors, errors


def tail_on(bootstrap: str) -> Callable[[], KafkaChangelogTail]:
    return lambda: KafkaChangelogTail(bootstrap)


def contents(replica: Replica, topic: SowTopic) -> dict[bytes, bytes]:
    """A copy of a topic's records, read under the replica's lock."""

    def copy(tables: list[SowTable]) -> dict[bytes, bytes]:
        return dict(tables[0].envelopes)

    return replica.read([topic], copy)[0]


def eventually(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def single(topic: SowTopic) -> Topology:
    return Topology({topic.name: topic})
