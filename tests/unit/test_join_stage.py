"""The join stages of views of several Joins (processor/views/join.py) under every order
in which partitions may take their records: the records of four topics are fed as the
view's feed sends them, each partition applies its queue in runs of any length, in any
interleaving with the others (a partition's own records stay in order, as Kafka keeps
them), sometimes forgetting its memory and reloading from its state; at the end the
view's members equal a left-outer join computed in plain Python, with and without
JoinNullEquivalency.

The integration tests (tests/integration/test_view_joins.py) run the same joins through
Kafka and the processor; this one reaches interleavings they cannot force (a record's
retract and upsert taken by two partitions in either order). The engine's batch and
store are stood in for by the few calls the join stage makes.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from processor.changelog import STATE_PREFIX
from processor.expr.values import extract, text_of
from processor.topology.join_plan import join_plan
from processor.topology.yaml_loader import parse_yaml
from processor.views.contribution import decode_values, encode_values
from processor.views.definition import ViewDefinition
from processor.views.feed import DIGEST_HEADER, MEMBER_HEADER, SIDE_HEADER, STEP_HEADER, member_id
from processor.views.join import JoinStage

Message = dict[str, Any]

TOPICS = """
topics:
  - {name: orders, key: /id}
  - {name: customers, key: /id}
  - {name: regions, key: /code}
  - {name: prices, key: /id}
"""

#: Four topics in three steps; step 2 joins on fields of two earlier topics; a later
#: Join is written right to left.
MIXED = """
views:
  - name: V
    message_type: json
    partitions: 5
    joins:
      - "[orders]./cust = [customers]./id"
      - "[regions]./code = [customers]./region"
      - "[orders]./sym = [regions]./sym"
      - "[prices]./venue = [regions]./venue"
    projection: ["[regions]./desk AS /desk", "SUM([orders]./qty) AS /qty",
                 "MAX([customers]./name) AS /n", "MAX([prices]./px) AS /px"]
    grouping: ["[regions]./desk"]
"""


def generate(rnd: random.Random) -> tuple[str, int, Message | None]:
    """A change of a random record (None: its delete); NULL, missing and empty join
    values on every side."""
    topic = rnd.choice(["orders", "customers", "regions", "prices"])
    key, pick = rnd.randint(0, 5), rnd.choice
    if rnd.random() < 0.15:
        return topic, key, None
    if topic == "orders":
        return topic, key, {"id": key, "cust": pick(["c0", "c1", ""]), "sym": pick(["I", None])}
    if topic == "customers":
        message: Message = {"id": pick(["c0", "c1", ""]), "name": pick(["ann", "bob"])}
        if rnd.random() < 0.8:
            message["region"] = pick(["r0", "r1", ""])
        return topic, key, message
    if topic == "regions":
        return (
            topic,
            key,
            {
                "code": pick(["r0", "r1", ""]),
                "desk": pick(["d0", "d1"]),
                "sym": pick(["I", "M", ""]),
                "venue": pick(["X", None]),
            },
        )
    return topic, key, {"id": key, "venue": pick(["X", "Y", ""]), "px": rnd.randint(1, 99)}


class Record:
    """A record of the repartition topic or the view's input, as a partition reads it."""

    def __init__(self, topic: str, key: bytes, value: bytes | None, headers: list[Any]) -> None:
        self._topic, self._key, self._value, self._headers = topic, key, value, headers

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[Any]:
        return self._headers


