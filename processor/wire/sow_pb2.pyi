from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AckType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERSISTED: _ClassVar[AckType]
    PROCESSED: _ClassVar[AckType]

class ChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_PUBLISH: _ClassVar[ChangeKind]
    CHANGE_DELETE: _ClassVar[ChangeKind]
    CHANGE_OOF: _ClassVar[ChangeKind]

class QueueAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    QUEUE_ACK: _ClassVar[QueueAction]
    QUEUE_CANCEL: _ClassVar[QueueAction]
    QUEUE_EXPIRE: _ClassVar[QueueAction]
PERSISTED: AckType
PROCESSED: AckType
CHANGE_PUBLISH: ChangeKind
CHANGE_DELETE: ChangeKind
CHANGE_OOF: ChangeKind
QUEUE_ACK: QueueAction
QUEUE_CANCEL: QueueAction
QUEUE_EXPIRE: QueueAction

class Position(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("topic", "data", "sow_key", "expiration", "correlation_id", "text_form", "publisher", "sequence", "delta", "ack")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SOW_KEY_FIELD_NUMBER: _ClassVar[int]
    EXPIRATION_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FORM_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    topic: str
    data: bytes
    sow_key: str
    expiration: float
    correlation_id: str
    text_form: bool
    publisher: str
    sequence: int
    delta: bool
    ack: AckType
    def __init__(self, topic: _Optional[str] = ..., data: _Optional[bytes] = ..., sow_key: _Optional[str] = ..., expiration: _Optional[float] = ..., correlation_id: _Optional[str] = ..., text_form: _Optional[bool] = ..., publisher: _Optional[str] = ..., sequence: _Optional[int] = ..., delta: _Optional[bool] = ..., ack: _Optional[_Union[AckType, str]] = ...) -> None: ...

class PublishReply(_message.Message):
    __slots__ = ("position", "sow_key")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SOW_KEY_FIELD_NUMBER: _ClassVar[int]
    position: Position
    sow_key: str
    def __init__(self, position: _Optional[_Union[Position, _Mapping]] = ..., sow_key: _Optional[str] = ...) -> None: ...

class PublishBatch(_message.Message):
    __slots__ = ("batch_id", "messages", "topic", "data", "text_form", "publisher", "first_sequence", "expiration", "correlation_id", "sow_keys", "delta", "ack")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TEXT_FORM_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EXPIRATION_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    SOW_KEYS_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    messages: _containers.RepeatedCompositeFieldContainer[PublishRequest]
    topic: str
    data: _containers.RepeatedScalarFieldContainer[bytes]
    text_form: bool
    publisher: str
    first_sequence: int
    expiration: float
    correlation_id: str
    sow_keys: _containers.RepeatedScalarFieldContainer[str]
    delta: bool
    ack: AckType
    def __init__(self, batch_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[PublishRequest, _Mapping]]] = ..., topic: _Optional[str] = ..., data: _Optional[_Iterable[bytes]] = ..., text_form: _Optional[bool] = ..., publisher: _Optional[str] = ..., first_sequence: _Optional[int] = ..., expiration: _Optional[float] = ..., correlation_id: _Optional[str] = ..., sow_keys: _Optional[_Iterable[str]] = ..., delta: _Optional[bool] = ..., ack: _Optional[_Union[AckType, str]] = ...) -> None: ...

