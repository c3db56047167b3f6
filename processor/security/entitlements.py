"""Entitlements, as AMPS's: who may log on, read, write and acknowledge which topics, and
through which filters (docs/security.md).

The definitions are a YAML file (``SOW_ENTITLEMENTS``; a YAML topology names it in
``security: {entitlements: ...}``, an AMPS configuration in
``<Entitlement><Options><ResourceURI>``)::

    roles:
      traders:
        logon: true
        read:  [{topic: "orders", filter: "/desk = 'FX'"}]
        write: [{topic: "orders", filter: "/desk = 'FX'"}]
        acknowledge: [{topic: "work"}]
    principals:               # one principal by name; the same keys as a role
      bob: {logon: true, roles: [traders], read: [{topic: ".*"}]}

``topic`` is a regular expression over topic names, matched whole (``orders`` is the
topic orders, ``orders.*`` every topic whose name starts with orders); a view is its own
topic, a queue too. ``filter`` is an AMPS expression: the *entitlement filter* of a read
grant is AND-ed into every read of that topic, so the principal never sees a record
outside it; the *write filter* of a write grant is what every message it publishes (and
every record it deletes) must match. A principal's rights are the union of its own
entry's and those of its roles (from its token's roles claim, the users file, or the
entry's ``roles``): a topic two grants cover is read through either filter (OR); a
grant without a filter wins. Deny by default: no grant, no right; no logon, no call.

:class:`Entitlements` re-reads the file when it changes (:meth:`Entitlements.reload`,
called by a watcher thread and on SIGHUP) and bumps its ``generation``; open
subscriptions then re-resolve their rights (the subscription hub re-plans them, and a
record outside the new rights leaves as an out-of-focus notice). A file that does not
load keeps the definitions in force and logs why.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from processor.errors import ConfigurationError, ExpressionError, NotEntitledError
from processor.expr import compile as compile_expression
from processor.security.context import Principal, Rights

log = logging.getLogger(__name__)

RIGHTS = ("read", "write", "acknowledge")
_KEYS = {"logon", "roles", *RIGHTS}
#: How often the watcher looks at the file's modification time.
WATCH_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Grant:
    """One right on the topics ``pattern`` matches whole, through ``filter`` (None: every
    record)."""

    topic: str
    pattern: re.Pattern[str]
    filter: str | None

    def covers(self, topic: str) -> bool:
        return self.pattern.fullmatch(topic) is not None


@dataclass(frozen=True, slots=True)
class Grants:
    """A role's or a principal's own entry."""

    logon: bool = False
    roles: tuple[str, ...] = ()
    read: tuple[Grant, ...] = ()
    write: tuple[Grant, ...] = ()
    acknowledge: tuple[Grant, ...] = ()


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _any_of(filters: list[str | None]) -> str | None:
    """The OR of grants' filters; None when one grant has none (every record)."""
    if any(f is None for f in filters):
        return None
    unique = list(dict.fromkeys(f for f in filters if f is not None))
    if len(unique) == 1:
        return unique[0]
    return " OR ".join(f"({f})" for f in unique)


