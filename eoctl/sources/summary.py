"""What eoctl sees of an endpoint's input: per-partition counts, offsets and protocol coverage.

One aggregation over the records (Spark, or DuckDB: eoctl.expr.summary); only one row per
partition reaches the driver.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config
from eoctl.engine.frames import local_frame
from eoctl.sources import OffsetRange, input_committed_offsets, read_input

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class PartitionSummary:
    topic: str
    partition: int
    records: int
    first_offset: int | None
    last_offset: int | None
    committed_offset: int | None
    in_flight: int
    with_protocol_headers: int
    distinct_message_ids: int


@dataclass(frozen=True)
class InputSummary:
    endpoint: str
    source: str
    isolation: str | None
    partitions: list[PartitionSummary]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "source": self.source,
            "isolation": self.isolation,
            "records": self.records,
            "partitions": [asdict(p) for p in self.partitions],
        }


def _input_of(config: Config, endpoint: str):
    ep = config.endpoint(endpoint)
    if ep.input is None:
        from eoctl.errors import UsageError

        raise UsageError(f"endpoint {endpoint!r} has no [endpoints.{endpoint}.input] configured")
    return ep.input


def _summary(endpoint: str, source, partitions: list[PartitionSummary]) -> InputSummary:
    kind = f"kafka {source.kafka}" if source.kafka else f"archive {source.archive}"
    return InputSummary(endpoint, kind, source.isolation if source.kafka else None, partitions)


def summarize_input_duckdb(config: Config, endpoint: str, ranges: list[OffsetRange] | None = None) -> InputSummary:
    """The same summary on the DuckDB engine (eoctl.expr.summary), in process."""
    from eoctl.engine.duckdb import build_working_copy, connect
    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.records import commits_table, protocol_table
    from eoctl.expr.summary import partition_stats
    from eoctl.options import AuditOptions

    source = _input_of(config, endpoint)
    committed = input_committed_offsets(config, source)
    con = connect(config.engine.memory_limit)
    try:
        build_working_copy(con, config, [endpoint], AuditOptions(ranges=ranges), keep=False)
        sql = compile_sql(partition_stats(protocol_table(), commits_table()), Dialect.duckdb)
        rows = con.sql(sql).to_arrow_table().to_pylist()  # one row per partition
    finally:
        con.close()
    return _summary(endpoint, source, [
        PartitionSummary(committed_offset=committed.get(r["topic"], {}).get(r["partition"]),
                         **{k: v for k, v in r.items()}) for r in rows])


def summarize_input(
    spark: SparkSession, config: Config, endpoint: str, ranges: list[OffsetRange] | None = None
) -> InputSummary:
    from pyspark.sql import functions as F

    source = _input_of(config, endpoint)
    committed = input_committed_offsets(config, source)
    df = read_input(spark, config, source, ranges)

    # Committed offsets travel as a tiny broadcast table, never the records to the driver.
    rows = [(t, p, o) for t, parts in committed.items() for p, o in parts.items()]
    commits = local_frame(spark, rows, "c_topic string, c_partition int, committed long")
    joined = df.join(
        F.broadcast(commits),
        (df.topic == commits.c_topic) & (df.partition == commits.c_partition),
        "left",
    )
    stats = joined.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("records"),
        F.min("offset").alias("first_offset"),
        F.max("offset").alias("last_offset"),
        F.first("committed", ignorenulls=True).alias("committed_offset"),
        F.sum(F.when(F.col("committed").isNull() | (F.col("offset") >= F.col("committed")), 1).otherwise(0)).alias(
            "in_flight"
        ),
        F.sum(F.when(F.col("message_id").isNotNull() & F.col("token_id").isNotNull(), 1).otherwise(0)).alias(
            "with_protocol_headers"
        ),
        F.countDistinct("message_id").alias("distinct_message_ids"),
    )
    partitions = [
        PartitionSummary(
            topic=r["topic"],
            partition=r["partition"],
            records=r["records"],
            first_offset=r["first_offset"],
            last_offset=r["last_offset"],
            committed_offset=committed.get(r["topic"], {}).get(r["partition"]),
            in_flight=r["in_flight"],
            with_protocol_headers=r["with_protocol_headers"],
            distinct_message_ids=r["distinct_message_ids"],
        )
        for r in stats.orderBy("topic", "partition").collect()  # one row per partition
    ]
    return _summary(endpoint, source, partitions)
