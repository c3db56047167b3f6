"""Setting values in text form that several settings' readers share."""

from __future__ import annotations

from processor.errors import ConfigurationError


def parse_kafka_properties(text: str) -> dict[str, str]:
    """``key=value;key=value`` (blank entries ignored) as a map, or a ConfigurationError
    naming the entry that is not ``key=value``. Values may contain ``=``; keys are
    librdkafka property names (letters, digits, ``.`` and ``_``)."""
    properties: dict[str, str] = {}
    for position, entry in enumerate(text.split(";"), start=1):
        if not entry.strip():
            continue
        key, equals, value = entry.partition("=")
        key = key.strip()
        if not equals or not key or not all(c.isalnum() or c in "._" for c in key):
            raise ConfigurationError(
                f"kafka_properties (SOW_KAFKA_PROPERTIES) entry {position} {entry.strip()!r} "
                "is not key=value; write librdkafka properties as "
                "'key=value;key=value', e.g. 'security.protocol=SASL_SSL;sasl.mechanism=PLAIN'"
            )
        properties[key] = value.strip()
    return properties
