"""A message's findings: the audit's own check loop (eoctl.audit.evaluate_checks) over tables that
hold only the rows trace gathered for it (records, store rows, blobs, sink rows), run on a
RowsRun (eoctl.engine.run.open_rows_run). Each evidence row is given as Spark's `to_json` writes it
(null fields left out, times as `2026-11-01T12:00:00.000Z`), so that a trace reads the same on
both engines."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eoctl.config.model import Config
    from eoctl.trace.model import MessageTrace, TraceOptions
    from eoctl.trace.reader import SinkRow
    from eoctl.trace.stores import StoreLookups


def message_findings(config: Config, options: TraceOptions, hits: list[dict[str, Any]], stores: StoreLookups,
                     sink_rows: list[SinkRow], sink_schemas: dict, messages: list[MessageTrace]) -> list[dict[str, Any]]:
    """The catalog's message-scoped findings (CodeInfo.message_scoped) over the rows trace gathered.
    `sink_schemas`: (endpoint, sink) -> Ibis schema."""
    import ibis

    from eoctl.audit import evaluate_checks
    from eoctl.engine.run import open_rows_run
    from eoctl.expr.inputs import BLOB_LISTING_SCHEMA, STORE_SCHEMAS, Scope
    from eoctl.expr.records import RECORD_COLUMNS, records_table
    from eoctl.findings import CATALOG, AuditReport
    from eoctl.options import AuditOptions
    from eoctl.stores.layout import KINDS, EndpointTable
    from eoctl.trace.reader import naive_utc

    scope = Scope(config, AuditOptions(now=options.now, grace=options.grace, stuck_after=options.stuck_after))
    scope.layout = stores.layout
    tables: dict[str, tuple[list[dict[str, Any]], Any]] = {}
    tables["records"] = ([{**{c: h.get(c) for c in RECORD_COLUMNS}, "endpoint": h["consumer"],
                           "timestamp": naive_utc(h["timestamp"])} for h in hits], records_table().schema())
    for kind in KINDS:
        rows = []
        for name in config.endpoints:
            if isinstance(stores.layout.lookup(name, kind), EndpointTable):
                scope.tables.add((name, kind))
                rows += [{"ep": name, **{c: naive_utc(r.get(c)) for c in STORE_SCHEMAS[kind]}}
                         for r in stores.rows.get((name, kind), {}).values()]
        tables[kind] = (rows, ibis.schema({"ep": "string", **STORE_SCHEMAS[kind]}))
    listed: dict[str, dict[str, Any]] = {}
    for m in messages:
        for b in m.blobs:
            if b.present:
                listed.setdefault(b.producer, {})[b.name] = b
    for name, ep in config.endpoints.items():
        if ep.blobs:
            tables[scope.blob_view(name)] = ([{"name": b.name, "size": b.size, "modified": naive_utc(b.modified),
                                               "actual_sha256": b.actual_sha256} for b in listed.get(name, {}).values()],
                                             ibis.schema(BLOB_LISTING_SCHEMA))
        for sink in ep.sinks:  # the sink rows trace found: those naming the messages, or the lookup's
            schema = sink_schemas[(name, sink.name)]
            tables[scope.sink_view(name, sink)] = ([{c: naive_utc(r.row.get(c)) for c in schema.names} for r in sink_rows
                                                    if (r.endpoint, r.sink) == (name, sink.name)], schema)
            scope.sink_schemas[(name, sink.name)] = schema
    report = AuditReport(run={"id": "trace"})
    run = open_rows_run(config, tables, scope)
    try:
        evaluate_checks(report, run, [c for c, info in CATALOG.items() if info.message_scoped], lambda _m: None)
    finally:
        run.release()
    out = []
    for f in report.findings:  # each finding's rows in the order of their JSON text
        rows = [_spark_json(r) for r in f.evidence]
        out += [{"code": f.code, "endpoint": f.endpoint, "where": f.where, "evidence": r}
                for _text_of, r in sorted((json.dumps(r, separators=(",", ":"), ensure_ascii=False), r) for r in rows)]
    return out


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
