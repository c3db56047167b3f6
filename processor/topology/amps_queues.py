"""Queues of an AMPS ``<SOW>`` section (seed 002 SOW/Queue, SOW/LocalQueue and
SOW/GroupLocalQueue; ``QueueDefinition`` is a synonym of ``Queue``), parsed and validated.

Contract: :func:`read_queue` returns a :class:`~processor.topology.model.QueueSpec`, or
raises :class:`~processor.errors.TopologyError` naming the file, the element path, what is
wrong and what is allowed. Nothing here serves a queue (issue 22): ``sow serve`` refuses a
topology that has one.

* ``Name`` (or ``Topic``) and ``MessageType`` are required; every element at most once.
* ``UnderlyingTopic`` (default: the Name) is a topic whose publishes are logged: a SOW
  topic or a TransactionLog topic of the file. Otherwise, when it has regular-expression
  characters, it is a pattern over topic names: ``DefaultPublishTarget`` is then required
  and must be a topic of the file the pattern matches. With one topic, a
  ``DefaultPublishTarget`` must be that topic. Every underlying topic has the queue's
  message type.
* Intervals (``LeasePeriod``, ``Expiration``, ``DeferredAckExpiration``) are greater than
  0; ``TargetQueueDepth`` is 1000 or more; ``MaxDeliveries``/``MaxCancels`` 0 or more.
* ``Priority`` (a value expression), ``BarrierExpression`` and ``TargetQueueDepth``
  exclude each other; an ``at-most-once`` queue has the ``round-robin`` fairness model
  only; ``InitialOwner`` and ``GroupLocalQueueDomain`` are for a ``GroupLocalQueue`` only.
  AMPS requires ``InitialOwner`` there, but its own example omits it, and kafka-sow has no
  instance for it to name: it is optional.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any, Literal

from processor.errors import ExpressionError, ValueFormatError
from processor.expr.regex import compile_regex
from processor.topology.amps_entries import check_expression, entry_groups, entry_type
from processor.topology.amps_reader import AmpsReader
from processor.topology.entry_rules import LOGGED, Catalog, Known, refuse_binary
from processor.topology.model import (
    ExpirationModel,
    FairnessModel,
    Leasing,
    QueueKind,
    QueueRecoveryPoint,
    QueueSemantics,
    QueueSpec,
)
from processor.topology.quantities import (
    format_interval,
    parse_choice,
    parse_interval,
    parse_positive_int,
    parse_timestamp,
)
from processor.topology.topics import is_pattern

#: The elements that declare a queue.
QUEUE_ELEMENTS = ("Queue", "QueueDefinition", "LocalQueue", "GroupLocalQueue")
# fmt: off
ELEMENTS = (
    "Name", "Topic", "MessageType", "UnderlyingTopic", "DefaultPublishTarget", "LeasePeriod",
    "Semantics", "MaxBacklog", "MaxPerSubscriptionBacklog", "TargetQueueDepth", "Expiration",
    "ExpirationModel", "Filter", "RecoveryPoint", "FairnessModel", "Leasing", "MaxDeliveries",
    "MaxCancels", "Priority", "BarrierExpression", "DeferredAckExpiration",
    "FileBackedMetadata", "InitialOwner", "GroupLocalQueueDomain",
)
# fmt: on
#: The smallest TargetQueueDepth AMPS accepts.
MIN_TARGET_QUEUE_DEPTH = 1000
_GROUP_ONLY = ("InitialOwner", "GroupLocalQueueDomain")
_EXCLUSIVE = ("Priority", "BarrierExpression", "TargetQueueDepth")
_BOOKMARK = re.compile(r"^\d+\|\d+\|$")
_WORDS: dict[str, Literal["epoch", "now", "creation"]] = {
    "epoch": "epoch",
    "now": "now",
    "creation": "creation",
}
_KINDS = {
    "Queue": QueueKind.QUEUE,
    "QueueDefinition": QueueKind.QUEUE,
    "LocalQueue": QueueKind.LOCAL,
    "GroupLocalQueue": QueueKind.GROUP_LOCAL,
}


def _interval(what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        seconds = parse_interval(text)
        if seconds <= 0:
            raise ValueFormatError(f"{what} must be greater than 0, got {format_interval(seconds)}")
        return seconds

    return parse


def _choice(allowed: tuple[str, ...], what: str) -> Callable[[str], str]:
    return lambda text: parse_choice(text, allowed, what)


def parse_queue_recovery_point(text: str) -> QueueRecoveryPoint:
    """``epoch``, ``now``, ``creation``, an AMPS bookmark (``123|456|``) or a timestamp."""
    word = text.strip().lower()
    if word in _WORDS:
        return QueueRecoveryPoint(_WORDS[word])
    if _BOOKMARK.match(text.strip()):
        return QueueRecoveryPoint("bookmark", bookmark=text.strip())
    try:
        return QueueRecoveryPoint("timestamp", timestamp=parse_timestamp(text))
    except ValueError:
        raise ValueFormatError(
            f"RecoveryPoint {text.strip()!r} is not allowed; allowed: epoch, now, creation, "
            "an AMPS bookmark (publisher|sequence|) or a timestamp such as 20240131T100000Z"
        ) from None


#: Element -> (QueueSpec field, value parser), for the elements that are one value.
_VALUES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "LeasePeriod": ("lease_period_s", _interval("LeasePeriod")),
    "Semantics": ("semantics", lambda v: QueueSemantics(parse_choice(
        v, ("at-least-once", "at-most-once"), "Semantics"))),
    "MaxBacklog": ("max_backlog", lambda v: parse_positive_int(v, "MaxBacklog")),
    "MaxPerSubscriptionBacklog": (
        "max_per_subscription_backlog",
        lambda v: parse_positive_int(v, "MaxPerSubscriptionBacklog"),
    ),
    "TargetQueueDepth": ("target_queue_depth", lambda v: parse_positive_int(
        v, "TargetQueueDepth", minimum=MIN_TARGET_QUEUE_DEPTH)),
    "Expiration": ("expiration_s", _interval("Expiration")),
    "ExpirationModel": ("expiration_model", lambda v: ExpirationModel(parse_choice(
        v, ("default", "queue", "latest", "earliest"), "ExpirationModel"))),
    "RecoveryPoint": ("recovery_point", parse_queue_recovery_point),
    "FairnessModel": ("fairness_model", lambda v: FairnessModel(parse_choice(
        v, ("fast", "round-robin", "proportional"), "FairnessModel"))),
    "Leasing": ("leasing", lambda v: Leasing(parse_choice(v, ("strict", "sublet"), "Leasing"))),
    "MaxDeliveries": ("max_deliveries", lambda v: parse_positive_int(
        v, "MaxDeliveries", minimum=0)),
    "MaxCancels": ("max_cancels", lambda v: parse_positive_int(v, "MaxCancels", minimum=0)),
    "DeferredAckExpiration": ("deferred_ack_expiration_s", _interval("DeferredAckExpiration")),
    "FileBackedMetadata": ("file_backed_metadata", lambda v: bool(
        _choice(("enabled",), "FileBackedMetadata")(v))),
    "InitialOwner": ("initial_owner", str),
    "GroupLocalQueueDomain": ("group_local_queue_domain", str),
}  # fmt: skip


def read_queue(reader: AmpsReader, element: ET.Element, where: str, catalog: Catalog) -> QueueSpec:
    """One ``<Queue>``, ``<LocalQueue>``, ``<GroupLocalQueue>`` or ``<QueueDefinition>``
    (module doc); ``catalog`` holds every topic of the file."""
    groups, name = entry_groups(reader, element, where, ELEMENTS)
    kind = _KINDS[element.tag]
    typed = entry_type(reader, groups)
    if typed is None:
        reader.fail(
            f"a <{element.tag}> needs <MessageType>, the type of its messages (the type of "
            "its underlying topics)",
            where,
        )
    message_type, schema, _ = typed
    for tag in _GROUP_ONLY:
        if tag in groups and kind is not QueueKind.GROUP_LOCAL:
            reader.fail(
                f"<{tag}> is for a <GroupLocalQueue> only, not a <{element.tag}>",
                groups[tag][0][1],
            )
    given = [tag for tag in _EXCLUSIVE if tag in groups]
    if len(given) > 1:
        reader.fail(
            f"<{given[1]}> cannot be combined with <{given[0]}> (as in AMPS: Priority, "
            "BarrierExpression and TargetQueueDepth exclude each other)",
            groups[given[1]][0][1],
        )
    fields: dict[str, Any] = {}
    for tag, (attribute, parse) in _VALUES.items():
        if tag in groups:
            fields[attribute] = reader.value(*groups[tag][0], parse)
    semantics = fields.get("semantics", QueueSemantics.AT_LEAST_ONCE)
    if semantics is QueueSemantics.AT_MOST_ONCE:
        fairness = fields.setdefault("fairness_model", FairnessModel.ROUND_ROBIN)
        if fairness is not FairnessModel.ROUND_ROBIN:
            reader.fail(
                f"an at-most-once queue delivers round-robin only, not {fairness.value} "
                "(as in AMPS)",
                groups["FairnessModel"][0][1],
            )
    underlying, topics, target = _underlying(reader, groups, name, where, catalog)
    for known in topics:
        if (known.message_type, known.schema) != (message_type, schema):
            reader.fail(
                f"the underlying topic {known.name!r} (at {known.where}) has MessageType "
                f"{known.message_type}, not the queue's {message_type}; a queue's topics all "
                "have its message type",
                typed[2],
            )
    for tag, what in (("Filter", "filter"), ("Priority", "value expression")):
        if tag in groups:
            for known in topics:
                refuse_binary(reader, known, tag, groups[tag][0][1])
            fields[tag.lower()] = check_expression(reader, groups[tag][0], what)
    if "BarrierExpression" in groups:
        fields["barrier_expression"] = check_expression(
            reader, groups["BarrierExpression"][0], "filter"
        )
    return QueueSpec(
        name=name,
        message_type=message_type,
        schema=schema,
        kind=kind,
        underlying=underlying,
        underlying_pattern=not any(k.name == underlying for k in topics),
        underlying_topics=tuple(k.name for k in topics),
        default_publish_target=target,
        source=reader.source,
        where=where,
        **fields,
    )


def _underlying(
    reader: AmpsReader, groups: dict[str, Any], name: str, where: str, catalog: Catalog
) -> tuple[str, list[Known], str]:
    """The UnderlyingTopic text, the topics it names, and the DefaultPublishTarget."""
    under_where = where
    underlying = name
    if "UnderlyingTopic" in groups:
        under_el, under_where = groups["UnderlyingTopic"][0]
        underlying = reader.text(under_el, under_where)
    target_item = groups.get("DefaultPublishTarget")
    target = reader.text(*target_item[0]) if target_item else None
    logged = [k for k in catalog.by_name.values() if k.kind in LOGGED]
    known = catalog.get(underlying)
    if known is not None and known.kind in LOGGED:
        if target is not None and target != underlying:
            reader.fail(
                f"DefaultPublishTarget {target!r} must be one of the queue's topics: its "
                f"UnderlyingTopic {underlying!r}",
                target_item[0][1] if target_item else where,
            )
        return underlying, [known], underlying
    if not is_pattern(underlying):
        origin = "" if "UnderlyingTopic" in groups else " (the queue's Name, by default)"
        what = "a different topic" if known is not None else "not a topic of this file"
        reader.fail(
            f"UnderlyingTopic {underlying!r}{origin} is {what}; a queue reads a topic whose "
            "publishes are logged: a SOW topic, or a <TransactionLog> <Topic> (allowed: "
            f"{', '.join(k.name for k in logged) or 'none'})",
            under_where,
        )
    try:
        pattern = compile_regex(underlying, what="UnderlyingTopic pattern")
    except ExpressionError as exc:
        reader.fail(str(exc), under_where)
    matched = [k for k in logged if pattern.search(k.name)]
    if target is None or target_item is None:
        reader.fail(
            f"UnderlyingTopic {underlying!r} is a regular expression, so the queue needs "
            "<DefaultPublishTarget>, the topic a publish to the queue goes to",
            where,
        )
    if target not in {k.name for k in matched}:
        reader.fail(
            f"DefaultPublishTarget {target!r} must be a topic of this file that the "
            f"UnderlyingTopic pattern {underlying!r} matches (matched: "
            f"{', '.join(k.name for k in matched) or 'none'})",
            target_item[0][1],
        )
    return underlying, matched, target
