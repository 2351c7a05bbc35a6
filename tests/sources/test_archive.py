"""Topic archives (Parquet and JSON in the Kafka record schema) and their committed offsets."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eoctl.config.model import TopicInput
from eoctl.errors import SourceError
from eoctl.sources.archive import archive_committed_offsets
from eoctl.engine.spark.sources import read_archive, undecodable_lines
from eoctl.engine.spark.sources import record_schema

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
    with pytest.raises(SourceError, match="is not a topic archive file: it lacks the record columns topic, "
                                          "partition, offset"):
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


#: lines read_archive cannot read as records, and the problem undecodable_lines names
_BAD_LINES = {
    '{"topic": "orders", "partition": 0, "offs': "not a record: malformed JSON or a field of the wrong type",
    '{"topic": "orders", "partition": 0, "offset": "seven"}': "not a record: malformed JSON or a field of the wrong type",
    '[1, 2]': "not a record: malformed JSON or a field of the wrong type",
    '{"topic": "orders", "partition": 1}': "no offset",
    '{"headers": []}': "no topic, partition, offset",
}


def _good_line(n: int) -> str:
    return json.dumps({"topic": "orders", "partition": 0, "offset": n, "timestamp": "2026-11-01T12:00:00.000Z",
                       "key": "aw==", "value": "dg==", "headers": [{"key": "eo-message-id", "value": "bTE="}]})


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.lists(st.sampled_from([None, "", *_BAD_LINES]), min_size=1, max_size=30), min_size=1,
                      max_size=3),
       split_bytes=st.sampled_from([64, 300, 1 << 20]))
def test_undecodable_lines_are_named_by_file_and_line(spark, tmp_path_factory, files, split_bytes: int) -> None:
    """Bad lines among good ones (None: a good record; "": a blank line), in files split into
    pieces of `split_bytes`: read_archive reads exactly the good records, undecodable_lines names
    exactly the bad lines, by file and 1-based line."""
    folder = tmp_path_factory.mktemp("json-archive")
    want, good = set(), 0
    for i, lines in enumerate(files):
        path = folder / f"part-{i}.json"
        text = []
        for number, line in enumerate(lines, start=1):
            text.append(_good_line(good) if line is None else line)
            good += line is None
            if line:
                want.add((str(path), number, _BAD_LINES[line]))
        path.write_text("\n".join(text) + "\n")
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(split_bytes))
    try:
        assert read_archive(spark, str(folder), "json").count() == good
        got = undecodable_lines(spark, str(folder), ["orders"]).collect()
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)
    assert {(r.file, r.line, r.problem) for r in got} == want


def test_undecodable_lines_of_other_topics_are_left_out(spark, tmp_path: Path) -> None:
    (tmp_path / "part-0.json").write_text('{"topic": "other", "partition": 0}\n{"topic": "orders"}\n{"x\n')
    got = undecodable_lines(spark, str(tmp_path), ["orders"]).collect()
    assert sorted((r.line, r.problem) for r in got) == [
        (2, "no partition, offset"), (3, "not a record: malformed JSON or a field of the wrong type")]


#: lines at the edges of JSON decoding: the DuckDB engine's reader must judge each as Spark's does
_EDGE_LINES = [
    '{"topic": "orders", "partition": "1", "offset": 3}',  # a number as text
    '{"topic": "orders", "partition": 1.5, "offset": 3}',  # a fraction where an integer goes
    '{"topic": "orders", "partition": 4294967296, "offset": 3}',  # past int
    '{"topic": "orders", "partition": 1, "offset": 9223372036854775808}',  # past long
    '{"topic": "orders", "partition": 1, "offset": 3, "timestamp": "yesterday"}',
    '{"topic": "orders", "partition": 1, "offset": 4, "timestamp": 1793534400}',  # seconds
    '{"topic": "orders", "partition": 1, "offset": 5, "timestamp": null, "key": null}',
    '{"topic": "orders", "partition": 1, "offset": 6, "headers": [{"key": "eo-message-id", "value": "!!"}]}',
    '{"topic": "orders", "partition": 1, "offset": 7, "headers": {"key": "k"}}',  # not a list
    '{"topic": "orders", "partition": 1, "offset": 8, "headers": [1]}',  # not a header
    '{"topic": "orders", "partition": 1, "offset": 9, "headers": [null, {"key": "k"}]}',
    '{"topic": "orders", "partition": 1, "offset": 10, "extra": {"a": 1}}',  # an unknown field
    '{"topic": 5, "partition": 1, "offset": 11}',  # a number where text goes: its text ("5")
    '{"topic": "orders", "partition": null, "offset": 12}',
    '"just text"',
    'null',
    '{"topic": "orders", "partition": 1, "offset": 13}\r',  # a Windows line end
]


def test_the_duckdb_engine_reads_json_lines_as_spark_does(spark, tmp_path: Path) -> None:
    """Every edge line, among good ones: the records each engine reads (with their place and
    time) and the lines each names as not records are the same."""
    from eoctl.engine.duckdb.sql import connect
    from eoctl.engine.duckdb.records import read_archive as read_on_duckdb

    lines = [_good_line(100 + i) if i % 3 == 0 else _EDGE_LINES[i // 3] for i in range(3 * len(_EDGE_LINES))]
    (tmp_path / "part-0.json").write_text("\n".join(lines) + "\n", newline="")
    on_spark = read_archive(spark, str(tmp_path), "json", ["orders", "5"])
    def row(topic, partition, offset, timestamp, key, headers):  # the values as Python compares them
        return (topic, partition, offset, timestamp and timestamp.replace(tzinfo=None).isoformat(),
                key and bytes(key), [h and (h[0], h[1] and bytes(h[1])) for h in headers or []])

    spark_records = sorted(row(r.topic, r.partition, r.offset, r.timestamp, r.key,
                               [h and (h.key, h.value) for h in r.headers or []]) for r in on_spark.collect())
    spark_bad = sorted((r.file, r.line, r.problem) for r in undecodable_lines(spark, str(tmp_path), ["orders", "5"])
                       .collect())
    con = connect()
    read_on_duckdb(con, "raw", str(tmp_path), "json", ["orders", "5"])
    duck_records = sorted(
        row(t, p, o, ts, k, [h and (h["key"], h["value"]) for h in hs or []])
        for t, p, o, ts, k, hs in con.execute("SELECT topic, partition, \"offset\", timestamp, key, headers FROM raw")
        .fetchall())
    duck_bad = sorted(con.execute("SELECT file, line, problem FROM raw_bad").fetchall())
    assert len(spark_records) > len(_EDGE_LINES) and spark_bad  # both kinds are there
    assert duck_records == spark_records
    assert duck_bad == spark_bad
