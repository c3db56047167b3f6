"""A client over several query-service replicas that resumes subscriptions on failure.

:class:`FailoverClient` talks to one query service at a time. When its subscription
stream breaks (the service died, restarted or cannot be reached), it connects to the
next address (round robin) and subscribes again from the subscription's bookmark in its
:class:`~processor.client.bookmark_store.BookmarkStore`: the position of the last message the
application *discarded* (until the store knows where the subscription got to, from the
bookmark it was made with). The service replays from there and goes live, so an application
that discards each message once it is done with it sees every change once, across
failovers and, with a :class:`~processor.client.bookmark_store.SowBookmarkStore`, across
restarts of its own process (AMPS's HAClient with a bookmark store, seed 004).

Messages received but not discarded when the stream breaks are delivered again.

UNAUTHENTICATED and PERMISSION_DENIED are raised at once: another service checks the same
credentials and the same entitlements. A TLS handshake that fails moves on to the next
address (another service may present a valid certificate), but only once per address:
when every address failed it in a row, the last error is raised without more rounds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from processor.client.bookmark_store import BookmarkStore, MemoryBookmarkStore, Vector, parse_vector
from processor.client.credentials import ClientSecurity
from processor.client.sow_client import SowClient, SubscriptionStream
from processor.errors import ChannelSecurityError, InvalidRequestError, ServiceError

log = logging.getLogger(__name__)

#: The bookmark meaning "where this subscription's bookmark store says it got to".
RECENT = "recent"

#: Bookmarks that start a subscription live, with no replay.
NOW = frozenset({"", "0|1|"})

#: Status codes after which a subscription moves to the next service: the service is
#: gone or not ready (CatchingUp is UNAVAILABLE too), or it dropped the stream. Never
#: UNAUTHENTICATED or PERMISSION_DENIED: every service would answer the same.
FAILOVER_CODES = frozenset({"UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "UNKNOWN"})


class _Failures:
    """Failures in a row of one operation, and whether the next moves on or gives up."""

    def __init__(self, owner: FailoverClient) -> None:
        self.owner = owner
        self.count = 0
        self.handshakes = 0

    def reset(self) -> None:
        self.count = self.handshakes = 0

    def fail_over(self, error: ServiceError) -> bool:
        """Count ``error``; whether to move to the next service (else raise it)."""
        self.count += 1
        if isinstance(error, ChannelSecurityError):
            self.handshakes += 1
            if self.handshakes >= len(self.owner.addresses):
                return False  # every service failed the handshake: a setting to fix
        else:
            self.handshakes = 0
        return error.code in FAILOVER_CODES and self.count < self.owner.rounds * len(
            self.owner.addresses
        )


class FailoverClient:
    """Query services at ``addresses`` (``host:port``), used one at a time.

    ``name`` identifies the client in its bookmark store (SubIds are unique per client).
    ``rounds`` bounds how many times in a row every address may fail before a
    subscription gives up with the last error; ``pause_s`` is the wait between attempts.
    ``security``: TLS and credentials for every address
    (:class:`~processor.client.credentials.ClientSecurity`).
    Thread-safe; iterate each subscription from one thread.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        name: str,
        bookmark_store: BookmarkStore | None = None,
        *,
        rounds: int = 10,
        pause_s: float = 0.2,
        security: ClientSecurity | None = None,
    ) -> None:
        if not addresses:
            raise InvalidRequestError("a FailoverClient needs at least one query-service address")
        self.addresses = list(addresses)
        self.name = name
        self.store: BookmarkStore = bookmark_store or MemoryBookmarkStore()
        self.rounds = rounds
        self.pause_s = pause_s
        self.security = security or ClientSecurity()
        self._lock = threading.Lock()
        self._index = 0
        self._client = SowClient(self.addresses[0], security=self.security)
        #: How many times this client moved to another address.
        self.failovers = 0

    @property
    def address(self) -> str:
        """The address in use."""
        with self._lock:
            return self.addresses[self._index]

    @property
    def client(self) -> SowClient:
        """The client of the service in use."""
        with self._lock:
            return self._client

    def fail_over(self, failed: SowClient) -> None:
        """Move to the next address, unless another thread already moved off ``failed``."""
        with self._lock:
            if self._client is not failed:
                return
            failed.close()
            self._index = (self._index + 1) % len(self.addresses)
            self._client = SowClient(self.addresses[self._index], security=self.security)
            self.failovers += 1
            log.warning("query service failed; moving to %s", self.addresses[self._index])

    def query(self, topic: str, **kwargs: Any) -> tuple[list[Any], Any, Any]:
        """:meth:`SowClient.query` on the service in use, moving on when it fails."""
        failures = _Failures(self)
        while True:
            client = self.client
            try:
                return client.query(topic, **kwargs)
            except ValueError:
                # grpc's "Cannot invoke RPC: Channel closed!": another thread moved to the
                # next service and closed this client after we took it. Use the new one.
                if self.client is client:
                    raise
            except ServiceError as error:
                if not failures.fail_over(error):
                    raise
                self.fail_over(client)
                time.sleep(self.pause_s)

    def subscribe(
        self, topic: str, sub_id: str, bookmark: str = RECENT, **options: Any
    ) -> BookmarkSubscription:
        """A subscription that survives failovers (see the module doc). ``bookmark`` is
        where it starts: ``recent`` (where the store says it got to; the whole log for a
        sub_id the store does not know), ``0`` (the whole log), "" (now), a position
        vector, a timestamp or a range (docs/subscriptions.md). ``options`` are
        SubscribeRequest fields. Call :meth:`discard` with each message when done with
        it."""
        if not sub_id:
            raise InvalidRequestError("a bookmark subscription needs a sub_id (the store's key)")
        return BookmarkSubscription(self, topic, sub_id, bookmark, options)

    def discard(self, message: Any) -> None:
        """The application is done with this subscription message (a ``change``); a
        resubscription starts after it."""
        if message.WhichOneof("part") != "change":
            return
        position = message.change.changelog_position
        self.store.discard(message.sub_id, position.topic, position.partition, position.offset)

    def close(self) -> None:
        with self._lock:
            self._client.close()

    def __enter__(self) -> FailoverClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BookmarkSubscription:
    """The messages of one failover subscription (iterate it from one thread).

    Yields the service's messages (``registered``, ``completed``, ``change``...) with the
    subscription's sub_id; after a failover it starts again with the new service's
    ``registered``. Ends when the service ends it (a range replay reached its end), when
    :meth:`cancel` is called, or with the last error when no service answers.
    """

    def __init__(
        self, owner: FailoverClient, topic: str, sub_id: str, bookmark: str, options: dict[str, Any]
    ) -> None:
        self._owner, self.topic, self.sub_id = owner, topic, sub_id
        self._bookmark, self._options = bookmark, options
        self._stream: SubscriptionStream | None = None
        self._cancelled = False
        #: Whether the store says where this subscription got to. Until it does (nothing
        #: delivered, no ``registered`` or ``completed`` recorded), a resubscription uses
        #: the bookmark asked for: the store knows nothing of it (or something stale).
        self._anchored = bookmark == RECENT
        #: Subscriptions made (1 + resubscriptions after failures).
        self.attempts = 0

    def _start_bookmark(self) -> str:
        if self._anchored:
            return self._owner.store.most_recent(self.sub_id)
        return self._bookmark

    def __iter__(self) -> Iterator[Any]:
        store, failures = self._owner.store, _Failures(self._owner)
        if not self._anchored:
            store.forget(self.sub_id)  # the bookmark asked for decides, not a stale entry
        vector = _vector_of(self._bookmark) if not self._anchored else None
        if vector is not None:
            # Everything up to the vector counts as discarded: a replay cut short resumes
            # each partition where it got to, after the vector.
            for (topic, partition), offset in sorted(vector.items()):
                store.discard(self.sub_id, topic, partition, offset)
            self._anchored = True
        while not self._cancelled:
            client = self._owner.client
            bookmark = self._start_bookmark()
            self.attempts += 1
            try:
                self._stream = client.subscribe(
                    self.topic, sub_id=self.sub_id, bookmark=bookmark, **self._options
                )
                for message in self._stream:
                    failures.reset()
                    part = message.WhichOneof("part")
                    if part == "registered" and bookmark in NOW:
                        # Nothing is replayed: the subscription starts at this vector.
                        store.advance(self.sub_id, _triples(message.registered.snapshot))
                        self._anchored = True
                    elif part == "completed":
                        # Every replayed message came before this, and was discarded.
                        store.advance(self.sub_id, _triples(message.completed.position))
                        self._anchored = True
                    elif part == "change":
                        self._anchored = True  # discarded before the next is taken
                    yield message
                return
            except ValueError:
                if self._cancelled:
                    return
                if self._owner.client is client:
                    raise  # not the race FailoverClient.query describes
            except ServiceError as error:
                if self._cancelled:
                    return
                if not failures.fail_over(error):
                    raise
                log.info("subscription %s lost (%s); resubscribing", self.sub_id, error)
                self._owner.fail_over(client)
                time.sleep(self._owner.pause_s)

    def cancel(self) -> None:
        """End the subscription (idempotent, any thread)."""
        self._cancelled = True
        if self._stream is not None:
            self._stream.cancel()

    def __enter__(self) -> BookmarkSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


def _vector_of(bookmark: str) -> Vector | None:
    """The position vector a bookmark names; None for now, epoch, a timestamp or a range."""
    if bookmark in NOW or "/" not in bookmark or bookmark.startswith(("[", "(")):
        return None
    try:
        return parse_vector(bookmark)
    except InvalidRequestError:
        return None  # not a vector: the service says what is wrong with it


def _triples(positions: Any) -> list[tuple[str, int, int]]:
    return [(p.topic, p.partition, p.offset) for p in positions]
