"""eoctl.stores.connection: opening a DuckDB store file."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest

from eoctl.config.model import DuckDBStore
from eoctl.errors import SourceError
from eoctl.stores.connection import connect

pytestmark = pytest.mark.unit


def test_a_corrupt_file_is_said_so_at_once_not_taken_for_one_in_use(tmp_path: Path) -> None:
    """DuckDB's checksum error names the "block" it read: it matched "lock", and eoctl waited 60 s
    then said the file was in use by another process."""
    path = tmp_path / "state.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("create table t as select range as i from range(100000)")
    data = bytearray(path.read_bytes())
    data[4096:4096 + 12288] = b"\xab" * 12288  # the first blocks after the headers
    path.write_bytes(bytes(data))
    store = DuckDBStore(type="duckdb", path=str(path), lock_wait_seconds=30)
    started = time.monotonic()
    with pytest.raises(SourceError) as raised:
        with connect(store):
            pass
    assert time.monotonic() - started < 5
    assert "cannot be opened" in raised.value.message and "in use" not in raised.value.message
    assert "Corrupt database file" in raised.value.message
