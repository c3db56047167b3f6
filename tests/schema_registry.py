"""A Schema Registry for tests: the subset of Confluent's REST API that confluent-kafka's
``SchemaRegistryClient`` and its Avro, Protobuf and JSON Schema serializers use.

No real registry installs here (Confluent's is not on Maven Central, Karapace is not on
PyPI), so the tests serve this subset from ``http.server``; the client, the serializers
and the wire format are confluent-kafka's own. It holds schemas in memory and keeps
them across :meth:`stop` and :meth:`start` (the same port), so a test can take the
registry away and bring it back:

- ``POST /subjects/{s}/versions``: register (the same schema text gets the same id);
- ``POST /subjects/{s}``: look a schema up under a subject;
- ``GET /schemas/ids/{id}`` (``/schemas/ids/{id}/versions``), ``GET /schemas/types``;
- ``GET /subjects``, ``GET /subjects/{s}/versions``, ``GET /subjects/{s}/versions/{v}``
  (``latest`` too);
- ``POST /compatibility/subjects/{s}/versions/{v}``: always compatible;
- ``GET``/``PUT /config`` and ``/config/{s}``.

Basic authentication is optional (``user_info="user:password"``): every request without
it is answered 401, as a registry with authentication answers.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: id -> {"schema", "schemaType", "references"}
        self.schemas: dict[int, dict[str, Any]] = {}
        #: subject -> [id of version 1, id of version 2, ...]
        self.subjects: dict[str, list[int]] = {}
        self.config: dict[str, str] = {"": "BACKWARD"}
        #: Requests served, by "METHOD path" (tests read it to see the client's calls).
        self.requests: list[str] = []

    def register(self, subject: str, body: dict[str, Any]) -> tuple[int, int]:
        entry = {
            "schema": body["schema"],
            "schemaType": body.get("schemaType", "AVRO"),
            "references": body.get("references") or [],
        }
        with self.lock:
            found = next((i for i, s in self.schemas.items() if s == entry), None)
            if found is None:
                found = len(self.schemas) + 1
                self.schemas[found] = entry
            versions = self.subjects.setdefault(subject, [])
            if found not in versions:
                versions.append(found)
            return found, versions.index(found) + 1


class SchemaRegistryServer:
    """The REST subset above on ``127.0.0.1:port`` (0: a free port, kept across restarts)."""

    def __init__(
        self, port: int = 0, user_info: str | None = None, tls: tuple[Path, Path] | None = None
    ) -> None:
        self.state = _State()
        self.port = port
        self.user_info = user_info
        #: Served over TLS with this certificate and key (PEM files) when given.
        self.tls = tls
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        #: Open connections: :meth:`stop` closes them (a client's keep-alive connection
        #: would otherwise go on being served by its handler thread).
        self.connections: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> SchemaRegistryServer:
        handler = type("Handler", (_Handler,), {"registry": self})
        server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        server.daemon_threads = True
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for connection in list(self.connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        self.connections.clear()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SchemaRegistryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register a schema directly (as another producer would have); its id."""
        return self.state.register(subject, {"schema": schema, "schemaType": schema_type})[0]


_VERSION = re.compile(r"^/subjects/([^/]+)/versions/([^/]+)$")


