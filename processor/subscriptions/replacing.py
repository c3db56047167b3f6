"""Replacing a subscription (spec 3.12): which options may change, and the marker that
places a replace in the change stream.

A Session command with ``replace`` and the ``sub_id`` of a live subscription changes it
in place. May change: the filter, the topic (not of a paginated subscription), ``oof``,
``no_empties``, ``max_backlog``, ``batch_size``, ``query_id``, and a paginated
subscription's ``top_n``/``skip_n``/``order_by`` (each one the original gave must be
restated). Must stay as they were: the command (subscribe or sow_and_subscribe), whether
it is paginated, ``conflation`` and ``conflation_key``, ``delta``, ``select`` and
``bookmark``. Anything else is refused with an InvalidRequestError that names the option.

The hub reads the SOW for the new filter under the replica's lock and, in the same
critical section, queues a :class:`ReplaceMarker` behind the changes already handed to
its dispatcher; the dispatcher, reaching it, moves the subscription to its new filter
group and rebases it on the rows read (see
:meth:`~processor.subscriptions.subscription.Subscription.rebase`). Changes applied
before the read that reach the dispatcher after the marker are skipped by position (the
rows reflect them), so the stream has no gap and no duplicate.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from processor.errors import InvalidRequestError
from processor.keys import partition_for
from processor.subscriptions.model import SubscribeRequest
from processor.subscriptions.plan import SubscriptionPlan
from processor.subscriptions.subscription import Row, StartVector, Subscription
from processor.subscriptions.window import is_paginated
from processor.topology.model import SowTopic

#: Options a replace must repeat unchanged.
FIXED = ("conflation", "conflation_key", "delta", "select", "bookmark")


def check_replace(subscription: Subscription, request: SubscribeRequest, with_query: bool) -> None:
    """Refuse a replace that changes what may not change (see the module doc)."""
    old = subscription.request
    name = request.sub_id
    if subscription.aggregated or request.projection.strip() or request.grouping.strip():
        raise InvalidRequestError(
            f"subscription {name!r}: an aggregated subscription cannot be replaced, nor a "
            "subscription replaced by one: unsubscribe and subscribe anew"
        )
    if with_query != subscription.with_query:
        was = "sow_and_subscribe" if subscription.with_query else "subscribe"
        raise InvalidRequestError(
            f"subscription {name!r} was placed with {was}: replace it with {was} too"
        )
    changed = [f for f in FIXED if getattr(old, f) != getattr(request, f)]
    if changed:
        raise InvalidRequestError(
            f"replace cannot change {', '.join(changed)} of subscription {name!r}: "
            "restate the original values, or unsubscribe and subscribe anew"
        )
    if is_paginated(old) != is_paginated(request):
        missing = [
            option
            for option in ("top_n", "skip_n", "order_by")
            if getattr(old, option) not in (None, 0, "")
            and getattr(request, option) in (None, 0, "")
        ]
        if missing:
            detail = f"restate {', '.join(missing)} (pagination options must be repeated)"
        else:
            detail = "a subscription cannot become paginated by replace; sow_and_subscribe anew"
        raise InvalidRequestError(f"replace of subscription {name!r}: {detail}")
    if is_paginated(old):
        if old.order_by.strip() and not request.order_by.strip():
            raise InvalidRequestError(
                f"replace of paginated subscription {name!r}: restate order_by "
                "(pagination options must be repeated)"
            )
        if request.topic != old.topic:
            raise InvalidRequestError(
                f"replace cannot change the topic of paginated subscription {name!r} "
                f"(from {old.topic!r} to {request.topic!r}); unsubscribe and "
                "sow_and_subscribe anew"
            )


@dataclass(slots=True)
class ReplaceMarker:
    """A replace's place in the dispatcher's queue (see the module doc).

    ``rows`` (None for a subscribe) are the records matching the new filter at
    ``vector``; ``gone`` the held records that no longer existed there. ``placed`` is set
    once ``vector`` is known (it is read in the same critical section as the rows, just
    after the marker is queued); a marker placed without a vector replaces nothing."""

    subscription: Subscription
    #: The replacing request's plan.
    plan: SubscriptionPlan
    vector: StartVector | None = None
    rows: list[Row] | None = None
    gone: set[tuple[str, bytes]] = field(default_factory=set)
    placed: threading.Event = field(default_factory=threading.Event)


def row_position(topic: SowTopic, sow_key: bytes) -> tuple[str, int, int]:
    """The position reported with a record of a re-run query: its changelog partition
    (offset -1: the record as of the replace, not one change)."""
    return (topic.changelog_topic, partition_for(sow_key, topic.partitions), -1)
