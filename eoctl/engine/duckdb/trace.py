"""`eoctl trace` on the DuckDB engine (eoctl.trace.TraceReader): the inputs read as the audit reads
them (eoctl.engine.duckdb.records.build_working_copy, as views: only the matching records are decoded
and fetched), sinks through the audit's sink readers (their schemas as Ibis gives them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eoctl.engine.duckdb.records import build_working_copy
from eoctl.engine.duckdb.sql import connect, ident, repr_sql
from eoctl.trace.reader import naive_utc

if TYPE_CHECKING:
    from eoctl.config.model import Config
    from eoctl.trace.reader import Bounds, Clause, ScanNote, SinkRow

#: the columns of a record trace keeps (as eoctl.engine.spark.trace's scan gives them)
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

    def record_index(self, config: Config):
        from eoctl.engine.duckdb.records import ArchiveFiles
        from eoctl.incremental import find_indexed_read

        return find_indexed_read(None, config, ArchiveFiles(config.engine.memory_limit))

    def scan(self, config: Config, bounds: Bounds, committed: dict, clauses: list[Clause],
             purpose: str) -> tuple[list[dict[str, Any]], ScanNote]:
        from eoctl.options import AuditOptions
        from eoctl.sources.kafka import time_ranges
        from eoctl.trace.reader import ScanNote

        inputs, ranges = [], {}
        for name, ep in config.endpoints.items():
            if ep.input is None:
                continue
            inputs.append(f"{name} ({', '.join(ep.input.topics)})")
            if ep.input.kafka and bounds.index is None and (bounds.since or bounds.until):
                # the broker's offsets of those times
                ranges[name] = time_ranges(config.kafka[ep.input.kafka], ep.input.topics, bounds.since, bounds.until)
        full = bounds.since is None and bounds.until is None and bounds.index is None
        if not inputs:
            return [], ScanNote(purpose, inputs, bounds.why, 0, full)
        if bounds.index is not None:
            return self._indexed_scan(config, bounds, clauses, purpose, inputs)
        build_working_copy(self.con, config, None, AuditOptions(since=bounds.since, until=bounds.until), keep=False,
                           endpoint_ranges=ranges)
        records = self.con.execute("SELECT count(*) FROM protocol").fetchall()[0][0]
        unread = self._unread(config, bounds) if bounds.chosen and bounds.since is not None else []
        return matching_records(self.con, clauses), ScanNote(purpose, inputs, bounds.why, records, full, unread)

    def _indexed_scan(self, config: Config, bounds: Bounds, clauses: list[Clause], purpose: str,
                      inputs: list[str]) -> tuple[list[dict[str, Any]], ScanNote]:
        """The copies in the record index and in the source past its end: the audit's `records`
        (eoctl.engine.duckdb.index.records_with_index: `processed` from the current committed
        offsets), as views, filtered by the clauses."""
        from eoctl.engine.duckdb.index import IndexRun
        from eoctl.options import AuditOptions
        from eoctl.trace.reader import ScanNote, clause_condition

        assert bounds.index is not None
        run = IndexRun(base=bounds.index.base, plans=bounds.index.plans)
        build_working_copy(self.con, config, None, AuditOptions(), keep=False, index=run)
        fresh = self.con.execute("SELECT count(*) FROM protocol").fetchall()[0][0]
        where, params = clause_condition(clauses, lambda c: "CAST(seq AS VARCHAR)" if c == "sequence" else ident(c))
        columns = ", ".join("CAST(seq AS VARCHAR) AS sequence" if c == "sequence" else ident(c) for c in _HIT_COLUMNS)
        hits = self.con.sql(f"SELECT endpoint AS consumer, {columns} FROM records WHERE {where}",
                            params=params).to_arrow_table().to_pylist()
        return hits, ScanNote(purpose, inputs, bounds.why, fresh, False, indexed=bounds.index.records)

    def _unread(self, config: Config, bounds: Bounds) -> list[str]:
        """The inputs holding records before the window read (eoctl.trace.reader.ScanNote.unread):
        of an archive, the first older record ends the query."""
        import datetime as dt

        from eoctl.trace.reader import unread_inputs

        assert bounds.since is not None
        since = bounds.since.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return unread_inputs(config, bounds.since, lambda name: bool(self.con.execute(
            f"SELECT 1 FROM {ident(f'protocol_{name}')} WHERE timestamp < ? LIMIT 1", [since]).fetchall()))

    # ----------------------------------------------------------------------------- sinks

    def _sink_views(self, config: Config) -> dict[tuple[str, str], tuple[str, Any]]:
        from eoctl.engine.duckdb.stores import read_sink

        if self._sinks is None:
            self._sinks = {}
            for name, ep in config.endpoints.items():
                for sink in ep.sinks:
                    view = f"all_sink_{len(self._sinks)}"
                    self._sinks[(name, sink.name)] = (view, read_sink(self.con, config, sink, view, self._copies))
        return self._sinks

    def sink_lookup(self, config: Config, column: str, value: str) -> tuple[list[SinkRow], bool]:
        from eoctl.trace.reader import SinkRow, sink_key_literal

        rows: list[SinkRow] = []
        seen_column = False
        for (name, sink), (view, schema) in self._sink_views(config).items():
            if column not in schema:
                continue
            seen_column = True
            dtype = schema[column]
            kind = "integer" if dtype.is_integer() else "number" if dtype.is_floating() or dtype.is_decimal() else "text"
            literal = sink_key_literal(column, value, kind)
            cond = (f"{ident(column)} = {literal!r}" if kind != "text"
                    else f"CAST({ident(column)} AS VARCHAR) = {repr_sql(literal)}")
            for r in self.con.sql(f"SELECT * FROM {ident(view)} WHERE {cond} LIMIT {_LIMIT}").fetchall():
                rows.append(SinkRow(name, sink, _as_spark_row(schema.names, r)))
        return rows, seen_column

    def _sink_where(self, config: Config, endpoint: str, sink: str, message_ids: set[str]) -> str:
        column = next(s for s in config.endpoints[endpoint].sinks if s.name == sink).message_id_column
        listed = ", ".join(repr_sql(m) for m in sorted(message_ids)) or "NULL"
        return f"CAST({ident(column)} AS VARCHAR) IN ({listed})"

    def sink_rows(self, config: Config, message_ids: set[str]) -> tuple[list[SinkRow], dict]:
        from eoctl.trace.reader import SinkRow

        out: list[SinkRow] = []
        schemas = {}
        for (name, sink), (view, schema) in self._sink_views(config).items():
            schemas[(name, sink)] = schema
            where = self._sink_where(config, name, sink, message_ids)
            for r in self.con.sql(f"SELECT * FROM {ident(view)} WHERE {where} LIMIT {_LIMIT}").fetchall():
                out.append(SinkRow(name, sink, _as_spark_row(schema.names, r)))
        return out, schemas

    # --------------------------------------------------------------------------- findings


def matching_records(con, clauses: list[Clause]) -> list[dict[str, Any]]:
    """The records of the views `protocol` and `commits` (eoctl.expr.records) that meet one of the
    clauses, as trace keeps them: the working copy's expression (the audit's one definition of
    `processed`, `seq` and `problem`) plus the eo-sequence header as text, filtered before
    anything else is decoded. Both engines' scans end here: the Spark one with the few candidate
    records its job returned."""
    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.records import commits_table, protocol_table, working_copy
    from eoctl.trace.reader import clause_condition, live_clauses

    if not live_clauses(clauses):
        return []
    sql = compile_sql(working_copy(protocol_table(), commits_table(), Dialect.duckdb, sequence_text=True),
                      Dialect.duckdb)
    where, params = clause_condition(clauses, ident)
    return con.sql(f"SELECT endpoint AS consumer, {', '.join(ident(c) for c in _HIT_COLUMNS)} "
                   f"FROM ({sql}) AS trace_records WHERE {where}", params=params).to_arrow_table().to_pylist()


def _as_spark_row(names, values) -> dict[str, Any]:
    """A sink row as Spark's Row.asDict gives it: times as UTC wall time, without a zone."""
    return {n: naive_utc(v) for n, v in zip(names, values)}


