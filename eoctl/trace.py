"""`eoctl trace`: everything eoctl can see about one logical message, and a verdict.

Where each piece comes from, and how it is found without reading more than needed:
- store rows (tokens, pending outbox entries, intents) by indexed SQL lookups, straight from the
  stores (no Spark);
- sink rows by a pushed-down predicate on the sink's message-id or key column;
- blobs named by the message, opened one by one through fsspec (present? sha256 as carried?);
- copies on the topics by one filtered Spark scan of every configured input that returns only the
  matching records and a count. The scan starts at `--since` (on Kafka: the offsets of that time,
  asked of the broker) or, failing that, at the store's first sign of the message less `--window`;
  otherwise it reads the whole topic and says so. A second, time-bounded pass looks for the other
  attempts of the same incoming message (EO302), the records sharing a copy's producer and sequence
  (EO103), and copies a token lookup revealed.

The message's findings are not decided here: the audit's own checks run over the rows gathered
(eoctl.engine.duckdb_trace.message_findings), and the verdict follows the findings that name the message (VERDICT_OF);
the facts only refine it and say why in words.

Nothing is collected but the matches: a message has a handful of copies.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

from eoctl.config.model import Config, EndpointConfig
from eoctl.errors import SourceError, UsageError
from eoctl.report.findings import names_message
from eoctl.sources.tables import quote_ident
from eoctl.stores.db import in_list, open_db
from eoctl.stores.layout import EndpointTable, StoreLayout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A producer's clock (record CreateTime) and the store's clock may disagree by this much.
_CLOCK_SKEW = dt.timedelta(minutes=15)


class Verdict(str, Enum):
    processed_once = "processed once"
    processed_twice = "processed twice"
    will_be_processed_twice = "will be processed twice"
    in_flight = "in flight"
    lost = "lost"
    ghost = "ghost"
    never_sent = "never sent"
    not_found = "not found"

    @property
    def bad(self) -> bool:
        """A verdict an operator must act on (exit code 1)."""
        return self in (Verdict.processed_twice, Verdict.will_be_processed_twice, Verdict.lost, Verdict.ghost,
                        Verdict.not_found)


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


@dataclass
class Entry:
    endpoint: str
    incoming_message_id: str
    incoming_token_id: str | None
    attempt_id: str | None
    tokens_committed_at: Any
    created_at: Any
    outgoing: list[dict[str, Any]]
    age_seconds: int | None = None


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
class SinkRow:
    endpoint: str
    sink: str
    row: dict[str, Any]


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
    timeline: list[Event] = field(default_factory=list)


@dataclass
class ScanNote:
    """How one pass read the topics: the bounds it used and how many records it read."""

    purpose: str
    inputs: list[str]
    bounds: str
    records_read: int
    full: bool


@dataclass
class TraceResult:
    lookup: Lookup
    messages: list[MessageTrace]
    scans: list[ScanNote]
    notes: list[str]
    history_run: str | None = None

    def to_dict(self) -> dict[str, Any]:
        def clean(value: Any) -> Any:
            if isinstance(value, Enum):
                return value.value
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [clean(v) for v in value]
            if isinstance(value, (dt.datetime, dt.date)):
                return value.isoformat()
            if isinstance(value, (bytes, bytearray)):
                return value.decode("utf-8", "replace")
            return value

        return clean({"schema": "eoctl.trace/v1", **asdict(self)})

    def worst_is_bad(self) -> bool:
        return not self.messages or any(m.verdict.bad for m in self.messages)


# ----------------------------------------------------------------------------- store lookups


def _utc(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(dt.timezone.utc)
    return value


def _any_in(*conditions: tuple[str, set[str]]) -> tuple[list[str], list[str]]:
    """SQL conditions `column in (...)` (compared as text) for the non-empty value sets, and their
    parameters; the caller joins them with `or`."""
    where: list[str] = []
    params: list[str] = []
    for column, values in conditions:
        if values:
            where.append(f"cast({quote_ident(column)} as varchar) in {in_list(sorted(values))}")
            params += sorted(values)
    return where, params


class _Stores:
    """Indexed lookups in every endpoint's tokens, outbox and intents tables (read-only); in a
    table several endpoints share, each endpoint's own rows (eoctl.stores.layout)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.layout = StoreLayout(config)
        #: (endpoint, kind) -> primary key -> the row by canonical column: every store row trace
        #: read, for the checks' scope
        self.rows: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}

    def _keep(self, t: EndpointTable, key: str, **row: Any) -> None:
        self.rows.setdefault((t.endpoint, t.kind), {})[key] = row

    def _query(self, key: str, build) -> list[tuple[EndpointTable, tuple]]:
        out: list[tuple[EndpointTable, tuple]] = []
        for name in self.config.endpoints:
            t = self.layout.lookup(name, key)
            if not isinstance(t, EndpointTable):  # trace reads what there is; doctor names a missing table
                continue
            owned, owner = t.owned()
            with open_db(t.store, read_only=True) as db:
                sql, params = build(db.table(t.table), SimpleNamespace(**t.columns))
                out += [(t, row) for row in db.execute(sql + owned, [*params, *owner])]
        return out

    def tokens(self, *, message_ids: set[str], token_ids: set[str]) -> list[TokenRow]:
        if not message_ids and not token_ids:
            return []

        def build(table: str, c) -> tuple[str, list]:
            q = quote_ident
            where, params = _any_in((c.message_id, message_ids), (c.token_id, token_ids))
            return (f"select cast({q(c.token_id)} as varchar), cast({q(c.message_id)} as varchar), "
                    f"cast({q(c.attempt_id)} as varchar), {q(c.created_at)} from {table} "
                    f"where ({' or '.join(where)})", params)

        out = []
        for t, (tid, m, a, c) in self._query("tokens", build):
            self._keep(t, tid, token_id=tid, message_id=m, destination=t.owner, attempt_id=a, created_at=_utc(c))
            out.append(TokenRow(t.endpoint, tid, m, t.owner, a, _utc(c)))
        return out

    def entries(self, *, incoming: set[str], outgoing: set[str], tokens: set[str]) -> list[Entry]:
        """Pending entries processing one of `incoming`, or holding one of `outgoing` (message
        ids) or `tokens` (token ids) among their outgoing messages."""
        needles = sorted(outgoing | tokens)
        if not incoming and not needles:
            return []

        def build(table: str, c) -> tuple[str, list]:
            q = quote_ident
            where, params = _any_in((c.incoming_message_id, incoming))
            for needle in needles:  # outgoing is JSON text: a LIKE narrows, the parse below decides
                where.append(f"cast({q(c.outgoing)} as varchar) like %s")
                params.append(f"%{needle}%")
            return (f"select cast({q(c.incoming_message_id)} as varchar), cast({q(c.incoming_token_id)} as varchar), "
                    f"cast({q(c.attempt_id)} as varchar), {q(c.tokens_committed_at)}, {q(c.created_at)}, "
                    f"cast({q(c.outgoing)} as varchar) from {table} where ({' or '.join(where)})", params)

        out = []
        for table, (m, t, a, committed, created, outgoing_json) in self._query("outbox", build):
            try:
                messages = json.loads(outgoing_json) if outgoing_json else []
            except ValueError:
                messages = []
            if not isinstance(messages, list):
                messages = []
            messages = [x for x in messages if isinstance(x, dict)]
            holds = any(x.get("message_id") in outgoing or x.get("token_id") in tokens for x in messages)
            if m in incoming or holds:
                self._keep(table, m, endpoint=table.owner, incoming_message_id=m, incoming_token_id=t, attempt_id=a,
                           outgoing=outgoing_json, tokens_committed_at=_utc(committed), created_at=_utc(created))
                out.append(Entry(table.endpoint, m, t, a, _utc(committed), _utc(created), messages))
        return out

    def intents(self, *, incoming: set[str], refs: set[str]) -> list[Intent]:
        if not incoming and not refs:
            return []

        def build(table: str, c) -> tuple[str, list]:
            q = quote_ident
            where, params = _any_in((c.incoming_message_id, incoming), (c.ref, refs))
            return (f"select cast({q(c.intent_id)} as varchar), cast({q(c.incoming_message_id)} as varchar), "
                    f"cast({q(c.attempt_id)} as varchar), {q(c.kind)}, cast({q(c.ref)} as varchar), "
                    f"{q(c.created_at)} from {table} where ({' or '.join(where)})", params)

        out = []
        for t, (i, m, a, k, r, c) in self._query("intents", build):
            self._keep(t, i, intent_id=i, endpoint=t.owner, incoming_message_id=m, attempt_id=a, kind=k, ref=r,
                       created_at=_utc(c))
            out.append(Intent(t.endpoint, i, m, a, k, r, _utc(c)))
        return out

    def frames(self, spark: SparkSession) -> dict[tuple[str, str], DataFrame]:
        """The rows read, as the checks read a table: one frame per table of every endpoint that
        has it (empty when no row was read)."""
        from eoctl.engine.frames import local_frame

        out = {}
        for name in self.config.endpoints:
            for kind, ddl in SCOPE_COLUMNS.items():
                if isinstance(self.layout.lookup(name, kind), EndpointTable):  # the tables there are
                    columns = [c.split()[0] for c in ddl.split(", ")]
                    rows = [tuple(r[c] for c in columns) for r in self.rows.get((name, kind), {}).values()]
                    out[(name, kind)] = local_frame(spark, rows, ddl)
        return out


