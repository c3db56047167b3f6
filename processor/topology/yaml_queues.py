"""Queues in the kafka-sow YAML topology format (``docs/topology.md``, "Queues in YAML")::

    queues:
      - name: MQ
        message_type: json
        underlying: ORDERS_.*               # a topic, or a regular expression over topics
        default_publish_target: ORDERS_DIRECT
        lease_period: 60s

Contract: :func:`read_queue` returns the :class:`~processor.topology.model.QueueSpec` the
AMPS XML loader makes of the same definition: both formats check it with
:mod:`processor.topology.queue_rules`. A problem raises
:class:`~processor.errors.TopologyError` naming the file and the field path
(``queues[MQ].lease_period``), what is wrong and what is allowed.

* The fields are the snake_case of the AMPS elements (:data:`QUEUE_ELEMENTS`), plus
  ``kind`` (:data:`QUEUE_KINDS`: which AMPS element declares it; default ``queue``) and
  ``schema`` (for ``avro``, as a topic's); ``message_type`` is required. An unknown field
  is an error with the closest allowed one.
* A number is read as written, so an interval without a unit (``lease_period: 60``) is an
  error asking for one, as for a conflated topic's ``interval``.
* ``file_backed_metadata`` is ``true`` (AMPS's only value, ``enabled``) or ``false`` (the
  default, AMPS's unset).
* The spec's ``where`` is the queue's index path (``queues[0]``), as a topic's is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from processor.topology.entry_rules import Catalog, Dialect, Item
from processor.topology.quantities import parse_choice
from processor.topology.queue_rules import QueueItems, queue
from processor.topology.queue_spec import QueueKind, QueueSpec
from processor.topology.yaml_fields import describe, named, parse_field, parse_text, schema_path

#: A queue's YAML fields that hold one value: the AMPS element of each, and what it holds.
QUEUE_ELEMENTS = {
    "underlying": "UnderlyingTopic",
    "default_publish_target": "DefaultPublishTarget",
    "lease_period": "LeasePeriod",
    "semantics": "Semantics",
    "max_backlog": "MaxBacklog",
    "max_per_subscription_backlog": "MaxPerSubscriptionBacklog",
    "target_queue_depth": "TargetQueueDepth",
    "expiration": "Expiration",
    "expiration_model": "ExpirationModel",
    "filter": "Filter",
    "recovery_point": "RecoveryPoint",
    "fairness_model": "FairnessModel",
    "leasing": "Leasing",
    "max_deliveries": "MaxDeliveries",
    "max_cancels": "MaxCancels",
    "priority": "Priority",
    "barrier_expression": "BarrierExpression",
    "deferred_ack_expiration": "DeferredAckExpiration",
    "file_backed_metadata": "FileBackedMetadata",
    "initial_owner": "InitialOwner",
    "group_local_queue_domain": "GroupLocalQueueDomain",
}
QUEUE_FIELDS = ("name", "message_type", "schema", "kind", *QUEUE_ELEMENTS)
#: A queue's ``kind``: the AMPS element that declares it.
QUEUE_KINDS = {
    "queue": QueueKind.QUEUE,
    "local": QueueKind.LOCAL,
    "group_local": QueueKind.GROUP_LOCAL,
}
_INTEGER = "an integer"
#: What each field holds, for the message when it is neither text nor a number.
_HINTS = {
    "underlying": "a topic name, or a regular expression over topic names",
    "default_publish_target": "a topic name",
    "lease_period": "an interval such as 60s",
    "semantics": "at-least-once or at-most-once",
    "max_backlog": _INTEGER,
    "max_per_subscription_backlog": _INTEGER,
    "target_queue_depth": _INTEGER,
    "expiration": "an interval such as 1d",
    "expiration_model": "default, queue, latest or earliest",
    "filter": "a filter such as \"/region = 'A'\"",
    "recovery_point": "epoch, now, creation, a bookmark (publisher|sequence|) or a timestamp",
    "fairness_model": "fast, round-robin or proportional",
    "leasing": "strict or sublet",
    "max_deliveries": _INTEGER,
    "max_cancels": _INTEGER,
    "priority": "a value expression such as /priority",
    "barrier_expression": 'a filter such as "/isSyncPoint IS NOT NULL"',
    "deferred_ack_expiration": "an interval such as 1d",
    "initial_owner": "a name",
    "group_local_queue_domain": "a name",
}


def read_queue(d: Dialect, catalog: Catalog, entry: tuple[object, str], base: Path) -> QueueSpec:
    """The queue ``entry`` (its YAML value, and its index path ``queues[0]``); ``catalog``
    holds the topics of the file; ``base`` is the file's directory (module doc)."""
    raw_entry, index_where = entry
    raw, name, where = named(raw_entry, index_where, "queue", QUEUE_FIELDS, d.source)
    if "message_type" not in raw:
        d.fail(
            "a queue needs 'message_type', the type of its messages (the type of its "
            "underlying topics)",
            where,
        )
    message_type = parse_field(
        d.source, f"{where}.message_type", "message_type", raw["message_type"]
    )
    schema = schema_path(raw, message_type, d.source, where, base)
    kind = QueueKind.QUEUE
    if "kind" in raw:
        kind_where = f"{where}.kind"
        try:
            text = parse_text(raw["kind"], "queue, local or group_local")
            kind = QUEUE_KINDS[parse_choice(text, tuple(QUEUE_KINDS), "kind")]
        except ValueError as exc:
            d.fail(str(exc), kind_where)
    values: dict[str, Item] = {}
    for field, element in QUEUE_ELEMENTS.items():
        item = _value(d, raw, field, where)
        if item is not None:
            values[element] = item
    items = QueueItems(
        kind=kind, typed=(message_type, schema, f"{where}.message_type"), values=values
    )
    return queue(d, catalog, (kind.value, name, index_where), items, at=where)


def _value(d: Dialect, raw: dict[Any, Any], field: str, where: str) -> Item | None:
    """A field's value as the text the shared rules read, if given, and its path."""
    if field not in raw:
        return None
    value, path = raw[field], f"{where}.{field}"
    if field == "file_backed_metadata":
        if not isinstance(value, bool):
            d.fail(
                "expected true (persist the queue's metadata: AMPS's enabled) or false (the "
                f"default), got {describe(value)}",
                path,
            )
        return ("enabled", path) if value else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value), path
    try:
        return parse_text(value, _HINTS[field]), path
    except ValueError as exc:
        d.fail(str(exc), path)
