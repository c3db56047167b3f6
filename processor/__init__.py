"""kafka-sow: a State of the World database on Kafka.

Publishers write commands to Kafka; the processor keeps the latest message per SowKey in
RocksDB with a compacted changelog and exactly-once commits; the query service serves SOW
queries over gRPC. See README.md and docs/.

**The public Python API is this package's top level** (docs/client.md)::

    import processor

    with processor.SowClient("127.0.0.1:50051") as client:
        client.publish("ORDERS", b'{"orderId": 1, "price": 10}')

Every name in :data:`__all__` is kept importable from here, with its signature, across
releases (``tests/unit/test_public_api.py`` holds them to ``tests/data/public_api.txt``);
the modules under ``processor.*`` are the package's internal rooms (docs/architecture.md)
and may move. Names load on first use, so ``import processor`` stays cheap for a process
that needs only part of the package (the processor does not load the gRPC client).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # the same names, seen by type checkers and editors
    from processor.app import Application
    from processor.client.bookmark_store import BookmarkStore, MemoryBookmarkStore, SowBookmarkStore
    from processor.client.credentials import ClientSecurity
    from processor.client.direct import DirectPublisher
    from processor.client.failover import BookmarkSubscription, FailoverClient
    from processor.client.publishing import LogPosition, PublishResult
    from processor.client.queues import QueueStream
    from processor.client.sow_client import SowClient, SubscriptionSession, SubscriptionStream
    from processor.errors import (
        AuthenticationError,
        BookmarkTooOldError,
        ChannelSecurityError,
        ConfigurationError,
        DeadlineError,
        ExpressionError,
        InvalidRequestError,
        MessageError,
        NotEntitledError,
        ServiceError,
        SlowConsumerError,
        SowError,
        TopologyError,
        UnknownTopicError,
    )
    from processor.testing import MemoryBackend, start_memory, wait_ready
    from processor.topology.loader import load_topology
    from processor.topology.model import Topology

#: Each public name and the internal module it lives in (loaded on first use).
_HOMES: dict[str, str] = {
    # the query service's clients
    "SowClient": "processor.client.sow_client",
    "SubscriptionStream": "processor.client.sow_client",
    "SubscriptionSession": "processor.client.sow_client",
    "PublishResult": "processor.client.publishing",
    "LogPosition": "processor.client.publishing",
    "QueueStream": "processor.client.queues",
    "FailoverClient": "processor.client.failover",
    "BookmarkSubscription": "processor.client.failover",
    "ClientSecurity": "processor.client.credentials",
    # publishing straight to Kafka
    "DirectPublisher": "processor.client.direct",
    # bookmark stores
    "BookmarkStore": "processor.client.bookmark_store",
    "MemoryBookmarkStore": "processor.client.bookmark_store",
    "SowBookmarkStore": "processor.client.bookmark_store",
    # errors (every one is a SowError)
    "SowError": "processor.errors",
    "ServiceError": "processor.errors",
    "ChannelSecurityError": "processor.errors",
    "ConfigurationError": "processor.errors",
    "TopologyError": "processor.errors",
    "MessageError": "processor.errors",
    "InvalidRequestError": "processor.errors",
    "ExpressionError": "processor.errors",
    "UnknownTopicError": "processor.errors",
    "AuthenticationError": "processor.errors",
    "NotEntitledError": "processor.errors",
    "BookmarkTooOldError": "processor.errors",
    "DeadlineError": "processor.errors",
    "SlowConsumerError": "processor.errors",
    # the broker-free testing driver and what it takes
    "start_memory": "processor.testing",
    "wait_ready": "processor.testing",
    "MemoryBackend": "processor.testing",
    "Application": "processor.app",
    "load_topology": "processor.topology.loader",
    "Topology": "processor.topology.model",
}

__all__ = [
    "Application",
    "AuthenticationError",
    "BookmarkStore",
    "BookmarkSubscription",
    "BookmarkTooOldError",
    "ChannelSecurityError",
    "ClientSecurity",
    "ConfigurationError",
    "DeadlineError",
    "DirectPublisher",
    "ExpressionError",
    "FailoverClient",
    "InvalidRequestError",
    "LogPosition",
    "MemoryBackend",
    "MemoryBookmarkStore",
    "MessageError",
    "NotEntitledError",
    "PublishResult",
    "QueueStream",
    "ServiceError",
    "SlowConsumerError",
    "SowBookmarkStore",
    "SowClient",
    "SowError",
    "SubscriptionSession",
    "SubscriptionStream",
    "Topology",
    "TopologyError",
    "UnknownTopicError",
    "__version__",
    "load_topology",
    "start_memory",
    "wait_ready",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(
            f"module 'processor' has no attribute {name!r}; the public names are "
            "processor.__all__ (docs/client.md)"
        )
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
