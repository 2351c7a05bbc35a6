"""A finding's evidence on the Spark engine: counted, sampled, the rest written as Parquet with
secrets masked, never collected whole."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from eoctl.engine.evidence import masked_jsonable
from eoctl.secrets import JAVA_REPLACEMENT, VALUE_REGEX

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def collected(df: DataFrame, rows: int) -> list[dict[str, Any]]:
    """The first `rows` rows as plain data, secrets masked: what reports and the history show."""
    return [masked_jsonable(r.asDict(recursive=True)) for r in df.limit(rows).collect()]


def materialize(df: DataFrame, rows_kept: int, evidence_dir: Path | None, stem: str,
                ) -> tuple[int, list[dict[str, Any]], str | None]:
    """Count a finding's evidence and bring back at most `rows_kept` of it; the rest of a large
    evidence set is written as Parquet beside the report, never collected.

    The evidence is computed once (count) and kept (memory, then disk) while it is sampled and
    written: a check's plan is the costly part, never the evidence it ends in.
    """
    from pyspark import StorageLevel

    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        count = df.count()
        if not count:
            return 0, [], None
        rows = collected(df, rows_kept)
        path = None
        if count > rows_kept and evidence_dir is not None:
            path = str(evidence_dir / f"{stem}.parquet")
            masked_strings(df).write.mode("overwrite").parquet(path)
        return count, rows, path
    finally:
        df.unpersist()


def masked_strings(df: DataFrame) -> DataFrame:
    """`df` with the secrets in its string columns masked by Spark (the rule of eoctl.secrets), so
    evidence written as files says no more than the rows a report shows."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    return df.select(*[F.regexp_replace(df[f.name], VALUE_REGEX, JAVA_REPLACEMENT).alias(f.name)
                       if isinstance(f.dataType, StringType) else df[f.name] for f in df.schema.fields])