#: the canonical columns of each store table that the checks read
SCOPE_COLUMNS = {
    "tokens": "token_id string, message_id string, destination string, attempt_id string, created_at timestamp",
    "outbox": "endpoint string, incoming_message_id string, incoming_token_id string, attempt_id string, "
              "outgoing string, tokens_committed_at timestamp, created_at timestamp",
    "intents": "intent_id string, endpoint string, incoming_message_id string, attempt_id string, kind string, "
               "ref string, created_at timestamp",
}


# ------------------------------------------------------------------------------ topic scans


@dataclass
class _Bounds:
    since: dt.datetime | None
    until: dt.datetime | None
    why: str


def _kafka_ranges(config: Config, ep: EndpointConfig, bounds: _Bounds):
    """Offset ranges of an input's partitions between two times, asked of the broker (fast path:
    Spark then reads only that slice of each partition)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from eoctl.sources.kafka import LATEST, OffsetRange, admin, partition_offsets

    assert ep.input is not None and ep.input.kafka is not None
    conn = config.kafka[ep.input.kafka]
    offsets = {(p.topic, p.partition): p for p in partition_offsets(conn, ep.input.topics)}
    client = admin(conn)

    def at(when: dt.datetime | None, default: str) -> dict[tuple[str, int], int]:
        if when is None:
            return {k: (p.log_start if default == "start" else LATEST) for k, p in offsets.items()}
        ms = int(when.timestamp() * 1000)
        futures = client.list_offsets({TopicPartition(t, p): OffsetSpec.for_timestamp(ms) for t, p in offsets},
                                      request_timeout=conn.timeout_seconds)
        out = {}
        for tp, f in futures.items():
            found = f.result().offset  # -1: no record at or after that time
            out[(tp.topic, tp.partition)] = found if found >= 0 else offsets[(tp.topic, tp.partition)].high_watermark
        return out

    start, end = at(bounds.since, "start"), at(bounds.until, "end")
    return [OffsetRange(t, p, start[(t, p)], end[(t, p)]) for t, p in sorted(offsets)
            if end[(t, p)] == LATEST or start[(t, p)] < end[(t, p)]]


#: one condition of a scan: protocol column -> accepted values, all of them (AND); a scan keeps
#: the records that meet any of its conditions (OR)
Clause = dict[str, set[str]]


def _input_frame(spark: SparkSession, config: Config, name: str, ep: EndpointConfig, bounds: _Bounds,
                 committed: dict[str, dict[int, int]]) -> DataFrame | None:
    """An input's raw records (headers not decoded yet) within the bounds, with its consumer's
    committed offset per record."""
    from pyspark.sql import functions as F

    from eoctl.engine.frames import local_frame
    from eoctl.sources import read_input

    assert ep.input is not None
    ranges = None
    if ep.input.kafka and (bounds.since or bounds.until):
        ranges = _kafka_ranges(config, ep, bounds)
        if not ranges:
            return None  # nothing in that time span
    df = read_input(spark, config, ep.input, ranges, protocol=False)
    if bounds.since is not None:
        df = df.where(F.col("timestamp") >= F.lit(bounds.since.astimezone(dt.timezone.utc).replace(tzinfo=None)))
    if bounds.until is not None:
        df = df.where(F.col("timestamp") < F.lit(bounds.until.astimezone(dt.timezone.utc).replace(tzinfo=None)))
    rows = [(t, p, o) for t, parts in committed.items() for p, o in parts.items()]
    commits = local_frame(spark, rows, "c_topic string, c_partition int, committed long")
    df = df.join(F.broadcast(commits), (df.topic == commits.c_topic) & (df.partition == commits.c_partition),
                 "left").drop("c_topic", "c_partition")
    return df.select("topic", "partition", "offset", "timestamp", "headers", "committed",
                     F.lit(name).alias("consumer"))


def live_clauses(clauses: list[Clause]) -> list[Clause]:
    """The clauses that can match: a clause with an empty value set matches nothing."""
    return [c for c in clauses if c and all(c.values())]


def _clauses(clauses: list[Clause], test) -> Any:
    from functools import reduce

    from pyspark.sql import functions as F

    def both(clause: Clause):
        return reduce(lambda a, b: a & b, (test(col, values) for col, values in clause.items()))

    live = live_clauses(clauses)
    return reduce(lambda a, b: a | b, (both(c) for c in live)) if live else F.lit(False)


def _scan(spark: SparkSession, config: Config, bounds: _Bounds, committed: dict[str, dict[str, dict[int, int]]],
          clauses: list[Clause], purpose: str) -> tuple[list[dict[str, Any]], ScanNote]:
    """One pass over every input: the records the clauses select, and how many records were read.

    Every record is only tested for a header with one of the wanted values (no decoding); the few
    candidates then get their protocol columns, exactly as the audit reads them (a repeated header
    keeps its last value), and are tested again. One Spark job; only the matches reach the driver.
    """
    from functools import reduce

    from pyspark.sql import functions as F

    from eoctl.engine.spark_records import processed_flag, with_problem
    from eoctl.sources.records import with_protocol_columns

    names = config.protocol.headers
    frames, inputs = [], []
    for name, ep in config.endpoints.items():
        if ep.input is None:
            continue
        inputs.append(f"{name} ({', '.join(ep.input.topics)})")
        df = _input_frame(spark, config, name, ep, bounds, committed[name])
        if df is not None:
            frames.append(df)
    full = bounds.since is None and bounds.until is None
    if not frames:
        return [], ScanNote(purpose, inputs, bounds.why, 0, full)
    df = reduce(lambda a, b: a.unionByName(b), frames)

    def raw(col: str, values: set[str]):
        header = getattr(names, col)
        return F.exists("headers", lambda h: (h["key"] == header) & h["value"].cast("string").isin(sorted(values)))

    candidate = F.struct("consumer", "topic", "partition", "offset", "timestamp", "headers", "committed")
    read = df.agg(F.count(F.lit(1)).alias("n"),
                  F.collect_list(F.when(_clauses(clauses, raw), candidate)).alias("c"))
    found = with_protocol_columns(read.select("n", F.explode_outer("c").alias("r")).select("n", "r.*"), names)
    found = with_problem(found).withColumn("processed", processed_flag())
    found = found.where(F.col("offset").isNull()
                        | _clauses(clauses, lambda col, values: F.col(col).isin(sorted(values))))
    rows = found.drop("headers").collect()  # the count, and the few matching records
    hits = [r.asDict() for r in rows if r["offset"] is not None]
    for h in hits:
        del h["n"]
    records = int(rows[0]["n"]) if rows else 0
    return hits, ScanNote(purpose, inputs, bounds.why, records, full)


# ------------------------------------------------------------------------------ sinks, blobs


def _sink_frames(spark: SparkSession, config: Config):
    from eoctl.sources.tables import read_table

    for name, ep in config.endpoints.items():
        for sink in ep.sinks:
            yield name, sink, read_table(spark, config, sink)


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


def _typed_literal(df: DataFrame, column: str, value: str):
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, DoubleType, FloatType, IntegralType

    dtype = df.schema[column].dataType
    kind = ("integer" if isinstance(dtype, IntegralType)
            else "number" if isinstance(dtype, (DoubleType, FloatType, DecimalType)) else "text")
    literal = sink_key_literal(column, value, kind)
    return F.col(column) == F.lit(literal) if kind != "text" else F.col(column).cast("string") == F.lit(literal)


def find_by_sink_key(reader: TraceReader, config: Config, column: str, value: str) -> tuple[set[str], list[SinkRow]]:
    """Source message ids of the sink rows whose `column` equals `value`."""
    rows, seen_column = reader.sink_lookup(config, column, value)
    if not seen_column:
        known = sorted({f"{s.name}" for ep in config.endpoints.values() for s in ep.sinks})
        raise UsageError(f"--by {column}=...: no configured sink has a column {column!r}"
                         + (f" (sinks: {', '.join(known)})" if known else " (no sinks are configured)"))
    ids = {str(r.row[_sink_config(config, r).message_id_column]) for r in rows}
    return ids, rows


def _sink_config(config: Config, row: SinkRow):
    return next(s for s in config.endpoints[row.endpoint].sinks if s.name == row.sink)


def _sink_rows(spark: SparkSession, config: Config, message_ids: set[str]) -> tuple[list[SinkRow], dict]:
    """The rows of every sink whose message-id column is one of `message_ids`, and each sink's
    schema ((endpoint, sink) -> StructType)."""
    from pyspark.sql import functions as F

    out: list[SinkRow] = []
    schemas = {}
    for name, sink, df in _sink_frames(spark, config):
        schemas[(name, sink.name)] = df.schema
        for r in df.where(F.col(sink.message_id_column).cast("string").isin(sorted(message_ids))).limit(1000).collect():
            out.append(SinkRow(name, sink.name, r.asDict()))
    return out, schemas


def _check_blob(config: Config, producer: str | None, uri: str, expected: str | None) -> Blob:
    import fsspec

    ep = config.endpoints.get(producer or "")
    if ep is None or ep.blobs is None:
        return Blob(producer or "?", uri, expected, None, None, "the producer has no blob prefix configured")
    try:
        fs, root = fsspec.core.url_to_fs(str(ep.blobs), **ep.blob_options)
    except (ImportError, ValueError) as exc:
        raise SourceError(f"blob prefix {ep.blobs} cannot be opened: {str(exc).splitlines()[0]}") from None
    root = root.rstrip("/")
    name = uri.split(root + "/", 1)[1] if (root + "/") in uri else uri  # absolute URIs under the prefix
    path = f"{root}/{name}"
    try:
        info = fs.info(path)
        digest = hashlib.sha256()
        with fs.open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        return Blob(producer or "?", name, expected, False, None)
    try:
        modified = _utc(fs.modified(path))
    except (NotImplementedError, OSError):
        modified = None
    actual = digest.hexdigest()
    ok = None if not expected else actual == expected.lower()
    return Blob(producer or "?", name, expected, True, ok, size=info.get("size"), modified=modified,
                actual_sha256=actual)


# ------------------------------------------------------------------------------ the trace


def _blob_refs(text: str | None) -> list[dict[str, Any]]:
    try:
        refs = json.loads(text) if text else []
    except ValueError:
        return []
    return [r for r in refs if isinstance(r, dict) and r.get("uri")] if isinstance(refs, list) else []


def _copy(h: dict[str, Any]) -> Copy:
    return Copy(h["consumer"], h["topic"], h["partition"], h["offset"], _utc(h["timestamp"]), h["token_id"],
                h["producer"], h["sequence"], h["causation_id"], h["attempt_id"], h["blobs"], h["processed"],
                h.get("committed"))


def _auto_bounds(options: TraceOptions, tokens: list[TokenRow], entries: list[Entry], ids: set[str]) -> _Bounds:
    if options.since or options.until:
        return _Bounds(options.since, options.until, "from --since/--until")
    if options.full_scan:
        return _Bounds(None, None, "full scan (--full-scan)")
    # Tokens of a message and the entry holding it are made before any copy is sent.
    known = [t.created_at for t in tokens if t.message_id in ids and isinstance(t.created_at, dt.datetime)]
    known += [e.created_at for e in entries if isinstance(e.created_at, dt.datetime)
              and any(m.get("message_id") in ids for m in e.outgoing)]
    if not known:
        return _Bounds(None, None, "full scan: nothing in the stores dates this message (give --since to narrow)")
    start = min(known) - options.window - _CLOCK_SKEW
    window = _age(int(options.window.total_seconds()))
    return _Bounds(start, None, f"from {start.isoformat(timespec='seconds')}: the stores' first sign of the "
                                f"message less --window {window} (--full-scan reads everything)")


class TraceReader(Protocol):
    """What trace asks of an engine: scans of the inputs, sink lookups, and the catalog's
    message-scoped checks over the rows gathered. Everything else is engine-free."""

    def scan(self, config: Config, bounds: _Bounds, committed: dict[str, dict[str, dict[int, int]]],
             clauses: list[Clause], purpose: str) -> tuple[list[dict[str, Any]], ScanNote]: ...

    def sink_lookup(self, config: Config, column: str, value: str) -> tuple[list[SinkRow], bool]:
        """The sink rows (at most 1,000 per sink) whose `column` equals `value`, and whether any
        sink has that column."""

    def sink_rows(self, config: Config, message_ids: set[str]) -> tuple[list[SinkRow], dict]: ...

    def scoped_findings(self, config: Config, options: TraceOptions, hits: list[dict[str, Any]], committed: dict,
                        stores: _Stores, sink_rows: list[SinkRow], sink_schemas: dict,
                        messages: list[MessageTrace]) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


class _SparkReader:
    """trace on the Spark engine."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def scan(self, config, bounds, committed, clauses, purpose):
        return _scan(self.spark, config, bounds, committed, clauses, purpose)

    def sink_lookup(self, config, column, value):
        rows: list[SinkRow] = []
        seen_column = False
        for name, sink, df in _sink_frames(self.spark, config):
            if column not in df.columns:
                continue
            seen_column = True
            for r in df.where(_typed_literal(df, column, value)).limit(1000).collect():
                rows.append(SinkRow(name, sink.name, r.asDict()))
        return rows, seen_column

    def sink_rows(self, config, message_ids):
        return _sink_rows(self.spark, config, message_ids)

    def scoped_findings(self, config, options, hits, committed, stores, sink_rows, sink_schemas, messages):
        import ibis
        from ibis.backends.sql.datatypes import PySparkType

        from eoctl.engine.duckdb_trace import message_findings

        # the few rows gathered are checked in process, as on the DuckDB engine
        schemas = {key: ibis.schema({f.name: PySparkType.from_string(f.dataType.simpleString()) for f in st.fields})
                   for key, st in sink_schemas.items()}
        return message_findings(config, options, hits, stores, sink_rows, schemas, messages)

    def close(self) -> None:
        pass


