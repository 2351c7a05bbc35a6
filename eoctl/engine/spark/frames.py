"""Small DataFrames built from driver-side rows without Python workers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], ddl: str | StructType) -> DataFrame:
    """A DataFrame of a few rows (committed offsets, broker answers) with the schema `ddl` (a DDL
    string, or a StructType such as another frame's schema) of text, integer, boolean, double and
    timestamp columns.

    Why not `spark.createDataFrame`: classic PySpark ships local rows as a pickled RDD, which forks
    Python workers (about 150 MiB of RSS for the daemon and two workers) every time the frame is
    read. The rows go to the JVM as one JSON text, parsed there: a literal per value cost a py4j
    call each, 16 ms a row (1,234 rows: 20 s to build the frame). A timestamp travels as
    microseconds since the epoch, taken as PySpark takes a datetime (one without a zone is local
    time).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        DataType,
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = ddl if isinstance(ddl, StructType) else DataType.fromDDL(ddl)
    assert isinstance(schema, StructType), ddl
    if not rows:
        return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields])
    for f in schema.fields:
        if not isinstance(f.dataType, (StringType, IntegerType, LongType, BooleanType, DoubleType, TimestampType)):
            raise ValueError(f"local_frame holds text, integers, booleans, doubles and timestamps; {f.name} is "
                             f"{f.dataType.simpleString()}")
    for row in rows:
        if len(row) != len(schema.fields):
            raise ValueError(f"row {row!r} does not have the {len(schema.fields)} fields of {ddl!r}")

    stamps = [isinstance(f.dataType, TimestampType) for f in schema.fields]
    wire = StructType([StructField(f.name, LongType() if stamp else f.dataType) for f, stamp in zip(schema.fields, stamps)])
    text = json.dumps([{f.name: TimestampType().toInternal(v) if stamp and v is not None else v
                        for f, stamp, v in zip(schema.fields, stamps, row)} for row in rows])
    parsed = spark.range(1).select(F.inline(F.from_json(F.lit(text), ArrayType(wire))))

    def column(name: str, stamp: bool):
        col = F.col("`" + name.replace("`", "``") + "`")
        return (F.timestamp_micros(col) if stamp else col).alias(name)

    return parsed.select(*[column(f.name, stamp) for f, stamp in zip(schema.fields, stamps)])
