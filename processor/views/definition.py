"""A view compiled for the processor: its aggregation, filter, output codec, and how a
group becomes the view's SowKey.

The view's SowKey is generated from its grouping values with the view's KeyDomain (the
view's name unless configured), by the documented key algorithm
(:func:`processor.keys.checksum_key`) over the grouping values' text forms. ``digest``
identifies the definition: what the underlying topics send carries it, and a view
partition applies only what was computed by its own definition.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from processor import changelog
from processor.expr import (
    Aggregation,
    ContextInput,
    Expression,
    FieldInput,
    clauses,
    compile_node,
    parser,
)
from processor.expr.qualified import joined_record_steps, unqualify
from processor.expr.values import extract, text_of
from processor.keys import checksum_key, partition_for
from processor.messages import Codec, codec_for
from processor.topology.join_plan import JoinPlan, join_plan
from processor.topology.model import SowTopic, ViewConflation, ViewSpec
from processor.topology.view_topics import conflated_underlying, underlying_topics
from processor.views.contribution import GroupKey, Values, contribution

#: A join value's text (None: NULL, missing or empty).
JoinValue = str | None
#: The join key of step 1's records without a join value (a view of two topics joined on
#: one field); :meth:`ViewDefinition.join_matches` says which keys match.
NO_JOIN_VALUE = b"n"


def _steps(field: str) -> tuple[str, ...]:
    return tuple(step for step in field.strip("/").split("/") if step)


class JoinTopic:
    """One topic of a join (:mod:`processor.topology.join_plan`): a record's values are
    the aggregation's inputs the topic supplies (``inputs``: their places and paths in its
    messages), then the texts of its fields that later steps join on (``carried``);
    ``key_fields`` are the fields its own step joins on (topic 0: step 1's left-hand
    fields). ``offset``: where its values start in a joined row."""

    __slots__ = ("_carried", "carried", "inputs", "key_fields", "offset", "topic", "width")

    def __init__(
        self,
        topic: str,
        name: str,
        aggregation: Aggregation,
        key_fields: tuple[str, ...],
        carried: tuple[str, ...],
        offset: int,
    ) -> None:
        self.topic = topic
        step = joined_record_steps(name, ())[0]
        self.inputs = tuple(
            (index, item.steps[1:])
            for index, item in enumerate(aggregation.inputs)
            if isinstance(item, FieldInput) and item.steps[:1] == (step,)
        )
        self.key_fields = tuple(_steps(field) for field in key_fields)
        self.carried = carried
        self._carried = tuple(_steps(field) for field in carried)
        self.width = len(self.inputs) + len(carried)
        self.offset = offset

    def read(self, message: Any) -> tuple[tuple[JoinValue, ...], Values]:
        """A record's join values (its step's) and its values."""
        key = tuple(text_of(extract(message, steps)) or None for steps in self.key_fields)
        inputs = tuple(extract(message, steps) for _, steps in self.inputs)
        carried = tuple(text_of(extract(message, steps)) or None for steps in self._carried)
        return key, inputs + carried

    def carried_at(self, field: str) -> int:
        """Where the text of a carried field is in a joined row."""
        return self.offset + len(self.inputs) + self.carried.index(field)


def _aggregation(view: ViewSpec, joined: bool) -> Aggregation:
    projection = ", ".join(view.projection)
    grouping = ", ".join(view.grouping)
    fields = tuple(
        dataclasses.replace(field, expr=unqualify(field.expr, joined))
        for text in view.projection
        for field in clauses.parse_projection(text)
    )
    groups = tuple(
        unqualify(group, joined) for text in view.grouping for group in clauses.parse_grouping(text)
    )
    return Aggregation(fields, groups, projection, grouping)


def digest_of(view: ViewSpec, topics: Mapping[str, SowTopic]) -> bytes:
    """What identifies a view's definition: everything its records depend on, the
    definitions of the views it reads included."""
    described: dict[str, Any] = {
        "reads": [
            digest_of(topic.view, topics).decode()
            for topic in underlying_topics(view, topics)
            if topic.view is not None
        ],
        "type": view.message_type,
        "underlying": [[ref.name, ref.message_type] for ref in view.underlying],
        "joins": [join.text for join in view.joins],
        "projection": list(view.projection),
        "grouping": list(view.grouping),
        "filter": view.filter,
        "key_domain": view.key_domain,
        "null_equivalency": view.join_null_equivalency,
    }
    if view.joins:  # the form of joined rows' ids: their join keys are part of them
        described["rows"] = 2
    copies = [  # only when it reads conflated topics: other views keep their digests
        derived_digest(topic, topics).decode()
        for topic in underlying_topics(view, topics)
        if topic.conflated is not None
    ]
    if copies:
        described["conflated"] = copies
    text = json.dumps(described, sort_keys=True).encode()
    return hashlib.blake2b(text, digest_size=8).hexdigest().encode()


def derived_digest(topic: SowTopic, topics: Mapping[str, SowTopic]) -> bytes:
    """What identifies a conflated topic's definition, with that of the view or
    conflated topic it copies (their records are rebuilt when theirs changes)."""
    spec = topic.conflated
    if spec is None:
        return b"" if topic.view is None else digest_of(topic.view, topics)
    reads = derived_digest(conflated_underlying(spec, topics), topics)
    described: list[object] = [spec.underlying, spec.filter, spec.message_type, reads.decode()]
    if spec.topic_format is not None or spec.enrichment:
        # Only when set, so a definition without them keeps the digest it always had.
        described += [spec.topic_format, list(spec.enrichment)]
    text = json.dumps(described).encode()
    return hashlib.blake2b(text, digest_size=8).hexdigest().encode()


class ViewDefinition:
    """One view, compiled (immutable; thread-safe)."""

    __slots__ = (
        "aggregation",
        "codec",
        "digest",
        "filter",
        "inline",
        "join_topics",
        "needs_context",
        "null_equivalency",
        "sources",
        "steps",
        "topic",
    )

    def __init__(self, topic: SowTopic, topics: Mapping[str, SowTopic]) -> None:
        view = topic.view
        assert view is not None, f"{topic.name} is not a view"
        self.topic = topic
        joined = bool(view.joins)
        self.aggregation = _aggregation(view, joined)
        self.filter: Expression | None = None
        if view.filter and view.filter.strip():
            self.filter = compile_node(unqualify(parser.parse(view.filter), joined), view.filter)
        #: The output messages' codec.
        self.codec: Codec = codec_for(topic)
        #: The topics read, each with its codec.
        self.sources: dict[str, Codec] = {
            source.name: codec_for(source) for source in underlying_topics(view, topics)
        }
        self.digest = digest_of(view, topics)
        #: A join's topics in join order, the preserved one first (empty: no join), and
        #: where the left-hand fields of each step from 2 on are in a joined row.
        self.join_topics: tuple[JoinTopic, ...] = ()
        self.steps: tuple[tuple[int, ...], ...] = ()
        if view.joins:
            self._plan(join_plan(view.joins))
        self.null_equivalency = view.join_null_equivalency
        #: Conflation inline: updates of one record, and of one group, may be conflated.
        self.inline = view.conflation is ViewConflation.INLINE
        #: Whether anything reads a record's context (SOW_KEY(), LAST_UPDATED()...): if
        #: not, only the message is decoded from an envelope.
        self.needs_context = any(
            isinstance(item, ContextInput)
            for item in (*self.aggregation.inputs, *(self.filter.inputs if self.filter else ()))
        )

    def _plan(self, plan: JoinPlan) -> None:
        carried: list[list[str]] = [[] for _ in plan.topics]
        for step in plan.steps[1:]:
            for pair in step.pairs:
                if pair.left_field not in carried[pair.left]:
                    carried[pair.left].append(pair.left_field)
        topics: list[JoinTopic] = []
        offset = 0
        for index, name in enumerate(plan.topics):
            step = plan.steps[max(index, 1) - 1]
            keys = tuple(p.right_field if index else p.left_field for p in step.pairs)
            topic = JoinTopic(
                self._scoped(name), name, self.aggregation, keys, tuple(carried[index]), offset
            )
            topics.append(topic)
            offset += topic.width
        self.join_topics = tuple(topics)
        self.steps = tuple(  # step 1's left-hand fields are read from topic 0's records
            tuple(topics[pair.left].carried_at(pair.left_field) for pair in step.pairs)
            if step.number > 1
            else ()
            for step in plan.steps
        )

    def _scoped(self, name: str) -> str:
        """The topology's name of a topic the view reads (scoped names included)."""
        if name in self.sources:
            return name
        (scoped,) = (source for source in self.sources if source.endswith(f".[{name}]"))
        return scoped

    def join_index(self, source: str) -> int:
        """The place of one of the topics read in the join order."""
        return next(i for i, topic in enumerate(self.join_topics) if topic.topic == source)

    def join_key(self, step: int, values: tuple[JoinValue, ...]) -> bytes:
        """The key of the records that meet by ``values`` in join step ``step``; its view
        partition (:meth:`partition_of`) joins them. Step 1 of one field keeps the
        two-topic form (``NO_JOIN_VALUE``, or ``v`` and the text)."""
        if step == 1 and len(values) == 1:
            (value,) = values
            return NO_JOIN_VALUE if value is None else b"v" + value.encode()
        marker = b"p" if None in values else b"c"
        return marker + step.to_bytes(2, "big") + json.dumps(values).encode()

    def join_matches(self, key: bytes) -> bool:
        """Whether records of a join key join (NULL values only with
        JoinNullEquivalency)."""
        return key[:1] in (b"v", b"c") or self.null_equivalency

    def join_width(self, step: int, side: int) -> int:
        """How many values a record of a step's side has (side 0: the rows of the
        topics before it; side 1: the step's topic)."""
        if side:
            return self.join_topics[step].width
        return sum(topic.width for topic in self.join_topics[:step])

    def join_read(self, source: str, envelope: bytes) -> tuple[bytes, Values]:
        """A join's record (its changelog envelope): its join key and values."""
        message: Any = self.sources[source].decode(changelog.data_of(envelope))
        index = self.join_index(source)
        values, read = self.join_topics[index].read(message)
        return self.join_key(max(index, 1), values), read

    def joined_row(self, step: int, left: Values, right: Values | None) -> tuple[bytes, Values]:
        """A row of join step ``step`` (``right`` None: no match): the key it is sent by
        (the next step's join key; after the last step, its group's view SowKey) and its
        values (the next step's left-hand side; after the last step, the aggregation's
        inputs)."""
        row = left + (right if right is not None else (None,) * self.join_topics[step].width)
        if step < len(self.steps):
            texts = tuple(row[position] for position in self.steps[step])
            return self.join_key(step + 1, texts), row
        values: list[Any] = [None] * len(self.aggregation.inputs)
        for topic in self.join_topics:
            start = topic.offset
            for (index, _), value in zip(
                topic.inputs, row[start : start + len(topic.inputs)], strict=True
            ):
                values[index] = value
        inputs = tuple(values)
        return self.view_key(self.aggregation.group_key(inputs)), inputs

    @property
    def name(self) -> str:
        return self.topic.name

    def view_key(self, group: GroupKey) -> bytes:
        """The view record's SowKey of a group."""
        return checksum_key(self.topic.domain, group).encode()

    def partition_of(self, view_key: bytes) -> int:
        return partition_for(view_key, self.topic.partitions)

    def contribution_of(self, source: str, envelope: bytes) -> tuple[GroupKey, Values] | None:
        """An underlying record's group and input values (None: filtered out)."""
        if self.needs_context:
            decoded = changelog.decode(envelope)
            message: Any = self.sources[source].decode(decoded.data)
            return contribution(self.aggregation, self.filter, message, decoded.context())
        message = self.sources[source].decode(changelog.data_of(envelope))
        return contribution(self.aggregation, self.filter, message)

    def encode(self, message: dict[str, Any]) -> bytes:
        """A group's output message in the view's message type."""
        return self.codec.encode_json(message)
