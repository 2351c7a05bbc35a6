"""`eoctl trace` on the DuckDB engine (eoctl.trace.TraceReader): the inputs read as the audit reads
them (eoctl.engine.duckdb.build_working_copy, as views: only the matching records are decoded
and fetched), sinks through the audit's sink readers, and the message's findings from the
catalog's own expressions (eoctl.expr.catalog) over tables holding only the rows trace gathered.

A finding's evidence is given as the Spark engine gives it (Spark's `to_json`: null fields left
out, times as `2026-11-01T12:00:00.000Z`), so that a trace reads the same on both engines.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import TYPE_CHECKING, Any

from eoctl.engine.duckdb import (
    _ident,
    _table_of_rows,
    build_working_copy,
    connect,
    repr_sql,
)

if TYPE_CHECKING:
    from eoctl.config.model import Config
    from eoctl.trace.model import (
        Bounds,
        Clause,
        MessageTrace,
        ScanNote,
        SinkRow,
        TraceOptions,
    )
    from eoctl.trace.stores import StoreLookups

#: the columns of a record trace keeps (as eoctl.engine.spark_trace's scan gives them)
_HIT_COLUMNS = ("topic", "partition", "offset", "timestamp", "committed", "message_id", "token_id", "producer",
                "sequence", "causation_id", "attempt_id", "blobs", "seq", "problem", "processed")
_LIMIT = 1000  # sink rows per sink, as on Spark


class DuckDBTraceReader:
    def __init__(self, config: Config) -> None:
        self.con = connect(config.engine.memory_limit)
        self._sinks: dict[tuple[str, str], tuple[str, Any]] | None = None  # (endpoint, sink) -> (view, schema)
        self._copies: dict[tuple[str, str], str] = {}

    def close(self) -> None:
        self.con.close()

    # ---------------------------------------------------------------------------- topics

    def scan(self, config: Config, bounds: Bounds, committed: dict, clauses: list[Clause],
             purpose: str) -> tuple[list[dict[str, Any]], ScanNote]:
        from eoctl.options import AuditOptions
        from eoctl.sources.kafka import time_ranges
        from eoctl.trace.model import ScanNote

        inputs, ranges = [], {}
        for name, ep in config.endpoints.items():
            if ep.input is None:
                continue
            inputs.append(f"{name} ({', '.join(ep.input.topics)})")
            if ep.input.kafka and (bounds.since or bounds.until):
                # the broker's offsets of those times
                ranges[name] = time_ranges(config.kafka[ep.input.kafka], ep.input.topics, bounds.since, bounds.until)
        full = bounds.since is None and bounds.until is None
        if not inputs:
            return [], ScanNote(purpose, inputs, bounds.why, 0, full)
        build_working_copy(self.con, config, None, AuditOptions(since=bounds.since, until=bounds.until), keep=False,
                           endpoint_ranges=ranges)
        records = self.con.execute("SELECT count(*) FROM protocol").fetchall()[0][0]
        return matching_records(self.con, clauses), ScanNote(purpose, inputs, bounds.why, records, full)

    # ----------------------------------------------------------------------------- sinks

    def _sink_views(self, config: Config) -> dict[tuple[str, str], tuple[str, Any]]:
        from eoctl.engine.duckdb_audit import read_sink

        if self._sinks is None:
            self._sinks = {}
            for name, ep in config.endpoints.items():
                for sink in ep.sinks:
                    view = f"all_sink_{len(self._sinks)}"
                    self._sinks[(name, sink.name)] = (view, read_sink(self.con, config, sink, view, self._copies))
        return self._sinks

    def sink_lookup(self, config: Config, column: str, value: str) -> tuple[list[SinkRow], bool]:
        from eoctl.trace.model import SinkRow
        from eoctl.trace.sinks import sink_key_literal

        rows: list[SinkRow] = []
        seen_column = False
        for (name, sink), (view, schema) in self._sink_views(config).items():
            if column not in schema:
                continue
            seen_column = True
            dtype = schema[column]
            kind = "integer" if dtype.is_integer() else "number" if dtype.is_floating() or dtype.is_decimal() else "text"
            literal = sink_key_literal(column, value, kind)
            cond = (f"{_ident(column)} = {literal!r}" if kind != "text"
                    else f"CAST({_ident(column)} AS VARCHAR) = {repr_sql(literal)}")
            for r in self.con.sql(f"SELECT * FROM {_ident(view)} WHERE {cond} LIMIT {_LIMIT}").fetchall():
                rows.append(SinkRow(name, sink, _as_spark_row(schema.names, r)))
        return rows, seen_column

    def _sink_where(self, config: Config, endpoint: str, sink: str, message_ids: set[str]) -> str:
        column = next(s for s in config.endpoints[endpoint].sinks if s.name == sink).message_id_column
        listed = ", ".join(repr_sql(m) for m in sorted(message_ids)) or "NULL"
        return f"CAST({_ident(column)} AS VARCHAR) IN ({listed})"

    def sink_rows(self, config: Config, message_ids: set[str]) -> tuple[list[SinkRow], dict]:
        from eoctl.trace.model import SinkRow

        out: list[SinkRow] = []
        schemas = {}
        for (name, sink), (view, schema) in self._sink_views(config).items():
            schemas[(name, sink)] = schema
            where = self._sink_where(config, name, sink, message_ids)
            for r in self.con.sql(f"SELECT * FROM {_ident(view)} WHERE {where} LIMIT {_LIMIT}").fetchall():
                out.append(SinkRow(name, sink, _as_spark_row(schema.names, r)))
        return out, schemas

    # --------------------------------------------------------------------------- findings

    def scoped_findings(self, config: Config, options: TraceOptions, hits: list[dict[str, Any]], committed: dict,
                        stores: StoreLookups, sink_rows: list[SinkRow], sink_schemas: dict,
                        messages: list[MessageTrace]) -> list[dict[str, Any]]:
        return message_findings(config, options, hits, stores, sink_rows, sink_schemas, messages)


def matching_records(con, clauses: list[Clause]) -> list[dict[str, Any]]:
    """The records of the views `protocol` and `commits` (eoctl.expr.records) that meet one of the
    clauses, as trace keeps them: the working copy's expression (the audit's one definition of
    `processed`, `seq` and `problem`) plus the eo-sequence header as text, filtered before
    anything else is decoded. Both engines' scans end here: the Spark one with the few candidate
    records its job returned."""
    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.records import commits_table, protocol_table, working_copy
    from eoctl.trace.model import live_clauses

    live = live_clauses(clauses)
    if not live:
        return []
    sql = compile_sql(working_copy(protocol_table(), commits_table(), Dialect.duckdb, sequence_text=True),
                      Dialect.duckdb)
    where = " OR ".join("(" + " AND ".join(f"{_ident(col)} IN ({', '.join(repr_sql(v) for v in sorted(values))})"
                                           for col, values in c.items()) + ")" for c in live)
    return con.sql(f"SELECT endpoint AS consumer, {', '.join(_ident(c) for c in _HIT_COLUMNS)} "
                   f"FROM ({sql}) AS trace_records WHERE {where}").to_arrow_table().to_pylist()


def message_findings(config: Config, options: TraceOptions, hits: list[dict[str, Any]], stores: StoreLookups,
                     sink_rows: list[SinkRow], sink_schemas: dict, messages: list[MessageTrace]) -> list[dict[str, Any]]:
    """The catalog's message-scoped findings (CodeInfo.message_scoped) over the rows trace gathered,
    on either engine: the checks of eoctl.expr.catalog run by an in-process DuckDB over tables
    holding only those rows (a handful: a Spark job each would cost more than all of them here),
    each evidence row as Spark's to_json gives it. `sink_schemas`: (endpoint, sink) -> Ibis schema."""
    import json

    import ibis

    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.catalog import CHECKS, shared_tables
    from eoctl.expr.inputs import BLOB_LISTING_SCHEMA, STORE_SCHEMAS, Scope
    from eoctl.expr.records import RECORD_COLUMNS, records_table
    from eoctl.options import AuditOptions
    from eoctl.findings import CATALOG
    from eoctl.stores.layout import KINDS, EndpointTable

    con = connect(config.engine.memory_limit)
    try:
        scope = Scope(config, AuditOptions(now=options.now, grace=options.grace, stuck_after=options.stuck_after))
        scope.layout = stores.layout
        as_read = [{**{c: h.get(c) for c in RECORD_COLUMNS}, "endpoint": h["consumer"],
                    "timestamp": _naive_utc(h["timestamp"])} for h in hits]
        _table_of_rows(con, "records", as_read, _arrow(records_table().schema()))
        for kind in KINDS:
            rows = []
            for name in config.endpoints:
                if isinstance(stores.layout.lookup(name, kind), EndpointTable):
                    scope.tables.add((name, kind))
                    rows += [{"ep": name, **{c: _naive_utc(r.get(c)) for c in STORE_SCHEMAS[kind]}}
                             for r in stores.rows.get((name, kind), {}).values()]
            _table_of_rows(con, kind, rows, _arrow(ibis.schema({"ep": "string", **STORE_SCHEMAS[kind]})))
        listed: dict[str, dict[str, Any]] = {}
        for m in messages:
            for b in m.blobs:
                if b.present:
                    listed.setdefault(b.producer, {})[b.name] = b
        for name, ep in config.endpoints.items():
            if ep.blobs:
                rows = [{"name": b.name, "size": b.size, "modified": _naive_utc(b.modified),
                         "actual_sha256": b.actual_sha256} for b in listed.get(name, {}).values()]
                _table_of_rows(con, scope.blob_view(name), rows, _arrow(ibis.schema(BLOB_LISTING_SCHEMA)))
            for sink in ep.sinks:  # the sink rows trace found: those naming the messages, or the lookup's
                schema = sink_schemas[(name, sink.name)]
                arrow = _arrow(schema)
                as_text = {f.name for f in arrow if f.type == "string"}  # and those of a type kept as text
                rows = [{c: _text(v) if c in as_text else v for c, v in
                         ((c, _naive_utc(r.row.get(c))) for c in schema.names)} for r in sink_rows
                        if (r.endpoint, r.sink) == (name, sink.name)]
                _table_of_rows(con, scope.sink_view(name, sink), rows, arrow)
                scope.sink_schemas[(name, sink.name)] = schema
        out = []
        part = 0
        codes = [c for c, info in CATALOG.items() if info.message_scoped]
        for name, expr in shared_tables(codes, scope, records_table(), Dialect.duckdb).items():
            con.execute(f"CREATE TEMP TABLE {_ident(name)} AS {compile_sql(expr, Dialect.duckdb)}")
        for code in codes:
            for hit in CHECKS[code](scope, records_table(), Dialect.duckdb):
                table = con.sql(compile_sql(hit.evidence, Dialect.duckdb)).to_arrow_table()
                rows = [_spark_json(r) for r in table.to_pylist()]
                texts = sorted((json.dumps(r, separators=(",", ":"), ensure_ascii=False), r) for r in rows)
                out += [(part, text, {"code": hit.code, "endpoint": hit.endpoint, "where": hit.where, "evidence": r})
                        for text, r in texts]
                part += 1
    finally:
        con.close()
    return [f for _p, _t, f in sorted(out, key=lambda x: (x[0], x[1]))]


