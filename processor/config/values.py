"""How a setting is given (:class:`Spec`), how each kind of setting reads its value from
text (``READ``), and the Kafka properties' form."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processor.errors import ConfigurationError


def parse_kafka_properties(
    text: str, setting: str = "kafka_properties (SOW_KAFKA_PROPERTIES)", client: str = "librdkafka"
) -> dict[str, str]:
    """``key=value;key=value`` (blank entries ignored) as a map, or a ConfigurationError
    naming the entry that is not ``key=value`` (in ``setting``). Values may contain ``=``;
    keys are property names of ``client`` (letters, digits, ``.`` and ``_``)."""
    properties: dict[str, str] = {}
    for position, entry in enumerate(text.split(";"), start=1):
        if not entry.strip():
            continue
        key, equals, value = entry.partition("=")
        key = key.strip()
        if not equals or not key or not all(c.isalnum() or c in "._" for c in key):
            raise ConfigurationError(
                f"{setting} entry {position} {entry.strip()!r} is not key=value; write "
                f"{client} properties as 'key=value;key=value', e.g. "
                "'security.protocol=SASL_SSL;sasl.mechanism=PLAIN'"
            )
        properties[key] = value.strip()
    return properties


def _choice(name: str, spec: Any, value: Any) -> str:
    """``value`` if it is one of the setting's choices, or a ConfigurationError naming
    the setting, its environment variable and the choices."""
    text = str(value).strip().lower()
    if text not in spec.choices:
        raise ConfigurationError(
            f"{name} ({spec.env}) must be one of {', '.join(spec.choices)}, got {value!r}"
        )
    return text


def _whole(name: str, spec: Any, value: Any) -> int:
    """``value`` as a whole number within the setting's bounds, or a ConfigurationError."""
    least, most = spec.bounds
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"{name} must be a whole number of {spec.unit}, got {value!r}"
        ) from None
    if number < least or (most is not None and number > most):
        bound = f"at least {least}" if most is None else f"between {least} and {most}"
        raise ConfigurationError(f"{name} must be {bound} {spec.unit}, got {value!r}")
    return number


def _methods(name: str, spec: Any, value: Any) -> str:
    """A comma list of the setting's choices, each once, as ``a,b`` (empty: none)."""
    given = [m.strip().lower() for m in str(value).split(",") if m.strip()]
    wrong = [m for m in given if m not in spec.choices]
    if wrong or len(set(given)) != len(given):
        raise ConfigurationError(
            f"{name} ({spec.env}) must be a comma list of {', '.join(spec.choices)}, each "
            f"once, got {value!r}"
        )
    return ",".join(given)


def _properties(name: str, spec: Any, value: Any) -> str:
    parse_kafka_properties(str(value), f"{name} ({spec.env})")  # refuse a malformed value now
    return str(value)


#: How each kind of setting reads its value.
READ: dict[str, Callable[[str, Any, Any], Any]] = {
    "text": lambda _, __, value: str(value),
    "path": lambda _, __, value: Path(value),
    "flag": lambda _, __, value: str(value).strip().lower() in ("1", "true", "yes"),
    "whole": _whole,
    "choice": _choice,
    "properties": _properties,
    "methods": _methods,
}


@dataclass(frozen=True, slots=True)
class Spec:
    """How one setting is given: its environment variable, what it means (for the docs
    table), its default as the docs say it, how its text is read (``kind``: text, path,
    whole, flag, choice or properties; ``choices`` and whole-number ``bounds`` and
    ``unit``), and the Helm value that sets it ("": the chart does not)."""

    env: str
    meaning: str
    default_text: str
    kind: str = "text"
    choices: tuple[str, ...] = ()
    bounds: tuple[int, int | None] = (1, None)
    unit: str = ""
    helm: str = ""


def setting(default: Any, spec: Spec) -> Any:
    """A Settings field: its default, and its :class:`Spec` in the field's metadata."""
    return field(default=default, metadata={"spec": spec})
