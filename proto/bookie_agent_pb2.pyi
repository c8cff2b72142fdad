from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListingsRequest(_message.Message):
    __slots__ = ("ledger_ids",)
    LEDGER_IDS_FIELD_NUMBER: _ClassVar[int]
    ledger_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ledger_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ListingsResponse(_message.Message):
    __slots__ = ("listings", "bookie_id")
    LISTINGS_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    listings: _containers.RepeatedCompositeFieldContainer[LedgerListing]
    bookie_id: str
    def __init__(self, listings: _Optional[_Iterable[_Union[LedgerListing, _Mapping]]] = ..., bookie_id: _Optional[str] = ...) -> None: ...

class LedgerListing(_message.Message):
    __slots__ = ("ledger_id", "status", "reason", "listing", "as_of_ms", "fenced", "has_ledger_record", "limbo")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[LedgerListing.Status]
        POSITIVE: _ClassVar[LedgerListing.Status]
        NO_LEDGER: _ClassVar[LedgerListing.Status]
        UNKNOWN: _ClassVar[LedgerListing.Status]
    STATUS_UNSPECIFIED: LedgerListing.Status
    POSITIVE: LedgerListing.Status
    NO_LEDGER: LedgerListing.Status
    UNKNOWN: LedgerListing.Status
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LISTING_FIELD_NUMBER: _ClassVar[int]
    AS_OF_MS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    HAS_LEDGER_RECORD_FIELD_NUMBER: _ClassVar[int]
    LIMBO_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    status: LedgerListing.Status
    reason: str
    listing: bytes
    as_of_ms: int
    fenced: bool
    has_ledger_record: bool
    limbo: bool
    def __init__(self, ledger_id: _Optional[int] = ..., status: _Optional[_Union[LedgerListing.Status, str]] = ..., reason: _Optional[str] = ..., listing: _Optional[bytes] = ..., as_of_ms: _Optional[int] = ..., fenced: _Optional[bool] = ..., has_ledger_record: _Optional[bool] = ..., limbo: _Optional[bool] = ...) -> None: ...

class LedgersRequest(_message.Message):
    __slots__ = ("after_ledger_id", "max_ledgers")
    AFTER_LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_LEDGERS_FIELD_NUMBER: _ClassVar[int]
    after_ledger_id: int
    max_ledgers: int
    def __init__(self, after_ledger_id: _Optional[int] = ..., max_ledgers: _Optional[int] = ...) -> None: ...

class LedgersPage(_message.Message):
    __slots__ = ("ledgers", "end", "bookie_id", "as_of_ms")
    LEDGERS_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    AS_OF_MS_FIELD_NUMBER: _ClassVar[int]
    ledgers: _containers.RepeatedCompositeFieldContainer[HeldLedger]
    end: bool
    bookie_id: str
    as_of_ms: int
    def __init__(self, ledgers: _Optional[_Iterable[_Union[HeldLedger, _Mapping]]] = ..., end: _Optional[bool] = ..., bookie_id: _Optional[str] = ..., as_of_ms: _Optional[int] = ...) -> None: ...

class HeldLedger(_message.Message):
    __slots__ = ("ledger_id", "has_ledger_record", "limbo", "first_entry_id", "last_entry_id")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_LEDGER_RECORD_FIELD_NUMBER: _ClassVar[int]
    LIMBO_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    has_ledger_record: bool
    limbo: bool
    first_entry_id: int
    last_entry_id: int
    def __init__(self, ledger_id: _Optional[int] = ..., has_ledger_record: _Optional[bool] = ..., limbo: _Optional[bool] = ..., first_entry_id: _Optional[int] = ..., last_entry_id: _Optional[int] = ...) -> None: ...

class EntryHeadersRequest(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[EntryRef]
    def __init__(self, entries: _Optional[_Iterable[_Union[EntryRef, _Mapping]]] = ...) -> None: ...

class EntryRef(_message.Message):
    __slots__ = ("ledger_id", "entry_id")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ...) -> None: ...

class EntryHeadersResponse(_message.Message):
    __slots__ = ("results", "bookie_id")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EntryHeaderResult]
    bookie_id: str
    def __init__(self, results: _Optional[_Iterable[_Union[EntryHeaderResult, _Mapping]]] = ..., bookie_id: _Optional[str] = ...) -> None: ...

class EntryHeaderResult(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "found", "last_add_confirmed", "length", "reason")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    found: bool
    last_add_confirmed: int
    length: int
    reason: str
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., found: _Optional[bool] = ..., last_add_confirmed: _Optional[int] = ..., length: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("bookie_id", "directories")
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    bookie_id: str
    directories: _containers.RepeatedCompositeFieldContainer[DirectoryHealth]
    def __init__(self, bookie_id: _Optional[str] = ..., directories: _Optional[_Iterable[_Union[DirectoryHealth, _Mapping]]] = ...) -> None: ...

class DirectoryHealth(_message.Message):
    __slots__ = ("index", "path", "ok", "reason", "caught_up_ms")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CAUGHT_UP_MS_FIELD_NUMBER: _ClassVar[int]
    index: int
    path: str
    ok: bool
    reason: str
    caught_up_ms: int
    def __init__(self, index: _Optional[int] = ..., path: _Optional[str] = ..., ok: _Optional[bool] = ..., reason: _Optional[str] = ..., caught_up_ms: _Optional[int] = ...) -> None: ...

class LedgerData(_message.Message):
    __slots__ = ("exists", "fenced", "master_key", "explicit_lac", "limbo")
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_LAC_FIELD_NUMBER: _ClassVar[int]
    LIMBO_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    fenced: bool
    master_key: bytes
    explicit_lac: bytes
    limbo: bool
    def __init__(self, exists: _Optional[bool] = ..., fenced: _Optional[bool] = ..., master_key: _Optional[bytes] = ..., explicit_lac: _Optional[bytes] = ..., limbo: _Optional[bool] = ...) -> None: ...
