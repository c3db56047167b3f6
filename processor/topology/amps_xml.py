"""Read SOW topics from an AMPS configuration file (``<AMPSConfig>``), stdlib ElementTree only.

Contract: :func:`parse_amps_config` returns a :class:`~processor.topology.model.Topology` of
the ``AMPSConfig/SOW/Topic`` elements in document order, with the section's views,
conflated topics and queues, or raises :class:`~processor.errors.TopologyError` naming the
file, the element path (``AMPSConfig/SOW/Topic[2]/Key``; a SOW entry is always numbered
from 1, other elements only when repeated), what was wrong and what is allowed. Elements
are read by :class:`~processor.topology.amps_reader.AmpsReader` (``${VAR}`` expansion,
declared message types and modules).

* ``TopicMetaData`` is a synonym of ``SOW``, ``TopicDefinition`` of ``Topic``; inside a topic
  ``Topic`` is the pre-5.0 synonym of ``Name`` and ``Duration`` of ``Durability``.
* Element names are case sensitive (as in AMPS); enumerated values (message types,
  persistent/transient, epoch/now, enabled/disabled) are not.
* Kafka extensions inside a Topic: ``KafkaTopic`` and ``Partitions``; ``UpsertTopic`` and
  ``UpsertKey`` (its upsert-table view, docs/upsert-tables.md).
* Topic options that do not apply to kafka-sow (:data:`NOT_APPLICABLE`: ``FileName`` and
  the growth and sizing options) are validated, logged once with the reason, and kept in
  :attr:`SowTopic.unused_options`.
* ``Pattern`` makes a regular-expression topic (:attr:`SowTopic.pattern`); with History,
  Preprocessing or Enrichment it is an error citing that element (as in AMPS).
* Views, conflated topics and queues (:data:`ENTRY_ELEMENTS`) are parsed and checked by
  :mod:`processor.topology.amps_entries` and :mod:`processor.topology.amps_queues`, after
  every topic of the file is known.
* Plain topics (no SOW): an ``AMPSConfig/TransactionLog/Topic`` whose ``Name`` is not a SOW
  topic of the file declares one (:data:`PLAIN_ELEMENTS`: ``Name``, ``MessageType``,
  ``KafkaTopic``, ``Partitions``); one that names a SOW topic is that topic's log and
  adds nothing. A ``Name`` that is a regular expression (AMPS logs every matching topic)
  is ignored with a warning: kafka-sow needs each plain topic by name.
* The top-level ``Authentication`` and ``Entitlement`` name the logon and the
  entitlements file (:mod:`processor.topology.amps_security`); inside a ``Transport``
  they are an error (kafka-sow serves one gRPC endpoint).
* ``Actions`` (:mod:`processor.topology.amps_actions`, docs/actions.md): the actions on
  SOW topics; any other AMPS action module is refused, naming those supported.
* Any other element inside SOW or Topic is an error. Top-level sections other than SOW,
  MessageTypes, Modules, TransactionLog, Authentication, Entitlement and Actions are not read.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from processor.errors import TopologyError
from processor.topology.amps_actions import read_actions
from processor.topology.amps_entries import SYNONYMS, read_conflated_topic
from processor.topology.amps_queues import QUEUE_ELEMENTS, read_queue
from processor.topology.amps_reader import AmpsReader, Child, children
from processor.topology.amps_security import read_security
from processor.topology.amps_views import read_view
from processor.topology.assemble import assemble, check_topic, read_text
from processor.topology.entry_rules import Catalog, Known
from processor.topology.model import (
    Durability,
    Entry,
    PlainTopic,
    SowTopic,
    Topic,
    Topology,
    UnusedOption,
)
from processor.topology.quantities import (
    check_key_path,
    check_topic_pattern,
    parse_choice,
    parse_expiration,
    parse_positive_int,
    parse_recovery_point,
    parse_size,
    unknown_name,
)
from processor.topology.upserts import UpsertKey, UpsertSpec, parse_upsert_key, parse_upsert_topic

_log = logging.getLogger(__name__)

SOW_SECTIONS = ("SOW", "TopicMetaData")
TOPIC_ELEMENTS = ("Topic", "TopicDefinition")
VIEW_ELEMENTS = ("View", "ViewDefinition")
CONFLATED_ELEMENTS = ("ConflatedTopic", "ReplicaDefinition")
#: The SOW entries other than topics: parsed and validated, refused by ``sow serve``.
ENTRY_ELEMENTS = VIEW_ELEMENTS + CONFLATED_ELEMENTS + QUEUE_ELEMENTS
# fmt: off
#: Topic elements kafka-sow implements (``Topic`` = Name, ``Duration`` = Durability).
IMPLEMENTED = (
    "Name", "Topic", "MessageType", "Key", "KeyDomain", "KeyGenerator", "Durability",
    "Duration", "RecoveryPoint", "Expiration", "HashIndex", "Index", "KafkaTopic", "Partitions",
    "History", "Preprocessing", "Enrichment", "Pattern", "UpsertTopic", "UpsertKey",
)
# fmt: on
_ROCKSDB = "kafka-sow stores records in RocksDB, which allocates and grows its files by itself"
#: AMPS Topic options that have no meaning in kafka-sow, and why (``{changelog}``: the
#: topic's changelog topic). Each is validated, logged once and kept as an UnusedOption.
NOT_APPLICABLE: dict[str, str] = {
    "FileName": (
        "no SOW file is written: kafka-sow keeps the topic's state in RocksDB under "
        "SOW_STATE_DIR and in its compacted changelog topic {changelog}"
    ),
    "SlabSize": (
        f"{_ROCKSDB}; the largest message is the Kafka record limit (message.max.bytes, "
        "set with SOW_KAFKA_PROPERTIES)"
    ),
    "RecordSize": f"{_ROCKSDB} (RecordSize is deprecated in AMPS too, for SlabSize)",
    "InitialSlabCount": f"{_ROCKSDB}; there are no slabs to allocate at start",
    "InitialSize": f"{_ROCKSDB} (InitialSize is deprecated in AMPS too, for InitialSlabCount)",
    "IncrementSize": f"{_ROCKSDB} (IncrementSize is deprecated in AMPS too, for SlabSize)",
    "ExpectedKeyCountHint": (
        "RocksDB keeps keys in sorted files and memtables, with no hash table to pre-size "
        "for a number of keys"
    ),
}
_OPTION_VALUES: dict[str, Callable[[str], object]] = {
    "FileName": str,
    "SlabSize": parse_size,
    "RecordSize": parse_size,
    "InitialSlabCount": lambda v: parse_positive_int(v, "InitialSlabCount", 1024),
    "InitialSize": lambda v: parse_positive_int(v, "InitialSize"),
    "IncrementSize": lambda v: parse_positive_int(v, "IncrementSize"),
    "ExpectedKeyCountHint": lambda v: parse_positive_int(v, "ExpectedKeyCountHint"),
}
#: Elements of a TransactionLog Topic (a plain topic when it names no SOW topic).
PLAIN_ELEMENTS = ("Name", "MessageType", "KafkaTopic", "Partitions")
#: Characters that make a TransactionLog Topic Name a pattern rather than a name.
PATTERN_CHARACTERS = frozenset("^$*+?()[]{}|\\")
_REPEATABLE = ("Key", "HashIndex", "Index")
_XML_NAME = {
    "keys": "Key",
    "key_generator": "KeyGenerator",
    "key_domain": "KeyDomain",
    "kafka_topic": "KafkaTopic",
    "hash_indexes": "HashIndex",
    "indexes": "Index",
    "message_type": "MessageType",
    "history": "History",
    "expiration_s": "Expiration",
    "preprocessing": "Preprocessing",
    "pattern": "Pattern",
    "upsert": "UpsertTopic",
    "enrichment": "Enrichment",
}


class _Reader(AmpsReader):
    """Reads the topics of one configuration file."""

    def unused_option(self, tag: str, item: Child, kafka_topic: str) -> UnusedOption:
        """Validate a Topic option kafka-sow does not use, log why, and record it."""
        element, where = item
        value = self.text(element, where)
        self.value(element, where, _OPTION_VALUES[tag])
        changelog = SowTopic(name=kafka_topic).changelog_topic
        reason = NOT_APPLICABLE[tag].format(changelog=changelog)
        _log.info("%s: %s: <%s> does not apply in kafka-sow: %s", self.source, where, tag, reason)
        return UnusedOption(tag, value, reason)

    def typed(self, item: Child, fields: dict[str, Any]) -> str:
        """A topic's MessageType; what it is configured with (its schema, FieldSeparator,
        protobuf Type, composite parts) goes into ``fields``."""
        fmt = self.declared_type(self.text(*item), item[1])
        fields.update((k, v) for k, v in fmt.items() if k != "message_type")
        return str(fmt["message_type"])

    def topic(self, element: ET.Element, where: str) -> SowTopic:
        groups = self.group(element, where, IMPLEMENTED + tuple(NOT_APPLICABLE), _REPEATABLE)
        named = self.synonym(groups, "Name", "Topic")
        durability = self.synonym(groups, "Durability", "Duration")
        if named is None:
            self.fail(
                "the topic has no <Name> (or pre-5.0 <Topic>); every SOW topic needs one", where
            )
        name = self.text(*named[0])
        fields: dict[str, Any] = {}
        message_type = "json"
        if "MessageType" in groups:
            message_type = self.typed(groups["MessageType"][0], fields)
        fields["keys"] = tuple(self.value(*item, check_key_path) for item in groups.get("Key", []))
        fields["indexes"] = tuple(
            self.value(*item, check_key_path) for item in groups.get("Index", [])
        )
        fields["hash_indexes"] = tuple(
            self.hash_index(*item) for item in groups.get("HashIndex", [])
        )
        single: dict[str, tuple[str, Callable[[str], object]]] = {
            "KeyDomain": ("key_domain", str),
            "RecoveryPoint": ("recovery_point", parse_recovery_point),
            "Expiration": ("expiration_s", parse_expiration),
            "KafkaTopic": ("kafka_topic", str),
            "Partitions": ("partitions", lambda v: parse_positive_int(v, "Partitions")),
        }
        for tag, (attribute, parse) in single.items():
            if tag in groups:
                fields[attribute] = self.value(*groups[tag][0], parse)
        if durability is not None:
            fields["durability"] = self.value(
                *durability[0],
                lambda v: Durability(parse_choice(v, ("persistent", "transient"), "Durability")),
            )
        if "History" in groups:
            fields["history"] = self.history(*groups["History"][0])
        if "UpsertTopic" in groups:
            key = UpsertKey.SOW_KEY
            if "UpsertKey" in groups:
                key = self.value(*groups["UpsertKey"][0], parse_upsert_key)
            topic_name = self.value(*groups["UpsertTopic"][0], parse_upsert_topic)
            fields["upsert"] = UpsertSpec(topic_name, key)
        elif "UpsertKey" in groups:
            self.fail("<UpsertKey> needs <UpsertTopic> beside it", groups["UpsertKey"][0][1])
        for tag in ("Preprocessing", "Enrichment"):
            if tag in groups:
                fields[tag.lower()] = self.fields(*groups[tag][0])
        if "KeyGenerator" in groups:
            fields["key_generator"] = self.key_generator(*groups["KeyGenerator"][0])
        if "History" in groups and fields.get("expiration_s") is not None:
            self.fail(
                "<Expiration> must be disabled when <History> is set (as in AMPS)",
                groups["Expiration"][0][1],
            )
        if "Pattern" in groups:
            fields["pattern"] = self.value(*groups["Pattern"][0], check_topic_pattern)
            for tag in ("History", "Preprocessing", "Enrichment"):
                if tag in groups:
                    self.fail(
                        f"a <Pattern> topic cannot have <{tag}> (as in AMPS)", groups[tag][0][1]
                    )
        fields["unused_options"] = tuple(
            self.unused_option(tag, groups[tag][0], fields.get("kafka_topic") or name)
            for tag in NOT_APPLICABLE
            if tag in groups
        )
        topic = SowTopic(name=name, message_type=message_type, **fields)
        problem = check_topic(topic, lambda attribute: _XML_NAME[attribute])
        if problem is not None:
            tag = _XML_NAME[problem[0]]
            self.fail(problem[1], groups[tag][0][1] if tag in groups else named[0][1])
        return topic

    def plain_topic(self, element: ET.Element, where: str) -> PlainTopic | str:
        """The plain topic a TransactionLog Topic declares, or its name when it declares
        none (a pattern, or a SOW topic's name: the caller decides)."""
        groups = self.group(element, where, PLAIN_ELEMENTS, repeatable=())
        if "Name" not in groups:
            self.fail("the topic has no <Name>; every TransactionLog topic needs one", where)
        name = self.text(*groups["Name"][0])
        if any(c in PATTERN_CHARACTERS for c in name):
            _log.warning(
                "%s: %s: <Name> %r is a pattern; kafka-sow needs each topic without a SOW by "
                "name, so it is ignored",
                self.source,
                where,
                name,
            )
            return name
        fields: dict[str, Any] = {}
        if "MessageType" in groups:
            fields["message_type"] = self.typed(groups["MessageType"][0], fields)
        if "KafkaTopic" in groups:
            fields["kafka_topic"] = self.text(*groups["KafkaTopic"][0])
        if "Partitions" in groups:
            fields["partitions"] = self.value(
                *groups["Partitions"][0], lambda v: parse_positive_int(v, "Partitions")
            )
        topic = PlainTopic(name=name, **fields)
        problem = check_topic(topic, lambda attribute: _XML_NAME.get(attribute, attribute))
        if problem is not None:
            tag = _XML_NAME.get(problem[0], problem[0])
            self.fail(problem[1], groups[tag][0][1] if tag in groups else groups["Name"][0][1])
        return topic


def load_amps_config(
    path: str | Path, *, environ: Mapping[str, str] | None = None, alone: bool = True
) -> Topology:
    """Load the SOW topics (and views, conflated topics, queues, actions) of an AMPS
    configuration file (``alone``: not one of a directory's, whose actions are checked
    once merged)."""
    return parse_amps_config(read_text(path), str(path), environ=environ, alone=alone)


def _root(text: str, source: str) -> ET.Element:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = exc.position
        problem = re.sub(r": line \d+, column \d+$", "", str(exc))
        raise TopologyError(
            f"XML syntax error: {problem}", source=source, where=f"line {line}, column {column + 1}"
        ) from None
    if root.tag != "AMPSConfig":
        raise TopologyError(
            f"the root element is <{root.tag}>; an AMPS configuration has <AMPSConfig>",
            source=source,
            where=root.tag,
        )
    return root


def parse_amps_config(
    text: str, source: str, *, environ: Mapping[str, str] | None = None, alone: bool = True
) -> Topology:
    """Parse AMPS configuration ``text``; ``source`` names the file and anchors relative paths.

    ``environ`` replaces ``os.environ`` for ``${VAR}`` expansion (tests). Topics are read
    first (the SOW section's, then the TransactionLog's plain topics), then the other SOW
    entries in document order, so that each can check what it reads.
    """
    root = _root(text, source)
    reader = _Reader(root, source, os.environ if environ is None else environ)
    sections = [(s, w) for s, w in children(root, root.tag) if s.tag in SOW_SECTIONS]
    if not sections:
        reader.fail("no <SOW> (or <TopicMetaData>) section, so no SOW topics are defined", root.tag)
    topics: list[tuple[Topic, str, str]] = []
    catalog = Catalog()
    pending: list[tuple[int, ET.Element, str]] = []
    order = 0
    for section, section_where in sections:
        allowed = TOPIC_ELEMENTS + ENTRY_ELEMENTS
        for child, where in children(section, section_where, numbered=allowed):
            order += 1
            if child.tag in TOPIC_ELEMENTS:
                topic = reader.topic(child, where)
                topics.append((topic, source, where))
                pattern = isinstance(topic, SowTopic) and topic.pattern is not None
                catalog.add(Known.of(topic, "Topic", where, order, pattern=pattern))
            elif child.tag in ENTRY_ELEMENTS:
                pending.append((order, child, where))
            else:
                reader.fail(
                    unknown_name("element", child.tag, allowed, parent=f"<{section.tag}>"), where
                )
    names = {topic.name for topic, _, _ in topics}
    for log_section, log_where in children(root, root.tag):
        if log_section.tag != "TransactionLog":
            continue
        for child, where in children(log_section, log_where, numbered=("Topic",)):
            if child.tag != "Topic":
                continue  # journal settings: nothing for kafka-sow
            plain = reader.plain_topic(child, where)
            if isinstance(plain, PlainTopic) and plain.name not in names:
                topics.append((plain, source, where))
                catalog.add(Known.of(plain, "TransactionLog Topic", where, 0))
    entries: list[Entry] = []
    for position, element, where in pending:
        entry: Entry
        if element.tag in VIEW_ELEMENTS:
            entry = read_view(reader, element, where, position, catalog)
        elif element.tag in CONFLATED_ELEMENTS:
            entry = read_conflated_topic(reader, element, where, position, catalog)
        else:
            entry = read_queue(reader, element, where, catalog)
        entries.append(entry)
        catalog.add(Known.of(entry, SYNONYMS.get(element.tag, element.tag), where, position))
    security = read_security(reader, root)
    topology = assemble(topics, (source,), entries, read_actions(reader, root), alone)
    return topology if security is None else dataclasses.replace(topology, security=security)
