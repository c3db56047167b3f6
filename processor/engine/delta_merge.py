"""delta_publish in the processor: the SowKey of a delta and its merge with the stored record.

A delta (header ``sow.delta``, :mod:`processor.changelog.commands`) is applied like a publish whose
message is the merge of the delta into the record its SowKey holds, as of its place in the
log (this transaction's earlier writes included), so two deltas in one batch merge in
order. The merged message is what the changelog records: readers never see a delta.
"""

from __future__ import annotations

from processor import changelog
from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch
from processor.errors import MissingKeyError
from processor.keys import KeyFunction, validate_user_key


def delta_key(
    state: PartitionState,
    value: bytes,
    key: bytes | None,
    form: bytes | None,
    key_function: KeyFunction | None = None,
) -> bytes:
    """The SowKey of a publish (``form`` None) or a delta (from its own fields: it must
    give the topic's Key fields), with ``key_function`` (default the topic's); the
    publisher-provided Kafka key on topics without Key fields.

    Raises MessageError (MissingKeyError naming the field) when it cannot be computed.
    """
    function = key_function or state.key_function
    if function is None:
        return validate_user_key(key).encode()
    if form is None:
        return function(state.codec.decode(value)).encode()
    fields = state.codec.decode_delta(value, form == b"json")
    try:
        return function(fields).encode()
    except MissingKeyError as exc:
        raise MissingKeyError(
            f"a delta_publish must give the record's Key fields (it is merged into the "
            f"record they identify): {exc}"
        ) from exc


def merge_delta(
    batch: PartitionBatch,
    sow_key: bytes,
    value: bytes,
    form: bytes,
    correlation_id: str | None,
) -> tuple[bytes, str | None]:
    """The merged message and its correlation id (the delta's if it has one, else the
    stored record's). With no stored record the delta alone is the record.

    Raises MessageError when the merge is not a message of the topic's type.
    """
    stored = batch.lookup(sow_key)
    codec = batch.state.codec
    if stored is None:
        return codec.merge(None, value, form == b"json"), correlation_id
    data, stored_correlation = changelog.data_and_correlation_of(stored)
    merged = codec.merge(data, value, form == b"json")
    return merged, correlation_id if correlation_id is not None else stored_correlation
