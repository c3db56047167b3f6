"""AMPS's event topics: ``/AMPS/ClientStatus`` and ``/AMPS/SOWStats`` (docs/console.md).

Both are plain topics of the topology (``topology.events.with_event_topics``), on Kafka
topics of their own, so subscribing to them is the ordinary subscription API, with filters, on
every query service; nothing about them is special past this module.

* ``/AMPS/ClientStatus``: one message per client event, in AMPS's JSON form
  (``{"ClientStatus": {"event": ..., "client_name": ..., ...}}``): ``logon`` and
  ``logoff`` when a client's connection (a session stream, a console's event stream)
  opens and closes, ``subscribe`` and ``unsubscribe`` for each subscription (at a
  logoff, one ``unsubscribe`` per subscription still open, as AMPS sends at a
  disconnect), and ``sow_delete``.
* ``/AMPS/SOWStats``: every ``interval_s``, one message per SOW topic with its record
  count as this service's replica holds it (the figure ``sow status`` shows as
  ``records``): ``{"SOWStats": {"topic", "message_type", "record_count", "timestamp"}}``.

Events are handed to a thread that publishes them through the gateway, so a request
never waits for its event; a full backlog (the broker unreachable) drops the oldest
events with one warning, never a request.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from processor.errors import SowError
from processor.publish.gateway import Gateway
from processor.publish.requests import PublishCommand
from processor.topology.events import CLIENT_STATUS, SOW_STATS

log = logging.getLogger(__name__)

#: The gRPC metadata (and HTTP header) a client names itself with in its events.
CLIENT_NAME_HEADER = "sow-client-name"
#: Events waiting to be published at most (the oldest are dropped past it).
MAX_PENDING = 10_000


def timestamp(now: float | None = None) -> str:
    """AMPS's timestamp form: ``20161108T225452.280650Z`` (UTC)."""
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return moment.strftime("%Y%m%dT%H%M%S.%fZ")