def run_trace(spark: SparkSession | None, config: Config, lookup: Lookup,
              options: TraceOptions | None = None) -> TraceResult:
    """Trace `lookup` on the Spark engine (`spark`), or on the DuckDB engine (None)."""
    if spark is not None:
        return _run_trace(_SparkReader(spark), config, lookup, options)
    from eoctl.engine.duckdb_trace import DuckDBTraceReader

    reader = DuckDBTraceReader(config)
    try:
        return _run_trace(reader, config, lookup, options)
    finally:
        reader.close()


def _run_trace(reader: TraceReader, config: Config, lookup: Lookup, options: TraceOptions | None) -> TraceResult:
    from eoctl.sources import input_committed_offsets

    options = options or TraceOptions()
    stores = _Stores(config)
    notes: list[str] = stores.layout.notes()
    sink_hits: list[SinkRow] = []
    ids: set[str] = set()
    token_ids: set[str] = set()
    if lookup.kind == "message_id":
        ids = set(lookup.values)
    elif lookup.kind == "token_id":
        token_ids = set(lookup.values)
    else:
        assert lookup.column is not None
        ids, sink_hits = find_by_sink_key(reader, config, lookup.column, lookup.value)
        if not ids:
            notes.append(f"no sink row has {lookup.column} = {lookup.value!r}")

    # what the stores know first: it dates the message and names more ids
    tokens = stores.tokens(message_ids=ids, token_ids=token_ids)
    ids |= {t.message_id for t in tokens if t.message_id and t.token_id in token_ids}
    entries = stores.entries(incoming=ids, outgoing=ids, tokens=token_ids)
    for e in entries:
        ids |= {m["message_id"] for m in e.outgoing if m.get("token_id") in token_ids and m.get("message_id")}
    if not ids and not token_ids:
        return TraceResult(lookup, [], [], notes)

    committed = {n: input_committed_offsets(config, ep.input) for n, ep in config.endpoints.items() if ep.input}
    bounds = _auto_bounds(options, tokens, entries, ids)
    scans: list[ScanNote] = []
    searched = set(ids)
    # the stores' tokens of the message too: a record carrying one is what keeps it from being an orphan
    hits, note = reader.scan(config, bounds, committed,
                       [{"message_id": ids}, {"token_id": token_ids | {t.token_id for t in tokens}},
                        {"causation_id": ids}],
                       "copies of the message and the messages it caused")
    scans.append(note)
    ids |= {h["message_id"] for h in hits if h["token_id"] in token_ids and h["message_id"]}

    # second pass, within --window of the copies: copies of ids a token revealed, every attempt that
    # answered the same incoming message (EO302), and the records sharing a copy's (producer,
    # sequence) (EO103)
    new_ids = ids - searched
    mine = [h for h in hits if h["message_id"] in ids]
    parents = {(h["producer"], h["causation_id"]) for h in mine if h["producer"] and h["causation_id"]}
    sequences = {(h["producer"], h["sequence"]) for h in mine if h["producer"] and h["sequence"]}
    if new_ids or parents or sequences:
        times = [_utc(h["timestamp"]) for h in mine if h["timestamp"] is not None]
        if options.since or options.until or options.full_scan or not times:
            second = bounds
        else:
            second = _Bounds(min(times) - options.window, max(times) + options.window,
                             f"within --window {_age(int(options.window.total_seconds()))} of the copies")
        clauses: list[Clause] = [{"message_id": new_ids}, {"causation_id": new_ids},
                                 {"causation_id": {c for _, c in parents}, "producer": {p for p, _ in parents}}]
        clauses += [{"producer": {p}, "sequence": {q}} for p, q in sorted(sequences)]
        more, note = reader.scan(config, second, committed, clauses,
                           "other attempts for the same incoming message, records of the same sequence"
                           + (", copies by token" if new_ids else ""))
        scans.append(note)
        seen = {_where(h) for h in hits}
        hits += [h for h in more if _where(h) not in seen]

    all_tokens = {h["token_id"] for h in hits if h["message_id"] in ids and h["token_id"]} | token_ids
    tokens = stores.tokens(message_ids=ids, token_ids=all_tokens)
    causes = {h["causation_id"] for h in hits if h["message_id"] in ids and h["causation_id"]}
    entries = stores.entries(incoming=ids | causes, outgoing=ids, tokens=token_ids)
    blob_refs = {r["uri"] for h in hits if h["message_id"] in ids for r in _blob_refs(h["blobs"])}
    intents = stores.intents(incoming=ids, refs=all_tokens | {t.token_id for t in tokens} | blob_refs)
    registered = {i.ref for i in intents if i.kind == "token" and i.ref} - all_tokens
    if registered:  # tokens an attempt processing the message made: present ones are its garbage
        tokens += stores.tokens(message_ids=set(), token_ids=registered)
    sink_rows, sink_schemas = reader.sink_rows(config, ids)
    for row in sink_hits:
        if row not in sink_rows:
            sink_rows.append(row)

    messages = [_assemble(config, options, m, hits, tokens, entries, intents, sink_rows) for m in sorted(ids)]
    found = [] if not messages else reader.scoped_findings(config, options, hits, committed, stores, sink_rows,
                                                           sink_schemas, messages)
    for m in messages:
        m.findings = [f for f in found if m.message_id in names_message(f["code"], f["evidence"])]
        m.verdict, m.reasons = _verdict(m, hits)
        m.timeline = _timeline(m)
    history_run = _attach_recorded_findings(config, messages, notes)
    return TraceResult(lookup, messages, scans, notes, history_run)