def _arrow(schema):
    """An Ibis schema as Arrow's, for the types check inputs and sinks use (Ibis's own conversion
    needs pyarrow_hotfix, which eoctl does not install); a type without a mapping here is kept as
    its text."""
    import pyarrow as pa

    fixed = {"string": pa.string(), "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
             "float32": pa.float32(), "float64": pa.float64(), "boolean": pa.bool_(), "date": pa.date32(),
             "binary": pa.binary()}
    fields = []
    for name, t in schema.items():
        if t.is_timestamp():  # UTC wall time, as every reader here gives it
            fields.append((name, pa.timestamp("us", tz="UTC") if t.timezone else pa.timestamp("us")))
        elif t.is_decimal():
            fields.append((name, pa.decimal128(t.precision or 38, t.scale or 0)))
        else:
            fields.append((name, fixed.get(str(t).lstrip("!"), pa.string())))
    return pa.schema(fields)


def _text(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else str(value)


def _as_spark_row(names, values) -> dict[str, Any]:
    """A sink row as Spark's Row.asDict gives it: times as UTC wall time, without a zone."""
    return {n: _naive_utc(v) for n, v in zip(names, values)}


def _naive_utc(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def _spark_json(value: Any) -> Any:
    """A value as Spark's to_json writes it and json.loads reads it back: null struct fields left
    out, times as ISO text to the millisecond with the zone (UTC: Z), dates as ISO text."""
    if isinstance(value, dict):
        return {k: _spark_json(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_spark_json(v) for v in value]
    if isinstance(value, dt.datetime):
        utc = value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(dt.timezone.utc)
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value
