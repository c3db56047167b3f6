"""The YAML topology's ``security:`` section (docs/topology.md, "Security")::

    security:
      entitlements: entitlements.yaml   # the entitlements file, relative to this file
      auth: [token, password]           # or "token,password": SOW_AUTH's methods
      users_file: users.txt
      jwks_file: issuer-keys.json       # or jwt_key: issuer.pem
      jwt_audience: kafka-sow
      jwt_issuer: https://login.example
      jwt_roles_claim: roles

Every key is optional and has the name of the setting it stands for; a setting given
wins (:class:`~processor.topology.security_spec.SecuritySpec`). Paths are resolved
against the topology file's directory and must exist. ``entitlements`` is a path only:
the definitions stay in their own file, which is reloaded when it changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from processor.errors import TopologyError
from processor.topology.quantities import unknown_name
from processor.topology.security_spec import (
    FIELDS,
    PATH_FIELDS,
    SecuritySpec,
    existing_file,
    parse_methods,
)
from processor.topology.yaml_fields import describe

_WHAT = {
    "entitlements": "the entitlements file",
    "users_file": "the users file",
    "jwt_key": "the token issuer's key file",
    "jwks_file": "the token issuer's JWKS file",
}


def read_security(raw: object, source: str, base: Path) -> SecuritySpec:
    """The ``security`` section ``raw`` of the file ``source`` (in directory ``base``)."""
    if not isinstance(raw, dict):
        raise TopologyError(
            f"expected a mapping of {', '.join(FIELDS)}, got {describe(raw)}",
            source=source,
            where="security",
        )
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"security.{key}"
        if key not in FIELDS:
            raise TopologyError(
                unknown_name("key", str(key), FIELDS, parent="security"),
                source=source,
                where=where,
            )
        fields[key] = _value(str(key), value, source, where, base)
    return SecuritySpec(**fields, source=source, where="security")


def _value(key: str, value: object, source: str, where: str, base: Path) -> object:
    if key == "entitlements" and isinstance(value, dict):
        raise TopologyError(
            "expected the path of the entitlements file (roles and principals), relative to "
            "this file; definitions are not written inline, so that they can be reloaded "
            "without a restart when their file changes",
            source=source,
            where=where,
        )
    if key == "auth":
        if not (isinstance(value, str) or (isinstance(value, list) and value)):
            raise TopologyError(
                f"expected logon methods (a list or a comma list), got {describe(value)}",
                source=source,
                where=where,
            )
        try:
            return parse_methods(value)
        except ValueError as exc:
            raise TopologyError(str(exc), source=source, where=where) from None
    if not isinstance(value, str) or not value.strip():
        raise TopologyError(
            f"expected a non-empty string, got {describe(value)}", source=source, where=where
        )
    if key in PATH_FIELDS:
        try:
            return existing_file(base, value, _WHAT[key])
        except ValueError as exc:
            raise TopologyError(str(exc), source=source, where=where) from None
    return value.strip()
