"""What a subscriber asks for and what it receives."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from processor.changelog.events import ChangelogPosition

#: Messages a subscription may have queued before it is disconnected as a slow consumer.
DEFAULT_MAX_BACKLOG = 10_000
MAX_MAX_BACKLOG = 1_000_000


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    """A ``subscribe`` or ``sow_and_subscribe`` command (AMPS options of spec 3.5).

    ``topic`` is a SOW topic or a regular expression over topic names; ``filter`` an AMPS
    expression (empty: everything). ``oof`` asks for out-of-focus notifications (without
    it, deletes and expirations are not sent, as in AMPS; ``send_deletes`` sends them as
    deletes, and ``oof_last_received`` puts the last state received in the body of an OOF
    ``match``, with the new one in ``current``: kafka-sow's behaviours before issue 19);
    ``no_empties`` suppresses an update whose message equals the one last delivered for
    the record; ``batch_size`` applies to the query phase of sow_and_subscribe;
    ``send_keys`` is accepted (SowKeys are always sent). ``max_backlog`` (0: default) is
    how many messages may wait for the subscriber before it is disconnected.

    Subscription features (spec 3.7, 3.10-3.13): ``delta`` sends an update as the changed
    fields plus the key; ``select`` is a select list (spec 1.19); ``top_n``/``skip_n``/
    ``order_by`` make a sow_and_subscribe a live paginated window; ``replace`` replaces
    the session's subscription with the same ``sub_id``; ``conflation`` (an interval,
    "none" or empty) and ``conflation_key`` conflate deliveries per key; ``bookmark``
    replays the log from a point before going live.
    """

    topic: str
    filter: str = ""
    sub_id: str = ""
    oof: bool = False
    no_empties: bool = False
    batch_size: int = 0
    send_keys: bool = False
    query_id: str = ""
    max_backlog: int = 0
    delta: bool = False
    select: str = ""
    top_n: int = 0
    #: None: not given (``top_n`` alone only limits the query); 0 is the first page.
    skip_n: int | None = None
    order_by: str = ""
    replace: bool = False
    conflation: str = ""
    conflation_key: str = ""
    bookmark: str = ""
    send_deletes: bool = False
    oof_last_received: bool = False
    #: Records as text (JSON; Base64 for binary): needed for select and delta on avro.
    text_form: bool = False
    #: An aggregated subscription (spec 3.17, :mod:`processor.subscriptions.aggregated`):
    #: both or neither.
    grouping: str = ""
    projection: str = ""


class ChangeKind(Enum):
    """What a delivered change tells the subscriber."""

    PUBLISH = "publish"
    DELETE = "delete"
    OOF = "oof"


class OofReason(Enum):
    """Why a record left a subscription's focus (spec 3.9)."""

    DELETED = "deleted"
    EXPIRED = "expired"
    MATCH = "match"


@dataclass(frozen=True, slots=True)
class Notice:
    """One change for one subscription: a publish, delete or OOF notice."""

    kind: ChangeKind
    #: The record's topic and SowKey.
    topic: str
    sow_key: bytes
    #: The record as the subscriber should see it: the new state for a publish and an
    #: OOF ``match``, the last state it received for a delete or any other OOF
    #: (``oof_last_received``: for every OOF, the new state then going in ``current``).
    envelope: bytes
    #: The changelog record of the change.
    position: ChangelogPosition
    oof_reason: OofReason | None = None
    current: bytes | None = None
    #: The state last decided for the record before this change (None: the subscriber
    #: did not hold it): a delta is computed against it (processor.subscriptions.shape),
    #: and conflation tells from it what the subscriber received.
    previous: bytes | None = None
