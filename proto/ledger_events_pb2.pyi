from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    LEDGER_CREATED: _ClassVar[EventKind]
    LEDGER_CHANGED: _ClassVar[EventKind]
    LEDGER_DELETED: _ClassVar[EventKind]
    UNDER_REPLICATION_MARKED: _ClassVar[EventKind]
    UNDER_REPLICATION_CLEARED: _ClassVar[EventKind]
    BOOKIE_REGISTERED: _ClassVar[EventKind]
    BOOKIE_UNREGISTERED: _ClassVar[EventKind]
    BOOKIE_READONLY: _ClassVar[EventKind]
    BOOKIE_WRITABLE: _ClassVar[EventKind]
    RACKS_CHANGED: _ClassVar[EventKind]
    TICK: _ClassVar[EventKind]
    SNAPSHOT_BEGIN: _ClassVar[EventKind]
    SNAPSHOT_END: _ClassVar[EventKind]
    LEDGER_RECHECK: _ClassVar[EventKind]
    BOOKIE_LOST: _ClassVar[EventKind]
    AUTORECOVERY_HEALTH: _ClassVar[EventKind]

class RecheckReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECHECK_REASON_UNSPECIFIED: _ClassVar[RecheckReason]
    BOOKIE_LOST_RECHECK: _ClassVar[RecheckReason]
    BOOKIE_RETURNED: _ClassVar[RecheckReason]
    COOKIE_CHANGED: _ClassVar[RecheckReason]
    BOOKIE_RESTARTED: _ClassVar[RecheckReason]

