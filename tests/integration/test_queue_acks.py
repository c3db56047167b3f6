"""A sow_delete on a queue is an acknowledgement (seed 002, the queue chapter) and its
``records_deleted`` is how many messages it removed, as the queue's partitions answer
(processor/queues/answers.py): through gRPC on both backends, and the CLI."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from processor.errors import ServiceError
from tests.integration.harness import running_sow
from tests.integration.test_queues import Consumer, _publish, _queued, _sow, _topology, _until


def _bookmarks(client: object) -> dict[int, str]:
    records, _, _ = client.query("Q")  # type: ignore[attr-defined]
    return {orjson.loads(r.data)["id"]: r.sow_key for r in records}


def test_records_deleted_counts_what_the_acknowledgement_removed(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = _topology(unique, "leasing: strict, max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        holder = Consumer(client, max_backlog=1)
        try:
            _publish(client, {"id": 0})
            _until(lambda: len(holder.leases) == 1)
            # Leased to another subscription, Leasing strict: refused, nothing removed.
            assert client.delete("Q", holder.bookmarks()).records_deleted == 0
            assert _queued(client) == [0]
            _publish(client, *({"id": i} for i in range(1, 5)))
            _until(lambda: _queued(client) == [0, 1, 2, 3, 4])
            # A message nobody holds: removed.
            assert client.delete("Q", [_bookmarks(client)[1]]).records_deleted == 1
            _until(lambda: _queued(client) == [0, 2, 3, 4])  # the replica follows
            # A bookmark the queue does not hold: nothing removed.
            unknown = f"{unique}.orders/0/999999"
            assert client.delete("Q", [unknown]).records_deleted == 0
            # A filter: what it matches and may settle (not the message leased to another).
            assert client.delete("Q", filter="/id >= 0").records_deleted == 3
            _until(lambda: _queued(client) == [0])
            # Queues.Act says so too, beside the command records it wrote.
            reply = client.queue_act("Q", "ack", bookmarks=holder.bookmarks())
            assert (reply.commands, reply.removed) == (1, 0)
            # The CLI prints the same count.
            address = app.grpc_address
            deleted = _sow(address, "delete", "Q", "--filter", "/id >= 0")
            assert deleted.returncode == 0, deleted.stderr
            assert orjson.loads(deleted.stdout) == {"records_deleted": 0}
            acked = _sow(address, "queue-ack", "Q", "--filter", "/id >= 0")
            assert acked.returncode == 0, acked.stderr
            assert orjson.loads(acked.stdout) == {"ack": "filter", "commands": 1, "removed": 0}
            holder.stream.ack(holder.bookmarks())
            _until(lambda: _queued(client) == [])
        finally:
            holder.close()


def test_an_acknowledgement_no_partition_answers_says_so(tmp_path: Path, unique: str) -> None:
    """Without a processor the acknowledgement is written but not applied: the caller is
    told so when its deadline passes, not given a count."""
    topology = _topology(unique, "")
    with running_sow("memory", topology, tmp_path, unique, processor=False) as (_, client):
        with pytest.raises(ServiceError, match="did not say") as failure:
            client.delete("Q", [f"{unique}.orders/0/1"], timeout=2.0)
        assert failure.value.code == "DEADLINE_EXCEEDED"
