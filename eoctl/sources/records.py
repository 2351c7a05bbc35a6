"""The one normalized record schema every topic source returns, and protocol-header extraction.

Live Kafka topics and topic archives both become DataFrames of this shape, so checks never care
where records came from:

    topic string, partition int, offset long, timestamp timestamp,
    key binary, value binary, headers array<struct<key: string, value: binary>>
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eoctl.config.model import HeaderNames

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")

#: normalized protocol columns, in order, and the HeaderNames field each comes from
PROTOCOL_COLUMNS = ("message_id", "token_id", "producer", "sequence", "causation_id", "attempt_id", "blobs")


def record_schema() -> StructType:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType(
        [
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("headers", ArrayType(header)),
        ]
    )


def normalize(df: DataFrame) -> DataFrame:
    """Project any Kafka-shaped DataFrame onto the record schema (casting compatible types)."""
    from pyspark.sql import functions as F

    missing = [c for c in RECORD_COLUMNS if c not in df.columns]
    if missing:
        from eoctl.errors import SourceError

        raise SourceError(
            f"records lack the Kafka record columns {', '.join(missing)}",
            hint="expected topic, partition, offset, timestamp, key, value, headers",
        )
    schema = record_schema()
    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def with_protocol_columns(df: DataFrame, names: HeaderNames, text: bool = True) -> DataFrame:
    """Add one string column per protocol header (message_id, token_id, ...), by the configured names
    (`text` false: the raw bytes, for eoctl.expr.records.working_copy to decode).

    The headers become one map per record (a repeated key keeps its last value, as Kafka's
    lastHeader does; the session sets mapKeyDedupPolicy=LAST_WIN), looked up once per header:
    several times faster than one array filter per header, which Spark cannot compile.
    """
    from pyspark.sql import functions as F

    hmap = F.map_from_entries(F.coalesce(F.col("headers"), F.array().cast("array<struct<key:string,value:binary>>")))
    return df.withColumn("_h", hmap).select(
        *df.columns, *[(value.cast("string") if text else value).alias(col) for col, value in
                       ((c, F.try_element_at("_h", F.lit(getattr(names, c)))) for c in PROTOCOL_COLUMNS)])
