"""The security a topology names beside its topics: the YAML ``security:`` section, the
AMPS XML ``<Authentication>``/``<Entitlement>`` elements, and the settings winning over
both (processor/topology/security_spec.py, yaml_security.py, amps_security.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from processor.cli.check import cmd_check_config
from processor.config import Settings
from processor.errors import ConfigurationError, TopologyError
from processor.security.entitlements import Entitlements
from processor.server.auth import server_security
from processor.topology import load_topology
from processor.topology.security_spec import SecuritySpec

ENTITLEMENTS = """\
roles:
  traders: {logon: true, read: [{topic: orders}]}
"""

YAML = """\
topics:
  - {name: orders, key: /id}
security:
  entitlements: secrets/entitlements.yaml
  auth: [password]
  users_file: secrets/users
"""

XML = """\
<AMPSConfig>
  <Modules>
    <Module><Name>entitlements</Name><Library>kafka-sow-entitlements</Library></Module>
  </Modules>
  <Authentication>
    <Module>kafka-sow-authentication</Module>
    <Options>
      <Methods>token, password</Methods>
      <UsersFile>secrets/users</UsersFile>
      <JwtKey>secrets/issuer.pem</JwtKey>
      <JwtAudience>kafka-sow</JwtAudience>
    </Options>
  </Authentication>
  <Entitlement>
    <Module>entitlements</Module>
    <Options><ResourceURI>secrets/entitlements.yaml</ResourceURI></Options>
  </Entitlement>
  <SOW><Topic><Name>orders</Name><Key>/id</Key></Topic></SOW>
</AMPSConfig>
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A directory with the files a topology's security names."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "entitlements.yaml").write_text(ENTITLEMENTS)
    (secrets / "users").write_text("")
    (secrets / "issuer.pem").write_text("not read by the loader")
    return tmp_path


def load(home: Path, name: str, text: str) -> SecuritySpec:
    path = home / name
    path.write_text(text)
    spec = load_topology(path).security
    assert spec is not None
    return spec


def refused(home: Path, name: str, text: str) -> str:
    path = home / name
    path.write_text(text)
    with pytest.raises(TopologyError) as caught:
        load_topology(path)
    return str(caught.value)


def test_a_yaml_topology_names_its_entitlements_file_relative_to_itself(home: Path) -> None:
    spec = load(home, "orders.yaml", YAML)
    assert spec.entitlements == home / "secrets" / "entitlements.yaml"
    assert spec.auth == ("password",)
    assert spec.users_file == home / "secrets" / "users"
    assert spec.jwt_key is None


def test_a_topology_without_security_names_none(home: Path) -> None:
    (home / "plain.yaml").write_text("topics: [{name: orders, key: /id}]\n")
    assert load_topology(home / "plain.yaml").security is None


def test_an_amps_configuration_names_its_entitlements_file_in_resource_uri(home: Path) -> None:
    spec = load(home, "amps.xml", XML)
    assert spec.entitlements == home / "secrets" / "entitlements.yaml"
    assert spec.auth == ("token", "password")
    assert spec.users_file == home / "secrets" / "users"
    assert spec.jwt_key == home / "secrets" / "issuer.pem"
    assert spec.jwt_audience == "kafka-sow"


def test_amps_default_modules_change_nothing(home: Path) -> None:
    text = XML.split("<Authentication>", maxsplit=1)[0] + (
        "<Authentication><Module>amps-default-authentication-module</Module></Authentication>"
        "<Entitlement><Module>amps-default-entitlement-module</Module></Entitlement>"
        "<SOW><Topic><Name>orders</Name><Key>/id</Key></Topic></SOW></AMPSConfig>"
    )
    spec = load(home, "amps.xml", text)
    assert spec.given() == {}


