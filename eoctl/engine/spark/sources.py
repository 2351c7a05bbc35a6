"""Topics, topic archives and tables read as Spark DataFrames: a live topic through Spark's Kafka
source, an archive through its file reader, a store table through JDBC or a Parquet snapshot, a
sink through its format's reader; records given their protocol columns."""

from __future__ import annotations

import json
from functools import reduce
from typing import TYPE_CHECKING

from eoctl.config.model import Config, HeaderNames, Isolation, KafkaConnection, TopicInput
from eoctl.errors import SourceError
from eoctl.sources.archive import _misfit_local_parquet, check_archive_files
from eoctl.sources.kafka import _JAAS_MODULE, OffsetRange
from eoctl.sources.records import PROTOCOL_COLUMNS, RECORD_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def read_input(
    spark: SparkSession, config: Config, source: TopicInput, ranges: list[OffsetRange] | None = None,
    protocol: bool = True,
) -> DataFrame:
    """An endpoint's incoming records in the normalized schema, plus one column per protocol header
    (unless `protocol` is false: a caller that filters first decodes only what it keeps)."""
    if source.kafka:
        df = read_topics(spark, config.kafka[source.kafka], source.topics, isolation=source.isolation, ranges=ranges)
    else:
        assert source.archive is not None
        df = read_archive(spark, source.archive, source.archive_format, source.topics)
        if ranges:
            df = df.where(_ranges_predicate(ranges))
    return with_protocol_columns(df, config.protocol.headers) if protocol else df


def _ranges_predicate(ranges: list[OffsetRange]):
    from functools import reduce

    from pyspark.sql import functions as F

    def one(r: OffsetRange):
        cond = (F.col("topic") == r.topic) & (F.col("partition") == r.partition)
        if r.start >= 0:
            cond &= F.col("offset") >= r.start
        if r.end >= 0:
            cond &= F.col("offset") < r.end
        return cond

    return reduce(lambda a, b: a | b, (one(r) for r in ranges))


def spark_options(conn: KafkaConnection) -> dict[str, str]:
    """Spark Kafka source options (Java client settings prefixed with `kafka.`)."""
    opts = {
        "kafka.bootstrap.servers": conn.bootstrap_servers,
        "kafka.security.protocol": conn.security_protocol,
    }
    if conn.sasl_mechanism:
        password = conn.sasl_password.get_secret_value() if conn.sasl_password else ""
        opts["kafka.sasl.mechanism"] = conn.sasl_mechanism
        opts["kafka.sasl.jaas.config"] = (
            f"{_JAAS_MODULE[conn.sasl_mechanism]} required "
            f"username={json.dumps(conn.sasl_username)} password={json.dumps(password)};"
        )
    if conn.ssl_ca_location:
        opts["kafka.ssl.truststore.type"] = "PEM"
        opts["kafka.ssl.truststore.location"] = conn.ssl_ca_location
    opts.update({f"kafka.{k}": v for k, v in conn.spark_properties.items()})
    return opts


def _offsets_json(ranges: list[OffsetRange], attr: str) -> str:
    out: dict[str, dict[str, int]] = {}
    for r in ranges:
        out.setdefault(r.topic, {})[str(r.partition)] = getattr(r, attr)
    return json.dumps(out)


def read_topics(
    spark: SparkSession,
    conn: KafkaConnection,
    topics: list[str],
    *,
    isolation: Isolation = "read_committed",
    ranges: list[OffsetRange] | None = None,
) -> DataFrame:
    """Records of `topics` (all partitions, earliest to latest) or of exactly `ranges`, normalized.

    Under read_committed, "latest" is the last stable offset and aborted records are skipped.
    """
    reader = spark.read.format("kafka").options(**spark_options(conn))
    reader = reader.option("includeHeaders", "true").option("kafka.isolation.level", isolation)
    if ranges:
        unknown = sorted({r.topic for r in ranges} - set(topics))
        if unknown:
            raise SourceError(f"offset ranges name topics that are not configured: {', '.join(unknown)}")
        assign: dict[str, list[int]] = {}
        for r in ranges:
            assign.setdefault(r.topic, []).append(r.partition)
        reader = (
            reader.option("assign", json.dumps(assign))
            .option("startingOffsets", _offsets_json(ranges, "start"))
            .option("endingOffsets", _offsets_json(ranges, "end"))
        )
    else:
        reader = (
            reader.option("subscribe", ",".join(topics))
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
        )
    return normalize(reader.load())


_CORRUPT = "_corrupt_record"


