"""The Kafka cluster's condition for the topics an application uses.

A replicated cluster can lose brokers and go on (degraded), or lose enough of them that
nothing can progress (blocking): a partition without a leader can be neither read nor
written, and one with fewer in-sync replicas than its ``min.insync.replicas`` refuses every
acks=all write (every producer of the product). :func:`judge` decides which, from one
metadata answer, in one line that says what to do; it keeps no state and does no I/O, so
its rules are tested without a broker. :class:`Steady` publishes a judgement once it held
for a few polls in a row (one missed or odd answer does not flap readiness) and counts
the time spent in each condition. :class:`ClusterWatch` asks the cluster once a second on
a daemon thread, with one admin client.

A single broker (every partition of one copy on the one broker listed) is not watched:
there is nothing to judge but its silence, which the processor's watchdog reports
(``processor/engine/watchdog.py``); the watch ends after its first answer.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)

from processor.errors import KafkaSecurityError, SowError
from processor.log.kafka.settings import Refusals, client_settings, list_topics
from processor.log.replication import Replication

log = logging.getLogger(__name__)

HEALTHY = "healthy"
DEGRADED = "degraded"
BLOCKING = "blocking"
STATES = (HEALTHY, DEGRADED, BLOCKING)

#: How often the cluster is asked, how many answers in a row a new condition needs before
#: it is published, and how long no broker may answer before that is the condition.
POLL_S = 1.0
HOLD_POLLS = 2
#: Several of the watch's request timeouts (:data:`WATCH_REQUEST_TIMEOUT_MS`): a request
#: sent to one frozen member is only then given up and asked of another, so a shorter
#: silence would call a cluster with one frozen member dead. (A whole cluster gone silent
#: is said sooner by the processor's watchdog, "the broker has not answered".)
SILENT_AFTER_S = 12.0
#: How long the watch's own requests wait for one broker.
WATCH_REQUEST_TIMEOUT_MS = 3000
#: How long a listed broker may take to accept a TCP connection before it counts as down.
PROBE_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as the metadata describes it (``leader`` -1: none)."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What one metadata answer says of the watched topics: the brokers listed (alive:
    registered and not fenced) and each partition's leader, replicas and in-sync ones."""

    brokers: frozenset[int]
    partitions: tuple[PartitionState, ...]

    @classmethod
    def of(
        cls, metadata: Any, topics: Collection[str], unreachable: Collection[int] = ()
    ) -> ClusterView:
        """From a confluent-kafka ClusterMetadata, keeping ``topics`` (the others, and a
        topic this client may not describe, are left out). ``unreachable``: brokers the
        metadata lists that refuse connections: they count as down, and out of every
        in-sync set (a cluster that lost its controller quorum cannot say so itself: its
        last metadata lists the dead as alive, leaders and in-sync replicas unchanged)."""
        gone = set(unreachable)
        partitions = [
            PartitionState(
                name,
                p,
                int(part.leader),
                tuple(part.replicas),
                tuple(r for r in getattr(part, "isrs", ()) if r not in gone),
            )
            for name in sorted(topics)
            if (topic := metadata.topics.get(name)) is not None and topic.error is None
            for p, part in sorted(topic.partitions.items())
        ]
        return cls(frozenset(set(metadata.brokers) - gone), tuple(partitions))


@dataclass(frozen=True, slots=True)
class Condition:
    """The cluster's condition: ``state`` one of :data:`STATES`, ``text`` one line (empty
    when healthy), ``answering`` the brokers listed alive (0: none answered)."""

    state: str = HEALTHY
    text: str = ""
    answering: int = 0

    def __str__(self) -> str:
        return self.state if not self.text else f"{self.state}: {self.text}"


def judge(
    view: ClusterView, min_insync: Mapping[str, int], known: Collection[int] = ()
) -> Condition:
    """The condition ``view`` shows. ``min_insync``: each topic's ``min.insync.replicas``
    (a topic not given: 1); ``known``: broker ids seen before (a broker named only there,
    or only as a replica, and not listed, is down)."""
    listed = view.brokers
    everyone = set(known) | set(listed)
    for part in view.partitions:
        everyone.update(part.replicas)
    down = sorted(everyone - listed)
    lead = ""
    if down:
        verb, ids = ("is", "id") if len(down) == 1 else ("are", "ids")
        lead = f"{len(down)} of {len(everyone)} brokers {verb} down ({ids} {_ids(down)}); "
    answering = len(listed)
    leaderless = [p for p in view.partitions if p.leader < 0 or p.leader not in listed]
    if leaderless:
        first = leaderless[0]
        return Condition(
            BLOCKING,
            f"{lead}{first.name}{_more(leaderless)} has no leader: it can be neither written "
            f"nor read until a broker of its replicas ({_ids(first.replicas)}) returns",
            answering,
        )
    short = [p for p in view.partitions if len(p.isr) < min_insync.get(p.topic, 1)]
    if short:
        first = short[0]
        count = len(first.isr)
        return Condition(
            BLOCKING,
            f"{lead}{first.name}{_more(short)} has {count} in-sync replica"
            f"{'s' * (count != 1)}, fewer than min.insync.replicas="
            f"{min_insync.get(first.topic, 1)}: writes to it are refused until a broker returns",
            answering,
        )
    lagging = [p for p in view.partitions if len(p.isr) < len(p.replicas)]
    if down:
        return Condition(
            DEGRADED,
            f"{lead}every partition has a leader and enough in-sync replicas: bring "
            f"{'it' if len(down) == 1 else 'them'} back before another fails",
            answering,
        )
    if lagging:
        first = lagging[0]
        return Condition(
            DEGRADED,
            f"{first.name}{_more(lagging)} has {len(first.isr)} of {len(first.replicas)} "
            "replicas in sync (a broker catching up); every partition has a leader and "
            "enough in-sync replicas",
            answering,
        )
    return Condition(HEALTHY, "", answering)


