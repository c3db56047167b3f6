"""Restores in steps: a real changelog on the broker replayed into a real RocksDB store,
one fetched batch per step, with progress lines, publisher records, and a restore cut
short (a crash or a revoked partition) finishing on the next attempt."""

from __future__ import annotations

import re
from pathlib import Path

from confluent_kafka import Producer

from processor.app import topic_specs
from processor.changelog import (
    PROGRESS_KEY,
    EnvelopeWriter,
    encode_progress,
    publisher_record,
)
from processor.engine.publishers import meta_key
from processor.engine.recovery import restore_steps
from processor.log.kafka.readers import KafkaPartitionReader
from processor.log.kafka.settings import ensure_topics
from processor.state import CHANGELOG_OFFSET, offset_from
from processor.state.rocksdb import RocksDBStore
from processor.topology.model import SowTopic, Topology

RECORDS = 50_000


def _changelog(bootstrap: str, topic: SowTopic) -> int:
    """Write RECORDS upserts in transactions of 1,000, each with a publisher record and a
    progress record, as the processor does; return the changelog's end offset."""
    ensure_topics(bootstrap, topic_specs(Topology({topic.name: topic}), "sow.dead-letter"))
    writer = EnvelopeWriter(topic.name, "json", topic.kafka_topic, 0)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    written = 0
    for i in range(RECORDS):
        key = str(i).encode()
        value = writer.encode(i, key, b'{"orderId":%d}' % i, 1, 1)
        producer.produce(topic.changelog_topic, value, key, 0)
        written += 1
        if i % 1000 == 999:
            key, sequence = publisher_record(f"client-{i // 1000}", i)
            producer.produce(topic.changelog_topic, sequence, key, 0)
            progress = encode_progress([(topic.kafka_topic, 0, i + 1)])
            producer.produce(topic.changelog_topic, progress, PROGRESS_KEY, 0)
            written += 2
            producer.poll(0)
    assert producer.flush(30) == 0
    return written


def test_a_restore_runs_in_steps_reports_progress_and_resumes_after_a_cut(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.orders")
    end = _changelog(bootstrap, topic)
    reader = KafkaPartitionReader(bootstrap)
    store = RocksDBStore(tmp_path / "db")
    lines: list[str] = []
    figures: list[object] = []

    def report(text: str, extra: dict[str, object] | None = None) -> None:
        lines.append(text)
        figures.append(None if extra is None else extra["progress"])

    try:
        steps = restore_steps(store, topic, 0, reader, report, report_every_s=0.0)
        first = next(steps)
        assert 0 < first < end
        steps.close()  # cut short: what was written stays, with the offset it reflects
        cut = offset_from(store.get_meta(CHANGELOG_OFFSET))
        assert cut == first
        assert store.count() <= first

        lines.clear()
        figures.clear()
        steps = restore_steps(store, topic, 0, reader, report, report_every_s=0.0)
        counts = []
        while True:
            try:
                counts.append(next(steps))
            except StopIteration as done:
                restored = done.value
                break
        assert len(counts) >= 2, "a restore of this size takes more than one step"
        assert counts == sorted(counts)
        assert restored.applied == end - cut
        assert restored.log_next == {topic.kafka_topic: RECORDS}
        assert store.count() == RECORDS
        assert offset_from(store.get_meta(CHANGELOG_OFFSET)) == end
        assert store.get_meta(meta_key("client-49")) == b"49999"
        assert len(list(store.meta_items(b"publisher:"))) == 50

        assert re.fullmatch(
            rf"restoring ORDERS\[0\] from {re.escape(topic.changelog_topic)}: about "
            rf"[\d,]+ records to replay",
            lines[0],
        )
        middle = [
            int(m.group(1).replace(",", ""))
            for line in lines[1:-1]
            if (
                m := re.fullmatch(
                    r"restoring ORDERS\[0\]: ([\d,]+) of about [\d,]+ "
                    r"changelog records replayed",
                    line,
                )
            )
        ]
        assert len(middle) == len(lines) - 2 >= 1
        assert middle == sorted(middle)
        # a terminal shows them as a bar: (replayed, about how many), then complete
        assert [done for done, _ in figures[1:-1]] == middle  # type: ignore[misc]
        assert figures[-1] == (end - cut, end - cut)
        assert re.fullmatch(
            rf"restored ORDERS\[0\]: {end - cut:,} changelog records replayed in [\d.]+s, "
            rf"store at offset {end}",
            lines[-1],
        )
    finally:
        store.close()
        reader.close()
