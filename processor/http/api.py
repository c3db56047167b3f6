"""The HTTP transport: the console's pages and its JSON API, on the metrics endpoint.

``GET /console/`` is the web console (static files of ``processor/http/static``). The
API answers what gRPC answers, through the same request code (``processor/requests``):

* ``POST /api/query``: a ``sow`` query; ``{"group_begin", "records", "group_end"}``.
* ``GET /api/subscribe?topic=&filter=&sow=1&oof=1...``: a subscribe (``sow=1``: a
  sow_and_subscribe) as Server-Sent Events: ``group_begin``, ``records``,
  ``group_end``, then ``changes`` events (each a list), ``end`` with the reason.
* ``POST /api/publish``, ``POST /api/delete``: a publish, a sow_delete.
* ``GET /api/topics``, ``/api/overview``, ``/api/history``, ``/api/subscriptions``,
  ``/api/dead-letters``: the topology and the figures the console shows.

Each call's :class:`~processor.security.RequestContext` comes from gRPC's own
authentication (:mod:`processor.http.calls`); ``SOW_CONSOLE=loopback`` (the default)
answers loopback callers only.
"""

from __future__ import annotations

import ipaddress
import logging
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from processor import errors
from processor.http import calls
from processor.http.calls import ContextOf, HttpCall
from processor.http.overview import History, figures
from processor.http.request import Request
from processor.http.streams import Subscriber
from processor.publish.requests import PublishCommand
from processor.query.sow import SowQuery
from processor.requests.dead_letters import DeadLetters
from processor.requests.deletes import DeleteRequest, delete
from processor.requests.events import Events
from processor.requests.queries import Queries, QueryRequest
from processor.security import RequestContext
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.queues import QueueHub

log = logging.getLogger(__name__)


@dataclass
class Parts:
    """What the HTTP transport serves from."""

    queries: Queries
    hub: SubscriptionHub | None
    queues: QueueHub | None
    events: Events | None
    dead_letters: DeadLetters | None
    exposition: Callable[[], bytes]
    readiness: Callable[[], str | None]
    broker: str = ""