def silence(bootstrap: str, seconds: float) -> Condition:
    """The condition when no broker has answered for ``seconds`` or more (the text names
    the threshold, not the time so far: it stays the same while the silence lasts)."""
    return Condition(
        BLOCKING,
        f"no broker answers at {bootstrap} (none for {seconds:.0f}s or more): check that "
        "the brokers run and that this host reaches them",
        0,
    )


def unreachable(brokers: Mapping[int, Any], timeout_s: float = PROBE_TIMEOUT_S) -> set[int]:
    """The ids of the listed brokers (confluent-kafka BrokerMetadata: ``host``, ``port``)
    that refuse a TCP connection or do not accept one within ``timeout_s``. A frozen
    broker's kernel still accepts connections: it counts as reachable (its partitions
    move once the controller fences it)."""
    down = set()
    for broker_id, broker in brokers.items():
        try:
            with socket.create_connection((broker.host, int(broker.port)), timeout_s):
                pass
        except OSError:
            down.add(int(broker_id))
    return down


def _more(partitions: Sequence[PartitionState]) -> str:
    others = len(partitions) - 1
    return f" (and {others} more partition{'s' * (others != 1)})" if others else ""


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(map(str, ids)) or "none"


@dataclass(slots=True)
class Steady:
    """The condition published: a new state only once :data:`HOLD_POLLS` judgements in a
    row agree (a new text within the same state at once), and the seconds spent in each
    state. ``now`` is passed in: it keeps no clock of its own."""

    hold: int = HOLD_POLLS
    current: Condition = field(default_factory=Condition)
    _since: float | None = None
    _candidate: str = HEALTHY
    _seen: int = 0
    _spent: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STATES, 0.0))

    def update(self, judged: Condition, now: float) -> Condition:
        """Take one judgement; return the condition published after it."""
        if self._since is None:
            self._since = now
        if judged.state == self.current.state:
            self._seen = 0
            self.current = judged
            return judged
        if judged.state == self._candidate:
            self._seen += 1
        else:
            self._candidate, self._seen = judged.state, 1
        if self._seen >= self.hold:
            self._spent[self.current.state] += now - self._since
            self._since, self._seen = now, 0
            self.current = judged
        return self.current

    @property
    def judged(self) -> bool:
        """Whether any judgement was taken yet."""
        return self._since is not None

    def seconds(self, state: str, now: float) -> float:
        """Seconds spent in ``state`` so far (the current stretch included)."""
        spent = self._spent[state]
        if self._since is not None and self.current.state == state:
            spent += now - self._since
        return spent


