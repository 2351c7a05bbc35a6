"""What `eoctl trace` finds, as typed results: the lookup, the rows of each kind, a message's trace
and the whole result (rendered by eoctl.report.trace, serialized by TraceResult.to_dict)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

from eoctl.trace.reader import ScanNote, SinkRow


class Verdict(str, Enum):
    processed_once = "processed once"
    processed_twice = "processed twice"
    will_be_processed_twice = "will be processed twice"
    in_flight = "in flight"
    #: in flight, and the outbox entry it waits in is pending past --stuck-after (EO301): replay it
    stuck = "stuck"
    lost = "lost"
    ghost = "ghost"
    never_sent = "never sent"
    not_found = "not found"
    #: an endpoint it touches has a misnamed store table (eoctl.stores.layout.Misnamed): a
    #: configuration problem, never judged as loss or duplicates
    not_judged = "not judged"

    @property
    def bad(self) -> bool:
        """A verdict an operator must act on (exit code 1; a stuck entry too, as the audit's EO301 is
        an error); not found is not one (exit code 5: most often a typo, which must not read as data
        loss)."""
        return self in (Verdict.processed_twice, Verdict.will_be_processed_twice, Verdict.lost, Verdict.ghost,
                        Verdict.stuck)


@dataclass
class Lookup:
    kind: str  # message_id | token_id | sink
    value: str
    column: str | None = None  # for a sink lookup
    #: every id looked up (message and token lookups may name several, traced in one pass); value
    #: is the first
    values: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.values:
            self.values = [self.value]


@dataclass
class TraceOptions:
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    window: dt.timedelta = dt.timedelta(hours=24)
    full_scan: bool = False
    stuck_after: dt.timedelta = dt.timedelta(minutes=15)
    grace: dt.timedelta = dt.timedelta(hours=24)


@dataclass
class Copy:
    consumer: str  # the endpoint whose input carries it
    topic: str
    partition: int
    offset: int
    timestamp: Any
    token_id: str | None
    producer: str | None
    sequence: str | None
    causation_id: str | None
    attempt_id: str | None
    blobs: str | None
    processed: bool
    committed_offset: int | None
    token_present: bool | None = None  # in the consumer's token store; None when it has none


@dataclass
class TokenRow:
    endpoint: str  # whose token store
    token_id: str
    message_id: str | None
    destination: str | None
    attempt_id: str | None
    created_at: Any


#: a field of a result that trace reads but does not write into its JSON
_NOT_IN_JSON = {"json": False}

#: a pending entry holding more outgoing messages than this shows only those that name a traced
#: message or token (a batch job's entry may hold a million)
SHOWN_MESSAGES = 1_000


@dataclass
class Entry:
    endpoint: str
    incoming_message_id: str
    incoming_token_id: str | None
    attempt_id: str | None
    tokens_committed_at: Any
    created_at: Any
    #: the messages shown: every one it holds, or past SHOWN_MESSAGES those naming a traced id
    outgoing: list[dict[str, Any]]
    outgoing_messages: int = 0  # how many it holds
    age_seconds: int | None = None
    #: every message id it holds and every blob URI their headers name: filled for an entry
    #: processing a traced message (its verdict asks whether all were sent, and what it publishes)
    message_ids: frozenset[str | None] = field(default=frozenset(), metadata=_NOT_IN_JSON)
    blob_uris: frozenset[str] = field(default=frozenset(), metadata=_NOT_IN_JSON)


@dataclass
class Intent:
    endpoint: str
    intent_id: str
    incoming_message_id: str | None
    attempt_id: str | None
    kind: str | None
    ref: str | None
    created_at: Any


@dataclass
class Blob:
    producer: str
    name: str
    expected_sha256: str | None
    present: bool | None  # None: the producer has no blob prefix configured
    sha256_ok: bool | None
    error: str | None = None
    registered_only: bool = False  # named by an intent of its processing, published by no copy
    size: int | None = None
    modified: Any = None
    actual_sha256: str | None = None


@dataclass
class Event:
    at: Any
    what: str


@dataclass
class MessageTrace:
    message_id: str
    verdict: Verdict
    reasons: list[str]
    copies: list[Copy] = field(default_factory=list)
    tokens: list[TokenRow] = field(default_factory=list)
    emitted_by: Entry | None = None  # the sender's pending entry that holds it
    caused_entries: list[Entry] = field(default_factory=list)  # pending entries processing it
    caused_messages: list[dict[str, Any]] = field(default_factory=list)  # records it caused
    intents: list[Intent] = field(default_factory=list)
    blobs: list[Blob] = field(default_factory=list)
    sink_rows: list[SinkRow] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)  # what trace sees, by code
    recorded_findings: list[dict[str, Any]] = field(default_factory=list)  # from the last audit
    #: why a code is in one of `findings` and `recorded_findings` but not the other, one line each
    findings_differ: list[str] = field(default_factory=list)
    timeline: list[Event] = field(default_factory=list)
    what_to_do: str = ""  # one line under the verdict (eoctl.trace.verdict.what_to_do)
    #: why the verdict may not be the whole answer: records before the window trace read, which an
    #: older copy among them could change (None: every copy that decides it was read)
    unread: str | None = None


@dataclass
class TraceResult:
    lookup: Lookup
    messages: list[MessageTrace]
    scans: list[ScanNote]
    notes: list[str]
    history_run: str | None = None
    #: endpoint tables whose owner column never holds the endpoint's name (their messages not judged)
    misnamed: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "eoctl.trace/v1", **_plain(self)}

    def worst_is_bad(self) -> bool:
        return any(m.verdict.bad for m in self.messages)

    def nothing_found(self) -> bool:
        """Some id matched nothing (or no message at all was found)."""
        return not self.messages or any(m.verdict is Verdict.not_found for m in self.messages)


def _plain(value: Any) -> Any:
    """A result as JSON values, without its fields marked _NOT_IN_JSON (dataclasses.asdict would
    deep-copy them first)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value) if f.metadata.get("json", True)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return value


def utc(value: Any) -> Any:
    """A time as an aware UTC datetime (stores and readers give naive UTC or aware times)."""
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(dt.timezone.utc)
    return value


def position(c: Copy) -> str:
    return f"{c.topic}/{c.partition}@{c.offset}"


def age_text(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds // 60}m" if seconds >= 60 else f"{seconds}s"
