"""The records of a Pattern topic in the processor (AMPS regular-expression SOW topics).

A Pattern topic stores every topic its pattern matches in one store and one changelog.
Each record names the topic it was published to in the header
:data:`~processor.changelog.commands.TOPIC_HEADER` (the gateway and the direct publisher
add it); its SowKey is made from the Key fields with that topic's name as the domain, so
two topics never share a record, and its changelog envelope names that topic, which is
what queries and subscriptions of the topic select (``TOPIC_NAME()``).

A record without the header, or naming a topic the pattern does not match, is the
record's failure (MessageError): it is dead-lettered and the processor goes on.
"""

from __future__ import annotations

from processor.changelog import EnvelopeWriter
from processor.changelog.commands import TOPIC_HEADER
from processor.errors import MessageError
from processor.expr.regex import compile_regex
from processor.keys import FieldKeyGenerator
from processor.log import Headers
from processor.topology.model import SowTopic

#: Topics remembered per Pattern topic partition (their key functions and writers).
MAX_TOPICS = 4096


class PatternRecords:
    """One Pattern topic partition's view of its records' topics; not thread-safe (the
    processor's loop owns it)."""

    __slots__ = ("_keys", "_pattern", "_writers", "partition", "topic")

    def __init__(self, topic: SowTopic, partition: int) -> None:
        assert topic.pattern is not None
        self.topic = topic
        self.partition = partition
        self._pattern = compile_regex(topic.pattern, what="Pattern", backtracking=False)
        self._keys: dict[str, FieldKeyGenerator] = {}
        self._writers: dict[tuple[str, str], EnvelopeWriter] = {}

    def topic_of(self, headers: Headers | None) -> str:
        """The topic a record was published to (MessageError when it names none that
        the pattern matches)."""
        raw = next((value for name, value in headers or () if name == TOPIC_HEADER), None)
        if not raw:
            raise MessageError(
                f"a record of Pattern topic {self.topic.name} needs header {TOPIC_HEADER} "
                "naming the topic it was published to (publish through kafka-sow's gateway "
                "or direct publisher, or set the header)"
            )
        name = raw.decode(errors="replace")
        if not self._pattern.search(name):
            raise MessageError(
                f"header {TOPIC_HEADER} names {name!r}, which Pattern topic "
                f"{self.topic.name} ({self.topic.pattern!r}) does not store"
            )
        return name

    def key_function(self, name: str) -> FieldKeyGenerator:
        """The SowKey generator of the topic ``name``'s records."""
        function = self._keys.get(name)
        if function is None:
            if len(self._keys) >= MAX_TOPICS:
                self._keys.clear()
            function = self._keys[name] = FieldKeyGenerator(name, self.topic.keys)
        return function

    def writer(self, name: str, log_topic: str) -> EnvelopeWriter:
        """The envelope writer of the topic ``name``'s records read from ``log_topic``."""
        writer = self._writers.get((name, log_topic))
        if writer is None:
            if len(self._writers) >= MAX_TOPICS:
                self._writers.clear()
            writer = EnvelopeWriter(name, self.topic.message_type, log_topic, self.partition)
            self._writers[(name, log_topic)] = writer
        return writer
