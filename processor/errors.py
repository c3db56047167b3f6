"""The one exception tree of kafka-sow.

Every error the package raises derives from :class:`SowError`. Foreign exceptions
(confluent-kafka, rocksdict, fastavro, orjson, grpc) are translated at the adapter that
calls the foreign library, with ``raise ... from exc``. A message states what was
expected, what arrived, and what to do about it.
"""

from __future__ import annotations


class SowError(Exception):
    """Root of every kafka-sow error.

    ``failure`` is the kind of failure a request ends with, the same for every
    transport: each maps it to its own status (gRPC's in ``server/calls.py``, HTTP's in
    ``http/``), so a new error class picks its kind here, once."""

    #: The failure kind of a request that ends with this error (see the class doc).
    failure = "internal"


class ConfigurationError(SowError):
    """Settings, command-line options or environment variables are invalid."""


class TopologyError(ConfigurationError):
    """A topology (YAML or AMPS XML) is invalid.

    ``source`` names the file, ``where`` the element or field; both are part of the message.
    """

    def __init__(self, message: str, *, source: str = "<topology>", where: str = "") -> None:
        self.source = source
        self.where = where
        location = f"{source}: {where}: " if where else f"{source}: "
        super().__init__(location + message)


class JoinPlanError(ConfigurationError):
    """A view's Joins do not relate every topic to the others; ``join`` is the text of the
    first Join left unrelated (the loaders re-raise it as a TopologyError naming where
    that Join is written)."""

    def __init__(self, message: str, join: str) -> None:
        super().__init__(message)
        self.join = join


class UnservedEntryError(ConfigurationError):
    """A topology holds entries kafka-sow parses but does not serve yet (views, conflated
    topics, queues): ``sow serve`` refuses it rather than answer NOT_FOUND for them."""


class ValueFormatError(SowError, ValueError):
    """A value in text form (a duration, a size, a timestamp, a field path, a setting) is
    not in the form expected; the message says what arrived and what is allowed. Callers
    that know where the text came from re-raise it as their own error (a TopologyError
    naming the file, an InvalidRequestError naming the option)."""


class MessageError(SowError):
    """A message cannot be processed; the processor sends it to the dead-letter topic."""

    failure = "invalid"

    #: Short machine-readable reason, written to the dead-letter record's headers.
    reason_code = "invalid-message"


class DecodeError(MessageError):
    """The payload is not valid for the topic's message type."""

    reason_code = "undecodable"


class UnknownSchemaError(DecodeError):
    """A payload in the Schema Registry wire format names a schema id the registry does
    not have (it answered 404): the record is dead-lettered at once."""

    reason_code = "unknown-schema-id"


class SchemaRegistryUnreachableError(DecodeError):
    """A record needed a schema the Schema Registry was to give, and the registry stayed
    unreachable for ``SOW_SCHEMA_REGISTRY_WAIT_S``: the record is dead-lettered."""

    reason_code = "schema-registry-unreachable"


class SchemaRegistryUnavailableError(SowError):
    """The Schema Registry cannot be reached for a schema no cache holds, within the wait
    a record may take (``SOW_SCHEMA_REGISTRY_WAIT_S``): the processor restarts its batch
    from the committed offsets after a backoff (nothing is lost), a publish is refused."""

    failure = "unavailable"


class MissingKeyError(MessageError):
    """A Key field configured for the topic is absent (or NULL) in the message."""

    reason_code = "missing-key-field"


class InvalidSowKeyError(MessageError):
    """A publisher-provided SowKey is missing or contains non-Base64 characters."""

    reason_code = "invalid-sow-key"


class RecordTooLargeError(MessageError):
    """A record (or the changelog envelope made from it) is larger than the log accepts
    (the producer's ``message.max.bytes``); it is dead-lettered without its value."""

    reason_code = "too-large"


class KeyGenerationError(MessageError):
    """The topic's key function failed on a message: a custom KeyGenerator raised, or a
    Key field holds a value that has no text form (for example an Avro decimal)."""

    reason_code = "key-generation-failed"


class InvalidSequenceError(MessageError):
    """The duplicate-detection headers of a command are incomplete or malformed
    (``sow.sequence`` must be a decimal integer and come with ``sow.publisher``)."""

    reason_code = "invalid-sequence"


class EnrichmentError(MessageError):
    """A topic's Preprocessing or Enrichment field failed on a message (a value that
    cannot be written where the field puts it, a function that raised)."""

    reason_code = "enrichment-failed"


