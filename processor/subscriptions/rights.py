"""Open subscriptions follow their subscribers' rights: after the entitlements change,
each subscription of a restricted principal is planned again with its new rights and
moved onto that plan at a place in its stream (:meth:`SubscriptionHub.move`), so a
record it may no longer see leaves as an out-of-focus notice (never its new body); a
subscriber that may no longer read the topic, or log on, has the subscription ended with
the reason (PERMISSION_DENIED). A queue consumer whose rights over its queue changed is
ended the same way and subscribes again; its leases return to the queue."""

from __future__ import annotations

import dataclasses
import logging

from processor.errors import NotEntitledError, SowError
from processor.security import RightsSource
from processor.security.reads import read_restriction
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.queues import QueueHub

log = logging.getLogger(__name__)


def refresh_rights(hub: SubscriptionHub, source: RightsSource) -> int:
    """Re-plan every open subscription of a restricted principal with its current
    rights; returns how many were moved or ended."""
    changed = 0
    for subscription in hub.subscriptions():
        old = subscription.context
        if not old.rights.restricted or old.generation == source.generation:
            continue
        context = dataclasses.replace(
            old, rights=source.rights_for(old.principal), generation=source.generation
        )
        request = dataclasses.replace(subscription.request, replace=False)
        try:
            context.rights.check_logon()
            plan = hub.plan(
                request, with_query=subscription.with_query, replacing=True, context=context
            )
            hub.move(subscription, plan, held=True)
            subscription.context = context
        except NotEntitledError as exc:
            log.info("subscription %r of %s ended: %s", request.sub_id, old.principal, exc)
            subscription.close(exc)
            hub.unsubscribe(subscription)
        except SowError as exc:  # the topic or filter no longer plans: end it with why
            log.warning("subscription %r of %s ended: %s", request.sub_id, old.principal, exc)
            subscription.close(exc)
            hub.unsubscribe(subscription)
        changed += 1
    return changed


def refresh_queue_rights(queues: QueueHub, source: RightsSource) -> int:
    """End every queue consumer whose principal's rights over its queue changed: its
    subscription's filter holds the old entitlement filter, so it must subscribe again
    (its leases return to the queue: nothing is lost). Returns how many were ended."""
    ended = 0
    for consumer in queues.consumers():
        old = consumer.context
        if not old.rights.restricted or old.generation == source.generation:
            continue
        rights = source.rights_for(old.principal)
        name = consumer.topic.name
        before = read_restriction(old.rights, queues.topology, name)
        try:
            rights.check_logon()
            after = read_restriction(rights, queues.topology, name)
        except NotEntitledError as exc:
            consumer.end(exc)
            ended += 1
            continue
        if after != before:
            consumer.end(
                NotEntitledError(
                    f"the entitlements of {old.principal} on queue {name!r} changed: "
                    "subscribe again to consume under the new ones"
                )
            )
            ended += 1
            continue
        consumer.context = dataclasses.replace(old, rights=rights, generation=source.generation)
    return ended
