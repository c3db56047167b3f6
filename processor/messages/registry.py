"""A Schema Registry, as the codecs of its wire format see it (docs/schema-registry.md):
schemas by id and a subject's latest version, through confluent-kafka's
``SchemaRegistryClient`` (its HTTP client, not the Kafka client: the one use of
confluent-kafka outside ``log/``), cached for the life of the process.

One :class:`Registry` per URL and authentication serves every codec of the process (the
processor's, the gateway's, the replica's), so a schema fetched once is never fetched
again, whichever room asks, and a pipeline restarted by the processor keeps the cache.

What the registry's answers become:

- a schema it gives: cached (the schema of an id never changes);
- 404 for an id: :class:`~processor.errors.UnknownSchemaError`, a DecodeError (the
  record is dead-lettered at once with the reason);
- no answer (refused, timed out, a 5xx, a refusal of our credentials): the registry is
  *unreachable*. One warning says so when it begins, one line when it ends. A call
  raises :class:`~processor.errors.SchemaRegistryUnavailableError` (the processor
  restarts its batch after a backoff, losing nothing; a publish is refused) until the
  registry has been unreachable for ``SOW_SCHEMA_REGISTRY_WAIT_S``; after that,
  :class:`~processor.errors.SchemaRegistryUnreachableError`, a DecodeError: the record
  goes to the dead-letter topic with the reason, and the processor goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar

from processor.config import Settings
from processor.errors import (
    ConfigurationError,
    SchemaRegistryUnavailableError,
    SchemaRegistryUnreachableError,
    UnknownSchemaError,
)
from processor.topology.model import Topology

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The client's own retries stay short: the processor's loop must come round within the
#: watchdog's stall time (a few seconds); the wait for an outage is this module's.
_CLIENT = {
    "max.retries": 1,
    "retries.wait.ms": 100,
    "retries.max.wait.ms": 500,
    "timeout": 3,
    # A subject's latest version (what kafka-sow encodes with) is looked up again after
    # this long, so a new version is taken up without a restart.
    "cache.latest.ttl.sec": 60,
}


#: A registry whose last failed call is older than this has nothing waiting for it.
_WAITING_S = 15.0


class Registry:
    """One Schema Registry: its client, the values built from its schemas (cached per
    key), and whether it is reachable (see the module doc). Thread-safe."""

    def __init__(
        self,
        url: str,
        user_info: str = "",
        wait_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        # Imported when a topology has a registry type (a third of a second, httpx's).
        from confluent_kafka.schema_registry import SchemaRegistryClient

        conf: dict[str, Any] = {"url": url, **_CLIENT, **(properties or {})}
        if user_info:
            conf["basic.auth.user.info"] = user_info
        self.url = url
        self.wait_s = wait_s
        self.client = SchemaRegistryClient(conf)
        self._clock = clock
        self._lock = threading.Lock()
        self._built: dict[Any, Any] = {}
        #: When the registry stopped answering (None: it answers), and its last failed call.
        self.unreachable_since: float | None = None
        self.failed_at: float | None = None

    def outage(self) -> str:
        """How long the registry has not answered, while records wait for it: its calls
        fail now (the processor's retries come every 10 s at most) and the wait is not
        over ("" otherwise: it answers, or nothing asks it, or what asked was
        dead-lettered and the processor went on)."""
        since, failed = self.unreachable_since, self.failed_at
        if since is None or failed is None:
            return ""
        now = self._clock()
        if now - failed > _WAITING_S or failed - since >= self.wait_s:
            return ""
        return f"{self.url} for {now - since:.0f}s"

    def built(self, key: Any, build: Callable[[], T]) -> T:
        """The value ``build`` makes for ``key`` (a schema id and what is read from its
        schema), built once; ``build`` calls the registry through :meth:`call`."""
        found = self._built.get(key)
        if found is None:
            found = build()
            with self._lock:
                found = self._built.setdefault(key, found)
        return found  # type: ignore[no-any-return]

    def call(self, what: str, request: Callable[[], T]) -> T:
        """``request`` (a call of :attr:`client`) with its failures translated (see the
        module doc); ``what`` names what was asked for, in the messages."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            answer = request()
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                self._answered()
                raise UnknownSchemaError(
                    f"the Schema Registry at {self.url} has no {what} ({exc.error_message}); "
                    "the producer wrote it to another registry, or it was deleted"
                ) from exc
            self._unreachable(what, exc)
        except Exception as exc:  # httpx's transport errors, timeouts: the registry is away
            self._unreachable(what, exc)
        self._answered()
        return answer

    def _answered(self) -> None:
        if self.unreachable_since is not None:
            with self._lock:
                if self.unreachable_since is not None:
                    gone = self._clock() - self.unreachable_since
                    self.unreachable_since = None
                    log.warning(
                        "the Schema Registry at %s answers again (after %.0fs)", self.url, gone
                    )

    def _unreachable(self, what: str, exc: Exception) -> NoReturn:
        now = self._clock()
        with self._lock:
            self.failed_at = now
            if self.unreachable_since is None:
                self.unreachable_since = now
                log.warning(
                    "the Schema Registry at %s is unreachable (%s): records whose schema "
                    "is in no cache wait for it up to %gs (SOW_SCHEMA_REGISTRY_WAIT_S), "
                    "then go to the dead-letter topic",
                    self.url,
                    _describe(exc),
                    self.wait_s,
                )
            since = self.unreachable_since
        if now - since >= self.wait_s:
            raise SchemaRegistryUnreachableError(
                f"schema registry unreachable: {self.url} did not give the {what} for "
                f"{now - since:.0f}s (SOW_SCHEMA_REGISTRY_WAIT_S={self.wait_s:g}): "
                f"{_describe(exc)}"
            ) from exc
        raise SchemaRegistryUnavailableError(
            f"the Schema Registry at {self.url} cannot give the {what} ({_describe(exc)}); "
            f"retrying for up to {self.wait_s - (now - since):.0f}s more"
        ) from exc


def _describe(exc: Exception) -> str:
    status = getattr(exc, "http_status_code", None)
    if status is not None:  # the client's SchemaRegistryError
        return f"HTTP {status}: {getattr(exc, 'error_message', exc)}"
    return f"{type(exc).__name__}: {exc}"


_REGISTRIES: dict[tuple[str, str, float, str], Registry] = {}
_REGISTRIES_LOCK = threading.Lock()


def registry_for(url: str) -> Registry:
    """The process's :class:`Registry` for ``url``, with the authentication, client
    properties and wait of the settings (``SOW_SCHEMA_REGISTRY_USER_INFO``,
    ``SOW_SCHEMA_REGISTRY_PROPERTIES``, ``SOW_SCHEMA_REGISTRY_WAIT_S``)."""
    settings = Settings.from_env()
    user_info, wait_s = settings.schema_registry_user_info, float(settings.schema_registry_wait_s)
    key = (url, user_info, wait_s, settings.schema_registry_properties)
    with _REGISTRIES_LOCK:
        found = _REGISTRIES.get(key)
        if found is None:
            try:
                found = _REGISTRIES[key] = Registry(
                    url, user_info, wait_s, properties=settings.registry_properties
                )
            except (ValueError, TypeError) as exc:  # the client refuses its configuration
                raise ConfigurationError(f"cannot use the Schema Registry at {url}: {exc}") from exc
        return found


def unreachable(topology: Topology) -> list[str]:
    """The registries of ``topology``'s topics that records wait for now, each with how
    long (for readiness: a processor waiting for one cannot progress past the record that
    needs it)."""
    urls = {
        found.url
        for topic in topology.topics.values()
        if (found := getattr(topic, "schema_registry", None)) is not None
    }
    with _REGISTRIES_LOCK:
        registries = [r for r in _REGISTRIES.values() if r.url in urls]
    return [text for registry in registries if (text := registry.outage())]


def decode_waiting(decode: Callable[[bytes], T], data: bytes) -> T:
    """``decode(data)``, waiting while a Schema Registry does not answer for a schema no
    cache holds: until it answers, or until the record's wait is over (then the
    DecodeError it becomes). For the read replica's apply and the subscriptions'
    dispatch, which must not drop a change; other codecs never wait here."""
    while True:
        try:
            return decode(data)
        except SchemaRegistryUnavailableError:
            time.sleep(0.5)
