"""The trace readers (eoctl.trace.reader) of both engines give one message's records and sink rows
alike: everything after them is engine-free."""

from __future__ import annotations

import pytest

from eoctl.engine.run import open_trace_reader
from eoctl.findings import names_message
from eoctl.sources import input_committed_offsets
from eoctl.trace.reader import Bounds
from tests.helpers.audits import audit_duckdb, on_engine
from tests.helpers.chaos import recorded_copy, settled


@pytest.mark.integration
def test_both_readers_give_the_same_records_and_sink_rows(tmp_path, spark) -> None:
    config = recorded_copy(tmp_path).config
    report = audit_duckdb(config, settled(), ["EO101", "EO102", "EO501"])
    ids = {m for f in report.findings for row in f.evidence for m in names_message(f.code, row)}
    assert len(ids) >= 3
    committed = {n: input_committed_offsets(config, ep.input) for n, ep in config.endpoints.items() if ep.input}
    everything = Bounds(None, None, "every record")
    got = {}
    for engine, session in (("duckdb", None), ("spark", spark)):
        reader = open_trace_reader(session, on_engine(config, engine))
        try:
            hits, note = reader.scan(config, everything, committed, [{"message_id": ids}], "the copies")
            rows, schemas = reader.sink_rows(config, ids)
            by_key, has_column = reader.sink_lookup(config, "order_id", str(rows[0].row["order_id"]))
        finally:
            reader.close()
        key = lambda h: (h["consumer"], h["topic"], h["partition"], h["offset"])  # noqa: E731
        got[engine] = ([{k: v for k, v in sorted(h.items()) if k != "timestamp"} for h in sorted(hits, key=key)],
                       note.records_read, sorted(str(r) for r in rows),
                       # the columns and their kinds (a time's precision is the engine's own)
                       {k: {c: type(t).__name__ for c, t in schema.items()} for k, schema in schemas.items()},
                       sorted(str(r) for r in by_key), has_column)
    assert got["duckdb"][0] and {h["message_id"] for h in got["duckdb"][0]} == ids
    assert got["duckdb"] == got["spark"]