def _where(h: dict[str, Any]) -> tuple:
    """A record as one consumer reads it (two endpoints may read one topic)."""
    return h["consumer"], h["topic"], h["partition"], h["offset"]


def _assemble(config: Config, options: TraceOptions, message_id: str, hits: list[dict[str, Any]],
              tokens: list[TokenRow], entries: list[Entry], intents: list[Intent],
              sink_rows: list[SinkRow]) -> MessageTrace:
    """What trace found of one message: its copies, store rows, blobs and sink rows (no verdict yet)."""
    copies = sorted((_copy(h) for h in hits if h["message_id"] == message_id),
                    key=lambda c: (c.timestamp or dt.datetime.min.replace(tzinfo=dt.timezone.utc), c.topic,
                                   c.partition, c.offset))
    present = {(t.endpoint, t.token_id) for t in tokens}
    for c in copies:
        ep = config.endpoints[c.consumer]
        c.token_present = (c.consumer, c.token_id) in present if ep.store_of(ep.tokens) else None
    registered = {i.ref for i in intents if i.incoming_message_id == message_id and i.kind == "token"}
    my_tokens = [t for t in tokens if t.message_id == message_id or t.token_id in {c.token_id for c in copies}
                 or t.token_id in registered]
    emitted_by = next((e for e in entries if any(m.get("message_id") == message_id for m in e.outgoing)), None)
    caused_entries = [e for e in entries if e.incoming_message_id == message_id]
    for e in entries:
        if e is not None and isinstance(e.created_at, dt.datetime):
            e.age_seconds = int((options.now - e.created_at).total_seconds())
    caused: dict[tuple, dict[str, Any]] = {}
    for h in hits:
        if h["causation_id"] == message_id:
            k = (h["message_id"], h["topic"], h["attempt_id"])
            caused.setdefault(k, {"message_id": h["message_id"], "topic": h["topic"], "producer": h["producer"],
                                  "attempt_id": h["attempt_id"], "copies": 0})["copies"] += 1
    blob_refs = {(c.producer, r["uri"]): r.get("sha256") for c in copies for r in _blob_refs(c.blobs)}
    if emitted_by is not None:
        for m in emitted_by.outgoing:
            if m.get("message_id") == message_id:
                header = (m.get("headers") or {}).get(config.protocol.headers.blobs)
                for r in _blob_refs(header):
                    blob_refs.setdefault((emitted_by.endpoint, r["uri"]), r.get("sha256"))
    blobs = [_check_blob(config, p, uri, sha) for (p, uri), sha in sorted(blob_refs.items(), key=str)]
    published = {b.name for b in blobs}
    # what its processing published: blobs on the messages it caused, sent or still pending
    published |= {r["uri"] for h in hits if h["causation_id"] == message_id for r in _blob_refs(h["blobs"])}
    published |= {r["uri"] for e in caused_entries for m in e.outgoing
                  for r in _blob_refs((m.get("headers") or {}).get(config.protocol.headers.blobs))}
    for i in intents:  # blobs an attempt processing the message prepared and nothing publishes
        if i.incoming_message_id == message_id and i.kind == "blob" and i.ref and i.ref not in published:
            blob = _check_blob(config, i.endpoint, i.ref, None)
            blob.registered_only = True
            blobs.append(blob)
            published.add(blob.name)
    mine = {t.token_id for t in my_tokens} | {c.token_id for c in copies if c.token_id} | {b.name for b in blobs}
    my_intents = [i for i in intents if i.incoming_message_id == message_id or i.ref in mine]
    my_sink = [s for s in sink_rows
               if str(s.row.get(_sink_config(config, s).message_id_column)) == message_id]
    return MessageTrace(message_id, Verdict.not_found, [], copies, my_tokens, emitted_by, caused_entries,
                        sorted(caused.values(), key=lambda x: (x["topic"], x["message_id"])), my_intents, blobs,
                        my_sink)


