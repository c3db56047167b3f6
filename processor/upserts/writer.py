"""The upsert-table writer of one SOW topic (docs/upsert-tables.md).

:class:`UpsertWriter` is a :class:`~processor.engine.transaction.ChangeListener` of the
topic: the engine hands it each partition batch's changes, in log order, as the commit
begins, and it produces one record per change to the upsert topic, on the partition of
the same number (the upsert topic has the SOW topic's partitions, so each record's
changes stay in one partition, in SOW order), in the batch's transaction:

* a publish (an insert or an update): key the record's key, value the stored message as
  it is (the message's own format: the bytes a sow query returns, Schema Registry
  framing included when the topic's messages carry it);
* a delete, an expiry, or any other removal from the SOW: key the record's key, value
  None (a tombstone).

The record is thus committed exactly once with the change (read it with
``isolation.level=read_committed``): an aborted transaction takes it with it, and the
change is made again, with its record, when the input is applied again.

The key (:func:`key_of`): with ``key: sow_key`` the SowKey's text (ASCII: a generated key
is its decimal checksum, a publisher's key its Base64 text); with ``key: fields`` the Key
field values' texts (:func:`processor.keys.key_text`), one field's as UTF-8, several as a
compact JSON array of those texts. Both suit a String key serde.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from processor import changelog
from processor.changelog.events import ChangeEvent, Listener
from processor.engine.transaction import PartitionBatch
from processor.errors import KeyGenerationError
from processor.keys import extract, key_text, parse_path
from processor.messages import codec_for
from processor.topology.model import SowTopic
from processor.topology.upserts import UpsertKey

#: The key of an upsert record from a record's SowKey and its envelope (the one it has,
#: or had before a removal).
KeyOf = Callable[[bytes, bytes | None], bytes]


def _sow_key(sow_key: bytes, _envelope: bytes | None) -> bytes:
    return sow_key


def key_of(topic: SowTopic) -> KeyOf:
    """The key function of ``topic``'s upsert records (module doc)."""
    spec = topic.upsert
    if spec is None or spec.key is UpsertKey.SOW_KEY:
        return _sow_key
    decode = codec_for(topic).key_decoder(topic.keys)
    paths = tuple(parse_path(path) for path in topic.keys)
    name = topic.name

    def fields(sow_key: bytes, envelope: bytes | None) -> bytes:
        if envelope is None:
            raise KeyGenerationError(
                f"the upsert key of record {sow_key.decode(errors='replace')} of {name} needs "
                "its message, which the engine did not read"
            )
        message = decode(changelog.data_of(envelope))
        texts = [key_text(extract(message, path)) for path in paths]
        if len(texts) == 1:
            return texts[0].encode()
        return orjson.dumps(texts)

    return fields


class UpsertWriter:
    """Writes one SOW topic's changes to its upsert topic (module doc)."""

    def __init__(self, topic: SowTopic) -> None:
        target = topic.upsert_topic
        assert target is not None, f"{topic.name} has no upsert topic"
        self.target = target
        self.key_of = key_of(topic)
        #: Only a key made of the message's fields needs the removed record's message.
        self.needs_old = self.key_of is not _sow_key

    def listen(self, batch: PartitionBatch) -> Listener:
        target, partition, key_of = self.target, batch.state.partition, self.key_of
        produce = batch.produce

        def changed(events: Sequence[ChangeEvent]) -> None:
            for event in events:
                new = event.new
                if new is None:
                    produce(target, None, key_of(event.sow_key, event.old), partition, None)
                else:
                    value = changelog.data_of(new)
                    produce(target, value, key_of(event.sow_key, new), partition, None)

        return changed