class ProcessingError(MessageError):
    """Applying one record failed in an unexpected way (a bug or an unforeseen input);
    the record is dead-lettered with the exception and the processor goes on."""

    reason_code = "processing-failed"


class QueueExpiredError(MessageError):
    """A queue message expired (its expiration time, ``MaxDeliveries``, ``MaxCancels``, or
    an expire command): it leaves the queue for the dead-letter topic with the reason."""

    reason_code = "queue-expired"


class CorruptRecordError(SowError):
    """A log record a reader read is not what its topic holds (a changelog value that is
    not an envelope, a message that does not decode or fit the columns asked for); the
    message names the record's topic, partition and offset."""


class EnvelopeError(CorruptRecordError):
    """A changelog value is not a valid envelope (the message says where it breaks)."""


class UnknownTopicError(SowError):
    """A command names a topic that has no SOW in the topology."""

    failure = "not-found"


class InvalidRequestError(SowError):
    """A query or command carries an invalid argument (for example BatchSize above 10000)."""

    failure = "invalid"


class ExpressionError(InvalidRequestError):
    """An AMPS expression (filter, projection, grouping, OrderBy) is invalid.

    ``text`` is the expression; ``position`` the 0-based character offset of the problem
    (-1 when it concerns the whole expression). The message names what was expected,
    what was found, and shows the position under the text.
    """

    def __init__(self, message: str, *, text: str = "", position: int = -1) -> None:
        self.text = text
        self.position = position
        self.reason = message
        if text and position >= 0:
            caret = " " * min(position, len(text)) + "^"
            message = f"{message} (at position {position})\n  {text}\n  {caret}"
        elif text:
            message = f"{message}, in {text!r}"
        super().__init__(message)


class ParseError(ExpressionError):
    """An expression does not follow the grammar; ``position`` says where it stops.

    ``expected`` describes what the parser would have accepted there.
    """

    def __init__(self, message: str, *, text: str, position: int, expected: str = "") -> None:
        self.expected = expected
        super().__init__(message, text=text, position=position)


class TooDeepError(ExpressionError):
    """Python cannot compile the generated source: the expression nests too deeply."""


class RegexBudgetError(ExpressionError):
    """A regular expression that runs on the backtracking engine (a PCRE construct RE2
    cannot run: backreferences, lookaround, ...) took longer than its budget on one text
    (``SOW_REGEX_MATCH_BUDGET_MS``). A query fails with it (RESOURCE_EXHAUSTED); a
    subscription's, view's or queue's filter counts it and does not match the message
    (docs/expressions.md). ``pattern`` is the pattern, ``budget_ms`` the budget."""

    failure = "exhausted"

    def __init__(self, pattern: str, budget_ms: float, what: str = "LIKE pattern") -> None:
        self.pattern = pattern
        self.budget_ms = budget_ms
        super().__init__(
            f"the {what} {pattern!r} took longer than its budget of {budget_ms:g} ms on one "
            "value and was stopped (it backtracks: a nested repetition or a backreference "
            "over a long text); write a pattern that RE2 can run (no backreferences, "
            "lookaround, atomic groups or possessive quantifiers; see docs/expressions.md), "
            "or raise SOW_REGEX_MATCH_BUDGET_MS"
        )


class MessageTooLargeError(InvalidRequestError):
    """A published message is larger than the log (topic, broker or changelog) accepts."""


class AuthenticationError(SowError):
    """A caller did not prove who it is: no credentials where security asks for them, a
    wrong password, a token that is expired, for another audience or badly signed, a
    client certificate from another CA (gRPC UNAUTHENTICATED). The message names the
    cause and never echoes the secret; ``reason`` is a short machine-readable cause
    (``bad-password``, ``expired-token``, ``no-credentials``...) that the audit counts."""

    failure = "unauthenticated"

    def __init__(self, message: str, reason: str = "bad-credentials") -> None:
        super().__init__(message)
        self.reason = reason


class NotEntitledError(SowError):
    """An authenticated principal may not do this: log on, read, write or acknowledge on
    this topic, or write a message outside its write filter (gRPC PERMISSION_DENIED)."""

    failure = "not-entitled"


class CatchingUpError(SowError):
    """A query needs the complete SOW but the replica has not caught up with the
    changelogs yet (after a start); retry, or ask the query to wait."""

    failure = "unavailable"


