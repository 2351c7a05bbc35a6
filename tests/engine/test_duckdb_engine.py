"""The DuckDB engine reads the same records the Spark engine reads (docs/engines.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eoctl.engine.duckdb import archive_files, connect, read_archive
from eoctl.errors import SourceError
from tests.helpers.chaos import CHAOS


def _rows(rows) -> list[tuple]:
    return sorted((r["topic"], r["partition"], r["offset"], r["timestamp"], r["key"], r["value"],
                   tuple((h["key"], h["value"]) for h in r["headers"] or ())) for r in rows)


@pytest.mark.integration
@pytest.mark.parametrize("topic", ["orders", "invoices"])
def test_a_parquet_archive_reads_as_spark_reads_it(spark, topic: str) -> None:
    from eoctl.sources.archive import read_archive as spark_archive

    path = str(CHAOS / "topics" / topic)
    con = connect()
    read_archive(con, "records", path, "parquet", [topic])
    duck = con.sql("select * from records").to_arrow_table().to_pylist()
    sparks = [r.asDict(recursive=True) for r in spark_archive(spark, path, "parquet", [topic]).collect()]
    for r in sparks:  # Spark gives the session's (UTC) wall time with the zone; DuckDB the wall time
        r["timestamp"] = r["timestamp"].replace(tzinfo=None)
        r["key"], r["value"] = (bytes(v) if v is not None else None for v in (r["key"], r["value"]))
        r["headers"] = [{"key": h["key"], "value": bytes(h["value"])} for h in r["headers"] or ()]
    assert len(duck) == len(sparks) > 0
    assert _rows(duck) == _rows(sparks)


@pytest.mark.unit
def test_archive_files_are_listed_as_spark_lists_them(tmp_path: Path) -> None:
    for name in ("part-0.parquet", "sub/part-1.parquet", "_committed_offsets.json", "_SUCCESS",
                 ".part-0.parquet.crc", "_temporary/part-9.parquet"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert archive_files(str(tmp_path), "parquet") == [str(tmp_path / "part-0.parquet"),
                                                       str(tmp_path / "sub" / "part-1.parquet")]
    with pytest.raises(SourceError, match="does not exist"):
        archive_files(str(tmp_path / "nope"), "parquet")