class HttpApi:
    """The console and API handler mounted on the metrics endpoint (see the module doc).
    ``contexts``: gRPC's authentication (None: open); ``open_to``: ``loopback`` or
    ``on``."""

    def __init__(self, parts: Parts, contexts: ContextOf | None, open_to: str) -> None:
        self.parts = parts
        self._contexts = contexts or calls.open_context
        self._loopback_only = open_to != "on"
        self.history = History(lambda: parts.exposition().decode())
        self._gets: dict[str, Callable[[Request], Any]] = {
            "/api/topics": self._topics,
            "/api/overview": self._overview,
            "/api/history": lambda _: self.history.samples(),
            "/api/subscriptions": self._subscriptions,
            "/api/clients": self._clients,
            "/api/dead-letters": self._dead_letters,
        }
        self._posts: dict[str, Callable[[Request], Any]] = {
            "/api/query": self._query,
            "/api/publish": self._publish,
            "/api/delete": self._delete,
        }

    def __call__(self, handler: BaseHTTPRequestHandler, method: str) -> bool:
        url = urllib.parse.urlsplit(handler.path)
        path = url.path
        if not (path == "/" or path.startswith(("/console", "/api/"))):
            return False
        request = Request(handler, method, path, urllib.parse.parse_qs(url.query))
        if self._loopback_only and not _loopback(handler.client_address[0]):
            request.error(403, "the console answers loopback callers only; set SOW_CONSOLE=on")
            return True
        try:
            self._serve(request)
        except errors.SowError as exc:
            request.error(calls.status_of(exc), str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller left
        return True

    def _serve(self, request: Request) -> None:
        path, method = request.path, request.method
        if path in {"/", "/console"}:
            request.redirect("/console/")
        elif path.startswith("/console/"):
            request.static(path.removeprefix("/console/") or "index.html")
        elif method == "GET" and path in self._gets:
            self._context(request)
            request.json(self._gets[path](request))
        elif method == "POST" and path in self._posts:
            request.caller = self._context(request)
            request.json(self._posts[path](request))
        elif method == "GET" and path == "/api/subscribe":
            request.caller = self._context(request)
            self._subscribe(request)
        else:
            request.error(404, f"no {method} {path}: see docs/console.md for the API")

    def _context(self, request: Request) -> RequestContext:
        timeout = request.number("timeout", 0.0) or None
        call = HttpCall(request.handler.headers, request.peer, timeout)
        request.call = call
        return self._contexts(call)

    # -- reads -------------------------------------------------------------------------

    def _topics(self, _: Request) -> list[dict[str, Any]]:
        topology = self.parts.queries.gateway.topology
        rows, seen = [], set()
        for topic in topology.every_topic():
            if topic.name in seen:  # a queue over a plain topic of its own name
                continue
            seen.add(topic.name)
            kind = "plain"
            keys: tuple[str, ...] = ()
            if topic.name in topology.topics:
                sow = topology.topics[topic.name]
                keys = sow.keys
                kind = (
                    "view"
                    if sow.view
                    else "queue"
                    if sow.queue
                    else "conflated"
                    if sow.conflated
                    else "sow"
                )
            rows.append(
                {
                    "name": topic.name,
                    "kind": kind,
                    "message_type": topic.message_type,
                    "keys": list(keys),
                }
            )
        return rows

    def _overview(self, _: Request) -> dict[str, Any]:
        overview = figures(self.parts.exposition().decode())
        overview["broker"] = self.parts.broker
        overview["not_ready"] = self.parts.readiness()
        return overview

    def _subscriptions(self, _: Request) -> list[dict[str, Any]]:
        hub = self.parts.hub
        if hub is None:
            return []
        return [
            {
                "number": s.number,
                "topic": s.request.topic,
                "filter": s.request.filter,
                "sub_id": s.request.sub_id,
                "principal": s.context.principal.name,
                "backlog": s.backlog(),
                "delivered": s.delivered,
            }
            for s in hub.subscriptions()
        ]

    def _clients(self, _: Request) -> list[dict[str, Any]]:
        events, hub = self.parts.events, self.parts.hub
        if events is None:
            return []
        live = {} if hub is None else {s.number: s for s in hub.subscriptions()}
        out = []
        for client in events.clients():
            subscriptions = []
            for number, fields in client.subscriptions().items():
                held = live.get(number)
                backlog = None if held is None else held.backlog()
                subscriptions.append({**fields, "backlog": backlog})
            out.append(
                {
                    "name": client.name,
                    "connection": client.connection,
                    "since": client.since,
                    "subscriptions": subscriptions,
                }
            )
        return out

    def _dead_letters(self, request: Request) -> list[dict[str, Any]]:
        letters = self.parts.dead_letters
        return [] if letters is None else letters.recent(int(request.number("max", 50)))

    # -- requests ----------------------------------------------------------------------

    def _query(self, request: Request) -> dict[str, Any]:
        body = request.body()
        query = SowQuery(
            topic=_text(body, "topic"),
            sow_keys=tuple(body.get("sow_keys") or ()),
            query_id=_text(body, "query_id"),
            batch_size=int(body.get("batch_size") or 0),
            timeout_s=float(body.get("timeout_seconds") or 0),
            filter=_text(body, "filter"),
            top_n=int(body.get("top_n") or 0),
            skip_n=int(body.get("skip_n") or 0),
            order_by=_text(body, "order_by"),
            grouping=_text(body, "grouping"),
            projection=_text(body, "projection"),
            wait_for_catch_up=bool(body.get("wait_for_catch_up")),
        )
        asked = QueryRequest(
            query,
            _text(body, "select"),
            body.get("text_form", True) is not False,
            _text(body, "bookmark"),
        )
        answer = self.parts.queries.answer(asked, request.caller)
        records = [calls.row(r) for rows in answer.batches for r in rows]
        return {
            "group_begin": {
                "query_id": answer.query_id,
                "topic": answer.topic,
                "snapshot": [calls.position_text(p) for p in answer.snapshot],
                "staleness_ms": answer.staleness_ms,
            },
            "records": records,
            "group_end": {"query_id": answer.query_id, **calls.stats(answer.stats)},
        }

    def _publish(self, request: Request) -> dict[str, Any]:
        body = request.body()
        data = body.get("data")
        if not isinstance(data, str):
            raise errors.InvalidRequestError(
                'a publish needs "data": the message as text (JSON, or Base64 for binary types)'
            )
        command = PublishCommand(
            _text(body, "topic"),
            data.encode(),
            sow_key=_text(body, "sow_key"),
            expiration=float(body.get("expiration") or 0),
            correlation_id=_text(body, "correlation_id"),
            text_form=True,
        )
        gateway = self.parts.queries.gateway
        published = gateway.publish(command, _wait(request), request.caller)
        if body.get("ack") == "processed":
            self.parts.queries.until_processed([published.position], _wait(request))
        return {"sow_key": published.sow_key, "position": calls.position_text(published.position)}

    def _delete(self, request: Request) -> dict[str, Any]:
        body = request.body()
        asked = DeleteRequest(
            _text(body, "topic"),
            tuple(body.get("sow_keys") or ()),
            _text(body, "filter"),
            _text(body, "data").encode(),
            True,
            float(body.get("timeout_seconds") or 0),
        )
        deleted = delete(
            self.parts.queries.gateway, self.parts.queues, asked, request.caller, _wait(request)
        )
        if self.parts.events is not None:
            self.parts.events.client(
                "sow_delete",
                request.client_name,
                connection_name=request.peer,
                topic=asked.topic,
                filter=asked.filter,
            )
        return {
            "records_deleted": deleted.records_deleted,
            "positions": [calls.position_text(p) for p in deleted.positions],
        }

    def _subscribe(self, request: Request) -> None:
        hub = self.parts.hub
        if hub is None:
            raise errors.UnsupportedError("this service serves no subscriptions")
        codecs = {t.name: self.parts.queries.gateway.codec(t) for t in hub.topology.every_topic()}
        Subscriber(hub, codecs, self.parts.events).serve(request)


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name) or ""
    if not isinstance(value, str):
        raise errors.InvalidRequestError(f'"{name}" must be a string')
    return value


def _wait(request: Request) -> float:
    call = request.call
    remaining = None if call is None else call.time_remaining()
    return 30.0 if remaining is None else remaining


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