class PublishAck(_message.Message):
    __slots__ = ("batch_id", "log_topics", "partitions", "offsets", "sow_keys", "refused", "log_topic")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_TOPICS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SOW_KEYS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    LOG_TOPIC_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    log_topics: _containers.RepeatedScalarFieldContainer[str]
    partitions: _containers.RepeatedScalarFieldContainer[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    sow_keys: _containers.RepeatedScalarFieldContainer[str]
    refused: _containers.RepeatedCompositeFieldContainer[Refusal]
    log_topic: str
    def __init__(self, batch_id: _Optional[int] = ..., log_topics: _Optional[_Iterable[str]] = ..., partitions: _Optional[_Iterable[int]] = ..., offsets: _Optional[_Iterable[int]] = ..., sow_keys: _Optional[_Iterable[str]] = ..., refused: _Optional[_Iterable[_Union[Refusal, _Mapping]]] = ..., log_topic: _Optional[str] = ...) -> None: ...

class Refusal(_message.Message):
    __slots__ = ("index", "error_code", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    error_code: str
    error: str
    def __init__(self, index: _Optional[int] = ..., error_code: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class SowQueryRequest(_message.Message):
    __slots__ = ("topic", "sow_keys", "query_id", "batch_size", "min_position", "timeout_seconds", "filter", "top_n", "skip_n", "order_by", "text_form", "grouping", "projection", "wait_for_catch_up", "select", "bookmark", "send_deletes", "oof_last_received")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SOW_KEYS_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIN_POSITION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    SKIP_N_FIELD_NUMBER: _ClassVar[int]
    ORDER_BY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FORM_FIELD_NUMBER: _ClassVar[int]
    GROUPING_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    SELECT_FIELD_NUMBER: _ClassVar[int]
    BOOKMARK_FIELD_NUMBER: _ClassVar[int]
    SEND_DELETES_FIELD_NUMBER: _ClassVar[int]
    OOF_LAST_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    sow_keys: _containers.RepeatedScalarFieldContainer[str]
    query_id: str
    batch_size: int
    min_position: _containers.RepeatedCompositeFieldContainer[Position]
    timeout_seconds: float
    filter: str
    top_n: int
    skip_n: int
    order_by: str
    text_form: bool
    grouping: str
    projection: str
    wait_for_catch_up: bool
    select: str
    bookmark: str
    send_deletes: bool
    oof_last_received: bool
    def __init__(self, topic: _Optional[str] = ..., sow_keys: _Optional[_Iterable[str]] = ..., query_id: _Optional[str] = ..., batch_size: _Optional[int] = ..., min_position: _Optional[_Iterable[_Union[Position, _Mapping]]] = ..., timeout_seconds: _Optional[float] = ..., filter: _Optional[str] = ..., top_n: _Optional[int] = ..., skip_n: _Optional[int] = ..., order_by: _Optional[str] = ..., text_form: _Optional[bool] = ..., grouping: _Optional[str] = ..., projection: _Optional[str] = ..., wait_for_catch_up: _Optional[bool] = ..., select: _Optional[str] = ..., bookmark: _Optional[str] = ..., send_deletes: _Optional[bool] = ..., oof_last_received: _Optional[bool] = ...) -> None: ...

class SowRecord(_message.Message):
    __slots__ = ("sow_key", "data", "topic", "message_type", "position", "publish_time_ms", "apply_time_ms", "expiration_ms", "correlation_id", "queue_state")
    SOW_KEY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    APPLY_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRATION_MS_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_STATE_FIELD_NUMBER: _ClassVar[int]
    sow_key: str
    data: bytes
    topic: str
    message_type: str
    position: Position
    publish_time_ms: int
    apply_time_ms: int
    expiration_ms: int
    correlation_id: str
    queue_state: QueueMessageState
    def __init__(self, sow_key: _Optional[str] = ..., data: _Optional[bytes] = ..., topic: _Optional[str] = ..., message_type: _Optional[str] = ..., position: _Optional[_Union[Position, _Mapping]] = ..., publish_time_ms: _Optional[int] = ..., apply_time_ms: _Optional[int] = ..., expiration_ms: _Optional[int] = ..., correlation_id: _Optional[str] = ..., queue_state: _Optional[_Union[QueueMessageState, _Mapping]] = ...) -> None: ...

class QueueMessageState(_message.Message):
    __slots__ = ("leased", "leased_to", "lease_deadline_ms", "deliveries", "cancels")
    LEASED_FIELD_NUMBER: _ClassVar[int]
    LEASED_TO_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    CANCELS_FIELD_NUMBER: _ClassVar[int]
    leased: bool
    leased_to: str
    lease_deadline_ms: int
    deliveries: int
    cancels: int
    def __init__(self, leased: _Optional[bool] = ..., leased_to: _Optional[str] = ..., lease_deadline_ms: _Optional[int] = ..., deliveries: _Optional[int] = ..., cancels: _Optional[int] = ...) -> None: ...

class GroupBegin(_message.Message):
    __slots__ = ("query_id", "topic", "snapshot", "staleness_ms")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STALENESS_MS_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    topic: str
    snapshot: _containers.RepeatedCompositeFieldContainer[Position]
    staleness_ms: int
    def __init__(self, query_id: _Optional[str] = ..., topic: _Optional[str] = ..., snapshot: _Optional[_Iterable[_Union[Position, _Mapping]]] = ..., staleness_ms: _Optional[int] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[SowRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[SowRecord, _Mapping]]] = ...) -> None: ...

class GroupEnd(_message.Message):
    __slots__ = ("query_id", "topic_matches", "matches", "records_returned", "elapsed_us", "plan")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_MATCHES_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_RETURNED_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_US_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    topic_matches: int
    matches: int
    records_returned: int
    elapsed_us: int
    plan: str
    def __init__(self, query_id: _Optional[str] = ..., topic_matches: _Optional[int] = ..., matches: _Optional[int] = ..., records_returned: _Optional[int] = ..., elapsed_us: _Optional[int] = ..., plan: _Optional[str] = ...) -> None: ...

class SowQueryReply(_message.Message):
    __slots__ = ("group_begin", "batch", "group_end")
    GROUP_BEGIN_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_END_FIELD_NUMBER: _ClassVar[int]
    group_begin: GroupBegin
    batch: Batch
    group_end: GroupEnd
    def __init__(self, group_begin: _Optional[_Union[GroupBegin, _Mapping]] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., group_end: _Optional[_Union[GroupEnd, _Mapping]] = ...) -> None: ...

class SowDeleteRequest(_message.Message):
    __slots__ = ("topic", "sow_keys", "timeout_seconds", "filter", "data", "text_form")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SOW_KEYS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TEXT_FORM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    sow_keys: _containers.RepeatedScalarFieldContainer[str]
    timeout_seconds: float
    filter: str
    data: bytes
    text_form: bool
    def __init__(self, topic: _Optional[str] = ..., sow_keys: _Optional[_Iterable[str]] = ..., timeout_seconds: _Optional[float] = ..., filter: _Optional[str] = ..., data: _Optional[bytes] = ..., text_form: _Optional[bool] = ...) -> None: ...

class SowDeleteReply(_message.Message):
    __slots__ = ("records_deleted", "positions")
    RECORDS_DELETED_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    records_deleted: int
    positions: _containers.RepeatedCompositeFieldContainer[Position]
    def __init__(self, records_deleted: _Optional[int] = ..., positions: _Optional[_Iterable[_Union[Position, _Mapping]]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("topic", "filter", "sub_id", "oof", "no_empties", "batch_size", "send_keys", "text_form", "query_id", "max_backlog", "delta", "select", "top_n", "skip_n", "order_by", "replace", "conflation", "conflation_key", "bookmark", "send_deletes", "oof_last_received", "grouping", "projection")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    SUB_ID_FIELD_NUMBER: _ClassVar[int]
    OOF_FIELD_NUMBER: _ClassVar[int]
    NO_EMPTIES_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEND_KEYS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FORM_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKLOG_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    SELECT_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    SKIP_N_FIELD_NUMBER: _ClassVar[int]
    ORDER_BY_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    CONFLATION_FIELD_NUMBER: _ClassVar[int]
    CONFLATION_KEY_FIELD_NUMBER: _ClassVar[int]
    BOOKMARK_FIELD_NUMBER: _ClassVar[int]
    SEND_DELETES_FIELD_NUMBER: _ClassVar[int]
    OOF_LAST_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    GROUPING_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    filter: str
    sub_id: str
    oof: bool
    no_empties: bool
    batch_size: int
    send_keys: bool
    text_form: bool
    query_id: str
    max_backlog: int
    delta: bool
    select: str
    top_n: int
    skip_n: int
    order_by: str
    replace: bool
    conflation: str
    conflation_key: str
    bookmark: str
    send_deletes: bool
    oof_last_received: bool
    grouping: str
    projection: str
    def __init__(self, topic: _Optional[str] = ..., filter: _Optional[str] = ..., sub_id: _Optional[str] = ..., oof: _Optional[bool] = ..., no_empties: _Optional[bool] = ..., batch_size: _Optional[int] = ..., send_keys: _Optional[bool] = ..., text_form: _Optional[bool] = ..., query_id: _Optional[str] = ..., max_backlog: _Optional[int] = ..., delta: _Optional[bool] = ..., select: _Optional[str] = ..., top_n: _Optional[int] = ..., skip_n: _Optional[int] = ..., order_by: _Optional[str] = ..., replace: _Optional[bool] = ..., conflation: _Optional[str] = ..., conflation_key: _Optional[str] = ..., bookmark: _Optional[str] = ..., send_deletes: _Optional[bool] = ..., oof_last_received: _Optional[bool] = ..., grouping: _Optional[str] = ..., projection: _Optional[str] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ("kind", "topic", "sow_key", "record", "changelog_position", "oof_reason", "current", "delta")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SOW_KEY_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    CHANGELOG_POSITION_FIELD_NUMBER: _ClassVar[int]
    OOF_REASON_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    kind: ChangeKind
    topic: str
    sow_key: str
    record: SowRecord
    changelog_position: Position
    oof_reason: str
    current: SowRecord
    delta: bool
    def __init__(self, kind: _Optional[_Union[ChangeKind, str]] = ..., topic: _Optional[str] = ..., sow_key: _Optional[str] = ..., record: _Optional[_Union[SowRecord, _Mapping]] = ..., changelog_position: _Optional[_Union[Position, _Mapping]] = ..., oof_reason: _Optional[str] = ..., current: _Optional[_Union[SowRecord, _Mapping]] = ..., delta: _Optional[bool] = ...) -> None: ...

class SubscribeGroupEnd(_message.Message):
    __slots__ = ("query_id", "snapshot", "topic_matches", "matches", "records_returned", "elapsed_us", "plan")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    TOPIC_MATCHES_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_RETURNED_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_US_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    snapshot: _containers.RepeatedCompositeFieldContainer[Position]
    topic_matches: int
    matches: int
    records_returned: int
    elapsed_us: int
    plan: str
    def __init__(self, query_id: _Optional[str] = ..., snapshot: _Optional[_Iterable[_Union[Position, _Mapping]]] = ..., topic_matches: _Optional[int] = ..., matches: _Optional[int] = ..., records_returned: _Optional[int] = ..., elapsed_us: _Optional[int] = ..., plan: _Optional[str] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: _containers.RepeatedCompositeFieldContainer[Position]
    def __init__(self, snapshot: _Optional[_Iterable[_Union[Position, _Mapping]]] = ...) -> None: ...

class SubscriptionMessage(_message.Message):
    __slots__ = ("sub_id", "registered", "group_begin", "batch", "group_end", "change", "changes", "ended", "completed")
    SUB_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    GROUP_BEGIN_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_END_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    sub_id: str
    registered: Registered
    group_begin: GroupBegin
    batch: Batch
    group_end: SubscribeGroupEnd
    change: Change
    changes: ChangeBatch
    ended: SubscriptionEnded
    completed: Completed
    def __init__(self, sub_id: _Optional[str] = ..., registered: _Optional[_Union[Registered, _Mapping]] = ..., group_begin: _Optional[_Union[GroupBegin, _Mapping]] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., group_end: _Optional[_Union[SubscribeGroupEnd, _Mapping]] = ..., change: _Optional[_Union[Change, _Mapping]] = ..., changes: _Optional[_Union[ChangeBatch, _Mapping]] = ..., ended: _Optional[_Union[SubscriptionEnded, _Mapping]] = ..., completed: _Optional[_Union[Completed, _Mapping]] = ...) -> None: ...

class SubscriptionEnded(_message.Message):
    __slots__ = ("code", "details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: str
    details: str
    def __init__(self, code: _Optional[str] = ..., details: _Optional[str] = ...) -> None: ...

class Completed(_message.Message):
    __slots__ = ("position",)
    POSITION_FIELD_NUMBER: _ClassVar[int]
    position: _containers.RepeatedCompositeFieldContainer[Position]
    def __init__(self, position: _Optional[_Iterable[_Union[Position, _Mapping]]] = ...) -> None: ...

class SessionCommand(_message.Message):
    __slots__ = ("subscribe", "sow_and_subscribe", "unsubscribe")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    SOW_AND_SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    subscribe: SubscribeRequest
    sow_and_subscribe: SubscribeRequest
    unsubscribe: str
    def __init__(self, subscribe: _Optional[_Union[SubscribeRequest, _Mapping]] = ..., sow_and_subscribe: _Optional[_Union[SubscribeRequest, _Mapping]] = ..., unsubscribe: _Optional[str] = ...) -> None: ...

class ChangeBatch(_message.Message):
    __slots__ = ("changes",)
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[Change]
    def __init__(self, changes: _Optional[_Iterable[_Union[Change, _Mapping]]] = ...) -> None: ...

class QueueSubscribe(_message.Message):
    __slots__ = ("queue", "filter", "sub_id", "max_backlog", "text_form")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    SUB_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKLOG_FIELD_NUMBER: _ClassVar[int]
    TEXT_FORM_FIELD_NUMBER: _ClassVar[int]
    queue: str
    filter: str
    sub_id: str
    max_backlog: int
    text_form: bool
    def __init__(self, queue: _Optional[str] = ..., filter: _Optional[str] = ..., sub_id: _Optional[str] = ..., max_backlog: _Optional[int] = ..., text_form: _Optional[bool] = ...) -> None: ...

class QueueBookmarks(_message.Message):
    __slots__ = ("bookmarks",)
    BOOKMARKS_FIELD_NUMBER: _ClassVar[int]
    bookmarks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, bookmarks: _Optional[_Iterable[str]] = ...) -> None: ...

class QueueCommand(_message.Message):
    __slots__ = ("subscribe", "ack", "cancel", "expire")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_FIELD_NUMBER: _ClassVar[int]
    subscribe: QueueSubscribe
    ack: QueueBookmarks
    cancel: QueueBookmarks
    expire: QueueBookmarks
    def __init__(self, subscribe: _Optional[_Union[QueueSubscribe, _Mapping]] = ..., ack: _Optional[_Union[QueueBookmarks, _Mapping]] = ..., cancel: _Optional[_Union[QueueBookmarks, _Mapping]] = ..., expire: _Optional[_Union[QueueBookmarks, _Mapping]] = ...) -> None: ...

class QueueLease(_message.Message):
    __slots__ = ("bookmark", "record", "lease_deadline_ms", "deliveries", "barrier")
    BOOKMARK_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    bookmark: str
    record: SowRecord
    lease_deadline_ms: int
    deliveries: int
    barrier: bool
    def __init__(self, bookmark: _Optional[str] = ..., record: _Optional[_Union[SowRecord, _Mapping]] = ..., lease_deadline_ms: _Optional[int] = ..., deliveries: _Optional[int] = ..., barrier: _Optional[bool] = ...) -> None: ...

class QueueMessage(_message.Message):
    __slots__ = ("sub_id", "registered", "lease", "leases")
    SUB_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    sub_id: str
    registered: Registered
    lease: QueueLease
    leases: QueueLeases
    def __init__(self, sub_id: _Optional[str] = ..., registered: _Optional[_Union[Registered, _Mapping]] = ..., lease: _Optional[_Union[QueueLease, _Mapping]] = ..., leases: _Optional[_Union[QueueLeases, _Mapping]] = ...) -> None: ...

class QueueLeases(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[QueueLease]
    def __init__(self, leases: _Optional[_Iterable[_Union[QueueLease, _Mapping]]] = ...) -> None: ...

class QueueActionRequest(_message.Message):
    __slots__ = ("queue", "action", "bookmarks", "filter")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    BOOKMARKS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    queue: str
    action: QueueAction
    bookmarks: _containers.RepeatedScalarFieldContainer[str]
    filter: str
    def __init__(self, queue: _Optional[str] = ..., action: _Optional[_Union[QueueAction, str]] = ..., bookmarks: _Optional[_Iterable[str]] = ..., filter: _Optional[str] = ...) -> None: ...

class QueueActionReply(_message.Message):
    __slots__ = ("commands", "removed")
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    commands: int
    removed: int
    def __init__(self, commands: _Optional[int] = ..., removed: _Optional[int] = ...) -> None: ...
