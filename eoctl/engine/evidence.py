"""Evidence of a finding or a plan: counted once, a sample brought back, the rest kept in Parquet."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


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
        rows = [jsonable(r.asDict(recursive=True)) for r in df.limit(rows_kept).collect()]
        path = None
        if count > rows_kept and evidence_dir is not None:
            path = str(evidence_dir / f"{stem}.parquet")
            df.write.mode("overwrite").parquet(path)
        return count, rows, path
    finally:
        df.unpersist()
