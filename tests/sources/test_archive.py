"""Topic archives (Parquet and JSON in the Kafka record schema) and their committed offsets."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from eoctl.config.model import TopicInput
from eoctl.errors import SourceError
from eoctl.sources.archive import archive_committed_offsets, read_archive
from eoctl.sources.records import record_schema

pytestmark = pytest.mark.integration

ROWS = [
    ("orders", p, o, dt.datetime(2026, 11, 1, 12, o, tzinfo=dt.timezone.utc), f"k{o}".encode(), bytes([o, 0, 255]),
     [("eo-message-id", f"m{p}-{o}".encode()), ("raw", bytes([0xFE, o]))])
    for p in (0, 1) for o in range(5)
] + [("other", 0, 0, dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc), None, b"x", None)]


@pytest.fixture(scope="module")
def archive_df(spark):
    return spark.createDataFrame(ROWS, record_schema())


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_archive_round_trip(spark, archive_df, tmp_path: Path, fmt: str) -> None:
    path = str(tmp_path / f"archive-{fmt}")
    archive_df.write.format(fmt).save(path)
    df = read_archive(spark, path, fmt)
    assert df.schema == record_schema()
    got = sorted(df.collect(), key=lambda r: (r.topic, r.partition, r.offset))
    want = sorted(archive_df.collect(), key=lambda r: (r.topic, r.partition, r.offset))
    assert [r.asDict(recursive=True) for r in got] == [r.asDict(recursive=True) for r in want]
    only_orders = read_archive(spark, path, fmt, topics=["orders"])
    assert only_orders.count() == 10


def test_archive_without_record_columns_is_a_clear_error(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "not-an-archive")
    spark.createDataFrame([(1, "a")], "id int, name string").write.parquet(path)
    with pytest.raises(SourceError, match="lack the Kafka record columns topic, partition, offset"):
        read_archive(spark, path, "parquet")


def test_committed_offsets_inline_file_and_beside_the_archive(tmp_path: Path) -> None:
    inline = TopicInput(topics=["orders"], archive=str(tmp_path), committed_offsets={"orders": {"0": 3}})
    assert archive_committed_offsets(inline) == {"orders": {0: 3}}
    (tmp_path / "offsets.json").write_text(json.dumps({"orders": {"0": 4, "1": 9}}))
    as_file = TopicInput(topics=["orders"], archive=str(tmp_path), committed_offsets=str(tmp_path / "offsets.json"))
    assert archive_committed_offsets(as_file) == {"orders": {0: 4, 1: 9}}
    beside = TopicInput(topics=["orders"], archive=str(tmp_path))
    with pytest.raises(SourceError, match="no committed offsets for archive"):
        archive_committed_offsets(beside)
    (tmp_path / "_committed_offsets.json").write_text(json.dumps({"orders": {"1": 2}}))
    assert archive_committed_offsets(beside) == {"orders": {1: 2}}
    (tmp_path / "_committed_offsets.json").write_text("[1, 2]")
    with pytest.raises(SourceError, match="is not JSON of the form"):
        archive_committed_offsets(beside)
