"""Session streams: many subscriptions on one gRPC stream.

An AMPS client connection carries many subscriptions; one gRPC stream per subscription
costs the service a worker thread each (see :mod:`processor.server.subscriptions`), so
a client with thousands of subscriptions opens a ``Session`` instead: it sends
subscribe, sow_and_subscribe and unsubscribe commands, and gets every subscription's
messages on the one stream, each tagged with its ``sub_id``. A subscribe or
sow_and_subscribe command with ``replace`` changes the live subscription of its
``sub_id`` in place (spec 3.12, :mod:`processor.subscriptions.replacing`); a refused
replace ends that subscription with the reason.

Threads: the gRPC worker of the stream sends; a reader thread takes the client's
commands and registers subscriptions with the hub. All the session's subscriptions share
one :class:`~processor.subscriptions.subscription.SharedSender`: the dispatcher
notifies its condition and names the subscriptions with news, so one sender serves them
all without looking at the others. A subscription's opening messages (its
``registered`` or query result) are queued before it becomes active, so they always
precede its changes. A subscription that ends (refused command, unsubscribe, slow
consumer) gets an ``ended`` message; the session and the others go on. The session ends
when the client cancels or the service stops.

Lock order: the hub's locks, then a session's condition; never the reverse (nothing here
calls the hub while holding the condition).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc

from processor import errors
from processor.subscriptions.subscription import SharedSender, Subscription
from processor.wire import sow_pb2

log = logging.getLogger(__name__)

#: Subscriptions one session holds at most.
MAX_SESSION_SUBSCRIPTIONS = 10_000

#: Builds a subscription's opening messages and registers it: (request, sender) ->
#: (subscription, opening messages); raises SowError when the hub refuses it.
Opener = Callable[[Any, SharedSender], tuple[Subscription, Iterable[Any]]]

#: Replaces a live subscription's request in place: (subscription, request, whether
#: the command is a sow_and_subscribe); raises SowError, changing nothing, when the hub
#: refuses it.
Replacer = Callable[[Subscription, Any, bool], None]


class Session:
    """The subscriptions of one Session stream and what waits to be sent to it."""

    def __init__(
        self,
        unsubscribe: Callable[[Subscription], None],
        subscribe: Opener,
        sow_and_subscribe: Opener,
        status_for: Callable[[errors.SowError], grpc.StatusCode],
        changes: Callable[[Subscription, Any, list[Any]], Any],
        replace: Replacer | None = None,
    ) -> None:
        #: Drops a subscription (the hub's, with its client-status event).
        self._unsubscribe_from_hub = unsubscribe
        self._replace_with = replace
        self._openers = {"subscribe": subscribe, "sow_and_subscribe": sow_and_subscribe}
        self._status_for = status_for
        self._changes = changes
        self.sender = SharedSender()
        self.ready = self.sender.ready
        #: Opening messages and ended notices, in the order they are sent.
        self._outbox: collections.deque[Any] = collections.deque()
        #: sub_id -> (subscription, its request): the ones whose changes are sent.
        self._active: dict[str, tuple[Subscription, Any]] = {}
        #: sub_ids registered or being registered (unique in the session).
        self._names: set[str] = set()
        #: subscription number -> sub_id, for the active ones.
        self._ids: dict[int, str] = {}
        self._closed = False

    # -- the reader's side ---------------------------------------------------------------

    def read(self, commands: Iterable[Any]) -> None:
        """Carry out the client's commands until it stops sending or the stream ends."""
        try:
            for command in commands:
                if self._closed:
                    return
                self.command(command)
        except Exception as exc:  # the stream ended under the iterator (cancel, shutdown)
            log.debug("session commands ended: %r", exc)

    def command(self, command: Any) -> None:
        """One command: subscribe, sow_and_subscribe or unsubscribe."""
        kind = command.WhichOneof("command")
        if kind == "unsubscribe":
            self._unsubscribe(command.unsubscribe)
            return
        if kind is None:
            self._end(
                "",
                "INVALID_ARGUMENT",
                "an empty session command: send one of subscribe, sow_and_subscribe or unsubscribe",
            )
            return
        request = getattr(command, kind)
        sub_id = request.sub_id
        if request.replace:
            self._replace(kind, request)
            return
        with self.ready:
            refusal = None
            if not sub_id:
                refusal = "a session subscription needs a sub_id (unique in the session)"
            elif sub_id in self._names:
                refusal = f"sub_id {sub_id!r} is already in use in this session"
            elif len(self._names) >= MAX_SESSION_SUBSCRIPTIONS:
                refusal = (
                    f"this session already holds {MAX_SESSION_SUBSCRIPTIONS} subscriptions; "
                    "open another session"
                )
            else:
                self._names.add(sub_id)
        if refusal is not None:
            self._end(sub_id, "INVALID_ARGUMENT", refusal)
            return
        try:
            subscription, opening = self._openers[kind](request, self.sender)
            # A bookmark replay is read here, before the sender's lock is taken (it
            # starts the subscription, which shares that lock).
            opening = list(opening)
        except errors.SowError as exc:
            with self.ready:
                self._names.discard(sub_id)
            self._end(sub_id, self._status_for(exc).name, str(exc))
            return
        with self.ready:
            if self._closed:
                closed = True
            else:
                closed = False
                self._outbox.extend(opening)
                self._active[sub_id] = (subscription, request)
                self._ids[subscription.number] = sub_id
                # Changes queued before it was active: the sender looks at it now.
                self.sender.woken.append(subscription)
                self.ready.notify()
        if closed:
            self._unsubscribe_from_hub(subscription)

    def _replace(self, kind: str, request: Any) -> None:
        """Replace the live subscription ``request.sub_id`` (spec 3.12). Refused (unknown
        sub_id, an option that may not change, a bad filter): the subscription is ended
        with the reason, as its ``ended`` message says."""
        sub_id = request.sub_id
        with self.ready:
            entry = self._active.get(sub_id)
        if entry is None or self._replace_with is None:
            self._end(
                sub_id,
                "NOT_FOUND",
                f"replace: no live subscription {sub_id!r} in this session to replace; send "
                f"{kind} without replace to place it",
            )
            return
        subscription = entry[0]
        try:
            self._replace_with(subscription, request, kind == "sow_and_subscribe")
        except errors.SowError as exc:
            with self.ready:
                if self._active.get(sub_id, (None,))[0] is subscription:
                    del self._active[sub_id]
                    self._names.discard(sub_id)
                    self._ids.pop(subscription.number, None)
            self._unsubscribe_from_hub(subscription)
            self._end(
                sub_id,
                self._status_for(exc).name,
                f"replace refused, subscription ended: {exc}",
            )
            return
        with self.ready:
            if self._active.get(sub_id, (None,))[0] is subscription:
                self._active[sub_id] = (subscription, request)

    def _unsubscribe(self, sub_id: str) -> None:
        with self.ready:
            entry = self._active.pop(sub_id, None)
            if entry is not None:
                self._names.discard(sub_id)
                self._ids.pop(entry[0].number, None)
        if entry is None:
            self._end(sub_id, "NOT_FOUND", f"no subscription {sub_id!r} in this session")
            return
        self._unsubscribe_from_hub(entry[0])
        self._end(sub_id, "CANCELLED", "unsubscribed")

    def _end(self, sub_id: str, code: str, details: str) -> None:
        with self.ready:
            self._outbox.append(
                sow_pb2.SubscriptionMessage(
                    sub_id=sub_id, ended=sow_pb2.SubscriptionEnded(code=code, details=details)
                )
            )
            self.ready.notify()

    def close(self) -> None:
        """End the session: every subscription is dropped (idempotent)."""
        with self.ready:
            self._closed = True
            subscriptions = [s for s, _ in self._active.values()]
            self._active.clear()
            self._ids.clear()
            self.ready.notify_all()
        for subscription in subscriptions:
            self._unsubscribe_from_hub(subscription)

    # -- the sender's side ---------------------------------------------------------------

    def messages(self, is_active: Callable[[], bool], idle_s: float, most: int) -> Iterator[Any]:
        """What to send, until the session closes or ``is_active()`` turns False."""
        woken = self.sender.woken
        while True:
            with self.ready:
                while not self._closed and not self._outbox and not woken:
                    if not self.ready.wait(idle_s) and not is_active():
                        self._closed = True
                if self._closed:
                    return
                outbox = list(self._outbox)
                self._outbox.clear()
                pending: dict[int, tuple[str, Subscription, Any]] = {}
                while woken:
                    subscription = woken.popleft()
                    sub_id = self._ids.get(subscription.number)
                    if sub_id is not None:
                        pending[subscription.number] = (sub_id, *self._active[sub_id])
            yield from outbox
            for sub_id, subscription, request in pending.values():
                try:
                    deliveries = subscription.take(most, 0)
                except errors.SowError as exc:
                    yield from self._ended(sub_id, subscription, exc)
                    continue
                if subscription.has_backlog():
                    with self.ready:
                        woken.append(subscription)  # more than one message's worth
                if deliveries:
                    message = self._changes(subscription, request, deliveries)
                    if message is not None:  # None: no_empties suppressed every change
                        yield message

    def _ended(
        self, sub_id: str, subscription: Subscription, error: errors.SowError
    ) -> Iterator[Any]:
        """A subscription the hub closed (a slow consumer): drop it, tell the client."""
        with self.ready:
            entry = self._active.get(sub_id)
            if entry is None or entry[0] is not subscription:
                return
            del self._active[sub_id]
            self._names.discard(sub_id)
            self._ids.pop(subscription.number, None)
        self._unsubscribe_from_hub(subscription)
        if isinstance(error, errors.SlowConsumerError):
            log.warning("%s", error)
        yield sow_pb2.SubscriptionMessage(
            sub_id=sub_id,
            ended=sow_pb2.SubscriptionEnded(code=self._status_for(error).name, details=str(error)),
        )