#: what a critical finding on a message makes of it, first match wins (held complete by a unit test:
#: no message with a critical finding gets a verdict that is not bad)
VERDICT_OF = {
    "EO302": Verdict.ghost,
    "EO501": Verdict.processed_twice,
    "EO102": Verdict.will_be_processed_twice,  # or processed twice: see _several_tokens
    "EO402": Verdict.lost,
    "EO403": Verdict.lost,
    "EO202": Verdict.lost,
}


def _verdict(t: MessageTrace, hits: list[dict[str, Any]]) -> tuple[Verdict, list[str]]:
    """The verdict follows the message's findings (t.findings, from the checks); the facts only
    refine it (processed twice or about to be) and say why in words."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for f in t.findings:
        rows.setdefault(f["code"], []).append(f)
    for code, verdict in VERDICT_OF.items():
        if code not in rows:
            continue
        first = rows[code][0]
        ev = first["evidence"]
        if code == "EO302":
            return verdict, [f"sent by attempt {ev.get('ghost_attempt')} of {ev.get('producer')}, which never "
                             f"committed; attempt {ev.get('committed_attempt')} answered the same incoming message "
                             f"{ev.get('causation_id')}"]
        if code == "EO501":
            return verdict, [f"{ev.get('rows')} rows in sink {first['where']} ({first['endpoint']})"]
        if code == "EO102":
            return _several_tokens(t)
        if code in ("EO402", "EO403"):
            return verdict, [f"blob {f['evidence'].get('name')} it publishes "
                             + ("does not exist" if f["code"] == "EO402" else
                                "does not match its sha256: it was overwritten")
                             for f in t.findings if f["code"] in ("EO402", "EO403")]
        return verdict, [f"in flight at {ev.get('topic')}/{ev.get('partition')}@{ev.get('offset')} but its token "
                         f"{ev.get('token_id')} is gone: the consumer will drop it as a duplicate, and its effect "
                         "is in no sink"]

    processed = [c for c in t.copies if c.processed]
    waiting = [c for c in t.copies if not c.processed]
    stuck = {(f["endpoint"], f["evidence"].get("incoming_message_id")) for f in rows.get("EO301", [])}

    def is_stuck(e: Entry) -> bool:
        return (e.endpoint, e.incoming_message_id) in stuck

    # in flight: not sent yet, waiting on the topic, or its processing's entry still pending
    if not t.copies:
        if t.emitted_by is not None:
            e = t.emitted_by
            return Verdict.in_flight, [f"not sent yet: pending in the outbox of {e.endpoint} "
                                       f"(entry {e.incoming_message_id}, {_age(e.age_seconds)} old"
                                       + (", stuck: replay-outbox sends it" if is_stuck(e) else "") + ")"]
        if t.tokens or t.intents:
            return Verdict.never_sent, ["the stores know it (tokens or intents) but no copy is on any topic and no "
                                        "pending entry holds it: left by an attempt that did not send it"]
        if t.sink_rows:
            return Verdict.processed_once, ["its effect is in the sink; no copy is left on the topics read"]
        return Verdict.not_found, ["no copy on the topics read, nothing in the stores or sinks"]
    if not processed:
        c = waiting[0]
        return Verdict.in_flight, [f"at {_pos(c)}, above {c.consumer}'s committed offset {c.committed_offset}; "
                                   f"its token is {'present' if c.token_present else 'unknown'}"]
    open_entries = [e for e in t.caused_entries if not _entry_sent(e, hits)]
    if open_entries:
        e = open_entries[0]
        return Verdict.in_flight, [f"consumed by {e.endpoint}, but the messages its processing emits are pending "
                                   f"in the outbox ({_age(e.age_seconds)} old"
                                   + (", stuck: replay-outbox sends them" if is_stuck(e) else "") + ")"]
    reasons = [f"consumed by {processed[0].consumer} at {_pos(processed[0])}"]
    if len(t.copies) > 1:
        tokens = {c.token_id for c in t.copies}
        reasons.append(f"{len(t.copies)} copies with one token: redeliveries the consumer dropped" if len(tokens) == 1
                       else f"{len(t.copies)} copies under {len(tokens)} tokens on different topics or consumers")
    if t.sink_rows:
        reasons.append(f"one row in sink {t.sink_rows[0].sink}")
    for e in t.caused_entries:
        reasons.append(f"its entry at {e.endpoint} is still pending although its messages were sent")
    return Verdict.processed_once, reasons


def _several_tokens(t: MessageTrace) -> tuple[Verdict, list[str]]:
    """EO102 on a message: processed twice when two of its tokens were used up, else about to be.

    A token is used up when a copy under it was processed, or is gone from the consumer's store
    although a copy under it exists: only processing removes a token a record carries (gc never
    does), so a copy still in flight whose token is gone was processed before its offset was
    committed. A copy waiting under a token still present will be processed."""
    processed = [c for c in t.copies if c.processed]
    used = {c.token_id for c in processed} | {c.token_id for c in t.copies if c.token_present is False}
    if len(used) > 1:
        return Verdict.processed_twice, [f"{len(used)} different tokens were consumed: {', '.join(sorted(used))}"]
    ahead = [c for c in t.copies if not c.processed and c.token_present is not False and c.token_id not in used]
    if not ahead:  # EO102 groups copies per consumer and topic; these facts do not say more
        tokens = sorted({c.token_id for c in t.copies if c.token_id})
        return Verdict.will_be_processed_twice, [f"it travels under {len(tokens)} tokens: {', '.join(tokens)}"]
    c = ahead[0]
    if used:
        first = next(p for p in t.copies if p.token_id in used)
        before = (f"it was processed at {_pos(first)} under token {first.token_id}" if first.processed
                  else f"token {first.token_id} of its copy at {_pos(first)} was consumed")
    else:
        other = next((a.token_id for a in ahead if a.token_id != c.token_id), "?")
        before = f"another copy waits under token {other}"
    store = "which is present in its store" if c.token_present else "whose store eoctl does not read"
    return Verdict.will_be_processed_twice, [
        f"copy at {_pos(c)} waits above {c.consumer}'s committed offset under token {c.token_id}, {store}: the "
        f"consumer will process it; {before}"]


def _entry_sent(e: Entry, hits: list[dict[str, Any]]) -> bool:
    """Every outgoing message of a pending entry is on a topic read (with a token)."""
    sent = {h["message_id"] for h in hits if h["causation_id"] == e.incoming_message_id}
    wanted = {m.get("message_id") for m in e.outgoing}
    return wanted <= sent  # an entry with nothing to send has sent everything


def _timeline(t: MessageTrace) -> list[Event]:
    events: list[Event] = []
    for tok in t.tokens:
        events.append(Event(tok.created_at, f"token {tok.token_id} created in {tok.endpoint}'s store by attempt "
                                            f"{tok.attempt_id} (still present)"))
    for i in t.intents:
        events.append(Event(i.created_at, f"intent: {i.endpoint} attempt {i.attempt_id} registered {i.kind} {i.ref}"))
    if t.emitted_by is not None:
        e = t.emitted_by
        events.append(Event(e.created_at, f"outbox entry at {e.endpoint} (incoming {e.incoming_message_id}, attempt "
                                          f"{e.attempt_id}) holds it"))
        if e.tokens_committed_at:
            events.append(Event(e.tokens_committed_at, "tokens committed in that entry"))
    for c in t.copies:
        state = "processed" if c.processed else "in flight"
        token = "" if c.token_present is None else (" (token present)" if c.token_present else " (token gone)")
        cause = f" while processing {c.causation_id}" if c.causation_id else ""
        events.append(Event(c.timestamp, f"copy at {_pos(c)}: token {c.token_id}{token}, sent by {c.producer} (seq "
                                         f"{c.sequence}, attempt {c.attempt_id}){cause}; {state} by {c.consumer}"))
    for e in t.caused_entries:
        events.append(Event(e.created_at, f"its processing at {e.endpoint} (attempt {e.attempt_id}) left an outbox "
                                          f"entry of {len(e.outgoing)} message(s), still pending"))
    for m in t.caused_messages:
        events.append(Event(None, f"caused {m['message_id']} on {m['topic']} ({m['copies']} copies, attempt "
                                  f"{m['attempt_id']})"))
    for b in t.blobs:
        state = {None: "not checked", True: "present", False: "missing"}[b.present]
        if b.registered_only:
            state += "; prepared by its processing (an intent names it), published by no copy"
        elif b.present:
            state += ", sha256 " + {None: "not carried", True: "ok", False: "MISMATCH"}[b.sha256_ok]
        events.append(Event(None, f"blob {b.name} of {b.producer}: {state}"))
    for s in t.sink_rows:
        events.append(Event(None, f"sink {s.sink} ({s.endpoint}) row: {json.dumps(s.row, default=str, sort_keys=True)}"))
    floor = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    return sorted(events, key=lambda e: e.at if isinstance(e.at, dt.datetime) else floor)


def _attach_recorded_findings(config: Config, messages: list[MessageTrace], notes: list[str]) -> str | None:
    """Findings of the last recorded audit whose evidence names the message, its tokens or blobs."""
    from eoctl import history
    from eoctl.errors import EoctlError

    try:
        run, rows = history.evidence_of_last_run(config)
    except EoctlError as exc:
        notes.append(f"no recorded audit to compare with ({exc.one_line()})")
        return None
    texts = [(code, ep, row, json.dumps(row, default=str)) for code, ep, row in rows]
    for m in messages:
        needles = {m.message_id, *(c.token_id for c in m.copies if c.token_id), *(t.token_id for t in m.tokens),
                   *(b.name for b in m.blobs)}
        holder = m.emitted_by.incoming_message_id if m.emitted_by else None  # EO301 names the entry
        m.recorded_findings = [{"code": code, "endpoint": ep, "evidence": row} for code, ep, row, text in texts
                               if any(n and n in text for n in needles)
                               or (code == "EO301" and row.get("incoming_message_id") == holder)]
    return run


def _pos(c: Copy) -> str:
    return f"{c.topic}/{c.partition}@{c.offset}"


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds // 60}m" if seconds >= 60 else f"{seconds}s"
