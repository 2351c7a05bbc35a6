"""Topic archives: topics copied to files (Parquet or JSON lines) in the Kafka record schema.

JSON archives carry `key`, `value` and header values as base64 strings, as Spark's own JSON
writer encodes binary. Committed offsets come from the configuration or from a
`_committed_offsets.json` file inside the archive folder (Spark skips files starting with `_`).

A JSON line that does not decode as a record (not JSON, a field of the wrong type, no topic,
partition or offset) is never read as a record; `undecodable_lines` names each one by file and
line so the audit reports it (EO106) instead of scanning less in silence.
"""

from __future__ import annotations

import json
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING

from eoctl.config.model import TopicInput
from eoctl.errors import SourceError
from eoctl.sources.records import normalize, record_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

COMMITTED_OFFSETS_FILE = "_committed_offsets.json"

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


#: what a topic archive file holds, said when one does not
RECORD_COLUMNS_TEXT = "topic, partition, offset, timestamp, key, value, headers"


def check_archive_files(archive: str, misfits: list[tuple[str, list[str]]]) -> None:
    """SourceError (exit 3) naming the first file of `archive` that is no topic archive file (file,
    the record columns it lacks), from an engine's reading of the files' footers; both engines
    say it alike."""
    if misfits:
        file, missing = misfits[0]
        if file.startswith("file:"):
            file = file[len("file://"):] if file.startswith("file://") else file[len("file:"):]
        more = f" (and {len(misfits) - 1} more file{'s' if len(misfits) > 2 else ''})" if len(misfits) > 1 else ""
        raise SourceError(f"topic archive {archive}: {file} is not a topic archive file: it lacks the record "
                          f"column{'s' if len(missing) > 1 else ''} {', '.join(missing)}{more}",
                          hint=f"expected columns {RECORD_COLUMNS_TEXT}; move the file out of the archive")


def _misfit_local_parquet(files: list[str]) -> list[tuple[str, list[str]]]:
    """(file, the record columns it lacks) of each local Parquet file of `files` that is no topic
    archive file, from its footer (Spark takes one file's schema for all and reads a file of
    another schema as rows of nulls, which the topic filter then drops in silence). Files on
    remote filesystems are left to Spark."""
    import pyarrow.parquet as pq

    out = []
    for file in files:
        if not file.startswith("file:"):
            continue
        local = file[len("file://"):] if file.startswith("file://") else file[len("file:"):]
        try:
            names = set(pq.read_schema(local).names)
        except (OSError, ValueError):  # cut short or not Parquet: Spark's read names it (engine.errors)
            continue
        missing = [c for c in ("topic", "partition", "offset", "headers") if c not in names]
        if missing:
            out.append((file, missing))
    return sorted(out)


def read_archive(spark: SparkSession, path: str, fmt: str, topics: list[str] | None = None) -> DataFrame:
    """Records of the archive at `path`, normalized; only `topics` when given."""
    from pyspark.sql import functions as F
    from pyspark.sql.utils import AnalysisException

    try:
        if fmt == "json":
            raw = spark.read.schema(_json_schema()).options(**_JSON_OPTIONS).json(path)
            decoded = reduce(lambda a, b: a & b, [F.col(c).isNotNull() for c in _PLACE], F.col(_CORRUPT).isNull())
            df = raw.where(decoded).drop(_CORRUPT)
        else:
            df = spark.read.format(fmt).load(path)
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
