"""An AMPS configuration's top-level ``<Authentication>`` and ``<Entitlement>``: the logon
and the entitlements file of the topology (docs/topology.md, "Security")::

    <AMPSConfig>
      <Authentication>
        <Module>kafka-sow-authentication</Module>
        <Options>
          <Methods>token,password</Methods>     <!-- SOW_AUTH's methods -->
          <UsersFile>users.txt</UsersFile>
          <JwksFile>issuer-keys.json</JwksFile> <!-- or <JwtKey>issuer.pem</JwtKey> -->
          <JwtAudience>kafka-sow</JwtAudience>
        </Options>
      </Authentication>
      <Entitlement>
        <Module>kafka-sow-entitlements</Module>
        <Options><ResourceURI>entitlements.yaml</ResourceURI></Options>
      </Entitlement>
      ...

As in AMPS, each element has a ``<Module>`` and ``<Options>``; the module is one kafka-sow
provides (:data:`MODULES`), or the ``Name`` of an ``AMPSConfig/Modules/Module`` whose
``Library`` is one. AMPS's default modules are accepted without options and change
nothing (``amps-default-authentication-module`` lets anyone in: no logon;
``amps-default-entitlement-module`` gives every right). Paths are relative to the
configuration file and must exist. An ``<Authentication>`` or ``<Entitlement>`` inside a
``Transport`` is refused: kafka-sow serves one gRPC endpoint, so they belong at the top
level. Every problem is a :class:`~processor.errors.TopologyError` naming the element and
what is accepted.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from processor.topology.amps_reader import AmpsReader, Child, children
from processor.topology.quantities import unknown_name
from processor.topology.security_spec import SecuritySpec, existing_file, parse_methods

ENTITLEMENTS_MODULE = "kafka-sow-entitlements"
AUTHENTICATION_MODULE = "kafka-sow-authentication"
#: Element -> the modules it accepts -> their options (option -> SecuritySpec field).
MODULES: dict[str, dict[str, dict[str, str]]] = {
    "Authentication": {
        AUTHENTICATION_MODULE: {
            "Methods": "auth",
            "UsersFile": "users_file",
            "JwtKey": "jwt_key",
            "JwksFile": "jwks_file",
            "JwtAudience": "jwt_audience",
            "JwtIssuer": "jwt_issuer",
            "JwtRolesClaim": "jwt_roles_claim",
        },
        "amps-default-authentication-module": {},
    },
    "Entitlement": {
        ENTITLEMENTS_MODULE: {"ResourceURI": "entitlements"},
        "amps-default-entitlement-module": {},
    },
}
#: The option each kafka-sow module needs.
_REQUIRED = {AUTHENTICATION_MODULE: "Methods", ENTITLEMENTS_MODULE: "ResourceURI"}
_FILES = {
    "entitlements": "the entitlements file",
    "users_file": "the users file",
    "jwt_key": "the token issuer's key file",
    "jwks_file": "the token issuer's JWKS file",
}


def read_security(reader: AmpsReader, root: ET.Element) -> SecuritySpec | None:
    """The top-level ``<Authentication>`` and ``<Entitlement>`` of ``root`` (None: neither)."""
    found: dict[str, Child] = {}
    for element, where in children(root, root.tag):
        if element.tag in MODULES:
            if element.tag in found:
                reader.fail(
                    f"<{element.tag}> is given twice; AMPSConfig takes one (kafka-sow serves "
                    "one gRPC endpoint)",
                    where,
                )
            found[element.tag] = (element, where)
        elif element.tag == "Transports":
            _refuse_per_transport(reader, element, where)
    if not found:
        return None
    fields: dict[str, object] = {}
    for tag, (element, where) in found.items():
        fields.update(_module(reader, tag, element, where))
    places = " and ".join(where for _, where in found.values())
    return SecuritySpec(**fields, source=reader.source, where=places)  # type: ignore[arg-type]


def _refuse_per_transport(reader: AmpsReader, transports: ET.Element, where: str) -> None:
    for transport, transport_where in children(transports, where):
        for child, child_where in children(transport, transport_where):
            if child.tag in MODULES:
                reader.fail(
                    f"kafka-sow serves one gRPC endpoint, whose logon and entitlements are "
                    f"the instance's: move <{child.tag}> to the top level of <AMPSConfig>",
                    child_where,
                )


def _module(reader: AmpsReader, tag: str, element: ET.Element, where: str) -> dict[str, object]:
    """The fields one element sets, by its module and options."""
    accepted = MODULES[tag]
    groups = reader.group(element, where, ("Module", "Options"), repeatable=())
    if "Module" not in groups:
        reader.fail(f"<{tag}> needs <Module>; accepted: {', '.join(accepted)}", where)
    module_el, module_where = groups["Module"][0]
    module = reader.text(module_el, module_where)
    if module in reader.modules:
        declared, declared_where = reader.modules[module]
        library = declared.find("Library")
        if library is None:
            reader.fail(
                f"the Module has no <Library>: one of {', '.join(accepted)}", declared_where
            )
        module_where = f"{declared_where}/Library"
        module = reader.text(library, module_where)
    if module not in accepted:
        reader.fail(
            unknown_name(f"{tag} module", module, accepted)
            + " (or the Name of an AMPSConfig/Modules/Module whose Library is one)",
            module_where,
        )
    options = accepted[module]
    given: dict[str, Child] = {}
    for options_el, options_where in groups.get("Options", []):
        for option, option_where in children(options_el, options_where):
            if option.tag not in options:
                allowed = ", ".join(options) or "none"
                reader.fail(
                    f"unknown option <{option.tag}> of {module}; allowed: {allowed}",
                    option_where,
                )
            if option.tag in given:
                reader.fail(f"option <{option.tag}> is given twice", option_where)
            given[option.tag] = (option, option_where)
    required = _REQUIRED.get(module)
    if required is not None and required not in given:
        reader.fail(f"{module} needs the option <{required}>", where)
    fields: dict[str, object] = {}
    for tag_name, (option_el, option_where) in given.items():
        name = options[tag_name]
        if name == "auth":
            fields[name] = reader.value(option_el, option_where, parse_methods)
        elif name in _FILES:
            text = reader.text(option_el, option_where)
            try:
                fields[name] = existing_file(reader.base, text, _FILES[name])
            except ValueError as exc:
                reader.fail(str(exc), option_where)
        else:
            fields[name] = reader.text(option_el, option_where)
    return fields
