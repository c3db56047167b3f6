"""The commands on the transaction log, as Kafka records (ARCHITECTURE.md: every state
change is a command on the log, applied by the processor in offset order).

* **publish**: key = SowKey, value = the message; optional headers
  ``sow.expiration`` (seconds; 0 never expires) and ``sow.correlation_id``.
  Duplicate detection: headers ``sow.publisher`` (the publisher's name) and
  ``sow.sequence`` (its message number, decimal, increasing from 1); the processor applies
  each (publisher, sequence) at most once per partition and discards a publish whose
  sequence is not above the highest it applied for that publisher (as AMPS does).
* **delta_publish**: a publish with header ``sow.delta``: ``1`` when the value is a
  message of the topic's type, ``json`` when it is its JSON text form (avro topics: a
  partial record the schema cannot hold). The processor merges it into the stored record
  (:mod:`processor.messages.fields`); the merged message is what is stored and logged.
* **sow_delete by SowKey**: key = SowKey, value = None.
* **sow_delete by filter**: key = :data:`FILTER_DELETE_KEY`, value = None, header
  ``sow.filter`` = the filter text (UTF-8). It is written to every partition of the
  topic's input topic; each partition deletes the records that match the filter when the
  command is applied. Its tombstones carry the command's position, so a reader can count
  what it deleted.
* **sow_delete by data** is turned into a delete by SowKey before it enters the log.
"""

from __future__ import annotations

EXPIRATION_HEADER = "sow.expiration"
CORRELATION_HEADER = "sow.correlation_id"
FILTER_HEADER = "sow.filter"
PUBLISHER_HEADER = "sow.publisher"
SEQUENCE_HEADER = "sow.sequence"
DELTA_HEADER = "sow.delta"
#: The topic a record of a Pattern topic was published to (its records' own topic).
TOPIC_HEADER = "sow.topic"
#: ``sow.delta`` values: the delta is in the topic's message type, or in JSON text.
DELTA_NATIVE = b"1"
DELTA_TEXT = b"json"
#: Never a SowKey: keys starting with NUL are reserved for commands and control records.
FILTER_DELETE_KEY = b"\x00sow:delete-filter"
