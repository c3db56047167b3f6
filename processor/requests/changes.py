"""A subscription's messages for any transport: its records as the subscriber asked for
them (select list, text form, delta updates, ``no_empties``), its changes, and the loop
that takes them off the subscription's queue as a stream sends them.

The transports (``server/subscriptions.py`` for gRPC, ``http/`` for Server-Sent Events)
turn these values into their own messages and nothing else.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from processor import changelog, errors
from processor.changelog import Envelope
from processor.log import LogPosition
from processor.messages import Codec
from processor.subscriptions.model import ChangeKind, Notice
from processor.subscriptions.shape import MessageShape
from processor.subscriptions.subscription import Subscription

log = logging.getLogger(__name__)

#: Most changes sent per wake-up of a stream.
SEND_BATCH = 256
#: How long an idle stream sleeps between checks that its client is still there.
IDLE_CHECK_S = 5.0

#: An envelope -> the envelope as the subscriber sees it (data shaped, or itself).
Shaper = Callable[[Envelope], Envelope]


@dataclass(slots=True)
class Change:
    """One change as a subscriber gets it: the record (``record``, the state it should
    see), where the change is in the changelog, why a record left the subscription
    (``oof_reason``), its new state for an OOF with ``oof_last_received`` (``current``),
    and whether ``record`` holds a delta update (``delta``)."""

    kind: ChangeKind
    topic: str
    sow_key: str
    record: Envelope
    position: LogPosition
    oof_reason: str | None = None
    current: Envelope | None = None
    delta: bool = False


def text_form(subscription: Subscription, asked: bool) -> bool:
    """Whether a subscription's records are converted to their text form: as asked,
    except an aggregated subscription's rows, which are JSON already."""
    return asked and not subscription.aggregated


def shaper(shape: MessageShape | None, text_form: bool, codecs: Mapping[str, Codec]) -> Shaper:
    """How a subscription's records are sent: the selected fields when a select list
    applies to the record's topic, else the whole message (in text form on request)."""
    if shape is not None and shape.select is not None:
        plain = shaper(None, text_form, codecs)

        def selected(envelope: Envelope) -> Envelope:
            if not shape.shapes(envelope.topic):
                return plain(envelope)
            return _with_data(envelope, shape.full(envelope.topic, envelope.data))

        return selected
    if not text_form:
        return _same
    return lambda envelope: _with_data(envelope, codecs[envelope.topic].to_text(envelope.data))


def _same(envelope: Envelope) -> Envelope:
    return envelope


def _with_data(envelope: Envelope, data: bytes) -> Envelope:
    if data is envelope.data:
        return envelope
    shaped = copy.copy(envelope)
    shaped.data = data
    return shaped


def changes(
    deliveries: list[Notice], shape: MessageShape | None, to_record: Shaper
) -> list[Change]:
    """A subscription's deliveries as changes; a delta update where the subscriber holds
    the record, and none for an update ``no_empties`` suppresses (nothing selected
    changed): the list may be empty."""
    out = []
    delta = shape is not None and shape.delta
    for delivery in deliveries:
        change = _change(delivery, to_record)
        if delta and not _delta(change, delivery, shape):  # type: ignore[arg-type]
            continue
        out.append(change)
    return out


def _change(delivery: Notice, to_record: Shaper) -> Change:
    topic, partition, offset = delivery.position
    return Change(
        delivery.kind,
        delivery.topic,
        delivery.sow_key.decode(),
        to_record(changelog.decode(delivery.envelope)),
        (topic, partition, offset),
        None if delivery.oof_reason is None else delivery.oof_reason.value,
        None if delivery.current is None else to_record(changelog.decode(delivery.current)),
    )


def _delta(change: Change, delivery: Notice, shape: MessageShape) -> bool:
    """Make ``change`` a delta update when it is a publish updating a record the
    subscriber holds; False when ``no_empties`` suppresses it (nothing selected changed).
    A delete or an OOF notice is sent whole (spec 3.10), though it carries ``previous``
    too (for conflation and the OOF's last-received state)."""
    previous = delivery.previous
    if delivery.kind is not ChangeKind.PUBLISH or previous is None:
        return True
    if not shape.shapes(delivery.topic):
        return True
    update = shape.update(
        delivery.topic, changelog.data_of(previous), changelog.data_of(delivery.envelope)
    )
    if update is None:
        return False
    data, change.delta = update
    change.record = _with_data(change.record, data)
    return True


def live(
    subscription: Subscription,
    active: Callable[[], bool],
    batch: int = SEND_BATCH,
    idle_s: float = IDLE_CHECK_S,
) -> Iterator[list[Notice]]:
    """The subscription's deliveries, a batch at a time, until its client leaves
    (``active`` false after ``idle_s`` with nothing to send) or it closes. A slow
    consumer and a caller whose rights were taken away end it with their error (SlowConsumerError,
    NotEntitledError), which the transport sends as its reason; any other closing ends
    it quietly."""
    while True:
        try:
            deliveries = subscription.take(batch, idle_s)
        except errors.SlowConsumerError as exc:
            log.warning("%s", exc)
            raise
        except errors.NotEntitledError:
            raise
        except errors.SowError:
            return
        if not deliveries:
            if not active():
                return
            continue
        yield deliveries
