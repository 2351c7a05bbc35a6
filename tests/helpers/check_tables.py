"""One check of eoctl.expr run alone over tables given as Python rows, on DuckDB (in memory) or a
Spark session: no readers, no stores, no files. The oracle tests of tests/expr compare its
evidence with what a plain-Python reading of the protocol says it must be, on both engines.

    tables = CheckTables(config, records=[record(offset=0, token_id="k0")], stores={"tokens": [...]})
    tables.evidence("EO201", "duckdb")   # {endpoint: [row, ...]}
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

#: the working copy's columns a test usually leaves alone (eoctl.expr.records.records_table)
_RECORD_DEFAULTS: dict[str, Any] = {
    "endpoint": "billing", "topic": "t", "partition": 0, "offset": 0, "timestamp": dt.datetime(2026, 11, 1),
    "processed": False, "committed": None, "message_id": None, "token_id": None, "producer": None, "seq": None,
    "causation_id": None, "attempt_id": None, "blobs": None, "problem": None,
}
_STORE_DEFAULTS: dict[str, dict[str, Any]] = {
    "tokens": {"destination": None, "attempt_id": None, "message_id": None, "created_at": dt.datetime(2026, 11, 1)},
    "outbox": {"endpoint": None, "incoming_token_id": None, "attempt_id": "a", "outgoing": "[]",
               "tokens_committed_at": None, "created_at": dt.datetime(2026, 11, 1),
               "updated_at": dt.datetime(2026, 11, 1), "version": 1},
    "intents": {"endpoint": None, "attempt_id": "a", "created_at": dt.datetime(2026, 11, 1)},
}


def record(**fields: Any) -> dict[str, Any]:
    """A row of the working copy: the given fields, the rest their defaults (endpoint billing)."""
    unknown = set(fields) - set(_RECORD_DEFAULTS)
    assert not unknown, f"not a working-copy column: {unknown}"
    return {**_RECORD_DEFAULTS, **fields}


def store_row(kind: str, ep: str, /, **fields: Any) -> dict[str, Any]:
    """A row of store table `kind` (canonical columns) read for endpoint `ep`. Positional-only, so an
    intents row can be given its own `kind` column (store_row("intents", "billing", kind="blob"))."""
    return {"ep": ep, **_STORE_DEFAULTS[kind], **fields}


def differences(left: dict[str, list[tuple]], right: dict[str, list[tuple]]) -> list[tuple]:
    """(endpoint, side, row) of every row one side of two evidence sets (endpoint -> sorted row
    tuples) has more of: a readable failure."""
    from collections import Counter

    out = []
    for ep in sorted(set(left) | set(right)):
        a, b = Counter(left.get(ep, [])), Counter(right.get(ep, []))
        out += [(ep, "left only", dict(r)) for r in (a - b).elements()]
        out += [(ep, "right only", dict(r)) for r in (b - a).elements()]
    return out


def outgoing(*messages: dict[str, Any]) -> str:
    """An outbox entry's `outgoing` column: its messages as the protocol writes them (JSON)."""
    return json.dumps([{"message_id": None, "token_id": None, "topic": "t", "key": None, "headers": {}, **m}
                       for m in messages])


