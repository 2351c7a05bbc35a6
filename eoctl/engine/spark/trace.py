"""`eoctl trace` on the Spark engine (eoctl.trace.TraceReader): one filtered scan of every input per
pass, where each record is only tested for a header with a wanted value and the few candidates get
their protocol columns; sink lookups by a pushed-down predicate. The message's findings come from
the catalog over the rows gathered, in process, as on the DuckDB engine."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config, EndpointConfig
from eoctl.sources.kafka import time_ranges
from eoctl.trace.reader import Bounds, Clause, ScanNote, SinkRow, live_clauses, sink_key_literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_LIMIT = 1000  # sink rows per sink


class SparkTraceReader:

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def record_index(self, config):
        from eoctl.engine.spark.records import ArchiveFiles
        from eoctl.incremental import find_indexed_read

        if config.engine.remote:  # Spark Connect's client has no file system API: a window read
            return None, None
        return find_indexed_read(self.spark, config, ArchiveFiles(self.spark))

    def scan(self, config, bounds, committed, clauses, purpose):
        return _scan(self.spark, config, bounds, committed, clauses, purpose)

    def sink_lookup(self, config, column, value):
        rows: list[SinkRow] = []
        seen_column = False
        for name, sink, df in _sink_frames(self.spark, config):
            if column not in df.columns:
                continue
            seen_column = True
            for r in df.where(_typed_literal(df, column, value)).limit(_LIMIT).collect():
                rows.append(SinkRow(name, sink.name, r.asDict()))
        return rows, seen_column

    def sink_rows(self, config, message_ids):
        """The rows of every sink whose message-id column is one of `message_ids`, and each sink's
        columns ((endpoint, sink) -> Ibis schema)."""
        import ibis
        from ibis.backends.sql.datatypes import PySparkType
        from pyspark.sql import functions as F

        out: list[SinkRow] = []
        schemas = {}
        for name, sink, df in _sink_frames(self.spark, config):
            schemas[(name, sink.name)] = ibis.schema(
                {f.name: PySparkType.from_string(f.dataType.simpleString()) for f in df.schema.fields})
            wanted = F.col(sink.message_id_column).cast("string").isin(sorted(message_ids))
            out += [SinkRow(name, sink.name, r.asDict()) for r in df.where(wanted).limit(_LIMIT).collect()]
        return out, schemas

    def close(self) -> None:
        pass


def _input_frame(spark: SparkSession, config: Config, name: str, ep: EndpointConfig, bounds: Bounds,
                 timed: bool = True) -> DataFrame | None:
    """An input's raw records (headers not decoded yet) within the bounds: past a record index's
    end, or within its time span (`timed` False: every record of the time span's partitions)."""
    from pyspark.sql import functions as F

    from eoctl import incremental
    from eoctl.engine.spark.records import archive_predicate
    from eoctl.engine.spark.sources import read_input

    assert ep.input is not None
    ranges = None
    plans = bounds.index.plans.get(name) if bounds.index is not None else None
    if plans is not None and ep.input.kafka:
        ranges = incremental.kafka_ranges(plans)
    elif bounds.index is None and ep.input.kafka and timed and (bounds.since or bounds.until):
        ranges = time_ranges(config.kafka[ep.input.kafka], ep.input.topics, bounds.since, bounds.until)
        if not ranges:
            return None  # nothing in that time span
    df = read_input(spark, config, ep.input, ranges, protocol=False)
    if plans and ep.input.archive:
        df = df.where(archive_predicate(plans))
    if timed and bounds.index is None and bounds.since is not None:
        df = df.where(F.col("timestamp") >= F.lit(_wall(bounds.since)))
    if timed and bounds.index is None and bounds.until is not None:
        df = df.where(F.col("timestamp") < F.lit(_wall(bounds.until)))
    return df.select(F.lit(name).alias("endpoint"), "topic", "partition", "offset", "timestamp", "headers")


def _wall(when: dt.datetime) -> dt.datetime:
    return when.astimezone(dt.timezone.utc).replace(tzinfo=None)


def _unread(spark: SparkSession, config: Config, bounds: Bounds) -> list[str]:
    """The inputs holding records before the window read (eoctl.trace.reader.ScanNote.unread): of
    an archive, by a job that stops at the first older record."""
    from pyspark.sql import functions as F

    from eoctl.trace.reader import unread_inputs

    assert bounds.since is not None

    def archive_older(name: str) -> bool:
        df = _input_frame(spark, config, name, config.endpoints[name], bounds, timed=False)
        return df is not None and not df.where(F.col("timestamp") < F.lit(_wall(bounds.since))).isEmpty()

    return unread_inputs(config, bounds.since, archive_older)


def _indexed_hits(spark: SparkSession, config: Config, bounds: Bounds, clauses: list[Clause]) -> list[dict[str, Any]]:
    """The record index's rows (the audit's, `processed` from the current committed offsets) that
    meet a clause: decoded already, so tested as they are; the few found are brought back."""
    from pyspark.sql import functions as F

    from eoctl.engine.spark.records import SparkRecords
    from eoctl.options import AuditOptions

    assert bounds.index is not None
    records = SparkRecords(spark, config, AuditOptions(), base=bounds.index.base)
    indexed = records.indexed
    if indexed is None:  # the base was given up since it was found (a partition now ends below it)
        return []

    def test(col: str, values: set[str]):
        column = F.col("seq").cast("string") if col == "sequence" else F.col(col)
        return column.isin(sorted(values))

    # the time as microseconds since the epoch: a Row gives a TIMESTAMP in the driver's local zone
    found = indexed.where(_clauses(clauses, test)).withColumn("sequence", F.col("seq").cast("string")).withColumn(
        "timestamp", F.unix_micros("timestamp"))
    epoch = dt.datetime(1970, 1, 1)
    out = []
    for r in found.collect():  # the few records of the message
        hit = {("consumer" if k == "endpoint" else k): v for k, v in r.asDict().items()}
        hit["timestamp"] = None if hit["timestamp"] is None else epoch + dt.timedelta(microseconds=hit["timestamp"])
        out.append(hit)
    return out


def _clauses(clauses: list[Clause], test) -> Any:
    from functools import reduce

    from pyspark.sql import functions as F

    def both(clause: Clause):
        return reduce(lambda a, b: a & b, (test(col, values) for col, values in clause.items()))

    live = live_clauses(clauses)
    return reduce(lambda a, b: a | b, (both(c) for c in live)) if live else F.lit(False)


def _scan(spark: SparkSession, config: Config, bounds: Bounds, committed: dict[str, dict[str, dict[int, int]]],
          clauses: list[Clause], purpose: str) -> tuple[list[dict[str, Any]], ScanNote]:
    """One pass over every input: the records the clauses select, and how many records were read.

    One Spark job tests every record only for a header with one of the wanted values (no
    decoding) and brings back the count and the few candidates, headers still raw; these are then
    decoded and tested again in process, by the expression the DuckDB engine's scan ends with
    (eoctl.engine.duckdb.trace.matching_records: the working copy, as the audit reads records).
    """
    from functools import reduce

    from pyspark.sql import functions as F

    names = config.protocol.headers
    frames, inputs = [], []
    for name, ep in config.endpoints.items():
        if ep.input is None:
            continue
        inputs.append(f"{name} ({', '.join(ep.input.topics)})")
        df = _input_frame(spark, config, name, ep, bounds)
        if df is not None:
            frames.append(df)
    full = bounds.since is None and bounds.until is None and bounds.index is None
    indexed = _indexed_hits(spark, config, bounds, clauses) if bounds.index is not None else []
    unread = _unread(spark, config, bounds) if bounds.chosen and bounds.since is not None else []
    counted = bounds.index.records if bounds.index is not None else 0
    if not frames:
        return indexed, ScanNote(purpose, inputs, bounds.why, 0, full, unread, counted)
    df = reduce(lambda a, b: a.unionByName(b), frames)

    def raw(col: str, values: set[str]):
        header = getattr(names, col)
        return F.exists("headers", lambda h: (h["key"] == header) & h["value"].cast("string").isin(sorted(values)))

    candidate = F.struct("endpoint", "topic", "partition", "offset", "timestamp", "headers")
    read = df.agg(F.count(F.lit(1)).alias("n"), F.collect_list(F.when(_clauses(clauses, raw), candidate)).alias("c"))
    row = read.collect()[0]  # the count, and the few candidate records
    hits = _decoded(config, [c.asDict(recursive=True) for c in row["c"]], committed, clauses)
    return hits + indexed, ScanNote(purpose, inputs, bounds.why, int(row["n"]), full, unread, counted)


def _decoded(config: Config, candidates: list[dict[str, Any]], committed: dict[str, dict[str, dict[int, int]]],
             clauses: list[Clause]) -> list[dict[str, Any]]:
    """The candidates that meet a clause once decoded, as the DuckDB engine's scan gives them."""
    import pyarrow as pa

    from eoctl.engine.duckdb.records import commits_table, protocol_view
    from eoctl.engine.duckdb.sql import connect, table_of_rows
    from eoctl.engine.duckdb.trace import matching_records
    from eoctl.expr.records import HEADERS

    if not candidates:
        return []
    con = connect(config.engine.memory_limit)
    try:
        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        for c in candidates:
            c["headers"] = [{"key": h["key"], "value": bytes(h["value"]) if h["value"] is not None else None}
                            for h in c["headers"] or []]
        table_of_rows(con, "candidates", candidates, pa.schema([
            ("endpoint", pa.string()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us")), ("headers", pa.list_(header))]))
        protocol_view(con, "protocol", "candidates", {h: getattr(config.protocol.headers, h) for h in HEADERS})
        commits_table(con, committed)
        return matching_records(con, clauses)
    finally:
        con.close()


def _sink_frames(spark: SparkSession, config: Config):
    from eoctl.engine.spark.stores import read_table

    for name, ep in config.endpoints.items():
        for sink in ep.sinks:
            yield name, sink, read_table(spark, config, sink)


def _typed_literal(df: DataFrame, column: str, value: str):
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, DoubleType, FloatType, IntegralType

    dtype = df.schema[column].dataType
    kind = ("integer" if isinstance(dtype, IntegralType)
            else "number" if isinstance(dtype, (DoubleType, FloatType, DecimalType)) else "text")
    literal = sink_key_literal(column, value, kind)
    return F.col(column) == F.lit(literal) if kind != "text" else F.col(column).cast("string") == F.lit(literal)

