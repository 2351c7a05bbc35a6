"""`eoctl trace` on the Spark engine (eoctl.trace.TraceReader): one filtered scan of every input per
pass, where each record is only tested for a header with a wanted value and the few candidates get
their protocol columns; sink lookups by a pushed-down predicate. The message's findings come from
the catalog over the rows gathered, in process, as on the DuckDB engine."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config, EndpointConfig
from eoctl.sources.kafka import time_ranges
from eoctl.trace.model import Bounds, Clause, ScanNote, SinkRow, live_clauses
from eoctl.trace.sinks import sink_key_literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_LIMIT = 1000  # sink rows per sink


class SparkTraceReader:

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
            for r in df.where(_typed_literal(df, column, value)).limit(_LIMIT).collect():
                rows.append(SinkRow(name, sink.name, r.asDict()))
        return rows, seen_column

    def sink_rows(self, config, message_ids):
        """The rows of every sink whose message-id column is one of `message_ids`, and each sink's
        schema ((endpoint, sink) -> StructType)."""
        from pyspark.sql import functions as F

        out: list[SinkRow] = []
        schemas = {}
        for name, sink, df in _sink_frames(self.spark, config):
            schemas[(name, sink.name)] = df.schema
            wanted = F.col(sink.message_id_column).cast("string").isin(sorted(message_ids))
            out += [SinkRow(name, sink.name, r.asDict()) for r in df.where(wanted).limit(_LIMIT).collect()]
        return out, schemas

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


def _input_frame(spark: SparkSession, config: Config, name: str, ep: EndpointConfig, bounds: Bounds,
                 committed: dict[str, dict[int, int]]) -> DataFrame | None:
    """An input's raw records (headers not decoded yet) within the bounds, with its consumer's
    committed offset per record."""
    from pyspark.sql import functions as F

    from eoctl.engine.frames import local_frame
    from eoctl.sources import read_input

    assert ep.input is not None
    ranges = None
    if ep.input.kafka and (bounds.since or bounds.until):
        ranges = time_ranges(config.kafka[ep.input.kafka], ep.input.topics, bounds.since, bounds.until)
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

    live = live_clauses(clauses)
    return reduce(lambda a, b: a | b, (both(c) for c in live)) if live else F.lit(False)


def _scan(spark: SparkSession, config: Config, bounds: Bounds, committed: dict[str, dict[str, dict[int, int]]],
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


def _sink_frames(spark: SparkSession, config: Config):
    from eoctl.sources.tables import read_table

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

