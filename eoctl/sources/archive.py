"""Topic archives: topics copied to files (Parquet or JSON lines) in the Kafka record schema.

JSON archives carry `key`, `value` and header values as base64 strings, as Spark's own JSON
writer encodes binary. Committed offsets come from the configuration or from a
`_committed_offsets.json` file inside the archive folder (Spark skips files starting with `_`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from eoctl.config.model import TopicInput
from eoctl.errors import SourceError
from eoctl.sources.records import normalize, record_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

COMMITTED_OFFSETS_FILE = "_committed_offsets.json"


def read_archive(spark: SparkSession, path: str, fmt: str, topics: list[str] | None = None) -> DataFrame:
    """Records of the archive at `path`, normalized; only `topics` when given."""
    from pyspark.sql import functions as F
    from pyspark.sql.utils import AnalysisException

    try:
        if fmt == "json":
            df = spark.read.schema(record_schema()).json(path)
        else:
            df = spark.read.format(fmt).load(path)
        df = normalize(df)
    except AnalysisException as exc:
        raise SourceError(f"topic archive {path} cannot be read as {fmt}: {str(exc).splitlines()[0]}") from None
    if topics:
        df = df.where(F.col("topic").isin(topics))
    return df


def archive_committed_offsets(source: TopicInput) -> dict[str, dict[int, int]]:
    """Committed offsets of an archived input: inline, a JSON file, or the file inside the archive."""
    value = source.committed_offsets
    if isinstance(value, dict):
        return value
    path = Path(value) if value else Path(source.archive or ".") / COMMITTED_OFFSETS_FILE
    if value is None and not path.exists():
        raise SourceError(
            f"no committed offsets for archive {source.archive}",
            hint=f"set input.committed_offsets or write {COMMITTED_OFFSETS_FILE} in the archive folder",
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except FileNotFoundError:
        raise SourceError(f"committed offsets file {path} does not exist") from None
    except (ValueError, AttributeError, TypeError) as exc:
        raise SourceError(
            f"committed offsets file {path} is not JSON of the form {{topic: {{partition: offset}}}}: {exc}"
        ) from None
