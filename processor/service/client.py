"""A small Python client for the gRPC service (used by the CLI and tests)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from processor.errors import SowError
from processor.service._generated import sow_pb2, sow_pb2_grpc


class ServiceError(SowError):
    """The service answered a request with an error status."""

    def __init__(self, code: str, details: str) -> None:
        self.code = code
        self.details = details
        super().__init__(f"{code}: {details}")


def _translate(exc: grpc.RpcError) -> ServiceError:
    code = exc.code()
    return ServiceError(code.name if code else "UNKNOWN", exc.details() or "")


class SowClient:
    """Blocking client. ``address`` is ``host:port``."""

    def __init__(self, address: str) -> None:
        self._channel = grpc.insecure_channel(address)
        self._stub = sow_pb2_grpc.SowStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> SowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def publish(
        self,
        topic: str,
        data: bytes,
        sow_key: str = "",
        expiration: float = 0.0,
        correlation_id: str = "",
        timeout: float = 30.0,
        text_form: bool = False,
    ) -> Any:
        """Publish one message; the reply has its log position and SowKey."""
        request = sow_pb2.PublishRequest(
            topic=topic,
            data=data,
            sow_key=sow_key,
            expiration=expiration,
            correlation_id=correlation_id,
            text_form=text_form,
        )
        try:
            return self._stub.Publish(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise _translate(exc) from exc

    def query_stream(
        self,
        topic: str,
        sow_keys: Sequence[str] = (),
        query_id: str = "",
        batch_size: int = 0,
        min_position: Sequence[Any] = (),
        timeout: float = 60.0,
        **fields: Any,
    ) -> Iterator[Any]:
        """The raw reply stream: group begin, batches, group end."""
        request = sow_pb2.SowQueryRequest(
            topic=topic,
            sow_keys=list(sow_keys),
            query_id=query_id,
            batch_size=batch_size,
            min_position=list(min_position),
            **fields,
        )
        try:
            yield from self._stub.SowQuery(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise _translate(exc) from exc

    def query(self, topic: str, **kwargs: Any) -> tuple[list[Any], Any, Any]:
        """All records of a query, with its group begin and group end."""
        records: list[Any] = []
        begin = end = None
        for reply in self.query_stream(topic, **kwargs):
            part = reply.WhichOneof("part")
            if part == "group_begin":
                begin = reply.group_begin
            elif part == "batch":
                records.extend(reply.batch.records)
            else:
                end = reply.group_end
        return records, begin, end

    def delete(
        self,
        topic: str,
        sow_keys: Sequence[str] = (),
        timeout: float = 30.0,
        *,
        filter: str = "",
        data: bytes = b"",
        text_form: bool = False,
    ) -> Any:
        """sow_delete by SowKeys, by filter, or by message data (exactly one of them)."""
        request = sow_pb2.SowDeleteRequest(
            topic=topic, sow_keys=list(sow_keys), filter=filter, data=data, text_form=text_form
        )
        try:
            return self._stub.SowDelete(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise _translate(exc) from exc