class ClusterWatch:
    """Asks the cluster at ``bootstrap`` for its metadata every :data:`POLL_S` on a daemon
    thread and publishes the condition of ``topics`` (:func:`judge`, :class:`Steady`).
    ``replication``: the settings' replication, for a topic whose ``min.insync.replicas``
    cannot be read (it is read once per topic, with describe_configs)."""

    def __init__(
        self,
        bootstrap: str,
        topics: Collection[str],
        replication: Replication | None = None,
        *,
        poll_s: float = POLL_S,
        hold: int = HOLD_POLLS,
        silent_after_s: float = SILENT_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[Mapping[int, Any]], set[int]] = unreachable,
    ) -> None:
        self.bootstrap = bootstrap
        self.topics = frozenset(topics)
        self._replication = replication or Replication()
        self._poll_s = poll_s
        self._silent_after_s = silent_after_s
        self._clock = clock
        self._probe = probe
        self._steady = Steady(hold)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._min_insync: dict[str, int] = {}
        self._known: set[int] = set()
        self._answered_at = clock()
        #: False once the first answer showed a single broker (nothing to watch).
        self.watching = True

    def start(self) -> ClusterWatch:
        self._thread = threading.Thread(target=self._run, name="sow-cluster-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def condition(self) -> Condition:
        """The condition published (healthy until judged otherwise)."""
        with self._lock:
            return self._steady.current

    @property
    def active(self) -> bool:
        """Whether the condition is worth showing: judged at least once, and watched (not
        a single broker)."""
        with self._lock:
            return self.watching and self._steady.judged

    def blocking(self) -> str | None:
        """The condition's text while nothing can progress, else None (also once the
        watch has stopped: what it last saw is no longer known to hold)."""
        if not self.watching:
            return None
        condition = self.condition
        return condition.text if condition.state == BLOCKING else None

    def seconds(self, state: str) -> float:
        """Seconds spent in ``state`` since the watch began."""
        with self._lock:
            return self._steady.seconds(state, self._clock())

    def _run(self) -> None:
        refusals = Refusals("the cluster watch")
        # Silent, like the watchdog's client: the watch reports an unanswering broker itself.
        settings: dict[str, Any] = {
            **client_settings(self.bootstrap),
            "client.id": "sow-cluster-watch",
            "log_level": 0,
            # Its own requests give up on a frozen member soon and ask another: the
            # watch must see the cluster, not wait on one member (the product's other
            # clients keep librdkafka's 60 s: an acks=all write may rightly wait for a
            # follower's death to be noticed, replica.lag.time.max.ms, and a new
            # controller; at 10 s a processor gave up and restarted, over and over).
            "socket.timeout.ms": WATCH_REQUEST_TIMEOUT_MS,
            "error_cb": refusals,
        }
        admin = AdminClient(settings)
        failed = False
        try:
            while self.watching and not self._stopped.is_set():
                began = self._clock()
                try:
                    self.poll(admin, refusals)
                except KafkaSecurityError as exc:
                    log.error("the cluster watch stops: %s", exc)
                    return
                except Exception as exc:  # an answer it could not judge: said, asked again
                    if not failed:
                        log.exception("the cluster watch could not judge an answer: %s", exc)
                    failed = True
                else:
                    failed = False
                self._stopped.wait(max(0.0, self._poll_s - (self._clock() - began)))
        finally:
            # Whatever ends the thread, what it last saw is no longer known to hold.
            self.watching = False
            del admin  # its connections close now, not whenever collected

    def poll(self, admin: Any, refusals: Refusals) -> None:
        """Ask once and publish what the answer (or the silence) shows."""
        try:
            metadata = list_topics(admin, refusals, min(2.0, 2 * self._poll_s))
        except KafkaSecurityError:
            raise
        except SowError:
            silent = self._clock() - self._answered_at
            if silent >= self._silent_after_s:
                self._publish(silence(self.bootstrap, self._silent_after_s))
            return
        self._answered_at = self._clock()
        listed = metadata.brokers
        view = ClusterView.of(metadata, self.topics, self._probe(listed) if len(listed) > 1 else ())
        copies = {r for p in view.partitions for r in p.replicas} | set(view.brokers)
        if not self._known and len(copies) == 1:
            log.debug("a single broker: the cluster watch ends (the watchdog reports it)")
            self.watching = False
            return
        self._read_min_insync(admin, view)
        judged = judge(view, self._min_insync, self._known)
        self._known |= view.brokers
        self._publish(judged)

    def _publish(self, judged: Condition) -> None:
        with self._lock:
            before = self._steady.current
            after = self._steady.update(judged, self._clock())
        if after.state != before.state:
            if after.state == HEALTHY:
                log.info("the Kafka cluster is healthy again")
            else:
                log.warning("the Kafka cluster is %s", after)

    def _read_min_insync(self, admin: Any, view: ClusterView) -> None:
        """Read ``min.insync.replicas`` of the topics not read yet (once each); a topic
        whose configuration cannot be read gets the settings' (or the default rule's)."""
        unread = sorted({p.topic for p in view.partitions} - self._min_insync.keys())
        if not unread:
            return
        copies = {p.topic: len(p.replicas) for p in view.partitions}
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in unread]
        try:
            futures = admin.describe_configs(resources, request_timeout=2.0)
        except KafkaException:
            futures = {}
        for resource in resources:
            name = resource.name
            try:
                entries = futures[resource].result(timeout=2.0)
                self._min_insync[name] = int(entries["min.insync.replicas"].value)
            except (KafkaException, KeyError, ValueError, TypeError) as exc:
                log.debug("min.insync.replicas of %s not read: %s", name, exc)
                self._min_insync[name] = self._fallback_min_insync(copies[name])
            except TimeoutError:
                continue  # asked again at the next poll

    def _fallback_min_insync(self, copies: int) -> int:
        try:
            return Replication(copies, self._replication.min_insync).resolve(copies)[1]
        except SowError:  # more in sync asked than copies: the refusal is elsewhere
            return copies