@pytest.mark.parametrize(
    ("old", "new", "fragments"),
    [
        (
            "<Module>kafka-sow-authentication</Module>",
            "<Module>ldap</Module>",
            [
                "AMPSConfig/Authentication/Module",
                "unknown Authentication module 'ldap'",
                "kafka-sow-authentication",
            ],
        ),
        (
            "<Library>kafka-sow-entitlements</Library>",
            "<Library>libamps_simple_access_entitlement.so</Library>",
            [
                "AMPSConfig/Modules/Module/Library",
                "unknown Entitlement module",
                "amps-default-entitlement-module, kafka-sow-entitlements",
            ],
        ),
        (
            "<ResourceURI>secrets/entitlements.yaml</ResourceURI>",
            "<AllowedTopics>.*</AllowedTopics>",
            [
                "AMPSConfig/Entitlement/Options/AllowedTopics",
                "unknown option <AllowedTopics> of kafka-sow-entitlements; allowed: ResourceURI",
            ],
        ),
        (
            "<ResourceURI>secrets/entitlements.yaml</ResourceURI>",
            "<ResourceURI>secrets/missing.yaml</ResourceURI>",
            ["AMPSConfig/Entitlement/Options/ResourceURI", "the entitlements file", "missing"],
        ),
        (
            "<Methods>token, password</Methods>",
            "<Methods>kerberos</Methods>",
            [
                "AMPSConfig/Authentication/Options/Methods",
                "kerberos is not a logon method; allowed: certificate, token, password",
            ],
        ),
        (
            "<Methods>token, password</Methods>",
            "",
            ["AMPSConfig/Authentication", "kafka-sow-authentication needs the option <Methods>"],
        ),
        (
            "<UsersFile>",
            "<Users>x</Users><UsersFile>",
            ["AMPSConfig/Authentication/Options/Users", "unknown option <Users>", "UsersFile"],
        ),
        (
            "<SOW>",
            "<Transports><Transport><Entitlement/></Transport></Transports><SOW>",
            [
                "AMPSConfig/Transports/Transport/Entitlement",
                "move <Entitlement> to the top level of <AMPSConfig>",
            ],
        ),
        (
            "<SOW>",
            "<Entitlement><Module>amps-default-entitlement-module</Module></Entitlement><SOW>",
            ["AMPSConfig/Entitlement[2]", "<Entitlement> is given twice"],
        ),
    ],
)
def test_amps_security_errors_name_the_element_and_what_is_accepted(
    home: Path, old: str, new: str, fragments: list[str]
) -> None:
    assert old in XML
    message = refused(home, "amps.xml", XML.replace(old, new, 1))
    assert message.startswith(str(home / "amps.xml"))
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    ("section", "fragments"),
    [
        ("{entitlements: nowhere.yaml}", ["security.entitlements", "nowhere.yaml", "not exist"]),
        (
            "{entitlements: {roles: {}}}",
            ["security.entitlements", "not written inline", "reloaded without a restart"],
        ),
        ("{auth: [password, kerberos]}", ["security.auth", "kerberos is not a logon method"]),
        ("{entitelments: e.yaml}", ["security.entitelments", "did you mean 'entitlements'"]),
        ("{jwt_audience: 3}", ["security.jwt_audience", "expected a non-empty string"]),
        ("[entitlements]", ["security", "expected a mapping of entitlements, auth"]),
    ],
)
def test_yaml_security_errors_name_the_key(home: Path, section: str, fragments: list[str]) -> None:
    message = refused(home, "t.yaml", f"topics: [{{name: a, key: /id}}]\nsecurity: {section}\n")
    for fragment in fragments:
        assert fragment in message


def test_security_named_by_two_files_of_a_directory_is_refused(home: Path) -> None:
    (home / "a.yaml").write_text("topics: [{name: a, key: /id}]\n" + YAML.split("\n", 2)[2])
    (home / "b.yaml").write_text(YAML)
    with pytest.raises(TopologyError, match=r"security is named here and in .*a\.yaml"):
        load_topology(home)


def test_one_file_of_a_directory_names_the_security_of_all(home: Path) -> None:
    (home / "a.yaml").write_text(YAML)
    (home / "b.yaml").write_text("topics: [{name: b, key: /id}]\n")
    topology = load_topology(home)
    assert topology.security is not None
    assert topology.security.users_file == home / "secrets" / "users"


def test_the_topology_fills_in_the_settings_and_the_settings_win(home: Path) -> None:
    spec = load(home, "orders.yaml", YAML)
    other = home / "other.yaml"
    other.write_text(ENTITLEMENTS)
    settings, lines = spec.under(Settings(entitlements=other))
    assert settings.entitlements == other
    assert settings.auth == "password"
    assert settings.users_file == home / "secrets" / "users"
    assert lines == [
        f"topology security ({home / 'orders.yaml'}: security): auth, users_file",
        f"topology security ({home / 'orders.yaml'}): SOW_ENTITLEMENTS overrides its entitlements",
    ]


def test_server_security_loads_the_entitlements_the_topology_names(home: Path) -> None:
    path = home / "orders.yaml"
    path.write_text(YAML)
    security = server_security(Settings(), topology=load_topology(path))
    assert isinstance(security.rights, Entitlements)
    assert security.rights.path == home / "secrets" / "entitlements.yaml"
    assert security.contexts is not None
    assert "gRPC logon: password" in security.summary


def test_entitlements_without_a_logon_anywhere_are_refused_naming_the_topology(
    home: Path,
) -> None:
    path = home / "orders.yaml"
    path.write_text(
        "topics: [{name: a, key: /id}]\nsecurity: {entitlements: secrets/entitlements.yaml}\n"
    )
    with pytest.raises(ConfigurationError, match="the topology names entitlements"):
        server_security(Settings(), topology=load_topology(path))


def test_check_config_lists_the_security_the_topology_asks_for(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in Settings.ENVIRONMENT.values():
        monkeypatch.delenv(name, raising=False)
    path = home / "orders.yaml"
    path.write_text(YAML)
    assert cmd_check_config(argparse.Namespace(paths=[path])) == 0
    out, err = capsys.readouterr()
    security = [orjson.loads(line) for line in out.splitlines() if '"security"' in line]
    assert security == [
        {
            "source": str(path),
            "security": {
                "entitlements": str(home / "secrets" / "entitlements.yaml"),
                "auth": ["password"],
                "users_file": str(home / "secrets" / "users"),
            },
        }
    ]
    assert f"{path}: topology security ({path}: security): entitlements, auth, users_file" in err
    assert f"{path}: gRPC logon: password" in err
