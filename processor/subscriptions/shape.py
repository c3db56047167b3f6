"""What a subscriber (or a query) sees of each message: select lists and delta updates.

:class:`MessageShape` is made once per subscription or query from its options and applied
at send time, after matching (a select list never changes what matches):

* ``select`` (spec 1.19, :mod:`processor.messages.select`): every record sent carries only
  the selected fields.
* ``delta`` (spec 3.10): an update of a record the subscriber holds carries only the
  fields that changed since the state last delivered for it (leaf paths, arrays whole;
  :func:`processor.messages.fields.changed`), plus the topic's Key fields; records new to
  the subscriber, deletes and OOFs are sent whole. A delta cannot say that a field was
  removed (by a full republish; AMPS does not document it), so such an update is sent
  whole too, and the subscriber's copy loses the field. With ``no_empties`` an update
  with no changed field (with a select list: no changed *selected* field) is not sent.

Shaped messages are sent as JSON text: a partial record has no Avro encoding, so on avro
topics select and delta need the text form (``text_form``), and binary messages have no
fields to select (refused) or compare (a delta subscription gets them whole). Instances
are immutable and thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from processor.errors import InvalidRequestError
from processor.keys import parse_path
from processor.messages import Codec
from processor.messages.fields import changed, overlay, pick, removed
from processor.messages.select import SelectList, parse_select
from processor.topology.model import SowTopic, Topic


@dataclass(frozen=True, slots=True)
class MessageShape:
    """Select list and delta rules of one subscription or query (see the module doc):
    ``codecs`` of the topics it shapes, and their Key paths (``keys``)."""

    codecs: Mapping[str, Codec]
    keys: Mapping[str, tuple[tuple[str, ...], ...]]
    select: SelectList | None
    delta: bool
    no_empties: bool

    @classmethod
    def for_request(
        cls,
        topics: Sequence[Topic],
        codecs: Mapping[str, Codec],
        *,
        select: str = "",
        delta: bool = False,
        no_empties: bool = False,
        text_form: bool = False,
        what: str = "subscription",
    ) -> MessageShape | None:
        """The shape for a request's options over ``topics``, or None when the records go
        as they are. Raises InvalidRequestError (naming the topic and what to do) when a
        topic's message type cannot take the options, and for a bad select list."""
        if not select and not delta:
            return None
        selected = parse_select(select) if select else None
        shaped: dict[str, Codec] = {}
        for topic in topics:
            codec = codecs[topic.name]
            traits = codec.traits
            if not traits.parsed:
                if selected is not None:
                    raise InvalidRequestError(
                        f"{what} on {topic.name}: {codec.name} messages have no fields, so a "
                        "select list cannot apply; send the request without select"
                    )
                continue  # a delta subscription gets binary messages whole
            if selected is None and not traits.delta:
                continue  # a type without deltas: a delta subscription gets whole messages
            if not traits.partial_native and not text_form:
                option = "select" if selected is not None else "delta"
                raise InvalidRequestError(
                    f"{what} on {codec.name} topic {topic.name} with {option}: selected "
                    f"fields and deltas are partial messages, which {codec.name} cannot "
                    "encode; ask for the text form (text_form) to receive them as JSON"
                )
            shaped[topic.name] = codec
        keys = {
            t.name: _key_paths(t.keys)
            for t in topics
            if t.name in shaped and isinstance(t, SowTopic)
        }
        return cls(shaped, keys, selected, delta, no_empties)

    def shapes(self, topic: str) -> bool:
        """Whether records of ``topic`` are shaped (else they go as they are)."""
        return topic in self.codecs

    def full(self, topic: str, data: bytes) -> bytes:
        """A whole record as the subscriber sees it: its selected fields, as JSON text
        (the text form) when the topic is shaped."""
        codec = self.codecs[topic]
        message = codec.decode(data)
        if self.select is not None:
            message = self.select.project(message)
        return codec.text_of(message)

    def update(self, topic: str, held: bytes, data: bytes) -> tuple[bytes, bool] | None:
        """A delta subscription's update of a held record as JSON text, and whether it is
        a delta: the changed (selected) fields and the Key fields, or the whole (selected)
        record when a field was removed; None when ``no_empties`` suppresses it."""
        codec = self.codecs[topic]
        new = codec.decode(data)
        select = self.select
        if not codec.traits.delta:  # composite-global: its subscribers get whole messages
            return codec.text_of(new if select is None else select.project(new)), False
        old = codec.decode(held)
        if removed(old, new) and (
            select is None or removed(select.project(old), select.project(new))
        ):
            return codec.text_of(new if select is None else select.project(new)), False
        delta: dict[str, Any] = changed(old, new)
        if select is not None:
            delta = select.project(delta)
        if self.no_empties and not delta:
            return None
        keyed: dict[str, Any] = {}
        for path in self.keys.get(topic, ()):
            key = pick(new, path)
            if key is not None:
                keyed = overlay(keyed, key)
        return codec.text_of(overlay(keyed, delta)), True


def _key_paths(keys: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(parse_path(k) for k in keys)
