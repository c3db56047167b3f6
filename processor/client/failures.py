"""The client's one translation of a gRPC failure into its :class:`ServiceError`."""

from __future__ import annotations

import grpc

from processor.errors import ServiceError


def translate(exc: grpc.RpcError) -> ServiceError:
    """A gRPC failure as the client's ServiceError (its status code's name, details)."""
    code = exc.code()
    return ServiceError(code.name if code else "UNKNOWN", exc.details() or "")
