"""The Spark engine's inputs (eoctl.engine.spark_audit): blob listings while blobs come and go."""

from __future__ import annotations

from pathlib import Path

import pytest

from eoctl.engine.spark_audit import list_blobs
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