class Events:
    """Publishes a service's event-topic messages (see the module doc).

    ``counts``: the SOW topics' record counts (the replica's); ``types``: each SOW
    topic's message type; ``interval_s``: between two rounds of ``/AMPS/SOWStats``
    (0: none). ``publish`` False (``SOW_EVENT_TOPICS=false``): nothing is published,
    and the service's clients are still known (:meth:`clients`, the console's)."""

    def __init__(
        self,
        gateway: Gateway,
        counts: Callable[[], Mapping[str, int]],
        types: Mapping[str, str],
        interval_s: float = 5.0,
        *,
        publish: bool = True,
    ) -> None:
        self._gateway = gateway
        self._counts = counts
        self._types = dict(types)
        self._interval_s = interval_s
        self._pending: collections.deque[PublishCommand] = collections.deque()
        self._wake = threading.Condition()
        self._stopped = False
        self._dropped = 0
        #: Events published so far (metrics, tests).
        self.published = 0
        #: The connections open now (ClientEvents by id), for the console.
        self._clients: dict[int, ClientEvents] = {}
        self._publish_events = publish
        self._thread = threading.Thread(target=self._run, name="sow-event-topics", daemon=True)
        if publish:
            self._thread.start()

    def joined(self, client: ClientEvents) -> None:
        with self._wake:
            self._clients[id(client)] = client

    def left(self, client: ClientEvents) -> None:
        with self._wake:
            self._clients.pop(id(client), None)

    def clients(self) -> list[ClientEvents]:
        """The client connections open now (sessions, console streams, subscription
        streams), oldest first."""
        with self._wake:
            return sorted(self._clients.values(), key=lambda c: c.since)

    def client(self, event: str, client_name: str, **fields: Any) -> None:
        """A ``/AMPS/ClientStatus`` event of ``client_name`` (``fields``: connection_name,
        topic, filter, sub_id, options, reason... as they apply; empty ones are left
        out)."""
        body: dict[str, Any] = {"timestamp": timestamp(), "event": event}
        body["client_name"] = client_name
        body.update((name, value) for name, value in fields.items() if value not in ("", None))
        self._put(PublishCommand(CLIENT_STATUS, orjson.dumps({"ClientStatus": body})))

    def sow_stats(self) -> None:
        """One ``/AMPS/SOWStats`` message per SOW topic, now."""
        now = timestamp()
        for topic, count in sorted(self._counts().items()):
            body = {
                "message_type": self._types.get(topic, "json"),
                "topic": topic,
                "record_count": count,
                "timestamp": now,
            }
            self._put(PublishCommand(SOW_STATS, orjson.dumps({"SOWStats": body})))

    def _put(self, command: PublishCommand) -> None:
        if not self._publish_events:
            return
        with self._wake:
            if len(self._pending) >= MAX_PENDING:
                self._pending.popleft()
                self._dropped += 1
                if self._dropped == 1:
                    log.warning(
                        "event topics: %d events wait for the broker; the oldest are dropped",
                        MAX_PENDING,
                    )
            self._pending.append(command)
            self._wake.notify()

    def _run(self) -> None:
        next_stats = time.monotonic() + self._interval_s
        while True:
            with self._wake:
                if not self._pending and not self._stopped:
                    wait = next_stats - time.monotonic() if self._interval_s > 0 else None
                    self._wake.wait(None if wait is None else max(wait, 0.0))
                if self._stopped:
                    return
                batch = list(self._pending)
                self._pending.clear()
            try:
                if self._interval_s > 0 and time.monotonic() >= next_stats:
                    next_stats = time.monotonic() + self._interval_s
                    self.sow_stats()
                if batch:
                    self._publish(batch)
            except Exception:  # a bug: say so, lose these events, and go on
                log.exception("event topics: %d events lost", len(batch))

    def _publish(self, batch: list[PublishCommand]) -> None:
        try:
            pending = self._gateway.publish_many(batch)
            pending.wait(30.0)
            refused = [r for r in pending.results() if isinstance(r, SowError)]
        except SowError as exc:
            log.warning("event topics: %d events not published: %s", len(batch), exc)
            return
        self.published += len(batch) - len(refused)
        if refused:
            log.warning("event topics: %d events refused: %s", len(refused), refused[0])

    def close(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        if self._publish_events:
            self._thread.join(5)


#: What a subscription's client-status events say about it: its command, topic,
#: filter, sub_id and options.
def _subscription_fields(command: str, request: Any) -> dict[str, Any]:
    options = [
        name
        for name in ("oof", "no_empties", "send_keys", "delta", "replace")
        if getattr(request, name, False)
    ]
    return {
        "command": command,
        "topic": request.topic,
        "filter": request.filter,
        "sub_id": request.sub_id,
        "options": ",".join(options),
    }


class ClientEvents:
    """The client-status events of one client connection (a session stream, a console's
    event stream, or a single subscription stream): ``subscribe`` when it places a
    subscription, ``unsubscribe`` once when it drops one (:meth:`unsubscribe` closes it
    too), and with ``logon`` a ``logon`` now and at :meth:`close` an ``unsubscribe`` per
    subscription still open, then ``logoff``. ``events`` None: the service publishes no
    events, and this only unsubscribes."""

    def __init__(
        self,
        events: Events | None,
        name: str,
        connection: str,
        unsubscribe: Callable[[Any], None],
        *,
        logon: bool = False,
    ) -> None:
        self._events, self.name, self.connection = events, name, connection
        self._unsubscribe = unsubscribe
        self._logon = logon
        self._open: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        #: When the connection opened (epoch seconds).
        self.since = time.time()
        if logon:
            if events is not None:
                events.joined(self)
            self._send("logon")

    def _send(self, event: str, **fields: Any) -> None:
        if self._events is not None:
            self._events.client(event, self.name, connection_name=self.connection, **fields)

    def subscribed(self, subscription: Any, command: str, request: Any) -> None:
        """``subscription`` placed by ``command`` (subscribe, sow_and_subscribe)."""
        fields = _subscription_fields(command, request)
        with self._lock:
            self._open[subscription.number] = fields
        if self._events is not None:  # known while it holds a subscription, or logged on
            self._events.joined(self)
        self._send("subscribe", **fields)

    def unsubscribe(self, subscription: Any) -> None:
        """Drop ``subscription`` (idempotent): the hub closes it, and its
        ``unsubscribe`` event goes once."""
        self._unsubscribe(subscription)
        with self._lock:
            fields = self._open.pop(subscription.number, None)
            gone = not self._open and not self._logon
        if fields is not None:
            self._send("unsubscribe", **fields)
        if gone and self._events is not None:  # a subscription stream: it ends with it
            self._events.left(self)

    def subscriptions(self) -> dict[int, dict[str, Any]]:
        """The subscriptions open now, by number: command, topic, filter, sub_id."""
        with self._lock:
            return dict(self._open)

    def close(self, reason: str = "") -> None:
        """The connection ended: the events of what it left open, then its logoff."""
        with self._lock:
            left, self._open = list(self._open.values()), {}
        for fields in left:
            self._send("unsubscribe", **fields)
        if self._logon:
            self._logon = False
            self._send("logoff", reason=reason)
        if self._events is not None:
            self._events.left(self)