@dataclass(frozen=True, slots=True)
class PrincipalRights:
    """The rights of one principal (implements :class:`~processor.security.Rights`)."""

    principal: str
    logon: bool
    read: tuple[Grant, ...]
    write: tuple[Grant, ...]
    acknowledge: tuple[Grant, ...]
    restricted: bool = field(default=True)

    def _refuse(self, right: str, topic: str) -> NotEntitledError:
        return NotEntitledError(
            f"{self.principal} is not entitled to {right} {topic!r}: grant it a {right} "
            "entry whose topic pattern matches it in the entitlements file"
        )

    def check_logon(self) -> None:
        if not self.logon:
            raise NotEntitledError(
                f"{self.principal} may not log on: give it (or one of its roles) "
                "`logon: true` in the entitlements file"
            )

    def read_filter(self, topic: str) -> str | None:
        grants = [g for g in self.read if g.covers(topic)]
        if not grants:
            raise self._refuse("read", topic)
        return _any_of([g.filter for g in grants])

    def pattern_read_filter(self) -> str:
        """The entitlement filter of a read over topics a regular expression names: each
        record through the grants of its own topic (``TOPIC_NAME()``); a record of a
        topic no grant covers matches nothing."""
        if not self.read:
            raise self._refuse("read", "any topic")
        parts = []
        for grant in self.read:
            by_name = f"TOPIC_NAME() LIKE '^(?:{_quoted(grant.topic)})$'"
            parts.append(by_name if grant.filter is None else f"({by_name} AND ({grant.filter}))")
        return " OR ".join(parts)

    def write_filter(self, topic: str) -> str | None:
        grants = [g for g in self.write if g.covers(topic)]
        if not grants:
            raise self._refuse("write", topic)
        return _any_of([g.filter for g in grants])

    def check_acknowledge(self, queue: str) -> None:
        if not any(g.covers(queue) for g in self.acknowledge):
            raise self._refuse("acknowledge messages of", queue)


def _grants(entries: Any, right: str, where: str) -> tuple[Grant, ...]:
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise ConfigurationError(f"{where}.{right}: expected a list of {{topic, filter}} entries")
    grants = []
    for index, given in enumerate(entries):
        place = f"{where}.{right}[{index}]"
        entry = {"topic": given} if isinstance(given, str) else given
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise ConfigurationError(f"{place}: expected {{topic: <regular expression>}}")
        unknown = set(entry) - {"topic", "filter"}
        if unknown:
            raise ConfigurationError(f"{place}: unknown keys {sorted(unknown)} (topic, filter)")
        topic = entry["topic"]
        try:
            pattern = re.compile(topic)
        except re.error as exc:
            raise ConfigurationError(
                f"{place}: topic {topic!r} is not a regular expression: {exc}"
            ) from exc
        text = entry.get("filter")
        if text is not None:
            if not isinstance(text, str) or not text.strip():
                raise ConfigurationError(f"{place}: filter must be a non-empty AMPS expression")
            try:
                compile_expression(text)
            except ExpressionError as exc:
                raise ConfigurationError(f"{place}: filter {text!r} is invalid: {exc}") from exc
        grants.append(Grant(topic, pattern, text))
    return tuple(grants)


def _entry(value: Any, where: str) -> Grants:
    if value is None:
        return Grants()
    if not isinstance(value, dict):
        raise ConfigurationError(f"{where}: expected a mapping of {sorted(_KEYS)}")
    unknown = set(value) - _KEYS
    if unknown:
        raise ConfigurationError(f"{where}: unknown keys {sorted(unknown)}; use {sorted(_KEYS)}")
    roles = value.get("roles") or []
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise ConfigurationError(f"{where}.roles: expected a list of role names")
    return Grants(
        logon=bool(value.get("logon", False)),
        roles=tuple(roles),
        read=_grants(value.get("read"), "read", where),
        write=_grants(value.get("write"), "write", where),
        acknowledge=_grants(value.get("acknowledge"), "acknowledge", where),
    )