#: Spark's PERMISSIVE mode keeps a line it cannot parse, whole, in the corrupt-record column
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}


#: what a record cannot do without: where it is in the log
_PLACE = ("topic", "partition", "offset")


def _json_schema(binary_payload: bool = True):
    """The record schema as JSON lines carry it, plus the corrupt-record column. eoctl reads every
    column but `key` and `value`; with `binary_payload` false those two stay text, so decoding
    judges a line by what eoctl reads of it, as the records read (whose unread columns Spark's
    reader never decodes) do."""
    from pyspark.sql.types import StringType, StructField, StructType

    fields = [StructField(f.name, StringType()) if not binary_payload and f.name in ("key", "value") else f
              for f in record_schema().fields]
    return StructType([*fields, StructField(_CORRUPT, StringType())])


def read_archive(spark: SparkSession, path: str, fmt: str, topics: list[str] | None = None,
                 files: list[str] | None = None) -> DataFrame:
    """Records of the archive at `path`, normalized; only `topics` when given; only `files` (paths
    of files under it) when given."""
    from pyspark.sql import functions as F
    from pyspark.sql.utils import AnalysisException

    where = files if files is not None else path
    try:
        if fmt == "json":
            raw = spark.read.schema(_json_schema()).options(**_JSON_OPTIONS).json(where)
            decoded = reduce(lambda a, b: a & b, [F.col(c).isNotNull() for c in _PLACE], F.col(_CORRUPT).isNull())
            df = raw.where(decoded).drop(_CORRUPT)
        else:
            df = spark.read.format(fmt).load(where)
            if fmt == "parquet":
                check_archive_files(path, _misfit_local_parquet(df.inputFiles()))
        df = normalize(df)
    except AnalysisException as exc:
        raise SourceError(f"topic archive {path} cannot be read as {fmt}: {str(exc).splitlines()[0]}") from None
    if topics:
        df = df.where(F.col("topic").isin(topics))
    return df


def undecodable_lines(spark: SparkSession, path: str, topics: list[str] | None = None) -> DataFrame:
    """The lines of the JSON archive at `path` that read_archive cannot read as records: `file`,
    `line` (1-based, blank lines counted), `problem` and the line's first 200 characters (`text`).
    A line whose topic decodes to one not in `topics` is left out.

    Line numbers without collecting: every row gets Spark's monotonically increasing id, which
    counts the rows of one partition from a start that is the same for every row of it. Rows of
    one split of a file (`_metadata.file_block_start`) are consecutive in one partition, so a
    line's number is the lines of that file's earlier splits plus its distance from its split's
    first id. One pass counts each split's lines; the two branches scan the same files in one
    query, so they see the same partitions and the same ids.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    lines = spark.read.text(path).select(
        F.regexp_replace("_metadata.file_path", "^file:(//)?", "").alias("file"),
        F.col("_metadata.file_block_start").alias("_block"),
        F.monotonically_increasing_id().alias("_id"),
        F.col("value").alias("_text"))
    parsed = lines.where(F.trim("_text") != "").withColumn(
        "_r", F.from_json("_text", _json_schema(binary_payload=False), _JSON_OPTIONS))
    malformed = F.col("_r").isNull() | F.col(f"_r.{_CORRUPT}").isNotNull()
    unplaced = reduce(lambda a, b: a | b, [F.col(f"_r.{c}").isNull() for c in _PLACE])
    bad = parsed.where(malformed | unplaced)
    if topics:
        bad = bad.where(F.col("_r.topic").isNull() | F.col("_r.topic").isin(topics))
    problem = F.when(malformed, F.lit("not a record: malformed JSON or a field of the wrong type")).otherwise(
        F.concat(F.lit("no "), F.concat_ws(", ", *[F.when(F.col(f"_r.{c}").isNull(), F.lit(c)) for c in _PLACE])))
    earlier = Window.partitionBy("file").orderBy("_block").rowsBetween(Window.unboundedPreceding, -1)
    splits = lines.groupBy("file", "_block").agg(F.count(F.lit(1)).alias("_lines"), F.min("_id").alias("_first"))
    splits = splits.select("file", "_block", "_first", F.coalesce(F.sum("_lines").over(earlier), F.lit(0)).alias("_before"))
    return bad.join(splits, ["file", "_block"]).select(
        "file", (F.col("_before") + F.col("_id") - F.col("_first") + 1).alias("line"), problem.alias("problem"),
        F.substring("_text", 1, 200).alias("text"))


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
