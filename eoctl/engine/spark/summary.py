"""`eoctl sources scan` on the Spark engine: per partition statistics by one aggregation over the
input, the committed offsets a broadcast table; one row per partition comes back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eoctl.config.model import Config
from eoctl.engine.spark.frames import local_frame
from eoctl.engine.spark.sources import read_input
from eoctl.sources import input_committed_offsets
from eoctl.sources.kafka import OffsetRange
from eoctl.sources.summary import InputSummary, PartitionSummary, input_of, input_summary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def summarize_input(
    spark: SparkSession, config: Config, endpoint: str, ranges: list[OffsetRange] | None = None
) -> InputSummary:
    from pyspark.sql import functions as F

    source = input_of(config, endpoint)
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
    return input_summary(endpoint, source, partitions)