class _Handler(BaseHTTPRequestHandler):
    registry: SchemaRegistryServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.registry.connections.add(self.connection)

    def finish(self) -> None:
        self.registry.connections.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests' output is not for request lines."""

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: int, message: str) -> None:
        self._send(status, {"error_code": code, "message": message})

    def _authorized(self) -> bool:
        expected = self.registry.user_info
        if expected is None:
            return True
        token = base64.b64encode(expected.encode()).decode()
        if self.headers.get("Authorization") == f"Basic {token}":
            return True
        self._error(401, 40101, "Unauthorized")
        return False

    def _body(self) -> dict[str, Any]:
        size = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(size) or b"{}") if size else {}

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def _route(self, method: str) -> None:
        path = unquote(urlparse(self.path).path).rstrip("/")
        state = self.registry.state
        body = self._body() if method in ("POST", "PUT") else {}
        with state.lock:
            state.requests.append(f"{method} {path}")
        if not self._authorized():
            return
        parts = path.strip("/").split("/")
        if (
            method == "POST"
            and len(parts) == 3
            and parts[0] == "subjects"
            and parts[2] == "versions"
        ):
            schema_id, version = state.register(parts[1], body)
            self._send(200, {"id": schema_id, "subject": parts[1], "version": version})
        elif method == "POST" and len(parts) == 2 and parts[0] == "subjects":
            self._lookup(parts[1], body)
        elif method == "GET" and parts[:2] == ["schemas", "ids"] and len(parts) >= 3:
            self._by_id(parts[2], parts[3:])
        elif method == "GET" and parts == ["schemas", "types"]:
            self._send(200, ["AVRO", "PROTOBUF", "JSON"])
        elif method == "GET" and parts == ["subjects"]:
            self._send(200, sorted(state.subjects))
        elif (
            method == "GET"
            and len(parts) == 3
            and parts[0] == "subjects"
            and parts[2] == "versions"
        ):
            versions = state.subjects.get(parts[1])
            if not versions:
                self._error(404, 40401, f"Subject '{parts[1]}' not found.")
            else:
                self._send(200, list(range(1, len(versions) + 1)))
        elif method == "GET" and _VERSION.match(path):
            subject, version = _VERSION.match(path).groups()  # type: ignore[union-attr]
            self._version(subject, version)
        elif method == "POST" and parts[:2] == ["compatibility", "subjects"]:
            self._send(200, {"is_compatible": True})
        elif parts and parts[0] == "config":
            self._config(method, parts[1] if len(parts) > 1 else "", body)
        else:
            self._error(404, 404, f"no such resource: {method} {path}")

    def _lookup(self, subject: str, body: dict[str, Any]) -> None:
        state = self.registry.state
        versions = state.subjects.get(subject)
        if not versions:
            self._error(404, 40401, f"Subject '{subject}' not found.")
            return
        for index, schema_id in enumerate(versions):
            if state.schemas[schema_id]["schema"] == body.get("schema"):
                self._send(200, self._registered(subject, index + 1, schema_id))
                return
        self._error(404, 40403, "Schema not found")

    def _registered(self, subject: str, version: int, schema_id: int) -> dict[str, Any]:
        entry = self.registry.state.schemas[schema_id]
        return {"subject": subject, "version": version, "id": schema_id, **entry}

    def _by_id(self, text: str, rest: list[str]) -> None:
        state = self.registry.state
        entry = state.schemas.get(int(text)) if text.isdigit() else None
        if entry is None:
            self._error(404, 40403, f"Schema {text} not found")
        elif rest == ["versions"]:
            found = [
                {"subject": s, "version": i + 1}
                for s, ids in state.subjects.items()
                for i, schema_id in enumerate(ids)
                if schema_id == int(text)
            ]
            self._send(200, found)
        else:
            self._send(200, dict(entry))

    def _version(self, subject: str, version: str) -> None:
        versions = self.registry.state.subjects.get(subject)
        if not versions:
            self._error(404, 40401, f"Subject '{subject}' not found.")
            return
        index = len(versions) if version in ("latest", "-1") else int(version)
        if not 1 <= index <= len(versions):
            self._error(404, 40402, f"Version {version} not found.")
            return
        self._send(200, self._registered(subject, index, versions[index - 1]))

    def _config(self, method: str, subject: str, body: dict[str, Any]) -> None:
        config = self.registry.state.config
        if method == "PUT":
            config[subject] = body.get("compatibility", "BACKWARD")
            self._send(200, {"compatibility": config[subject]})
        else:
            level = config.get(subject, config[""])
            self._send(200, {"compatibilityLevel": level})
