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
  attempts of the same incoming message (ghost check) and for copies a token lookup revealed.

Nothing is collected but the matches: a message has a handful of copies.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config, EndpointConfig
from eoctl.errors import SourceError, UsageError
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

        return [TokenRow(t.endpoint, tid, m, t.owner, a, _utc(c))
                for t, (tid, m, a, c) in self._query("tokens", build)]

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

        return [Intent(t.endpoint, i, m, a, k, r, _utc(c)) for t, (i, m, a, k, r, c) in self._query("intents", build)]


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


def _clauses(clauses: list[Clause], test) -> Any:
    from functools import reduce

    from pyspark.sql import functions as F

    def both(clause: Clause):
        return reduce(lambda a, b: a & b, (test(col, values) for col, values in clause.items()))

    live = [c for c in clauses if c and all(c.values())]
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
    found = found.where(F.col("offset").isNull() | _clauses(clauses, lambda col, values: F.col(col).isin(sorted(values))))
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


def _typed_literal(df: DataFrame, column: str, value: str):
    """`value` in the column's own type, so the predicate is pushed down to files and databases."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, DoubleType, FloatType, IntegralType

    dtype = df.schema[column].dataType
    try:
        if isinstance(dtype, IntegralType):
            return F.col(column) == F.lit(int(value))
        if isinstance(dtype, (DoubleType, FloatType, DecimalType)):
            return F.col(column) == F.lit(float(value))
    except ValueError:
        raise UsageError(f"--by {column}={value!r}: the sink column {column} holds numbers") from None
    return F.col(column).cast("string") == F.lit(value)


def find_by_sink_key(spark: SparkSession, config: Config, column: str, value: str) -> tuple[set[str], list[SinkRow]]:
    """Source message ids of the sink rows whose `column` equals `value`."""
    rows: list[SinkRow] = []
    seen_column = False
    for name, sink, df in _sink_frames(spark, config):
        if column not in df.columns:
            continue
        seen_column = True
        for r in df.where(_typed_literal(df, column, value)).limit(1000).collect():
            rows.append(SinkRow(name, sink.name, r.asDict()))
    if not seen_column:
        known = sorted({f"{s.name}" for ep in config.endpoints.values() for s in ep.sinks})
        raise UsageError(f"--by {column}=...: no configured sink has a column {column!r}"
                         + (f" (sinks: {', '.join(known)})" if known else " (no sinks are configured)"))
    ids = {str(r.row[_sink_config(config, r).message_id_column]) for r in rows}
    return ids, rows


def _sink_config(config: Config, row: SinkRow):
    return next(s for s in config.endpoints[row.endpoint].sinks if s.name == row.sink)


def _sink_rows(spark: SparkSession, config: Config, message_ids: set[str]) -> list[SinkRow]:
    from pyspark.sql import functions as F

    out: list[SinkRow] = []
    for name, sink, df in _sink_frames(spark, config):
        for r in df.where(F.col(sink.message_id_column).cast("string").isin(sorted(message_ids))).limit(1000).collect():
            out.append(SinkRow(name, sink.name, r.asDict()))
    return out


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
        digest = hashlib.sha256()
        with fs.open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        return Blob(producer or "?", name, expected, False, None)
    ok = None if not expected else digest.hexdigest() == expected.lower()
    return Blob(producer or "?", name, expected, True, ok)


# ------------------------------------------------------------------------------ the trace


def _blob_refs(text: str | None) -> list[dict[str, Any]]:
    try:
        refs = json.loads(text) if text else []
    except ValueError:
        return []
    return [r for r in refs if isinstance(r, dict) and r.get("uri")] if isinstance(refs, list) else []


def _copy(h: dict[str, Any]) -> Copy:
    committed = h.get("committed")
    return Copy(h["consumer"], h["topic"], h["partition"], h["offset"], _utc(h["timestamp"]), h["token_id"],
                h["producer"], h["sequence"], h["causation_id"], h["attempt_id"], h["blobs"],
                committed is not None and h["offset"] < committed, committed)


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


def run_trace(spark: SparkSession, config: Config, lookup: Lookup, options: TraceOptions | None = None) -> TraceResult:
    from eoctl.sources import input_committed_offsets

    options = options or TraceOptions()
    stores = _Stores(config)
    notes: list[str] = stores.layout.notes()
    sink_hits: list[SinkRow] = []
    ids: set[str] = set()
    token_ids: set[str] = set()
    if lookup.kind == "message_id":
        ids = {lookup.value}
    elif lookup.kind == "token_id":
        token_ids = {lookup.value}
    else:
        assert lookup.column is not None
        ids, sink_hits = find_by_sink_key(spark, config, lookup.column, lookup.value)
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
    hits, note = _scan(spark, config, bounds, committed,
                       [{"message_id": ids}, {"token_id": token_ids}, {"causation_id": ids}],
                       "copies of the message and the messages it caused")
    scans.append(note)
    ids |= {h["message_id"] for h in hits if h["token_id"] in token_ids and h["message_id"]}

    # second pass: copies of ids a token revealed, and every attempt that answered the same
    # incoming message (ghost check), within --window of the copies
    new_ids = ids - searched
    parents = {(h["producer"], h["causation_id"]) for h in hits
               if h["message_id"] in ids and h["producer"] and h["causation_id"]}
    if new_ids or parents:
        times = [_utc(h["timestamp"]) for h in hits if h["message_id"] in ids and h["timestamp"] is not None]
        if options.since or options.until or options.full_scan or not times:
            second = bounds
        else:
            second = _Bounds(min(times) - options.window, max(times) + options.window,
                             f"within --window {_age(int(options.window.total_seconds()))} of the copies")
        producers = {p for p, _ in parents}
        causes = {c for _, c in parents}
        more, note = _scan(spark, config, second, committed,
                           [{"message_id": new_ids}, {"causation_id": new_ids},
                            {"causation_id": causes, "producer": producers}],
                           "other attempts for the same incoming message" + (", copies by token" if new_ids else ""))
        scans.append(note)
        seen = {(h["topic"], h["partition"], h["offset"]) for h in hits}
        hits += [h for h in more if (h["topic"], h["partition"], h["offset"]) not in seen]

    all_tokens = {h["token_id"] for h in hits if h["message_id"] in ids and h["token_id"]} | token_ids
    tokens = stores.tokens(message_ids=ids, token_ids=all_tokens)
    causes = {h["causation_id"] for h in hits if h["message_id"] in ids and h["causation_id"]}
    entries = stores.entries(incoming=ids | causes, outgoing=ids, tokens=token_ids)
    blob_refs = {r["uri"] for h in hits if h["message_id"] in ids for r in _blob_refs(h["blobs"])}
    intents = stores.intents(incoming=ids, refs=all_tokens | {t.token_id for t in tokens} | blob_refs)
    registered = {i.ref for i in intents if i.kind == "token" and i.ref} - all_tokens
    if registered:  # tokens an attempt processing the message made: present ones are its garbage
        tokens += stores.tokens(message_ids=set(), token_ids=registered)
    sink_rows = _sink_rows(spark, config, ids) if ids else []
    for row in sink_hits:
        if row not in sink_rows:
            sink_rows.append(row)

    messages = [
        _one_message(config, options, m, hits, tokens, entries, intents, sink_rows)
        for m in sorted(ids)
    ]
    history_run = _attach_recorded_findings(config, messages, notes)
    return TraceResult(lookup, messages, scans, notes, history_run)


def _one_message(config: Config, options: TraceOptions, message_id: str, hits: list[dict[str, Any]],
                 tokens: list[TokenRow], entries: list[Entry], intents: list[Intent],
                 sink_rows: list[SinkRow]) -> MessageTrace:
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

    trace = MessageTrace(message_id, Verdict.not_found, [], copies, my_tokens, emitted_by, caused_entries,
                         sorted(caused.values(), key=lambda x: (x["topic"], x["message_id"])), my_intents, blobs,
                         my_sink)
    trace.verdict, trace.reasons = _verdict(options, trace, hits, {(e.endpoint, e.incoming_message_id): e
                                                                   for e in entries})
    trace.findings = _findings(options, trace, hits)
    trace.timeline = _timeline(trace)
    return trace


def _committed_attempt(trace: MessageTrace, hits: list[dict[str, Any]], entries_by_incoming: dict) -> dict:
    """Per (producer, causation): the attempt that committed, as EO302 decides it: the one a pending
    entry names, else the last attempt to send."""
    out: dict[tuple[str, str], str] = {}
    keys = {(c.producer, c.causation_id) for c in trace.copies if c.producer and c.causation_id}
    for producer, cause in keys:
        pending = entries_by_incoming.get((producer, cause))
        if pending is not None and pending.attempt_id:
            out[(producer, cause)] = pending.attempt_id
            continue
        first_sent: dict[str, tuple] = {}
        for h in hits:
            if h["producer"] == producer and h["causation_id"] == cause and h["attempt_id"]:
                at = (_utc(h["timestamp"]), h["partition"], h["offset"])
                if h["attempt_id"] not in first_sent or at < first_sent[h["attempt_id"]]:
                    first_sent[h["attempt_id"]] = at
        if len(first_sent) > 1:
            out[(producer, cause)] = max(first_sent, key=lambda a: first_sent[a])
    return out


def _verdict(options: TraceOptions, t: MessageTrace, hits: list[dict[str, Any]],
             pending: dict[tuple[str, str], Entry]) -> tuple[Verdict, list[str]]:
    reasons: list[str] = []
    processed = [c for c in t.copies if c.processed]
    waiting = [c for c in t.copies if not c.processed]

    # ghost: sent by an attempt that never committed
    committed = _committed_attempt(t, hits, pending)
    ghosts = [c for c in t.copies if (c.producer, c.causation_id) in committed
              and c.attempt_id != committed[(c.producer, c.causation_id)]]
    if ghosts:
        c = ghosts[0]
        return Verdict.ghost, [f"sent by attempt {c.attempt_id} of {c.producer}, which never committed; attempt "
                               f"{committed[(c.producer, c.causation_id)]} answered the same incoming message "
                               f"{c.causation_id}"]

    # twice: two sink rows, or two tokens consumed
    if len(t.sink_rows) > 1:
        return Verdict.processed_twice, [f"{len(t.sink_rows)} rows in sink {t.sink_rows[0].sink}"]
    consumed = {c.token_id for c in processed if c.token_present is False}
    if len(consumed) > 1:
        return Verdict.processed_twice, [f"{len(consumed)} different tokens were consumed: {', '.join(sorted(consumed))}"]
    # will be processed twice (EO102): a copy waits under a token still in the consumer's store, other
    # than the one that let another copy through (or beside another waiting copy's token)
    ahead = [c for c in waiting if c.token_present is True and c.token_id not in {p.token_id for p in processed}]
    if ahead and (processed or len({c.token_id for c in ahead}) > 1):
        c = ahead[0]
        first = (f"it was processed at {_pos(processed[0])} under token {processed[0].token_id}" if processed else
                 f"another copy waits under token {next(a.token_id for a in ahead if a.token_id != c.token_id)}")
        return Verdict.will_be_processed_twice, [
            f"copy at {_pos(c)} waits above {c.consumer}'s committed offset under token {c.token_id}, which is "
            f"present in its store: the consumer will process it; {first}"]

    # lost: its blob is gone or changed, or its only copies wait with no token left
    for b in t.blobs:
        if b.registered_only:
            continue
        if b.present is False:
            reasons.append(f"blob {b.name} it publishes does not exist")
        elif b.sha256_ok is False:
            reasons.append(f"blob {b.name} it publishes does not match its sha256: it was overwritten")
    if reasons:
        return Verdict.lost, reasons
    if waiting and not processed and not t.sink_rows and all(c.token_present is False for c in waiting):
        return Verdict.lost, [f"in flight at {_pos(waiting[0])} but its token is gone: the consumer will drop it "
                              "as a duplicate, and its effect is in no sink"]

    # in flight: not sent yet, waiting on the topic, or its processing's entry still pending
    if not t.copies:
        if t.emitted_by is not None:
            e = t.emitted_by
            stuck = e.age_seconds is not None and e.age_seconds > options.stuck_after.total_seconds()
            return Verdict.in_flight, [f"not sent yet: pending in the outbox of {e.endpoint} "
                                       f"(entry {e.incoming_message_id}, {_age(e.age_seconds)} old"
                                       + (", stuck: replay-outbox sends it" if stuck else "") + ")"]
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
        stuck = e.age_seconds is not None and e.age_seconds > options.stuck_after.total_seconds()
        return Verdict.in_flight, [f"consumed by {e.endpoint}, but the messages its processing emits are pending "
                                   f"in the outbox ({_age(e.age_seconds)} old"
                                   + (", stuck: replay-outbox sends them" if stuck else "") + ")"]
    reasons = [f"consumed by {processed[0].consumer} at {_pos(processed[0])}"]
    if len(t.copies) > 1:
        tokens = {c.token_id for c in t.copies}
        reasons.append(f"{len(t.copies)} copies with one token: redeliveries the consumer dropped" if len(tokens) == 1
                       else f"{len(t.copies)} copies under {len(tokens)} tokens: the others' tokens are gone, so the "
                            "consumer drops them")
    if t.sink_rows:
        reasons.append(f"one row in sink {t.sink_rows[0].sink}")
    for e in t.caused_entries:
        reasons.append(f"its entry at {e.endpoint} is still pending although its messages were sent")
    return Verdict.processed_once, reasons


def _entry_sent(e: Entry, hits: list[dict[str, Any]]) -> bool:
    """Every outgoing message of a pending entry is on a topic read (with a token)."""
    sent = {h["message_id"] for h in hits if h["causation_id"] == e.incoming_message_id}
    wanted = {m.get("message_id") for m in e.outgoing}
    return wanted <= sent  # an entry with nothing to send has sent everything


def _findings(options: TraceOptions, t: MessageTrace, hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The catalog's findings as they show on this one message."""
    out: list[dict[str, Any]] = []
    by_token: dict[str | None, list[Copy]] = {}
    for c in t.copies:
        by_token.setdefault(c.token_id, []).append(c)
    for token, copies in by_token.items():
        if len(copies) > 1:
            out.append({"code": "EO101", "token_id": token, "positions": [_pos(c) for c in copies]})
    if len(by_token) > 1:
        out.append({"code": "EO102", "tokens": sorted(k for k in by_token if k)})
    if t.verdict is Verdict.ghost:
        out.append({"code": "EO302", "attempt_id": t.copies[0].attempt_id if t.copies else None})
    lost_waiting = [c for c in t.copies if not c.processed and c.token_present is False]
    if lost_waiting and t.verdict is Verdict.lost and not any(c.processed for c in t.copies):
        out.append({"code": "EO202", "positions": [_pos(c) for c in lost_waiting]})
    held_incoming = {e.incoming_token_id for e in t.caused_entries}
    for c in t.copies:
        if c.processed and c.token_present and c.token_id not in held_incoming:
            out.append({"code": "EO203", "token_id": c.token_id, "position": _pos(c)})
    for e in [t.emitted_by, *t.caused_entries]:
        if e is not None and e.age_seconds is not None and e.age_seconds > options.stuck_after.total_seconds():
            out.append({"code": "EO301", "endpoint": e.endpoint, "incoming_message_id": e.incoming_message_id})
    for b in t.blobs:
        if b.registered_only:
            registered = [i.created_at for i in t.intents if i.ref == b.name and isinstance(i.created_at, dt.datetime)]
            old = bool(registered) and options.now - min(registered) > options.grace
            if b.present and old:  # prepared by an attempt processing it, published by none
                out.append({"code": "EO401", "name": b.name, "endpoint": b.producer})
        elif b.present is False:
            out.append({"code": "EO402", "name": b.name})
        elif b.sha256_ok is False:
            out.append({"code": "EO403", "name": b.name})
    if len(t.sink_rows) > 1:
        out.append({"code": "EO501", "sink": t.sink_rows[0].sink, "rows": len(t.sink_rows)})
    in_flight = {c.token_id for c in t.copies if not c.processed}
    held = {m.get("token_id") for e in [t.emitted_by, *t.caused_entries] if e for m in e.outgoing} | held_incoming
    for tok in t.tokens:
        age = (options.now - tok.created_at) if isinstance(tok.created_at, dt.datetime) else None
        if tok.token_id not in in_flight and tok.token_id not in held and age is not None and age > options.grace:
            if not any(c.token_id == tok.token_id and c.processed for c in t.copies):
                out.append({"code": "EO201", "token_id": tok.token_id, "endpoint": tok.endpoint})
    return out


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
