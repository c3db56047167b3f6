"""A topology that names its entitlements file and logon beside its topics (issue 32):
the service started with only TLS settings enforces them, and follows the file when it
changes, without a restart. Over TLS on the memory log."""

from __future__ import annotations

import os
import time
from pathlib import Path

from processor.testing import start_memory
from processor.topology import load_topology
from tests.integration.grpc_auth_helpers import (
    AUDIENCE,
    ISSUER,
    TOPOLOGY,
    basic,
    bearer,
    call,
    channel,
    make_secrets,
    seed,
    token,
)

SECURITY = f"""\
security:
  entitlements: entitlements.yaml
  auth: [token, password]
  users_file: users
  jwt_key: issuer.pem
  jwt_audience: {AUDIENCE}
  jwt_issuer: {ISSUER}
"""
BOB_READS = """\
roles:
  traders: {logon: true, read: [{topic: "orders|work"}], write: [{topic: "orders|jobs"}]}
principals:
  bob: {logon: true, read: [{topic: orders}]}
"""


def test_the_entitlements_a_topology_names_are_enforced_and_reloaded(tmp_path: Path) -> None:
    secrets = make_secrets(tmp_path)  # entitlements.yaml, users, issuer.pem in tmp_path
    path = tmp_path / "topology.yaml"
    path.write_text(TOPOLOGY + SECURITY)
    app = start_memory(
        load_topology(path),
        tmp_path / "state",
        grpc_tls_cert=secrets.server.chain,
        grpc_tls_key=secrets.server.key,
    )
    try:
        deadline = time.monotonic() + 30
        while app.readiness() is not None:
            assert time.monotonic() < deadline, app.readiness()
            time.sleep(0.02)
        address = app.grpc_address
        seed(address, secrets)
        with channel(address, secrets) as ch:
            assert call("Sow/SowQuery", ch).code == "UNAUTHENTICATED"
            alice = call("Sow/SowQuery", ch, basic("alice", "alice-pw"))
            assert (alice.code, alice.records) == ("OK", 3)
            bob = bearer(token(secrets, sub="bob"))
            assert call("Sow/SowQuery", ch, bob).code == "PERMISSION_DENIED"  # logon only
            assert call("Sow/SowQuery", ch, basic("carol", "carol-pw")).code == (
                "PERMISSION_DENIED"  # no logon right
            )

            secrets.entitlements.write_text(BOB_READS)
            stamp = time.time_ns() + 2_000_000_000  # a change the watcher cannot miss
            os.utime(secrets.entitlements, ns=(stamp, stamp))
            deadline = time.monotonic() + 15
            while (outcome := call("Sow/SowQuery", ch, bob)).code != "OK":
                assert outcome.code == "PERMISSION_DENIED"
                assert time.monotonic() < deadline, "the entitlements file was not reloaded"
                time.sleep(0.1)
            assert outcome.records == 3
    finally:
        app.stop()
