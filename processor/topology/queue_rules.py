"""The rules of a queue that every topology format shares (seed 002 SOW/Queue, SOW/LocalQueue
and SOW/GroupLocalQueue), used by the AMPS XML loader (:mod:`processor.topology.amps_queues`)
and the YAML loader (:mod:`processor.topology.yaml_entries`): each takes a queue's values
from its format as text, with where each was written, and :func:`queue` checks them and
builds the :class:`~processor.topology.model.QueueSpec`, reporting problems through the
format's :class:`~processor.topology.entry_rules.Dialect` (``<LeasePeriod>`` or
``lease_period``). The queue is served by :mod:`processor.queues` (docs/queues.md).

* ``UnderlyingTopic`` (default: the name) is a topic whose publishes are logged: a SOW
  topic or a plain topic (AMPS: a TransactionLog topic) of the file. Otherwise, when it has
  regular-expression characters, it is a pattern over those topics' names:
  ``DefaultPublishTarget`` is then required and must be a topic the pattern matches. With
  one topic, a ``DefaultPublishTarget`` must be that topic. Every underlying topic has the
  queue's message type.
* Intervals (``LeasePeriod``, ``Expiration``, ``DeferredAckExpiration``) are greater than
  0; ``TargetQueueDepth`` is 1000 or more; ``MaxBacklog`` and
  ``MaxPerSubscriptionBacklog`` 1 or more; ``MaxDeliveries``/``MaxCancels`` 0 or more.
* ``Priority`` (a value expression), ``BarrierExpression`` and ``TargetQueueDepth``
  exclude each other; an ``at-most-once`` queue has the ``round-robin`` fairness model
  only; ``InitialOwner`` and ``GroupLocalQueueDomain`` are for a ``GroupLocalQueue`` only
  (AMPS requires ``InitialOwner`` there, but its own example omits it, and kafka-sow has
  no instance for it to name: it is optional). A binary topic's fields cannot be read by
  a ``Filter`` or ``Priority``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from processor.errors import ExpressionError, ValueFormatError
from processor.expr.regex import compile_regex
from processor.topology.entry_rules import (
    LOGGED,
    Catalog,
    Dialect,
    Item,
    Known,
    expression,
    refuse_binary,
)
from processor.topology.quantities import (
    format_interval,
    parse_choice,
    parse_interval,
    parse_positive_int,
    parse_timestamp,
)
from processor.topology.queue_spec import (
    ExpirationModel,
    FairnessModel,
    Leasing,
    QueueKind,
    QueueRecoveryPoint,
    QueueSemantics,
    QueueSpec,
)
from processor.topology.topics import is_pattern

#: The smallest TargetQueueDepth AMPS accepts.
MIN_TARGET_QUEUE_DEPTH = 1000
#: The elements only a GroupLocalQueue has.
GROUP_ONLY = ("InitialOwner", "GroupLocalQueueDomain")
#: The elements that exclude each other (as in AMPS).
EXCLUSIVE = ("Priority", "BarrierExpression", "TargetQueueDepth")
_BOOKMARK = re.compile(r"^\d+\|\d+\|$")
_WORDS: dict[str, Literal["epoch", "now", "creation"]] = {
    "epoch": "epoch",
    "now": "now",
    "creation": "creation",
}

#: A value parser: (the text, the element as the format names it in prose) -> the value.
Parser = Callable[[str, str], Any]


def _interval(text: str, what: str) -> float:
    seconds = parse_interval(text)
    if seconds <= 0:
        raise ValueFormatError(f"{what} must be greater than 0, got {format_interval(seconds)}")
    return seconds


def _count(minimum: int) -> Parser:
    return lambda text, what: parse_positive_int(text, what, minimum=minimum)


def _choice(allowed: tuple[str, ...], make: Callable[[str], Any] = str) -> Parser:
    return lambda text, what: make(parse_choice(text, allowed, what))


def parse_queue_recovery_point(text: str, what: str = "RecoveryPoint") -> QueueRecoveryPoint:
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
            f"{what} {text.strip()!r} is not allowed; allowed: epoch, now, creation, "
            "an AMPS bookmark (publisher|sequence|) or a timestamp such as 20240131T100000Z"
        ) from None


#: Element -> (QueueSpec field, value parser), for the elements that are one value.
VALUES: dict[str, tuple[str, Parser]] = {
    "LeasePeriod": ("lease_period_s", _interval),
    "Semantics": ("semantics", _choice(("at-least-once", "at-most-once"), QueueSemantics)),
    "MaxBacklog": ("max_backlog", _count(1)),
    "MaxPerSubscriptionBacklog": ("max_per_subscription_backlog", _count(1)),
    "TargetQueueDepth": ("target_queue_depth", _count(MIN_TARGET_QUEUE_DEPTH)),
    "Expiration": ("expiration_s", _interval),
    "ExpirationModel": (
        "expiration_model",
        _choice(("default", "queue", "latest", "earliest"), ExpirationModel),
    ),
    "RecoveryPoint": ("recovery_point", parse_queue_recovery_point),
    "FairnessModel": (
        "fairness_model",
        _choice(("fast", "round-robin", "proportional"), FairnessModel),
    ),
    "Leasing": ("leasing", _choice(("strict", "sublet"), Leasing)),
    "MaxDeliveries": ("max_deliveries", _count(0)),
    "MaxCancels": ("max_cancels", _count(0)),
    "DeferredAckExpiration": ("deferred_ack_expiration_s", _interval),
    "FileBackedMetadata": ("file_backed_metadata", _choice(("enabled",), bool)),
    "InitialOwner": ("initial_owner", lambda text, what: text),
    "GroupLocalQueueDomain": ("group_local_queue_domain", lambda text, what: text),
}
#: Every element of a queue that holds one text (the name and message type aside).
ELEMENTS = (
    "UnderlyingTopic",
    "DefaultPublishTarget",
    *VALUES,
    "Filter",
    "Priority",
    "BarrierExpression",
)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueItems:
    """A queue's values as written: ``kind``; ``typed`` is (message type, schema, where);
    ``values`` maps each element of :data:`ELEMENTS` that was given to its text and where
    it was written."""

    kind: QueueKind
    typed: tuple[str, str | None, str]
    values: Mapping[str, Item]


def queue(
    d: Dialect,
    catalog: Catalog,
    entry: tuple[str, str, str],
    items: QueueItems,
    *,
    at: str | None = None,
) -> QueueSpec:
    """The queue ``entry`` (the element that declares it, as messages name it:
    ``GroupLocalQueue``; its name; where it is defined) of ``items`` (module doc);
    ``catalog`` holds every topic of the file. ``at`` is where a problem of the whole
    queue is reported (default: where it is defined)."""
    element, name, where = entry
    at = where if at is None else at
    values = items.values
    message_type, schema, type_where = items.typed
    for tag in GROUP_ONLY:
        if tag in values and items.kind is not QueueKind.GROUP_LOCAL:
            d.fail(
                f"{d.label(tag)} is for a {d.label('GroupLocalQueue')} only, not a "
                f"{d.label(element)}",
                values[tag][1],
            )
    given = [tag for tag in EXCLUSIVE if tag in values]
    if len(given) > 1:
        d.fail(
            f"{d.label(given[1])} cannot be combined with {d.label(given[0])} (as in AMPS: "
            f"{d.word('Priority')}, {d.word('BarrierExpression')} and "
            f"{d.word('TargetQueueDepth')} exclude each other)",
            values[given[1]][1],
        )
    fields: dict[str, Any] = {}
    for tag, (attribute, parse) in VALUES.items():
        if tag in values:
            text, value_where = values[tag]
            try:
                fields[attribute] = parse(text, d.word(tag))
            except ValueError as exc:
                d.fail(str(exc), value_where)
    if fields.get("semantics") is QueueSemantics.AT_MOST_ONCE:
        fairness = fields.setdefault("fairness_model", FairnessModel.ROUND_ROBIN)
        if fairness is not FairnessModel.ROUND_ROBIN:
            d.fail(
                f"an at-most-once queue delivers round-robin only, not {fairness.value} "
                "(as in AMPS)",
                values["FairnessModel"][1],
            )
    underlying, topics, target = _underlying(d, catalog, (name, at), values)
    for known in topics:
        if (known.message_type, known.schema) != (message_type, schema):
            d.fail(
                f"the underlying topic {known.name!r} (at {known.where}) has "
                f"{d.word('MessageType')} {known.message_type}, not the queue's "
                f"{message_type}; a queue's topics all have its message type",
                type_where,
            )
    for tag, what in (("Filter", "filter"), ("Priority", "value expression")):
        if tag in values:
            for known in topics:
                refuse_binary(d, known, tag, values[tag][1])
            fields[tag.lower()] = expression(d, values[tag], tag, what)
    if "BarrierExpression" in values:
        fields["barrier_expression"] = expression(
            d, values["BarrierExpression"], "BarrierExpression", "filter"
        )
    return QueueSpec(
        name=name,
        message_type=message_type,
        schema=schema,
        kind=items.kind,
        underlying=underlying,
        underlying_pattern=not any(k.name == underlying for k in topics),
        underlying_topics=tuple(k.name for k in topics),
        default_publish_target=target,
        source=d.source,
        where=where,
        **fields,
    )


def _underlying(
    d: Dialect, catalog: Catalog, entry: tuple[str, str], values: Mapping[str, Item]
) -> tuple[str, list[Known], str]:
    """The underlying topic's text, the topics it names, and the default publish target."""
    name, where = entry
    underlying, under_where = values.get("UnderlyingTopic", (name, where))
    target_item = values.get("DefaultPublishTarget")
    under, target_word = d.word("UnderlyingTopic"), d.word("DefaultPublishTarget")
    logged = [k for k in catalog.by_name.values() if k.kind in LOGGED]
    known = catalog.get(underlying)
    if known is not None and known.kind in LOGGED:
        if target_item is not None and target_item[0] != underlying:
            d.fail(
                f"{target_word} {target_item[0]!r} must be one of the queue's topics: its "
                f"{under} {underlying!r}",
                target_item[1],
            )
        return underlying, [known], underlying
    if not is_pattern(underlying):
        origin = (
            "" if "UnderlyingTopic" in values else f" (the queue's {d.word('Name')}, by default)"
        )
        if known is not None:
            what = f"a {d.word(known.kind)} (at {known.where})"
        elif underlying in catalog.later:
            what = f"defined at {catalog.later[underlying]}, not a topic"
        else:
            what = "not a topic of this file"
        d.fail(
            f"{under} {underlying!r}{origin} is {what}; a queue reads a topic whose "
            f"publishes are logged: a SOW topic, or a {d.word('TransactionLog Topic')} of "
            f"this file (allowed: {', '.join(k.name for k in logged) or 'none'})",
            under_where,
        )
    try:
        pattern = compile_regex(underlying, what=f"{under} pattern", backtracking=False)
    except ExpressionError as exc:
        d.fail(str(exc), under_where)
    matched = [k for k in logged if pattern.search(k.name)]
    if target_item is None:
        d.fail(
            f"{under} {underlying!r} is a regular expression, so the queue needs "
            f"{d.label('DefaultPublishTarget')}, the topic a publish to the queue goes to",
            where,
        )
    target, target_where = target_item
    if target not in {k.name for k in matched}:
        d.fail(
            f"{target_word} {target!r} must be a topic of this file that the {under} "
            f"pattern {underlying!r} matches (matched: "
            f"{', '.join(k.name for k in matched) or 'none'})",
            target_where,
        )
    return underlying, matched, target
