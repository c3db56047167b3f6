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
from processor.topology.model import SowTopic, ViewConflation, ViewSpec
from processor.topology.view_topics import underlying_topics
from processor.views.contribution import GroupKey, Values, contribution

#: A join value's text (None: NULL, missing or empty).
JoinValue = str | None
#: The join key of the records without a join value.
NO_JOIN_VALUE = b"n"


class JoinSide:
    """One topic of a two-topic join: where its join field is, and which of the
    aggregation's inputs its records supply (their places and paths in its messages)."""

    __slots__ = ("field", "inputs", "topic")

    def __init__(self, topic: str, field: str, aggregation: Aggregation) -> None:
        self.topic = topic
        self.field = tuple(step for step in field.strip("/").split("/") if step)
        step = joined_record_steps(topic, ())[0]
        self.inputs = tuple(
            (index, item.steps[1:])
            for index, item in enumerate(aggregation.inputs)
            if isinstance(item, FieldInput) and item.steps[:1] == (step,)
        )

    def read(self, message: Any) -> tuple[JoinValue, Values]:
        """A record's join value and its values of this side's inputs."""
        return text_of(extract(message, self.field)) or None, tuple(
            extract(message, steps) for _, steps in self.inputs
        )


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
    text = json.dumps(described, sort_keys=True).encode()
    return hashlib.blake2b(text, digest_size=8).hexdigest().encode()


class ViewDefinition:
    """One view, compiled (immutable; thread-safe)."""

    __slots__ = (
        "aggregation",
        "codec",
        "digest",
        "filter",
        "inline",
        "needs_context",
        "null_equivalency",
        "sides",
        "sources",
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
        #: A join's two sides, the preserved (left) one first (empty: no join).
        self.sides: tuple[JoinSide, ...] = ()
        if view.joins:
            (join,) = view.joins
            self.sides = (
                JoinSide(self._scoped(join.left.name), join.left_field, self.aggregation),
                JoinSide(self._scoped(join.right.name), join.right_field, self.aggregation),
            )
        self.null_equivalency = view.join_null_equivalency
        #: Conflation inline: updates of one record, and of one group, may be conflated.
        self.inline = view.conflation is ViewConflation.INLINE
        #: Whether anything reads a record's context (SOW_KEY(), LAST_UPDATED()...): if
        #: not, only the message is decoded from an envelope.
        self.needs_context = any(
            isinstance(item, ContextInput)
            for item in (*self.aggregation.inputs, *(self.filter.inputs if self.filter else ()))
        )

    def _scoped(self, name: str) -> str:
        """The topology's name of a topic the view reads (scoped names included)."""
        if name in self.sources:
            return name
        (scoped,) = (source for source in self.sources if source.endswith(f".[{name}]"))
        return scoped

    def side(self, source: str) -> JoinSide:
        """The join side of one of the topics read."""
        return next(side for side in self.sides if side.topic == source)

    def joined(self, left: Values, right: Values | None) -> Values:
        """A joined row's values of the aggregation's inputs (right None: no match)."""
        values: list[Any] = [None] * len(self.aggregation.inputs)
        for side, found in zip(self.sides, (left, right), strict=True):
            if found is not None:
                for (index, _), value in zip(side.inputs, found, strict=True):
                    values[index] = value
        return tuple(values)

    @staticmethod
    def join_key(value: JoinValue) -> bytes:
        """The key of a join value's records (``NO_JOIN_VALUE`` for NULL); its view
        partition (:meth:`partition_of`) joins them."""
        return NO_JOIN_VALUE if value is None else b"v" + value.encode()

    @property
    def name(self) -> str:
        return self.topic.name

    def view_key(self, group: GroupKey) -> bytes:
        """The view record's SowKey of a group."""
        return checksum_key(self.topic.domain, group).encode()

    def partition_of(self, view_key: bytes) -> int:
        return partition_for(view_key, self.topic.partitions)

    def join_read(self, source: str, envelope: bytes) -> tuple[JoinValue, Values]:
        """A join's record (its changelog envelope): its join value and side values."""
        message: Any = self.sources[source].decode(changelog.data_of(envelope))
        return self.side(source).read(message)

    def row_contribution(self, values: Values) -> tuple[bytes, Values]:
        """A joined row's view SowKey and values."""
        return self.view_key(self.aggregation.group_key(values)), values

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
