"""Small DataFrames built from driver-side rows without Python workers."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

_ROWS_PER_LITERAL = 500  # keeps each generated array expression small enough for codegen


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], ddl: str | StructType) -> DataFrame:
    """A DataFrame of a few rows (committed offsets, broker answers) with the schema `ddl` (a DDL
    string, or a StructType such as another frame's schema).

    Why not `spark.createDataFrame`: classic PySpark ships local rows as a pickled RDD, which forks
    Python workers (about 150 MiB of RSS for the daemon and two workers) every time the frame is
    read. Literals stay in the JVM.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DataType, StructType

    schema = ddl if isinstance(ddl, StructType) else DataType.fromDDL(ddl)
    assert isinstance(schema, StructType), ddl
    if not rows:
        return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields])
    for row in rows:
        if len(row) != len(schema.fields):
            raise ValueError(f"row {row!r} does not have the {len(schema.fields)} fields of {ddl!r}")

    def chunk(part: Sequence[Sequence[Any]]) -> DataFrame:
        structs = [F.struct(*[F.lit(v).cast(f.dataType).alias(f.name) for v, f in zip(row, schema.fields)])
                   for row in part]
        return spark.range(1).select(F.inline(F.array(*structs)))

    parts = [rows[i:i + _ROWS_PER_LITERAL] for i in range(0, len(rows), _ROWS_PER_LITERAL)]
    return reduce(lambda a, b: a.unionByName(b), (chunk(p) for p in parts))
