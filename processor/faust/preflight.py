"""The faust table's preflight: before the table reads, ask Kafka, with the app's own client
settings, whether the app's principal may see what the table needs (docs/security.md).

Faust's client (aiokafka 0.14) reports most refusals in its own log, but without Read on
the app's consumer group it logs nothing and the worker waits for ever. So, as the table
starts, one short-lived aiokafka client bootstraps and sends, in one round trip, a
FindCoordinator for the app's group (Kafka refuses it without Describe on the group,
which Read implies) and a Metadata request for the changelog topic (refused without
Describe on it, which Read implies). A refusal is logged as one line naming the
permission and raised as a KafkaSecurityError, which stops the worker. The preflight is
skipped when it cannot apply (another transport driver, a broker it cannot reach or
authenticate to within the app's request timeout): Faust's own client reports those.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.coordination import FindCoordinatorRequest
from aiokafka.protocol.metadata import MetadataRequest
from faust.auth import SASLCredentials
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import AppT

from processor.errors import KafkaSecurityError

logger = logging.getLogger(__name__)

#: Where the ACLs of each component are listed (the end of every refusal's line).
ACL_DOC = "docs/security.md, Kafka ACLs; `sow acls` prints them"
#: Kafka's authorization refusals this preflight can meet: code -> (name, resource).
_REFUSED = {
    29: ("TOPIC_AUTHORIZATION_FAILED", "Topic"),
    30: ("GROUP_AUTHORIZATION_FAILED", "Group"),
}
_GROUP_COORDINATOR = 0
#: The longest the preflight waits for the broker (Faust's request timeout is 90 s).
TIMEOUT_S = 15.0


def refusal(error_code: int, who: str, name: str) -> KafkaSecurityError | None:
    """The KafkaSecurityError naming the Read ``who`` lacks on the resource ``name`` when
    ``error_code`` is an authorization refusal of a group or a topic (None otherwise)."""
    refused = _REFUSED.get(error_code)
    if refused is None:
        return None
    error, kind = refused
    target = f"{kind} '{name}'"
    return KafkaSecurityError(
        f"Kafka refused {who}: {error} on {target} -- grant Read on {target} ({ACL_DOC})"
    )


def _who(app: AppT) -> str:
    credentials = app.conf.broker_credentials
    if isinstance(credentials, SASLCredentials):
        return f"the faust table (sasl user '{credentials.username}')"
    return "the faust table"


async def check_permissions(app: AppT, changelog_topic: str) -> None:
    """Raise KafkaSecurityError (after logging it) when Kafka refuses ``app``'s principal
    its consumer group or ``changelog_topic``; return when it does not, or when the
    check cannot apply (module doc). Takes one round trip after the bootstrap, and at
    most the app's ``broker_request_timeout`` or :data:`TIMEOUT_S`, the shorter."""
    transport: Any = app.transport
    if not isinstance(transport, faust_aiokafka.Transport):
        return
    conf = app.conf
    client = AIOKafkaClient(
        bootstrap_servers=faust_aiokafka.server_list(transport.url, transport.default_port),
        client_id=conf.broker_client_id,
        request_timeout_ms=int(conf.broker_request_timeout * 1000.0),
        **faust_aiokafka.credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context),
    )
    try:
        async with asyncio.timeout(min(conf.broker_request_timeout, TIMEOUT_S)):
            await client.bootstrap()
            node = client.get_random_node()
            if node is None:  # no broker listed yet: Faust's own client waits for one
                return
            metadata, coordinator = await asyncio.gather(
                client.send(node, MetadataRequest([changelog_topic], False)),
                client.send(node, FindCoordinatorRequest(conf.id, _GROUP_COORDINATOR)),
            )
    except (KafkaError, OSError, TimeoutError) as exc:
        logger.info("faust table: permission check skipped (%r)", exc)
        return
    finally:
        await client.close()
    refused = refusal(coordinator.error_code, _who(app), conf.id)
    for topic in metadata.topics:
        refused = refused or refusal(topic[0], _who(app), topic[1])
    if refused is not None:
        logger.error("%s", refused)
        raise refused


__all__ = ["check_permissions", "refusal"]
