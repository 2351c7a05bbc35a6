"""What trace asks of an engine (eoctl.engine.run.open_trace_reader gives the configured one's):
scans of the inputs and sink lookups, and the values they exchange (bounds, clauses, sink rows, scan
notes). Everything else of a trace is engine-free (eoctl.trace.run)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from eoctl.errors import UsageError

if TYPE_CHECKING:
    from eoctl.config.model import Config
    from eoctl.incremental import IndexedRead


class TraceReader(Protocol):
    def scan(self, config: Config, bounds: Bounds, committed: dict[str, dict[str, dict[int, int]]],
             clauses: list[Clause], purpose: str) -> tuple[list[dict[str, Any]], ScanNote]:
        """The records within `bounds` that meet one of `clauses` (Clause), with
        their protocol columns, `processed` against `committed`, and the scan's note."""

    def record_index(self, config: Config) -> tuple[IndexedRead | None, str | None]:
        """The newest recorded audit's record index that covers every input unchanged
        (find_indexed_read on this engine's file system), else why there is none."""

    def sink_lookup(self, config: Config, column: str, value: str) -> tuple[list[SinkRow], bool]:
        """The sink rows (at most 1,000 per sink) whose `column` equals `value`, and whether any
        sink has that column."""

    def sink_rows(self, config: Config, message_ids: set[str]) -> tuple[list[SinkRow], dict]:
        """The rows of every sink whose message-id column is one of `message_ids` (at most 1,000
        per sink), and each sink's columns ((endpoint, sink) -> Ibis schema)."""

    def close(self) -> None: ...


@dataclass
class SinkRow:
    endpoint: str
    sink: str
    row: dict[str, Any]


@dataclass
class ScanNote:
    """How one pass read the topics: the bounds it used and how many records it read.
    `unread`: the inputs holding records before a window trace chose itself, which it did not read
    (a copy among them could change a verdict); `indexed`: the records looked up in a record index."""

    purpose: str
    inputs: list[str]
    bounds: str
    records_read: int
    full: bool
    unread: list[str] = field(default_factory=list)
    indexed: int = 0


@dataclass
class Bounds:
    """What a scan of the topics reads, and why (said in the output): a time span, or a record
    index and the source past its end (`index`). `chosen`: a window trace chose itself (from the
    stores' first sign of the message), not one the user gave: older records it leaves unread are
    said (ScanNote.unread)."""

    since: dt.datetime | None
    until: dt.datetime | None
    why: str
    index: IndexedRead | None = None
    chosen: bool = False


#: one condition of a scan: protocol column -> accepted values, all of them (AND); a scan keeps
#: the records that meet any of its conditions (OR)
Clause = dict[str, set[str]]


def live_clauses(clauses: list[Clause]) -> list[Clause]:
    """The clauses that can match: a clause with an empty value set matches nothing."""
    return [c for c in clauses if c and all(c.values())]


def sink_key_literal(column: str, value: str, kind: str) -> Any:
    """`value` as the sink column's own kind ("integer", "number", else text), so the predicate is
    pushed down to files and databases; a value that is not a number for a number column is a
    usage error."""
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
    except ValueError:
        raise UsageError(f"--by {column}={value!r}: the sink column {column} holds numbers") from None
    return value


def naive_utc(value: Any) -> Any:
    """A time as UTC wall time without a zone (what Spark's Row.asDict gives)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def unread_inputs(config: Config, since: dt.datetime, archive_older: Callable[[str], bool]) -> list[str]:
    """The endpoints whose input holds records before `since` (ScanNote.unread): a live topic's
    asked of the broker, an archive's of the engine (`archive_older`: endpoint -> whether one is)."""
    return [name for name, ep in config.endpoints.items() if ep.input is not None
            and (older_live_records(config, name, since) if ep.input.kafka else archive_older(name))]


def older_live_records(config: Config, name: str, since: dt.datetime) -> bool:
    """Whether an endpoint's live input holds records before `since` (asked of the broker: a
    partition whose offset for that time is past its log start)."""
    from eoctl.sources.kafka import partition_offsets, time_ranges

    source = config.endpoints[name].input
    assert source is not None and source.kafka is not None
    conn = config.kafka[source.kafka]
    starts = {(r.topic, r.partition): r.start for r in time_ranges(conn, source.topics, since, None)}
    return any(p.high_watermark > p.log_start and starts.get((p.topic, p.partition), p.high_watermark) > p.log_start
               for p in partition_offsets(conn, source.topics))



def clause_condition(clauses: list[Clause], column: Callable[[str], str]) -> tuple[str, list[str]]:
    """The clauses as one SQL condition with bound parameters (`column`: a protocol column's SQL,
    quoted) and its parameters, in order; FALSE when none can match."""
    live = live_clauses(clauses)
    params: list[str] = []
    parts = []
    for clause in live:
        terms = []
        for name, values in clause.items():
            ordered = sorted(values)
            params += ordered
            terms.append(f"{column(name)} IN ({', '.join('?' for _ in ordered)})")
        parts.append("(" + " AND ".join(terms) + ")")
    return (" OR ".join(parts) or "FALSE"), params