class ReplicaStoppedError(CatchingUpError):
    """A request waited on the read replica (for a position, a delete's effect) when its
    query service began to stop: the wait ends at once, unanswered. As with a replica
    still catching up, another query service, or this one restarted, can answer."""

    def __init__(self) -> None:
        super().__init__(
            "the query service is stopping: retry on another one, or once it has restarted"
        )


class UnsupportedError(SowError):
    """A request asks for something this release does not implement yet."""

    failure = "unsupported"


class BookmarkTooOldError(SowError):
    """A replay bookmark points below the earliest offset the log still retains."""

    failure = "precondition"


class PositionTimeoutError(SowError):
    """A read asked for a minimum log position the service did not reach in time."""

    failure = "timeout"


class DeadlineError(SowError):
    """A command's deadline (``--timeout``) passed before the service answered; what it
    was sending may or may not have taken effect."""

    failure = "timeout"


class SlowConsumerError(SowError):
    """A subscriber fell behind past its subscription's backlog limit and was
    disconnected; it must subscribe again (sow_and_subscribe to resynchronise)."""

    failure = "exhausted"


class TooManySubscriptionsError(SowError):
    """The query service already serves as many subscriptions as it allows; use another
    query-service replica or retry later."""

    failure = "exhausted"


class BrokerError(SowError):
    """The Kafka-protocol broker cannot be started, reached or used."""

    failure = "unavailable"


class KafkaSecurityError(BrokerError):
    """The Kafka cluster refused this client: authentication failed (wrong password, a
    certificate it does not trust or that expired) or an ACL is missing. Retrying does
    not help; ``cause`` names what to fix (the permission, the principal, the file)."""


class StalledError(BrokerError):
    """The processor's watchdog found it stuck (:mod:`processor.engine.watchdog`): its
    pipeline restarts from the committed offsets with a new consumer."""


class StaleGroupError(BrokerError):
    """The consumer group moved on while a transaction was open (a new generation, or under
    KIP-848 a new member epoch, which the broker hands out as it reassigns partitions):
    the transaction's input offsets were refused and nothing of it can commit. The
    processor aborts it and reads the batch again, once the consumer has caught up with
    the group."""


class TransactionTimedOutError(BrokerError):
    """The transaction stayed open longer than ``transaction.timeout.ms`` (the broker was
    unreachable, frozen or restarting, or the processor stalled that long): the
    coordinator aborted it and fenced the producer's epoch, so the producer is dead. A
    broker failure, not another processor taking over (:class:`FencedError`): the
    pipeline restarts from the committed offsets with a new producer."""


class UnconfirmedWriteError(BrokerError):
    """The broker did not confirm a write in time: it may or may not be in the log."""


class StoreError(SowError):
    """A state store cannot be opened, read or written."""


class StoreCorruptedError(StoreError):
    """A state store exists but cannot be opened; it will be rebuilt from the changelog."""


class SnapshotUnusableError(StoreError):
    """A replica snapshot file exists but cannot be used (the message says why)."""


class FencedError(SowError):
    """Another processor instance took over this processor's transactional identity."""


class ComponentFailedError(SowError):
    """A component of a running application (the processor thread or child process, the
    read replica) stopped with an error; ``component`` names it and ``error`` says why."""

    def __init__(self, component: str, error: BaseException) -> None:
        self.component = component
        self.error = error
        super().__init__(
            f"the {component} stopped: {type(error).__name__}: {error}; the process "
            "cannot go on without it (fix the cause above, then start it again)"
        )


class StartCancelledError(SowError):
    """A stop was asked for (Ctrl-C, SIGTERM) while the process was still starting."""


class SimulatedCrashError(SowError):
    """The broker-free driver's stand-in for a process killed at a commit step
    (:mod:`processor.testing`): the processor stops there, leaving what a kill leaves."""


class TransactionStateError(SowError):
    """A transaction was used in a state that does not allow it (a bug, not bad input)."""


class ServiceError(SowError):
    """The query service answered a request with an error status (a gRPC status name)."""

    def __init__(self, code: str, details: str) -> None:
        self.code = code
        self.details = details
        super().__init__(f"{code}: {details}")


class ChannelSecurityError(ServiceError):
    """A client could not set up its secure channel to a query service, or could not
    produce its own credentials: the TLS handshake failed (the service's certificate is
    not signed by the CA given, is not for the name used, or expired; the service refused
    the client's certificate or speaks no TLS), or the token file cannot be read. ``code``
    is the status gRPC gave (UNAVAILABLE); retrying the same service does not help."""