class Origin(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORIGIN_UNSPECIFIED: _ClassVar[Origin]
    SNAPSHOT: _ClassVar[Origin]
    RESYNC: _ClassVar[Origin]
    LIVE: _ClassVar[Origin]
EVENT_KIND_UNSPECIFIED: EventKind
LEDGER_CREATED: EventKind
LEDGER_CHANGED: EventKind
LEDGER_DELETED: EventKind
UNDER_REPLICATION_MARKED: EventKind
UNDER_REPLICATION_CLEARED: EventKind
BOOKIE_REGISTERED: EventKind
BOOKIE_UNREGISTERED: EventKind
BOOKIE_READONLY: EventKind
BOOKIE_WRITABLE: EventKind
RACKS_CHANGED: EventKind
TICK: EventKind
SNAPSHOT_BEGIN: EventKind
SNAPSHOT_END: EventKind
LEDGER_RECHECK: EventKind
BOOKIE_LOST: EventKind
AUTORECOVERY_HEALTH: EventKind
RECHECK_REASON_UNSPECIFIED: RecheckReason
BOOKIE_LOST_RECHECK: RecheckReason
BOOKIE_RETURNED: RecheckReason
COOKIE_CHANGED: RecheckReason
BOOKIE_RESTARTED: RecheckReason
ORIGIN_UNSPECIFIED: Origin
SNAPSHOT: Origin
RESYNC: Origin
LIVE: Origin

class BookieLost(_message.Message):
    __slots__ = ("unregistered_ms", "ledgers", "entries")
    UNREGISTERED_MS_FIELD_NUMBER: _ClassVar[int]
    LEDGERS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    unregistered_ms: int
    ledgers: int
    entries: int
    def __init__(self, unregistered_ms: _Optional[int] = ..., ledgers: _Optional[int] = ..., entries: _Optional[int] = ...) -> None: ...

class AutoRecovery(_message.Message):
    __slots__ = ("disabled", "disabled_since_ms", "disabled_critical", "auditor", "has_auditor", "no_auditor_since_ms", "no_auditor", "auditor_unsettled")
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    DISABLED_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    DISABLED_CRITICAL_FIELD_NUMBER: _ClassVar[int]
    AUDITOR_FIELD_NUMBER: _ClassVar[int]
    HAS_AUDITOR_FIELD_NUMBER: _ClassVar[int]
    NO_AUDITOR_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    NO_AUDITOR_FIELD_NUMBER: _ClassVar[int]
    AUDITOR_UNSETTLED_FIELD_NUMBER: _ClassVar[int]
    disabled: bool
    disabled_since_ms: int
    disabled_critical: bool
    auditor: str
    has_auditor: bool
    no_auditor_since_ms: int
    no_auditor: bool
    auditor_unsettled: bool
    def __init__(self, disabled: _Optional[bool] = ..., disabled_since_ms: _Optional[int] = ..., disabled_critical: _Optional[bool] = ..., auditor: _Optional[str] = ..., has_auditor: _Optional[bool] = ..., no_auditor_since_ms: _Optional[int] = ..., no_auditor: _Optional[bool] = ..., auditor_unsettled: _Optional[bool] = ...) -> None: ...

class ZnodeStat(_message.Message):
    __slots__ = ("version", "czxid", "mzxid", "ctime_ms", "mtime_ms")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CZXID_FIELD_NUMBER: _ClassVar[int]
    MZXID_FIELD_NUMBER: _ClassVar[int]
    CTIME_MS_FIELD_NUMBER: _ClassVar[int]
    MTIME_MS_FIELD_NUMBER: _ClassVar[int]
    version: int
    czxid: int
    mzxid: int
    ctime_ms: int
    mtime_ms: int
    def __init__(self, version: _Optional[int] = ..., czxid: _Optional[int] = ..., mzxid: _Optional[int] = ..., ctime_ms: _Optional[int] = ..., mtime_ms: _Optional[int] = ...) -> None: ...

class UnderReplication(_message.Message):
    __slots__ = ("replicas", "ctime_ms", "has_ctime", "raw", "decode_error")
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CTIME_MS_FIELD_NUMBER: _ClassVar[int]
    HAS_CTIME_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    DECODE_ERROR_FIELD_NUMBER: _ClassVar[int]
    replicas: _containers.RepeatedScalarFieldContainer[str]
    ctime_ms: int
    has_ctime: bool
    raw: bytes
    decode_error: str
    def __init__(self, replicas: _Optional[_Iterable[str]] = ..., ctime_ms: _Optional[int] = ..., has_ctime: _Optional[bool] = ..., raw: _Optional[bytes] = ..., decode_error: _Optional[str] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("ledgers", "under_replicated", "bookies", "duration_ms")
    LEDGERS_FIELD_NUMBER: _ClassVar[int]
    UNDER_REPLICATED_FIELD_NUMBER: _ClassVar[int]
    BOOKIES_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ledgers: int
    under_replicated: int
    bookies: int
    duration_ms: int
    def __init__(self, ledgers: _Optional[int] = ..., under_replicated: _Optional[int] = ..., bookies: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class LedgerEvent(_message.Message):
    __slots__ = ("kind", "origin", "ledger_id", "stat", "metadata", "decode_error", "under_replication", "bookie_id", "bookie_info", "racks", "snapshot", "observed_ms", "watcher_id", "epoch", "sequence", "ledgers_root", "recheck", "lost", "autorecovery")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    DECODE_ERROR_FIELD_NUMBER: _ClassVar[int]
    UNDER_REPLICATION_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_INFO_FIELD_NUMBER: _ClassVar[int]
    RACKS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_MS_FIELD_NUMBER: _ClassVar[int]
    WATCHER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LEDGERS_ROOT_FIELD_NUMBER: _ClassVar[int]
    RECHECK_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    AUTORECOVERY_FIELD_NUMBER: _ClassVar[int]
    kind: EventKind
    origin: Origin
    ledger_id: int
    stat: ZnodeStat
    metadata: bytes
    decode_error: str
    under_replication: UnderReplication
    bookie_id: str
    bookie_info: bytes
    racks: bytes
    snapshot: SnapshotInfo
    observed_ms: int
    watcher_id: str
    epoch: int
    sequence: int
    ledgers_root: str
    recheck: RecheckReason
    lost: BookieLost
    autorecovery: AutoRecovery
    def __init__(self, kind: _Optional[_Union[EventKind, str]] = ..., origin: _Optional[_Union[Origin, str]] = ..., ledger_id: _Optional[int] = ..., stat: _Optional[_Union[ZnodeStat, _Mapping]] = ..., metadata: _Optional[bytes] = ..., decode_error: _Optional[str] = ..., under_replication: _Optional[_Union[UnderReplication, _Mapping]] = ..., bookie_id: _Optional[str] = ..., bookie_info: _Optional[bytes] = ..., racks: _Optional[bytes] = ..., snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ..., observed_ms: _Optional[int] = ..., watcher_id: _Optional[str] = ..., epoch: _Optional[int] = ..., sequence: _Optional[int] = ..., ledgers_root: _Optional[str] = ..., recheck: _Optional[_Union[RecheckReason, str]] = ..., lost: _Optional[_Union[BookieLost, _Mapping]] = ..., autorecovery: _Optional[_Union[AutoRecovery, _Mapping]] = ...) -> None: ...
