"""The settings as documentation: the markdown table of docs/operations.md and the Helm
chart's values schema, both derived from :class:`processor.config.Settings`."""

from __future__ import annotations

from typing import Any

from processor.config import specs_by_name


def settings_table() -> str:
    """The settings as the markdown table of docs/operations.md."""
    rows = ["| setting | environment variable | default | meaning |", "| --- | --- | --- | --- |"]
    rows += [
        f"| {name} | {spec.env} | {spec.default_text} | {spec.meaning} |"
        for name, spec in specs_by_name().items()
    ]
    return "\n".join(rows) + "\n"


def helm_schema() -> dict[str, dict[str, Any]]:
    """The JSON schema of each chart value that sets a setting, by its dotted path."""
    out: dict[str, dict[str, Any]] = {}
    for spec in specs_by_name().values():
        if not spec.helm:
            continue
        if spec.kind == "choice":
            out[spec.helm] = {"type": "string", "enum": list(spec.choices)}
        elif spec.kind == "methods":
            items = {"type": "string", "enum": list(spec.choices)}
            out[spec.helm] = {"type": "array", "items": items, "uniqueItems": True}
        elif spec.kind == "whole":
            least, most = spec.bounds
            out[spec.helm] = {"type": "integer", "minimum": least}
            if most is not None:
                out[spec.helm]["maximum"] = most
        else:
            out[spec.helm] = {"type": "string", "minLength": 1}
    return out
