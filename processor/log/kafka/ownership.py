"""One owner per partition between a static processor and a consumer group's members.

A processor with ``assignment=static`` takes every partition of its topics without
joining its group; group members are given theirs by the group coordinator. Kafka shares
nothing out between the two, so they keep apart this way (docs/scaling.md):

- every static processor of a group uses the group's one static transactional id
  (``config.static_transactional_id``), and once its producer holds that id it checks
  that the group has no member, or refuses to start (:func:`refuse_beside_members`);
- a group member, each time it is given partitions and before it reads them or their
  committed offsets, initialises a producer with that id (:func:`fence_static_processor`):
  Kafka aborts a static processor's open transaction (or finishes one being committed) and
  fences its producer, which can commit nothing more.

Whichever starts second, no batch of a static processor commits once a group member works
on the partitions: a member is in the group from its join, before it is given partitions,
so a static processor that checked after that join sees it, and one that checked before
holds an epoch that the member's fence ends. Two static processors of one group fence each
other the same way (the later one's producer wins).
"""

from __future__ import annotations

import contextlib
import logging
import time

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from processor.errors import BrokerError, ConfigurationError
from processor.log.kafka.settings import (
    client_name,
    client_settings,
    producer_settings,
    refusal,
)

log = logging.getLogger(__name__)

#: How long a fence or a look at the group may take before it counts as a broker failure.
TIMEOUT_S = 30.0
#: Answers of a group coordinator that is not ready yet (a broker starting, a move).
_NOT_YET = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
    }
)
#: The states of a group without members.
_NOBODY = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD})
#: What a static processor's fenced producer means (the end of its error line).
FENCED_STATIC = (
    "a processor of its group took its partitions (a member sharing them out, which fences "
    "a static processor as it joins, or another static processor): a processor with "
    "SOW_ASSIGNMENT=static must be its group's only processor; run every processor of the "
    "group with SOW_ASSIGNMENT=group (the default of sow process)"
)


def refuse_beside_members(bootstrap: str, group: str) -> None:
    """Raise ConfigurationError (one line: what runs, what to run instead) when consumer
    group ``group`` has members; BrokerError when the broker does not say."""
    admin = AdminClient(
        {**client_settings(bootstrap), "client.id": "sow-ownership", "log_level": 0}
    )
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            described = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)
            found = described[group].result(TIMEOUT_S)
            break
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.GROUP_ID_NOT_FOUND:
                return  # never used as a group: nobody in it
            # A broker just started loads its group coordinator first: ask again.
            if error.code() in _NOT_YET and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            who = client_name("the processor (static assignment)")
            raise refusal(error, who, "Read", group) or BrokerError(
                f"cannot describe consumer group {group}: {exc}"
            ) from exc
    # Tansu lists no members, but says the group is not empty (UNKNOWN while one joins).
    if found.members or found.state not in _NOBODY:
        hosts = ", ".join(sorted({m.host for m in found.members})) or "members not listed"
        raise ConfigurationError(
            f"consumer group {group} is {found.state.name.lower()} with processors sharing "
            f"its partitions out ({hosts}); a processor with SOW_ASSIGNMENT=static takes every "
            "partition and must be the group's only processor: run it with "
            "SOW_ASSIGNMENT=group (the default of sow process; --group-id to use another "
            "group), or stop the others first"
        )


def fence_static_processor(bootstrap: str, static_id: str) -> None:
    """End any static processor of the group whose static transactional id is
    ``static_id`` (module doc); returns once Kafka has fenced it. BrokerError when the
    transaction coordinator does not answer in time."""
    producer = Producer(
        producer_settings(
            bootstrap,
            **{"client.id": "sow-fence", "transactional.id": static_id, "log_level": 0},
        )
    )
    try:
        producer.init_transactions(TIMEOUT_S)
    except KafkaException as exc:
        who = client_name("the processor (fencing static processors)")
        raise refusal(exc.args[0], who, "Write", static_id) or BrokerError(
            f"cannot fence a static processor (transactional id {static_id}) before taking "
            f"partitions: {exc}"
        ) from exc
    finally:
        # No transaction is open: closing aborts nothing and returns at once.
        with contextlib.suppress(RuntimeError, KafkaException):
            producer.close()
    log.debug("fenced any static processor with transactional id %s", static_id)
