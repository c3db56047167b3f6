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
from processor.expr import Aggregation, Expression, clauses, compile_node, parser
from processor.expr.qualified import unqualify
from processor.keys import checksum_key, partition_for
from processor.messages import Codec, codec_for
from processor.topology.model import SowTopic, ViewSpec
from processor.topology.view_topics import underlying_topics
from processor.views.contribution import GroupKey, Values, contribution


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


def digest_of(view: ViewSpec) -> bytes:
    """What identifies a view's definition (everything its records depend on)."""
    described = {
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
        self.digest = digest_of(view)

    @property
    def name(self) -> str:
        return self.topic.name

    def view_key(self, group: GroupKey) -> bytes:
        """The view record's SowKey of a group."""
        return checksum_key(self.topic.domain, group).encode()

    def partition_of(self, view_key: bytes) -> int:
        return partition_for(view_key, self.topic.partitions)

    def of_envelope(self, source: str, envelope: bytes) -> tuple[bytes, Values] | None:
        """What an underlying record (its changelog envelope) contributes: its group's
        SowKey and its input values, or None (filtered out, or not decodable: such a
        record was never stored, as the processor refuses it)."""
        decoded = changelog.decode(envelope)
        message: Any = self.sources[source].decode(decoded.data)
        found = contribution(self.aggregation, self.filter, message, decoded.context())
        if found is None:
            return None
        group, values = found
        return self.view_key(group), values

    def encode(self, message: dict[str, Any]) -> bytes:
        """A group's output message in the view's message type."""
        return self.codec.encode_json(message)
