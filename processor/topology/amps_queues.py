"""Queues of an AMPS ``<SOW>`` section (seed 002 SOW/Queue, SOW/LocalQueue and
SOW/GroupLocalQueue; ``QueueDefinition`` is a synonym of ``Queue``), parsed and validated.

Contract: :func:`read_queue` returns a :class:`~processor.topology.model.QueueSpec`, or
raises :class:`~processor.errors.TopologyError` naming the file, the element path
(``AMPSConfig/SOW/Queue[1]/LeasePeriod``), what is wrong and what is allowed. The queue
is served by :mod:`processor.queues` (docs/queues.md).

* ``Name`` (or ``Topic``) and ``MessageType`` are required; every element at most once.
* ``UnderlyingTopic`` names a SOW topic or a ``<TransactionLog>`` ``<Topic>`` of the file,
  or is a pattern over their names. Its rules, and every other element's, are the YAML
  format's too: :mod:`processor.topology.queue_rules` checks them for both.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from processor.topology.amps_entries import entry_groups, entry_type
from processor.topology.amps_reader import AmpsReader
from processor.topology.entry_rules import Catalog
from processor.topology.queue_rules import ELEMENTS as VALUE_ELEMENTS
from processor.topology.queue_rules import QueueItems, queue
from processor.topology.queue_spec import QueueKind, QueueSpec

#: The elements that declare a queue.
QUEUE_ELEMENTS = ("Queue", "QueueDefinition", "LocalQueue", "GroupLocalQueue")
#: The elements of a queue.
ELEMENTS = ("Name", "Topic", "MessageType", *VALUE_ELEMENTS)
_KINDS = {
    "Queue": QueueKind.QUEUE,
    "QueueDefinition": QueueKind.QUEUE,
    "LocalQueue": QueueKind.LOCAL,
    "GroupLocalQueue": QueueKind.GROUP_LOCAL,
}


def read_queue(reader: AmpsReader, element: ET.Element, where: str, catalog: Catalog) -> QueueSpec:
    """One ``<Queue>``, ``<LocalQueue>``, ``<GroupLocalQueue>`` or ``<QueueDefinition>``
    (module doc); ``catalog`` holds every topic of the file."""
    groups, name = entry_groups(reader, element, where, ELEMENTS)
    typed = entry_type(reader, groups)
    if typed is None:
        reader.fail(
            f"a <{element.tag}> needs <MessageType>, the type of its messages (the type of "
            "its underlying topics)",
            where,
        )
    values = {
        tag: (reader.text(*groups[tag][0]), groups[tag][0][1])
        for tag in VALUE_ELEMENTS
        if tag in groups
    }
    items = QueueItems(kind=_KINDS[element.tag], typed=typed, values=values)
    return queue(reader, catalog, (element.tag, name, where), items)
