"""The Spark engine's inputs (eoctl.engine.spark.run): blob listings while blobs come and go."""

from __future__ import annotations

from pathlib import Path

import pytest

from eoctl.engine.spark.stores import list_blobs
from tests.helpers.chaos import recorded_copy

pytestmark = pytest.mark.integration


def test_a_blob_moved_away_after_the_listing_is_gone_not_an_error(spark, tmp_path: Path) -> None:
    """gc-blobs quarantines a blob while an audit reads the prefix: Spark listed the file, then
    finds it gone when it reads it. The audit sees the prefix without it (as a listing a moment
    later would) instead of failing."""
    chaos = recorded_copy(tmp_path)
    listed = list_blobs(spark, chaos.config.endpoints["billing"].blobs, with_hash=True)  # Spark lists it here
    names = sorted(p.name for p in chaos.blobs.rglob("*") if p.is_file())
    gone = chaos.blobs / names[0]
    gone.unlink()
    got = {r.name: r.actual_sha256 for r in listed.collect()}
    assert sorted(got) == names[1:]


def test_both_engines_list_a_blob_modified_just_short_of_a_millisecond_at_that_millisecond(spark, tmp_path: Path) -> None:
    """EO401's evidence carries the blob's time: both listings truncate it to the millisecond
    (the DuckDB listing rounded .1239998 s up to .124 and the engines' evidence differed)."""
    import os

    from eoctl.engine.duckdb.sql import connect
    from eoctl.engine.duckdb.stores import list_blobs as duckdb_list_blobs

    for i, ns in enumerate((1_700_000_000_123_999_800, 1_700_000_000_999_999_999, 1_700_000_001_000_000_000)):
        (tmp_path / f"b{i}.bin").write_bytes(b"b")
        os.utime(tmp_path / f"b{i}.bin", ns=(0, ns))
    on_spark = sorted((r.name, r.modified) for r in list_blobs(spark, f"file://{tmp_path}", with_hash=False).collect())
    con = connect()
    duckdb_list_blobs(con, f"file://{tmp_path}", "listing", with_hash=False)
    assert sorted(con.execute("select name, modified from listing").fetchall()) == on_spark
    assert [m.microsecond for _, m in on_spark] == [123000, 999000, 0]
