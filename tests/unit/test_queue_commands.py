"""The records between the query services and a queue's partitions
(processor/queues/commands.py): commands round-trip, a record that is not a command is
refused with what is wrong, and a bookmark names its queue partition."""

from __future__ import annotations

import pytest

from processor.errors import MessageError
from processor.queues.commands import (
    COMMAND_HEADER,
    Command,
    CommandKind,
    decode_command,
    decode_delivery,
    delivery_headers,
)
from processor.queues.definition import bookmark_of, partition_of


@pytest.mark.parametrize(
    "command",
    [
        Command(CommandKind.SUBSCRIBE, "s/1", "s", filter="/a > 1", max_backlog=0),
        Command(CommandKind.ACK, "s/1", "s", bookmarks=("t/0/1", "t/0/2")),
        Command(CommandKind.ACK, None, "s", bookmarks=("t/0/1",)),
        Command(CommandKind.HEARTBEAT, service="s"),
        Command(CommandKind.ACK_FILTER, None, "s", filter="1=1"),
    ],
)
def test_a_command_round_trips(command: Command) -> None:
    value, headers = command.encode()
    assert decode_command(value, headers) == command


@pytest.mark.parametrize(
    ("value", "headers", "message"),
    [
        (b"{}", None, f"needs header {COMMAND_HEADER} naming one of subscribe"),
        (b"{}", [(COMMAND_HEADER, b"dance")], "naming one of subscribe, disconnect"),
        (b"not json", [(COMMAND_HEADER, b"ack")], "queue command ack is not a valid JSON"),
        (b"[1]", [(COMMAND_HEADER, b"ack")], "not an object"),
        (b'{"backlog": "x"}', [(COMMAND_HEADER, b"subscribe")], "not a valid JSON command"),
    ],
)
def test_a_record_that_is_no_command_is_refused_with_why(
    value: bytes, headers: list[tuple[str, bytes]] | None, message: str
) -> None:
    with pytest.raises(MessageError, match=message.replace("(", r"\(")):
        decode_command(value, headers)


def test_a_delivery_round_trips() -> None:
    headers = delivery_headers("lease", b"t/3/9", 1234, 2)
    delivery = decode_delivery(b"s/1", b"envelope", headers)
    assert (delivery.subscription, delivery.kind, delivery.bookmark) == ("s/1", "lease", "t/3/9")
    assert (delivery.deadline_ms, delivery.deliveries, delivery.envelope) == (1234, 2, b"envelope")
    assert (
        decode_delivery(b"s/1", b"", delivery_headers("barrier", b"t/0/1", None, 1)).deadline_ms
        is None
    )


def test_a_bookmark_names_its_queue_partition() -> None:
    assert bookmark_of("a.b/c", 5, 17) == b"a.b/c/5/17"
    assert partition_of(b"a.b/c/5/17", 8) == 5
    assert partition_of("orders/5/17", 4) == 1  # a SOW topic's partition, modulo the queue's
    with pytest.raises(ValueError, match="is not a bookmark"):
        partition_of("nonsense", 4)
