"""Aggregated subscriptions: live group rows, one shared state per aggregation (spec 3.17).

A subscribe or sow_and_subscribe with ``projection`` and ``grouping`` on one literal SOW
topic sees the topic as a private view with that definition: one row per group (the
query phase of a sow_and_subscribe), then, for each unit of changes, one update per
group the unit changed, and an OOF ``deleted`` when a group empties (without ``oof``:
nothing; ``send_deletes``: a delete). The filter applies to the underlying records, as a
view's ``Filter`` does.

The groups are kept exactly as a view's are (:class:`processor.views.grouped.Group`: a
record's old contribution retracted, its new one added), never by re-running the
query. Every subscriber of the same aggregation (topic, projection, grouping, and the
filter with the caller's entitlement filter AND-ed in) shares one :class:`AggregationFeed`:
the one subscription of the aggregation the dispatcher knows, holding the matching
records (its focus, so a record leaving the filter is offered to it) and the groups.
Its subscribers are :class:`AggregatedSubscription` s, never filed with the dispatcher:
the feed queues the same notice objects to each of them.

No gap, no duplicate: a subscriber joins under the feed's lock, taking the rows of every
group as they stand (its query phase); the feed stamps each unit's notices with a
generation under the same lock, and a subscriber is sent only the units after the one it
joined at. The notices are queued outside that lock, so a subscriber's full queue or a
session's lock never holds the dispatcher in the feed.

A row is a JSON message with the aggregated query's SowKey (:func:`processor.query.sow.
aggregate_key`): a subscriber can tell groups apart, and a row of the query phase and
its updates share the key.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

from processor import changelog
from processor.changelog.events import ChangelogPosition
from processor.errors import DecodeError, EnvelopeError, NotEntitledError, SowError
from processor.expr import Aggregation, ContextInput
from processor.log import LogPosition
from processor.messages import Codec
from processor.query.sow import QueryStats, aggregate_key, aggregated_envelope
from processor.subscriptions.model import ChangeKind, Notice, OofReason, SubscribeRequest
from processor.subscriptions.plan import SubscriptionPlan
from processor.subscriptions.subscription import Offer, SharedSender, StartVector, Subscription
from processor.topology.model import SowTopic
from processor.views.contribution import GroupKey, contribution
from processor.views.grouped import Group, GroupedView

log = logging.getLogger(__name__)

#: What identifies a shared aggregation: topic, projection, grouping, effective filter.
FeedKey = tuple[str, str, str, str]
#: Notices for a unit of changes: the feed's generation, each changed group's row.
Unit = tuple[int, list["Row"]]


@dataclasses.dataclass(slots=True)
class Row:
    """A group's row after a unit of changes: its SowKey, its new envelope (None: the
    group emptied), the envelope its subscribers had, and the change that made it."""

    sow_key: bytes
    envelope: bytes | None
    previous: bytes | None
    position: ChangelogPosition


class AggregatedSubscription(Subscription):
    """A subscriber of a shared aggregation (see the module doc): its queue receives its
    feed's rows; the dispatcher never offers it a change."""

    aggregated = True

    def __init__(self, request: SubscribeRequest, **options: Any) -> None:
        super().__init__(request, **options)
        #: The feed generation it joined at: only later units are sent to it.
        self.joined_at = 0
        self.feed: AggregationFeed | None = None

    def deliver(self, notices: list[Notice]) -> None:
        """Queue ``notices`` (never blocks: a full queue closes the subscription)."""
        with self._ready:
            if self.closed is not None:
                return
            queue = self._queue
            before = len(queue)
            if before + len(notices) <= self.max_backlog:  # the common case: room
                queue.extend(notices)
                if before == 0:  # else its sender was told already and has not emptied it
                    self._wake()
                return
            overflow = self._queue_all(notices)
        if overflow:
            self._run_close_callbacks()


