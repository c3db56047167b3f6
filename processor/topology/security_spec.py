"""The security a topology names beside its topics: its entitlements file and its logon.

Both topology formats may say it (docs/topology.md, "Security"): the YAML format's
top-level ``security:`` section (:mod:`processor.topology.yaml_security`), an AMPS
configuration's top-level ``<Authentication>`` and ``<Entitlement>`` elements
(:mod:`processor.topology.amps_security`). Each field has the name of the setting it
stands for (:class:`~processor.config.Settings`: ``SOW_ENTITLEMENTS``, ``SOW_AUTH``...);
the loaders resolve paths against the topology file and check that the files exist.

**The settings win**: :meth:`SecuritySpec.under` fills in only the settings left at their
default, so an operator can always replace what the topology says (a users file mounted
elsewhere, token logon turned on) without editing it. The entitlements file a topology
names is reloaded when it changes, as one ``SOW_ENTITLEMENTS`` names; there is no inline
form, since definitions inside the topology could not be reloaded without a restart.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from processor.config import AUTH_METHODS, Settings

#: The fields a topology may set, in the order ``sow check-config`` lists them.
FIELDS = (
    "entitlements",
    "auth",
    "users_file",
    "jwt_key",
    "jwks_file",
    "jwt_audience",
    "jwt_issuer",
    "jwt_roles_claim",
)
#: The fields that name files (resolved against the topology file, which must exist).
PATH_FIELDS = ("entitlements", "users_file", "jwt_key", "jwks_file")


@dataclass(frozen=True, slots=True)
class SecuritySpec:
    """What one topology file asks for; a field left None is not set by the topology.

    ``auth`` is the logon methods (``certificate``, ``token``, ``password``; the
    setting's comma list as a tuple). ``source`` and ``where`` name the file and the
    element or key that says it, for messages."""

    entitlements: Path | None = None
    auth: tuple[str, ...] | None = None
    users_file: Path | None = None
    jwt_key: Path | None = None
    jwks_file: Path | None = None
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    jwt_roles_claim: str | None = None
    source: str = ""
    where: str = ""

    def given(self) -> dict[str, object]:
        """The fields the topology sets, by setting name."""
        return {name: getattr(self, name) for name in FIELDS if getattr(self, name) is not None}

    def under(self, settings: Settings) -> tuple[Settings, list[str]]:
        """``settings`` with every security setting they leave at its default taken from
        this topology, and one line each saying what was taken and what the settings
        override (for ``sow check-config``). A setting given (not at its default) wins."""
        defaults = {f.name: f.default for f in dataclasses.fields(Settings)}
        env = Settings.ENVIRONMENT
        taken: dict[str, object] = {}
        overridden = []
        for name, value in self.given().items():
            if getattr(settings, name) != defaults[name]:
                overridden.append(f"{env[name]} overrides its {name}")
                continue
            taken[name] = ",".join(value) if isinstance(value, tuple) else value
        lines = []
        if taken:
            lines.append(f"topology security ({self.source}: {self.where}): {', '.join(taken)}")
        if overridden:
            lines.append(f"topology security ({self.source}): {'; '.join(overridden)}")
        return dataclasses.replace(settings, **taken), lines  # type: ignore[arg-type]

    def describe(self) -> dict[str, object]:
        """The fields as JSON values (paths as text), for ``sow check-config``."""
        out: dict[str, object] = {}
        for name, value in self.given().items():
            out[name] = list(value) if isinstance(value, tuple) else str(value)
        return out


def parse_methods(given: str | list[str]) -> tuple[str, ...]:
    """Logon methods from a comma list (or a list of names); ValueError naming the
    methods kafka-sow knows when one is not among them."""
    items = given.split(",") if isinstance(given, str) else given
    methods = tuple(dict.fromkeys(str(m).strip().lower() for m in items if str(m).strip()))
    wrong = [m for m in methods if m not in AUTH_METHODS]
    if wrong:
        raise ValueError(
            f"{', '.join(wrong)} is not a logon method; allowed: {', '.join(AUTH_METHODS)} "
            "(a comma list)"
        )
    if not methods:
        raise ValueError(f"no logon method given; allowed: {', '.join(AUTH_METHODS)}")
    return methods


def existing_file(base: Path, written: str, what: str) -> Path:
    """``written`` resolved against the topology file's directory ``base`` (a ``file:``
    URI taken as its path); ValueError when it is not a file."""
    text = written.strip()
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif text.startswith("file:"):
        text = text[len("file:") :]
    if not text:
        raise ValueError(f"expected the path of {what}, relative to this file")
    path = (base / text).resolve()
    if not path.is_file():
        raise ValueError(
            f"{what} {str(path)!r} does not exist; give a path relative to the directory of "
            "this file"
        )
    return path
