"""Security below the transports: who is calling (:class:`Principal`), what it may do
(:mod:`processor.security.entitlements`), and the one :class:`RequestContext` each
transport builds per call and hands to the gateway, the query engine, the subscription
plan and the queue hub (docs/security.md)."""

from processor.security.context import (
    ALL_RIGHTS,
    ANONYMOUS,
    EVERYONE,
    OPEN,
    Principal,
    RequestContext,
    Rights,
    RightsSource,
)

__all__ = [
    "ALL_RIGHTS",
    "ANONYMOUS",
    "EVERYONE",
    "OPEN",
    "Principal",
    "RequestContext",
    "Rights",
    "RightsSource",
]