@dataclass
class CheckTables:
    """The tables of eoctl.expr.inputs as rows. `stores`: kind -> rows (with `ep`); every endpoint
    with a store has each kind given here. `sinks`: (endpoint, sink name) -> rows of that sink's
    configured columns (their types: `sink_types`); `blobs`: endpoint -> its prefix's listing."""

    config: Any
    records: list[dict[str, Any]] = field(default_factory=list)
    stores: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    sinks: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    sink_types: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    blobs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    log_starts: list[dict[str, Any]] = field(default_factory=list)
    commits: list[dict[str, Any]] = field(default_factory=list)
    options: Any = None

    def scope(self):
        import ibis

        from eoctl.expr.inputs import Scope
        from eoctl.options import AuditOptions

        options = self.options or AuditOptions(now=dt.datetime(2026, 11, 10, tzinfo=dt.timezone.utc))
        with_store = [n for n, ep in self.config.endpoints.items() if ep.store]
        return Scope(self.config, options, tables={(n, kind) for n in with_store for kind in self.stores},
                     sink_schemas={k: ibis.schema(t) for k, t in self.sink_types.items()})

    def _tables(self, scope) -> dict[str, tuple[Any, list[dict[str, Any]]]]:
        """view name -> (Ibis schema, rows)."""
        import ibis

        from eoctl.expr.inputs import BLOB_LISTING_SCHEMA, LOG_STARTS_SCHEMA, STORE_SCHEMAS
        from eoctl.expr.records import commits_table, records_table

        out = {"records": (records_table().schema(), self.records),
               "log_starts": (ibis.schema(LOG_STARTS_SCHEMA), self.log_starts),
               "commits": (commits_table().schema(), self.commits)}
        for kind in STORE_SCHEMAS:
            out[kind] = (ibis.schema({"ep": "string", **STORE_SCHEMAS[kind]}), self.stores.get(kind, []))
        for (name, sink_name), schema in scope.sink_schemas.items():
            sink = next(s for s in self.config.endpoints[name].sinks if s.name == sink_name)
            out[scope.sink_view(name, sink)] = (schema, self.sinks.get((name, sink_name), []))
        for name, ep in scope.endpoints.items():
            if ep.blobs:
                out[scope.blob_view(name)] = (ibis.schema(BLOB_LISTING_SCHEMA), self.blobs.get(name, []))
        return out

    def rows_of(self, build: Any, engine: str = "duckdb", spark: Any = None) -> list[dict[str, Any]]:
        """The rows of one expression `build(scope, dialect)` over the tables (a part checks share)."""
        from eoctl.expr import compile_sql

        scope = self.scope()
        dialect, run = _engine(engine, spark)
        with run(self._tables(scope)) as (query, _keep):
            return query(compile_sql(build(scope, dialect), dialect))

    def evidence(self, code: str, engine: str, spark: Any = None) -> dict[str, list[dict[str, Any]]]:
        """endpoint -> the evidence rows of check `code` with any (hits without rows left out)."""
        from eoctl.expr import compile_sql
        from eoctl.expr.catalog import CHECKS, shared_tables
        from eoctl.expr.records import records_table

        scope = self.scope()
        dialect, run = _engine(engine, spark)
        with run(self._tables(scope)) as (query, keep):
            records = records_table()
            for name, expr in shared_tables([code], scope, records, dialect).items():
                keep(name, compile_sql(expr, dialect))  # as the audit keeps them before the checks
            out: dict[str, list[dict[str, Any]]] = {}
            for hit in CHECKS[code](scope, records, dialect):
                rows = query(compile_sql(hit.evidence, dialect))
                if rows:
                    out.setdefault(hit.endpoint, []).extend(rows)
            return out


def _engine(engine: str, spark: Any) -> tuple[Any, Any]:
    """(the dialect, the runner of the tables) of `engine`: duckdb, or spark on session `spark`."""
    from eoctl.expr import Dialect

    return (Dialect.duckdb, _on_duckdb) if engine == "duckdb" else (Dialect.spark, _on_spark(spark))


class _on_duckdb:
    def __init__(self, tables) -> None:
        import duckdb
        import pyarrow as pa
        from ibis.backends.sql.datatypes import DuckDBType

        self.con = duckdb.connect()
        self.con.execute("SET TimeZone = 'UTC'")
        for name, (schema, rows) in tables.items():
            cols = ", ".join(f'"{c}" {DuckDBType.to_string(t)}' for c, t in schema.items())
            self.con.execute(f'CREATE TABLE "{name}" ({cols})')
            if rows:
                # types as Arrow infers them, then cast by the insert to the table's
                given = pa.Table.from_pylist([{c: r.get(c) for c in schema} for r in rows])  # noqa: F841
                self.con.execute(f'INSERT INTO "{name}" BY NAME SELECT * FROM given')

    def __enter__(self):
        return (lambda sql: self.con.sql(sql).to_arrow_table().to_pylist(),
                lambda name, sql: self.con.execute(f'CREATE TABLE "{name}" AS {sql}'))

    def __exit__(self, *exc) -> None:
        self.con.close()


def _on_spark(spark):
    class _Run:
        def __init__(self, tables) -> None:
            from eoctl.engine.spark.run import sql_conf
            from eoctl.expr.functions import SPARK_SQL_CONF

            self.views = list(tables)
            self.conf = sql_conf(spark, SPARK_SQL_CONF)
            for name, (schema, rows) in tables.items():
                ddl = ", ".join(f"`{c}` {_spark_type(t)}" for c, t in schema.items())
                spark.createDataFrame([[r.get(c) for c in schema] for r in rows], ddl).createOrReplaceTempView(name)

        def __enter__(self):
            self.conf.__enter__()

            def keep(name: str, sql: str) -> None:
                spark.sql(sql).createOrReplaceTempView(name)
                self.views.append(name)

            return lambda sql: [r.asDict(recursive=True) for r in spark.sql(sql).collect()], keep

        def __exit__(self, *exc) -> None:
            self.conf.__exit__(*exc)
            for name in self.views:
                spark.catalog.dropTempView(name)

    return _Run


def _spark_type(t) -> str:
    if t.is_timestamp():
        return "timestamp"
    names = {"string": "string", "int32": "int", "int64": "bigint", "boolean": "boolean", "float64": "double",
             "binary": "binary"}
    return names[str(t).removeprefix("!")]
