"""One queue partition's messages, subscriptions and leases, and every rule that moves a
message between them (seed 002 SOW/Queue; ``../shared/spec/amps-semantics.md`` section 6).

A :class:`Ledger` is the queue's decision logic, with no I/O: the processor keeps one per
queue partition, feeds it what its transactions apply (messages enqueued, subscriptions,
acknowledgements, cancels, expiry requests, the clock) and persists the
:class:`Outcome` list each call returns (docs/queues.md). Not thread-safe.

Costs: a message's place is kept in sorted lists (``sortedcontainers.SortedList``:
insertion and removal O(log n), where a plain list moved the whole queue in memory for
each message leased or removed from its head), leases and expirations in heaps; a
dispatch scans the messages not leased in order until the subscriptions are full
(bench/queue_ledger.py).

Rules:

* **Order.** Oldest first (the enqueue ``sequence``); with a ``Priority``, highest first
  and ties by age. A priority is read as an unsigned 64-bit integer (a negative value
  wraps); NULL or a non-number is the lowest.
* **Leases** go to subscriptions whose filter matches and whose backlog (unacknowledged
  leases: the smaller of the subscription's ``max_backlog`` and the queue's
  ``MaxPerSubscriptionBacklog``) is not full, while the queue's ``MaxBacklog`` (leases
  outstanding in all) allows, chosen by the ``FairnessModel``: ``fast`` the first found,
  ``round-robin`` the next after the last chosen, ``proportional`` the lowest
  leased/backlog ratio (ties: the first found). A lease lasts ``LeasePeriod`` (None: no
  expiry).
* **at-most-once**: a message is removed when it is leased; an acknowledgement only
  frees the subscriber's backlog slot; cancel and expire do nothing.
* **Acknowledge** removes a message. With ``Leasing`` strict, only the lease holder (or
  anyone, for a message not leased) may; ``sublet`` lets anyone. An acknowledgement of a
  message the ledger does not hold is remembered for ``DeferredAckExpiration`` and
  removes the message if it arrives in that time.
* **Return**: a cancel (cancel count + 1), an expired lease or a disconnected
  subscription makes a leased message available again, unless it has now been
  delivered ``MaxDeliveries`` times or cancelled ``MaxCancels`` times: then it expires.
* **Expire**: on request, at its expiration time (even while leased), or by those
  counts; an expired message is removed with its reason (the dead-letter topic's).
* **TargetQueueDepth**: only the oldest that many messages are active (may be leased);
  the others wait until earlier ones leave.
* **Barrier** (``BarrierExpression``): a barrier message waits until every earlier message
  is removed, and every later one waits for it; it is then delivered to every
  subscription whose filter matches (and is not paused), whatever their backlogs, and
  removed. (Priority, barriers and TargetQueueDepth exclude each other, as in AMPS: the
  order is the age order wherever one of the last two applies.)
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from sortedcontainers import SortedList

from processor.queues.deferred import DeferredAcks
from processor.queues.model import (
    Bookmark,
    Change,
    MessageFilter,
    Outcome,
    QueueMessage,
    QueueRules,
    Subscription,
    priority_of,
)
from processor.topology.queue_spec import FairnessModel, Leasing, QueueSemantics

#: Stale heap entries allowed beyond twice the live ones before a heap is rebuilt.
_SLACK = 1024

__all__ = [
    "Bookmark",
    "Change",
    "Ledger",
    "MessageFilter",
    "Outcome",
    "QueueMessage",
    "QueueRules",
    "Subscription",
    "priority_of",
]


class Ledger:
    """One queue partition's decisions (see the module doc)."""

    def __init__(self, rules: QueueRules) -> None:
        self.rules = rules
        self._messages: dict[Bookmark, QueueMessage] = {}
        #: Every message held, and those not leased, in delivery order.
        self._order = SortedList()  # of (message.order(), bookmark)
        self._available = SortedList()
        self._leased = 0
        #: (deadline, bookmark, deliveries) of each lease, and (time, bookmark) of each
        #: expiration: checked against the message when due (a stale entry is skipped).
        self._lease_deadlines: list[tuple[int, Bookmark, int]] = []
        self._expirations: list[tuple[int, Bookmark]] = []
        self._subscriptions: dict[str, Subscription] = {}
        self._last_chosen: str | None = None
        #: Acknowledgements of messages not held yet: bookmark -> until, and by time.
        self._deferred = DeferredAcks()
        #: Barrier messages held (while there are none, order alone decides).
        self._barriers = 0
        #: Whether the next dispatch scans every available message: something changed
        #: that may let one go (a subscription, a freed slot, a return). Otherwise every
        #: available message was tried since, and only a new one can be leased.
        self._rescan = True

    # -- what it holds ------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._messages)

    def message(self, bookmark: Bookmark) -> QueueMessage | None:
        return self._messages.get(bookmark)

    def messages(self) -> list[QueueMessage]:
        """The messages held, in delivery order."""
        return [self._messages[bookmark] for _, bookmark in self._order]

    @property
    def leased(self) -> int:
        """How many messages are leased now."""
        return self._leased

    def subscription(self, subscription_id: str) -> Subscription | None:
        return self._subscriptions.get(subscription_id)

    def subscriptions(self) -> list[Subscription]:
        return list(self._subscriptions.values())

    def deferred_acks(self) -> dict[Bookmark, int]:
        """Acknowledgements of messages not held yet, and until when they are kept."""
        return self._deferred.kept()

    def keep_deferred_acks(self, acks: dict[Bookmark, int]) -> None:
        """Take over the deferred acknowledgements of an earlier ledger (memory only)."""
        for bookmark, until in acks.items():
            self._deferred.keep(bookmark, until)

    def next_due_ms(self) -> int | None:
        """When the clock next has work (an expiration, a lease deadline, a deferred
        acknowledgement to forget); None: nothing is timed."""
        times = [heap[0][0] for heap in (self._expirations, self._lease_deadlines) if heap]
        deferred = self._deferred.next_due_ms()
        return min([*times, deferred] if deferred is not None else times, default=None)

    # -- rebuilding after a restart -------------------------------------------------------

    def restore(
        self,
        subscriptions: Iterable[tuple[str, int | None, MessageFilter]],
        messages: Iterable[QueueMessage],
    ) -> None:
        """Take back what a partition kept (its subscriptions, then its messages with
        their counts and leases) without deciding anything: call :meth:`dispatch` after.
        A lease whose holder is not among the subscriptions is returned, uncounted. The
        subscriptions come back paused (:meth:`resume`): one whose service died with the
        restart must not be leased to (at-most-once would lose what it is sent)."""
        for subscription_id, max_backlog, matches in subscriptions:
            self._subscriptions[subscription_id] = Subscription(
                subscription_id, self._backlog(max_backlog), matches, paused=True
            )
        order: list[tuple[tuple[int, int], Bookmark]] = []
        available: list[tuple[tuple[int, int], Bookmark]] = []
        for message in messages:
            holder = None if message.holder is None else self._subscriptions.get(message.holder)
            if holder is None:
                message.holder, message.deadline_ms = None, None
            self._messages[message.bookmark] = message
            place = (message.order(), message.bookmark)
            order.append(place)
            self._barriers += message.barrier
            if message.expires_ms is not None:
                self._expirations.append((message.expires_ms, message.bookmark))
            if holder is None:
                available.append(place)
                continue
            holder.held.add(message.bookmark)
            self._leased += 1
            if message.deadline_ms is not None:
                self._lease_deadlines.append(
                    (message.deadline_ms, message.bookmark, message.deliveries)
                )
        self._order.update(order)
        self._available.update(available)
        heapq.heapify(self._expirations)
        heapq.heapify(self._lease_deadlines)
        self._rescan = True

    def _backlog(self, max_backlog: int | None) -> int:
        """A subscription's backlog: its ``max_backlog`` (default 1) within the queue's."""
        asked = 1 if max_backlog is None else max_backlog
        return min(asked, self.rules.max_per_subscription_backlog)

    # -- changes ------------------------------------------------------------------------

    def enqueue(self, message: QueueMessage, now_ms: int) -> list[Outcome]:
        """Take a message (a publish to an underlying topic that passed the filter)."""
        if message.bookmark in self._messages:
            return []  # the same publish again (replayed input): already held
        if self._deferred.take(message.bookmark, now_ms):
            return [Outcome(Change.ACKED, message.bookmark, message=message)]
        self._messages[message.bookmark] = message
        place = (message.order(), message.bookmark)
        self._order.add(place)
        self._available.add(place)
        self._barriers += message.barrier
        if message.expires_ms is not None:
            heapq.heappush(self._expirations, (message.expires_ms, message.bookmark))
            if len(self._expirations) > 2 * len(self._messages) + _SLACK:
                self._expirations = [
                    (m.expires_ms, m.bookmark)
                    for m in self._messages.values()
                    if m.expires_ms is not None
                ]
                heapq.heapify(self._expirations)
        return self._dispatch(now_ms, newest=place)

    def subscribe(
        self,
        subscription_id: str,
        now_ms: int,
        max_backlog: int | None = None,
        matches: MessageFilter | None = None,
    ) -> list[Outcome]:
        """Add (or replace, keeping its leases) a subscription; ``max_backlog`` is the
        subscriber's option (default 1; 0: barrier messages only), capped by the
        queue's."""
        backlog = self._backlog(max_backlog)
        current = self._subscriptions.get(subscription_id)
        held = current.held if current is not None else set()
        self._subscriptions[subscription_id] = Subscription(
            subscription_id, backlog, matches or (lambda _message: True), held
        )
        return self.dispatch(now_ms)

    def resume(self, subscription_ids: Iterable[str], now_ms: int) -> list[Outcome]:
        """Deliver to restored subscriptions again: their service was heard from."""
        resumed = False
        for subscription_id in subscription_ids:
            subscription = self._subscriptions.get(subscription_id)
            if subscription is not None and subscription.paused:
                subscription.paused, resumed = False, True
        return self.dispatch(now_ms) if resumed else []

    def disconnect(self, subscription_id: str, now_ms: int) -> list[Outcome]:
        """Remove a subscription: its leases return to the queue."""
        subscription = self._subscriptions.pop(subscription_id, None)
        if subscription is None:
            return []
        if self._last_chosen == subscription_id:
            self._last_chosen = None
        outcomes: list[Outcome] = []
        for bookmark in sorted(subscription.held):
            message = self._messages.get(bookmark)
            if message is not None and message.holder == subscription_id:
                outcomes.extend(self._return(message, cancelled=False))
        return outcomes + self.dispatch(now_ms)

    def acknowledge(
        self, bookmarks: Iterable[Bookmark], by: str | None, now_ms: int
    ) -> list[Outcome]:
        """Acknowledge messages (``by``: the subscription that asks; None: a client
        without one). A message another subscription holds is refused with ``Leasing``
        strict (no outcome for it)."""
        outcomes: list[Outcome] = []
        for bookmark in bookmarks:
            subscription = self._subscriptions.get(by) if by is not None else None
            if subscription is not None:
                subscription.held.discard(bookmark)  # its slot is free, whatever else
            if self.rules.semantics is QueueSemantics.AT_MOST_ONCE:
                continue  # removed when sent: an acknowledgement frees the slot only
            message = self._messages.get(bookmark)
            if message is None:
                if self.rules.semantics is QueueSemantics.AT_LEAST_ONCE:
                    self._deferred.keep(bookmark, now_ms + self.rules.deferred_ack_ms)
                continue
            if not self._may_settle(message, by):
                continue
            self._remove(message)
            outcomes.append(Outcome(Change.ACKED, bookmark, message=message))
        return outcomes + self.dispatch(now_ms)

    def acknowledge_matching(
        self, matches: MessageFilter, by: str | None, now_ms: int
    ) -> list[Outcome]:
        """Acknowledge every held message ``matches`` accepts (an ack by filter)."""
        chosen = [m.bookmark for m in self.messages() if matches(m) and self._may_settle(m, by)]
        return self.acknowledge(chosen, by, now_ms)

    def cancel(self, bookmarks: Iterable[Bookmark], by: str | None, now_ms: int) -> list[Outcome]:
        """Return leased messages to the queue (their cancel counts + 1); nothing for an
        at-most-once queue."""
        if self.rules.semantics is QueueSemantics.AT_MOST_ONCE:
            return []
        outcomes: list[Outcome] = []
        for bookmark in bookmarks:
            message = self._messages.get(bookmark)
            if message is None or message.holder is None or not self._may_settle(message, by):
                continue
            outcomes.extend(self._return(message, cancelled=True))
        return outcomes + self.dispatch(now_ms)

    def expire(self, bookmarks: Iterable[Bookmark], by: str | None, now_ms: int) -> list[Outcome]:
        """Expire messages now (their expiration actions run: the dead-letter topic);
        nothing for an at-most-once queue."""
        if self.rules.semantics is QueueSemantics.AT_MOST_ONCE:
            return []
        outcomes: list[Outcome] = []
        for bookmark in bookmarks:
            message = self._messages.get(bookmark)
            if message is not None and self._may_settle(message, by):
                outcomes.append(self._expire(message, "expired by request"))
        return outcomes + self.dispatch(now_ms)

    def tick(self, now_ms: int) -> list[Outcome]:
        """What the clock does: messages past their expiration expire, leases past their
        deadline return; then whatever can be delivered is."""
        outcomes = self._expire_due(now_ms)
        deadlines = self._lease_deadlines
        while deadlines and deadlines[0][0] <= now_ms:
            deadline, bookmark, deliveries = heapq.heappop(deadlines)
            message = self._messages.get(bookmark)
            if (
                message is not None
                and message.holder is not None
                and (message.deadline_ms, message.deliveries) == (deadline, deliveries)
            ):
                outcomes.extend(self._return(message, cancelled=False))
        self._deferred.forget_due(now_ms)
        return outcomes + self.dispatch(now_ms)

    def dispatch(self, now_ms: int) -> list[Outcome]:
        """Lease what can be leased now (the order, backlogs and fairness of the module
        doc), after expiring what is past its time."""
        self._rescan = True
        return self._dispatch(now_ms)

    def _dispatch(
        self, now_ms: int, newest: tuple[tuple[int, int], Bookmark] | None = None
    ) -> list[Outcome]:
        """``dispatch``; with ``newest`` (a message just enqueued) and nothing changed
        since the last dispatch, only that message is tried."""
        outcomes = self._expire_due(now_ms)
        if not self._subscriptions:
            return outcomes
        free = sum(max(s.free, 0) for s in self._subscriptions.values())
        if free <= 0 and not self._barriers:
            return outcomes  # no room anywhere: what frees a slot dispatches (rescans)
        available, index, end = self._available, 0, len(self._available)
        if outcomes or self._barriers:
            self._rescan = True
        if not self._rescan and newest is not None:
            index = available.bisect_left(newest)
            end = index + 1
        self._rescan = False
        limit, depth = self.rules.max_backlog, self.rules.target_queue_depth
        outstanding = sum(len(s.held) for s in self._subscriptions.values())
        while index < min(end, len(available)):
            if depth is not None and self._order.bisect_left(available[index]) >= depth:
                break  # past the active messages (TargetQueueDepth): later ones are too
            bookmark = available[index][1]
            message = self._messages[bookmark]
            if message.barrier:
                if self._order[0][1] != bookmark:
                    break  # earlier messages are still held: it and every later one wait
                if not any(_takes(s, message) for s in self._subscriptions.values()):
                    break  # nobody to deliver it to yet: it and every later one wait
                outcomes.append(self._deliver_barrier(message))
                end -= 1
                continue  # removed: the next one is at the same index
            if free <= 0 or (limit is not None and outstanding >= limit):
                break
            subscription = self._choose(message)
            if subscription is None:
                index += 1  # no subscription with room takes it: later ones may
                continue
            outcomes.append(self._lease(message, subscription, now_ms))
            free -= 1
            outstanding += 1
            end -= 1
            if self.rules.semantics is QueueSemantics.AT_LEAST_ONCE:
                del available[index]  # leased (at-most-once: removed with the message)
        return outcomes

    def _expire_due(self, now_ms: int) -> list[Outcome]:
        """Expire the messages whose time has come (before anything is leased)."""
        outcomes: list[Outcome] = []
        expirations = self._expirations
        while expirations and expirations[0][0] <= now_ms:
            expires_ms, bookmark = heapq.heappop(expirations)
            message = self._messages.get(bookmark)
            if message is not None and message.expires_ms == expires_ms:
                outcomes.append(self._expire(message, "message expired"))
        return outcomes

    # -- the rules ----------------------------------------------------------------------

    def _may_settle(self, message: QueueMessage, by: str | None) -> bool:
        """Whether ``by`` may acknowledge, cancel or expire the message (Leasing)."""
        return (
            self.rules.leasing is Leasing.SUBLET or message.holder is None or message.holder == by
        )

    def _choose(self, message: QueueMessage) -> Subscription | None:
        subscriptions = list(self._subscriptions.values())
        fairness = self.rules.fairness
        if fairness is FairnessModel.ROUND_ROBIN and self._last_chosen in self._subscriptions:
            start = [s.id for s in subscriptions].index(self._last_chosen) + 1
            subscriptions = subscriptions[start:] + subscriptions[:start]
        eligible = [s for s in subscriptions if s.free > 0 and s.matches(message)]
        if not eligible:
            return None
        if fairness is FairnessModel.PROPORTIONAL:
            return min(eligible, key=lambda s: len(s.held) / s.backlog)
        return eligible[0]

    def _lease(self, message: QueueMessage, subscription: Subscription, now_ms: int) -> Outcome:
        self._last_chosen = subscription.id
        subscription.held.add(message.bookmark)
        message.deliveries += 1
        period = self.rules.lease_period_ms
        deadline = None if period is None else now_ms + period
        if self.rules.semantics is QueueSemantics.AT_MOST_ONCE:
            self._remove(message)
        else:
            message.holder, message.deadline_ms = subscription.id, deadline
            self._leased += 1
            if deadline is not None:
                heapq.heappush(
                    self._lease_deadlines, (deadline, message.bookmark, message.deliveries)
                )
        return Outcome(
            Change.LEASED, message.bookmark, (subscription.id,), deadline, message=message
        )

    def _deliver_barrier(self, message: QueueMessage) -> Outcome:
        to = tuple(s.id for s in self._subscriptions.values() if _takes(s, message))
        self._remove(message)
        return Outcome(Change.BARRIER, message.bookmark, to, message=message)

    def _return(self, message: QueueMessage, cancelled: bool) -> list[Outcome]:
        holder = None if message.holder is None else self._subscriptions.get(message.holder)
        if holder is not None:
            holder.held.discard(message.bookmark)
        message.holder, message.deadline_ms = None, None
        self._leased -= 1
        self._available.add((message.order(), message.bookmark))
        if cancelled:
            message.cancels += 1
        rules = self.rules
        if cancelled and rules.max_cancels and message.cancels >= rules.max_cancels:
            return [self._expire(message, f"cancelled {message.cancels} times (MaxCancels)")]
        if rules.max_deliveries and message.deliveries >= rules.max_deliveries:
            return [self._expire(message, f"delivered {message.deliveries} times (MaxDeliveries)")]
        return [Outcome(Change.RETURNED, message.bookmark)]

    def _expire(self, message: QueueMessage, reason: str) -> Outcome:
        self._remove(message)
        return Outcome(Change.EXPIRED, message.bookmark, reason=reason, message=message)

    def _remove(self, message: QueueMessage) -> None:
        del self._messages[message.bookmark]
        self._barriers -= message.barrier
        place = (message.order(), message.bookmark)
        self._order.remove(place)
        if message.holder is None:
            self._available.discard(place)
            return
        self._leased -= 1  # acknowledged or expired while leased
        holder = self._subscriptions.get(message.holder)
        if holder is not None:
            holder.held.discard(message.bookmark)


def _takes(subscription: Subscription, message: QueueMessage) -> bool:
    """Whether a barrier message goes to ``subscription`` (its filter matches and it is
    not paused)."""
    return not subscription.paused and subscription.matches(message)