class AggregationFeed(Subscription):
    """One shared aggregation: the records matching its filter, grouped (module doc)."""

    def __init__(self, topic: SowTopic, aggregation: Aggregation, codec: Codec, filter: str):
        super().__init__(
            SubscribeRequest(topic=topic.name, filter=filter, oof=True),
            with_query=True,
            max_backlog=1,
        )
        self.topic, self.aggregation, self.codec = topic, aggregation, codec
        #: Whether the aggregation reads message-context facts (SOW_KEY(), ...).
        self._reads_context = any(isinstance(i, ContextInput) for i in aggregation.inputs)
        self.groups = GroupedView(aggregation, where="subscription")
        #: Each group's SowKey and the envelope of its row now.
        self._rows: dict[GroupKey, tuple[bytes, bytes]] = {}
        self.members: dict[int, AggregatedSubscription] = {}
        self.key: FeedKey = (topic.name, "", "", "")
        self._generation = 0
        #: The groups changed since the last flush, and the change that last did.
        self._changed: dict[GroupKey, ChangelogPosition] = {}
        self._units: list[Unit] = []
        #: Held while a unit's notices are queued to the subscribers (in unit order).
        self._sending = threading.Lock()
        #: Groups applied so far (updates, for metrics and benchmarks).
        self.applied = 0

    # -- the groups ------------------------------------------------------------------------

    @classmethod
    def of(
        cls, plan: SubscriptionPlan, codecs: Mapping[str, Codec]
    ) -> tuple[Self, SubscriptionPlan]:
        """A new feed for an aggregated subscription's plan, and the plan it is filed
        with in the dispatcher."""
        topic = plan.topics[0]
        assert isinstance(topic, SowTopic)
        assert plan.aggregation is not None
        feed = cls(topic, plan.aggregation, codecs[topic.name], plan.request.filter)
        feed.context = plan.context
        filed = dataclasses.replace(plan, request=feed.request, shape=None, with_query=True)
        return feed, filed

    def start(self, vector: StartVector, focus: Iterable[Any] = ()) -> None:
        """Start after ``vector`` with the groups of ``focus``, the matching records as a
        query selected them ((topic, envelope) pairs)."""
        rows = []
        for topic, envelope in focus:
            sow_key = changelog.decode(envelope).sow_key.encode()
            self._apply(sow_key, envelope)
            rows.append((topic, sow_key, envelope))
        groups = self.groups
        self._rows = {key: self._row(key, groups.group(key)) for key in groups.group_keys()}
        super().start(vector, rows)
        self.flush()

    def _accept(self, start: dict[tuple[str, int], int], offers: list[Offer]) -> bool:
        """Apply the offered changes to the groups, noting the groups they changed for
        the next :meth:`flush` (lock held); never overflows."""
        changed = self._changed
        for notice in self._decided(start, offers):
            envelope = notice.envelope if notice.kind is ChangeKind.PUBLISH else None
            for group in self._apply(notice.sow_key, envelope):
                changed[group] = notice.position
        return False

    def flush(self) -> None:
        """Send each group changed since the last flush its new row (the dispatcher's
        call once it has offered the units it took: when it is behind, one row per group
        for all of them)."""
        try:
            with self._ready:
                self._stamp()
        except Exception as exc:  # a row that cannot be built: end it, never go quiet
            log.exception("aggregation on %s failed; its subscribers are ended", self.topic.name)
            self._fail(exc)
            return
        self._send()

    def _fail(self, exc: Exception) -> None:
        """End every subscriber with the reason (they subscribe again, from a new state)."""
        error = SowError(
            f"the aggregated subscription on {self.topic.name!r} could not build a row "
            f"({exc.__class__.__name__}: {exc}); subscribe again"
        )
        self.close(error)
        with self._ready:
            members = list(self.members.values())
        for member in members:
            member.close(error)

    def _stamp(self) -> None:
        """The changed groups' new rows, stamped with the next generation (lock held)."""
        changed, self._changed = self._changed, {}
        if not changed:
            return
        rows: list[Row] = []
        for group, position in changed.items():
            before = self._rows.get(group)
            members = self.groups.group(group)
            if members is None:
                if before is not None:
                    del self._rows[group]
                    rows.append(Row(before[0], None, before[1], position))
                continue
            sow_key, envelope = self._rows[group] = self._row(group, members)
            rows.append(Row(sow_key, envelope, None if before is None else before[1], position))
        self._generation += 1
        self._units.append((self._generation, rows))

    def _apply(self, sow_key: bytes, envelope: bytes | None) -> tuple[GroupKey, ...]:
        """A record's new state (None: it left) applied; the groups it changed."""
        self.applied += 1
        found = None if envelope is None else self._contribution(envelope)
        return self.groups.place(sow_key, found)

    def _contribution(self, envelope: bytes) -> tuple[GroupKey, tuple[Any, ...]] | None:
        try:
            if self._reads_context:
                record = changelog.decode(envelope)
                message, context = self.codec.decode(record.data), record.context()
            else:  # the message alone: no need to decode the whole envelope
                message, context = self.codec.decode(changelog.data_of(envelope)), None
        except (DecodeError, EnvelopeError):
            return None  # stored records decode; one that does not contributes nothing
        return contribution(self.aggregation, None, message, context)

    def _row(self, group: GroupKey, members: Group | None) -> tuple[bytes, bytes]:
        assert members is not None
        sow_key = aggregate_key(self.topic, group)
        now_ms = int(time.time() * 1000)
        envelope = aggregated_envelope(self.topic, sow_key, members.result(), now_ms)
        return sow_key.encode(), changelog.encode(envelope)

    # -- the subscribers -------------------------------------------------------------------

    def join(self, member: AggregatedSubscription) -> list[changelog.Envelope]:
        """Add a subscriber; the rows of every group now (its query phase)."""
        with self._ready:
            if self.closed is not None:
                raise self.closed
            member.joined_at = self._generation
            member.feed = self
            self.members[member.number] = member
            rows = [changelog.decode(envelope) for _, envelope in self._rows.values()]
        member.start({})
        return rows

    def leave(self, member: AggregatedSubscription) -> bool:
        """Take a subscriber out; True when none is left."""
        with self._ready:
            self.members.pop(member.number, None)
            return not self.members

    def _send(self) -> None:
        """Queue the units stamped so far to the subscribers that joined before each."""
        with self._sending:
            with self._ready:
                units, self._units = self._units, []
                members = list(self.members.values())
            for generation, rows in units:
                # The same notices for every subscriber with the same options.
                shared: dict[tuple[bool, bool, bool], list[Notice]] = {}
                for member in members:
                    if member.joined_at >= generation:
                        continue
                    request = member.request
                    options = (request.oof, request.send_deletes, request.no_empties)
                    notices = shared.get(options)
                    if notices is None:
                        made = (_notice(request, self.topic.name, row) for row in rows)
                        notices = shared[options] = [n for n in made if n is not None]
                    if notices:
                        member.deliver(notices)