class Store:
    """A partition's committed state (the meta column the join stage reads)."""

    def __init__(self) -> None:
        self.meta: dict[bytes, bytes] = {}

    def meta_items(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return sorted((k, v) for k, v in self.meta.items() if k.startswith(prefix))


class State:
    def __init__(self) -> None:
        self.store = Store()


class Batch:
    """One transaction of one partition: its state changes apply at ``commit``."""

    def __init__(self, number: int, state: State, sent: list[tuple[str, int, Record]]) -> None:
        self.number, self.state, self._sent = number, state, sent
        self._pending: dict[bytes, bytes | None] = {}

    def put_state(self, key: bytes, value: bytes | None) -> None:
        self._pending[STATE_PREFIX + key] = value

    def produce(
        self, topic: str, value: bytes | None, key: bytes, partition: int, headers: list[Any]
    ) -> None:
        self._sent.append((topic, partition, Record(topic, key, value, list(headers))))

    def commit(self) -> None:
        for key, value in self._pending.items():
            if value is None:
                self.state.store.meta.pop(key, None)
            else:
                self.state.store.meta[key] = value


def _text(message: Message | None, field: str) -> str | None:
    if message is None:
        return None
    return text_of(extract(message, tuple(s for s in field.split("/") if s))) or None


def expected(definition: ViewDefinition, records: dict[str, dict[int, Message]]) -> Counter[str]:
    """The joined rows' aggregation inputs, by a plain left outer join."""
    view = definition.topic.view
    assert view is not None
    plan = join_plan(view.joins)
    topics = [topic.topic for topic in definition.join_topics]
    rows: list[tuple[Message | None, ...]] = [(m,) for m in records[topics[0]].values()]
    for step in plan.steps:
        joined: list[tuple[Message | None, ...]] = []
        for row in rows:
            left = tuple(_text(row[p.left], p.left_field) for p in step.pairs)
            hits: list[Message | None] = [
                message
                for message in records[topics[step.number]].values()
                if tuple(_text(message, p.right_field) for p in step.pairs) == left
                and (definition.null_equivalency or None not in left)
            ]
            joined.extend((*row, hit) for hit in hits or [None])
        rows = joined
    counted: Counter[str] = Counter()
    for row in rows:
        values: list[Any] = [None] * len(definition.aggregation.inputs)
        for topic, message in zip(definition.join_topics, row, strict=True):
            for index, steps in topic.inputs:
                values[index] = None if message is None else extract(message, steps)
        counted[repr(tuple(values))] += 1
    return counted


def simulate(
    definition: ViewDefinition,
    seed: int,
    changes: int,
    make: Callable[[random.Random], tuple[str, int, Message | None]],
) -> tuple[dict[str, dict[int, Message]], Counter[str]]:
    """Feed ``changes`` random changes and apply them in a random interleaving of the
    partitions; return the records and the view's members."""
    rnd = random.Random(seed)
    topic = definition.topic
    repartition, view_input = topic.repartition_topic, topic.kafka_topic
    partitions = range(topic.partitions)
    stages = [JoinStage(definition) for _ in partitions]
    states = [State() for _ in partitions]
    queues: dict[tuple[str, int], list[Record]] = {
        (name, p): [] for name in (repartition, view_input) for p in partitions
    }
    members: dict[tuple[bytes, bytes], Any] = {}
    records: dict[str, dict[int, Message]] = {t.topic: {} for t in definition.join_topics}
    number = 0

    def feed(source: str, key: int, old: Message | None, new: Message | None) -> None:
        index = definition.join_index(source)
        side = definition.join_topics[index]

        def read(message: Message) -> tuple[bytes, Any]:
            values, read = side.read(message)
            return definition.join_key(max(index, 1), values), read

        before = None if old is None else read(old)
        after = None if new is None else read(new)
        headers = [
            (MEMBER_HEADER, member_id(source, str(key).encode())),
            (DIGEST_HEADER, definition.digest),
            (SIDE_HEADER, b"1" if index else b"0"),
        ]
        if index > 1:
            headers.append((STEP_HEADER, str(index).encode()))
        if before is not None and (after is None or after[0] != before[0]):
            queue = queues[(repartition, definition.partition_of(before[0]))]
            queue.append(Record(repartition, before[0], None, headers))
        if after is not None:
            queue = queues[(repartition, definition.partition_of(after[0]))]
            queue.append(Record(repartition, after[0], encode_values(0, after[1]), headers))

    def take_some() -> bool:
        nonlocal number
        ready = [queue for queue, items in queues.items() if items]
        if not ready:
            return False
        name, partition = rnd.choice(ready)
        queue = queues[(name, partition)]
        run = rnd.randint(1, len(queue))
        taken, queue[:] = queue[:run], queue[run:]
        number += 1
        if name == repartition:
            sent: list[tuple[str, int, Record]] = []
            batch = Batch(number, states[partition], sent)
            stages[partition].apply(taken, batch, _raise)  # type: ignore[arg-type]
            batch.commit()
            if rnd.random() < 0.2:
                stages[partition].discard()  # memory lost: reloaded from the state
            for target, part, record in sent:
                queues[(target, part)].append(record)
            return True
        for record in taken:  # the view partitions' members
            member = (record.key(), dict(record.headers())[MEMBER_HEADER])
            value = record.value()
            if value is None:
                members.pop(member, None)
            else:
                members[member] = decode_values(value)[1]
        return True

    for _ in range(changes):
        source, key, message = make(rnd)
        old = records[source].get(key)
        if message is None:
            records[source].pop(key, None)
        else:
            records[source][key] = message
        if old is not None or message is not None:
            feed(source, key, old, message)
        while rnd.random() < 0.3 and take_some():
            pass
    while take_some():
        pass
    return records, Counter(repr(tuple(values)) for values in members.values())


def _raise(_record: object, exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize("null_equivalency", [False, True])
def test_every_interleaving_of_the_partitions_gives_the_left_outer_join(
    null_equivalency: bool,
) -> None:
    text = TOPICS + MIXED + ("    join_null_equivalency: true\n" if null_equivalency else "")
    topology = parse_yaml(text, "t.yaml")
    definition = ViewDefinition(topology.topics["V"], topology.topics)
    assert len(definition.steps) == 3
    for seed in range(40):
        records, members = simulate(definition, seed, 150, generate)
        assert members == expected(definition, records), seed
