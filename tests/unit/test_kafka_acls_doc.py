"""docs/security.md lists the Kafka ACLs each component needs: the tables there are what
``processor.log.kafka.acls`` computes (and ``sow acls`` prints) for the documented
example, so the document never drifts from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from processor.cli.acls_command import COMPONENTS as CLI_COMPONENTS
from processor.log.kafka.acls import (
    COMPONENTS,
    PREFIXED,
    Acl,
    AclContext,
    acls_command,
    component_acls,
    markdown_table,
)
from processor.topology.loader import load_topology

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"
EXAMPLE = ROOT / "topologies" / "orders.yaml"


def documented_tables() -> dict[str, str]:
    """Component -> its table under "### Kafka ACLs" (each under "#### <component>")."""
    text = DOC.read_text()
    section = text.split("### Kafka ACLs", 1)[1].split("\n### ", 1)[0]
    tables = {}
    for match in re.finditer(r"^#### (\S+)\n\n((?:\|.*\n)+)", section, re.MULTILINE):
        tables[match.group(1)] = match.group(2)
    return tables


@pytest.mark.parametrize("component", COMPONENTS)
def test_the_documented_acls_are_what_the_code_computes(component: str) -> None:
    expected = markdown_table(component_acls(component, load_topology(EXAMPLE)))
    assert documented_tables().get(component) == expected, (
        f"docs/security.md's table for {component} differs; paste the output of "
        f"`sow acls --topology topologies/orders.yaml --component {component} --format table`"
    )


def test_the_cli_offers_every_component() -> None:
    assert CLI_COMPONENTS == COMPONENTS


def test_no_entry_is_implied_by_another() -> None:
    """Read and Write imply Describe: a Describe beside either would survive its own
    removal (the removal tests need every entry to matter)."""
    topology = load_topology(EXAMPLE)
    for component in COMPONENTS:
        acls = component_acls(component, topology)
        assert len(set(acls)) == len(acls)
        strong = {(a.resource, a.name) for a in acls if a.operation in ("Read", "Write")}
        for acl in acls:
            if acl.operation == "Describe":
                assert (acl.resource, acl.name) not in strong, acl


def test_generated_names_are_prefixes_and_topics_are_exact() -> None:
    topology = load_topology(EXAMPLE)
    context = AclContext(group_id="g", faust_app_id="app")
    processor = component_acls("processor", topology, context)
    transactional = [a for a in processor if a.resource == "TransactionalId"]
    assert transactional == [Acl("TransactionalId", "g", PREFIXED, "Write")]
    assert all(a.pattern == "LITERAL" for a in processor if a.resource == "Topic")
    serve = set(component_acls("serve", topology, context))
    union = set(processor) | set(component_acls("query-service", topology, context))
    strong = {(a.resource, a.name) for a in serve if a.operation in ("Read", "Write")}
    assert serve <= union
    for acl in union - serve:  # what sow serve needs no more: implied by its Read or Write
        assert acl.operation == "Describe", acl
        assert (acl.resource, acl.name) in strong, acl


def test_a_kafka_acls_line() -> None:
    acl = Acl("TransactionalId", "sow-processor", PREFIXED, "Write")
    assert acls_command(acl, "User:sow", "b:9093") == (
        "kafka-acls.sh --bootstrap-server b:9093 --command-config admin.properties --add "
        "--allow-principal User:sow --operation Write --transactional-id 'sow-processor' "
        "--resource-pattern-type prefixed"
    )