def _notice(request: SubscribeRequest, topic: str, row: Row) -> Notice | None:
    """What a group's new row means for a subscriber who asked ``request``."""
    if row.envelope is not None:
        previous = row.previous
        if (
            request.no_empties
            and previous is not None
            and changelog.data_of(previous) == changelog.data_of(row.envelope)
        ):
            return None
        kind = ChangeKind.PUBLISH
        return Notice(kind, topic, row.sow_key, row.envelope, row.position, previous=previous)
    assert row.previous is not None
    if request.oof:
        return Notice(
            ChangeKind.OOF, topic, row.sow_key, row.previous, row.position, OofReason.DELETED
        )
    if request.send_deletes:
        return Notice(ChangeKind.DELETE, topic, row.sow_key, row.previous, row.position)
    return None


class Aggregations:
    """The shared aggregations of a hub, by :data:`FeedKey`; ``forget`` unfiles a feed
    whose last subscriber left."""

    def __init__(self, forget: Callable[[Subscription], None]) -> None:
        self._forget = forget
        self._lock = threading.Lock()
        self._feeds: dict[FeedKey, AggregationFeed] = {}

    def subscribe(
        self,
        plan: SubscriptionPlan,
        sender: SharedSender | None,
        open: Callable[[SubscriptionPlan], AggregationFeed],
    ) -> tuple[AggregatedSubscription, list[changelog.Envelope], list[LogPosition], QueryStats]:
        """A subscriber of ``plan``'s aggregation, joined to its feed (``open`` builds
        one when there is none): the subscriber, the rows now, the position vector they
        reflect, and the query phase's counts."""
        started = time.perf_counter()
        subscriber = AggregatedSubscription(
            plan.request, with_query=plan.with_query, max_backlog=plan.max_backlog, sender=sender
        )
        subscriber.context = plan.context
        request = plan.request
        projection, grouping = request.projection.strip(), request.grouping.strip()
        key = (request.topic, projection, grouping, plan.filter_text)
        with self._lock:
            feed = self._feeds.get(key)
            if feed is None or feed.closed is not None:
                feed = self._feeds[key] = open(plan)
                feed.key = key
            rows = feed.join(subscriber)
        elapsed_us = int((time.perf_counter() - started) * 1e6)
        stats = QueryStats(len(rows), len(rows), len(rows), elapsed_us, "aggregated subscription")
        return subscriber, rows, feed.start_vector(), stats

    def move(self, member: Subscription, plan: SubscriptionPlan) -> None:
        """A subscriber's new plan (its rights changed): kept when its aggregation is the
        same; else a NotEntitledError, to end it (it subscribes again under the new
        rights, from a snapshot of the groups it may see)."""
        feed = getattr(member, "feed", None)
        if feed is not None and feed.key[3] != plan.filter_text:
            raise NotEntitledError(
                f"the entitlements of {plan.context.principal} on {plan.request.topic!r} "
                "changed: subscribe again to aggregate under the new ones"
            )

    def leave(self, member: Subscription) -> None:
        """Take a subscriber out of its feed; the feed goes with its last subscriber."""
        feed = getattr(member, "feed", None)
        if feed is None:
            return
        with self._lock:
            if feed.leave(member):
                self._feeds = {k: f for k, f in self._feeds.items() if f is not feed}
                feed.close()
                self._forget(feed)

    def members(self) -> list[AggregatedSubscription]:
        with self._lock:
            feeds = list(self._feeds.values())
        return [member for feed in feeds for member in list(feed.members.values())]

    def feeds(self) -> list[AggregationFeed]:
        with self._lock:
            return list(self._feeds.values())
