"""`eoctl sources scan` on the DuckDB engine: the partition statistics of eoctl.expr.summary over
the input's records, in process."""

from __future__ import annotations

from eoctl.config.model import Config
from eoctl.sources import input_committed_offsets
from eoctl.sources.kafka import OffsetRange
from eoctl.sources.summary import InputSummary, PartitionSummary, input_of, input_summary


def summarize_input(config: Config, endpoint: str, ranges: list[OffsetRange] | None = None) -> InputSummary:
    """The input's summary (eoctl.sources.summary.InputSummary), one row per partition."""
    from eoctl.engine.duckdb.records import build_working_copy
    from eoctl.engine.duckdb.sql import connect
    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.records import commits_table, protocol_table
    from eoctl.expr.summary import partition_stats
    from eoctl.options import AuditOptions

    source = input_of(config, endpoint)
    committed = input_committed_offsets(config, source)
    con = connect(config.engine.memory_limit)
    try:
        build_working_copy(con, config, [endpoint], AuditOptions(ranges=ranges), keep=False)
        sql = compile_sql(partition_stats(protocol_table(), commits_table()), Dialect.duckdb)
        rows = con.sql(sql).to_arrow_table().to_pylist()  # one row per partition
    finally:
        con.close()
    return input_summary(endpoint, source, [
        PartitionSummary(committed_offset=committed.get(r["topic"], {}).get(r["partition"]),
                         **{k: v for k, v in r.items()}) for r in rows])
