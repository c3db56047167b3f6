"""One HTTP request being answered: its parameters and body, and the ways to answer
(JSON, an error, a redirect, a console file, Server-Sent Events)."""

from __future__ import annotations

import json
import mimetypes
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any

import orjson

from processor import errors
from processor.http.calls import HttpCall
from processor.security import RequestContext

#: The largest request body taken (a publish's message, a query).
MAX_BODY = 8 * 1024 * 1024


class Request:
    """One HTTP request being answered."""

    def __init__(
        self, handler: BaseHTTPRequestHandler, method: str, path: str, query: dict[str, list[str]]
    ) -> None:
        self.handler, self.method, self.path, self.query = handler, method, path, query
        self.peer = f"ipv4:{handler.client_address[0]}:{handler.client_address[1]}"
        self.caller: RequestContext
        self.call: HttpCall | None = None

    @property
    def client_name(self) -> str:
        given = self.handler.headers.get("sow-client-name") or self.param("client_name")
        return given or (self.caller.principal.name if hasattr(self, "caller") else "")

    def param(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[0] if values else default

    def number(self, name: str, default: float) -> float:
        text = self.param(name)
        if not text:
            return default
        try:
            return float(text)
        except ValueError:
            raise errors.InvalidRequestError(f"{name}={text!r} is not a number") from None

    def flag(self, name: str) -> bool:
        return self.param(name).lower() in ("1", "true", "yes", "on")

    def body(self) -> dict[str, Any]:
        length = int(self.handler.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise errors.InvalidRequestError(
                f"the request body is {length} bytes; at most {MAX_BODY}"
            )
        raw = self.handler.rfile.read(length) if length else b"{}"
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise errors.InvalidRequestError(f"the request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise errors.InvalidRequestError("the request body must be a JSON object")
        return body

    def send(
        self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None
    ) -> None:
        handler = self.handler
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    def json(self, value: Any) -> None:
        self.send(200, orjson.dumps(value), "application/json")

    def error(self, status: int, message: str) -> None:
        headers = {"WWW-Authenticate": 'Basic realm="kafka-sow"'} if status == 401 else None
        self.send(
            status,
            json.dumps({"error": message, "status": status}).encode(),
            "application/json",
            headers,
        )

    def redirect(self, where: str) -> None:
        self.send(302, b"", "text/plain", {"Location": where})

    def static(self, name: str) -> None:
        if "/" in name or name.startswith("."):
            self.error(404, f"no console file {name!r}")
            return
        try:
            body = resources.files("processor.http").joinpath("static", name).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            self.error(404, f"no console file {name!r}")
            return
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        self.send(
            200,
            body,
            kind
            + (
                "; charset=utf-8" if kind.startswith("text/") or kind.endswith("javascript") else ""
            ),
        )

    def events(self) -> None:
        """Start a Server-Sent Events answer."""
        handler = self.handler
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-store")
        handler.end_headers()

    def event(self, kind: str, value: Any) -> None:
        self.handler.wfile.write(
            b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(value) + b"\n\n"
        )
        self.handler.wfile.flush()

    def ping(self) -> None:
        self.handler.wfile.write(b": ping\n\n")
        self.handler.wfile.flush()