@dataclass(frozen=True, slots=True)
class Definitions:
    """One version of the entitlements file, parsed and checked."""

    roles: Mapping[str, Grants]
    principals: Mapping[str, Grants]

    @classmethod
    def parse(cls, data: Any, source: str) -> Definitions:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigurationError(f"{source}: expected a mapping with roles and principals")
        unknown = set(data) - {"roles", "principals"}
        if unknown:
            raise ConfigurationError(
                f"{source}: unknown sections {sorted(unknown)}; use roles and principals"
            )
        sections = {}
        for section in ("roles", "principals"):
            entries = data.get(section) or {}
            if not isinstance(entries, dict):
                raise ConfigurationError(f"{source}: {section} must map names to entries")
            sections[section] = {
                str(name): _entry(value, f"{source}: {section}.{name}")
                for name, value in entries.items()
            }
        for name, entry in sections["principals"].items():
            missing = [r for r in entry.roles if r not in sections["roles"]]
            if missing:
                raise ConfigurationError(
                    f"{source}: principals.{name}.roles names unknown roles {missing}"
                )
        return cls(sections["roles"], sections["principals"])

    def rights_for(self, principal: Principal) -> PrincipalRights:
        own = self.principals.get(principal.name, Grants())
        entries = [own]
        for role in (*sorted(principal.roles), *own.roles):  # one order: one filter text
            grants = self.roles.get(role)
            if grants is not None:
                entries.append(grants)
        return PrincipalRights(
            principal=f"principal {principal.name!r}",
            logon=any(e.logon for e in entries),
            read=_joined(e.read for e in entries),
            write=_joined(e.write for e in entries),
            acknowledge=_joined(e.acknowledge for e in entries),
        )


def _joined(groups: Iterable[tuple[Grant, ...]]) -> tuple[Grant, ...]:
    return tuple(grant for group in groups for grant in group)


class Entitlements:
    """The entitlements file, loaded, and reloaded when it changes (a
    :class:`~processor.security.RightsSource`). Thread-safe."""

    def __init__(self, path: Path, definitions: Definitions, stamp: tuple[int, int]) -> None:
        self.path = path
        self._definitions = definitions
        self._stamp = stamp
        self._generation = 1
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, frozenset[str]], Rights] = {}
        self._listeners: list[Any] = []
        self._stop = threading.Event()

    @classmethod
    def load(cls, path: str | Path) -> Entitlements:
        """Read and check ``path``; ConfigurationError naming the entry that is wrong."""
        path = Path(path)
        definitions, stamp = _read(path)
        return cls(path, definitions, stamp)

    @property
    def generation(self) -> int:
        return self._generation

    def rights_for(self, principal: Principal) -> Rights:
        key = (principal.name, principal.roles)
        with self._lock:
            rights = self._cache.get(key)
            if rights is None:
                rights = self._definitions.rights_for(principal)
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[key] = rights
            return rights

    def on_reload(self, listener: Any) -> None:
        """Call ``listener()`` after every reload that changed the definitions."""
        self._listeners.append(listener)

    def reload(self, force: bool = False) -> bool:
        """Read the file again when it changed (or ``force``); True when new definitions
        took effect. A file that does not load keeps the ones in force (logged)."""
        try:
            stamp = _stamp(self.path)
            if not force and stamp == self._stamp:
                return False
            definitions, stamp = _read(self.path)
        except ConfigurationError as exc:
            log.error("entitlements not reloaded, the ones in force stay: %s", exc)
            return False
        with self._lock:
            self._definitions, self._stamp = definitions, stamp
            self._cache.clear()
            self._generation += 1
        log.info("entitlements reloaded from %s (generation %d)", self.path, self._generation)
        for listener in list(self._listeners):
            listener()
        return True

    def watch(self, interval_s: float = WATCH_INTERVAL_S) -> threading.Thread:
        """Reload whenever the file changes, from a daemon thread, until :meth:`close`."""

        def run() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.reload()
                except Exception:  # a listener's bug: say it, and keep following the file
                    log.exception("applying reloaded entitlements failed; still watching")

        thread = threading.Thread(target=run, name="sow-entitlements", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._stop.set()


def _stamp(path: Path) -> tuple[int, int]:
    try:
        status = path.stat()
    except OSError as exc:
        raise ConfigurationError(f"entitlements file {path} cannot be read: {exc}") from exc
    return status.st_mtime_ns, status.st_size


def _read(path: Path) -> tuple[Definitions, tuple[int, int]]:
    stamp = _stamp(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"entitlements file {path} is not readable YAML: {exc}") from exc
    return Definitions.parse(data, str(path)), stamp
