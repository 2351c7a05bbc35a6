"""Half-written input files (a copy cut short, a disk that filled up) are named in one line, exit 3:
which file, and why it cannot be read; never an engine's internal error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl, without_progress

pytestmark = pytest.mark.integration


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


@pytest.mark.parametrize("engine", ["spark", "duckdb"])
@pytest.mark.parametrize(("victim", "expected"), [
    ("topics/orders/part-0.parquet", ("eoctl: error: could not read {path}: not a Parquet file "
                                      "(a half-written or corrupt file: restore it or move it away)")),
    ("state.duckdb", "eoctl: error: table eo_tokens in DuckDB file {path} cannot be read: IO Error: "),
])
def test_a_truncated_file_is_one_line_naming_it_on_both_engines(spark_jars: Path, tmp_path: Path, victim: str,
                                                                 expected: str, engine: str) -> None:
    chaos = recorded_copy(tmp_path)
    path = chaos.config_path.parent / victim
    _truncate(path)
    result = run_eoctl("--config", str(chaos.config_path), "--engine", engine, "audit",
                       env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert result.code == 3, result.stderr[-2000:]
    [line] = without_progress(result.stderr)
    assert line.startswith(expected.format(path=path)), line


@pytest.mark.parametrize("engine", ["spark", "duckdb"])
@pytest.mark.parametrize("alone", [False, True])
def test_a_file_of_another_schema_in_an_archive_is_one_line_naming_it_on_both_engines(
        spark_jars: Path, tmp_path: Path, engine: str, alone: bool) -> None:
    """Beside good files, DuckDB's scan failed mid-way (an internal error) and Spark read on,
    dropping its rows; alone, it was named by nothing. Both now name the file and the archive."""
    import duckdb

    chaos = recorded_copy(tmp_path)
    archive = chaos.config_path.parent / "topics" / "orders"
    wrong = archive / "zz-export.parquet"
    duckdb.sql(f"copy (select 1 as order_id, 'x' as note) to '{wrong}' (format parquet)")
    if alone:
        (archive / "part-0.parquet").unlink()
    result = run_eoctl("--config", str(chaos.config_path), "--engine", engine, "audit", "--no-record",
                       env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert result.code == 3, result.stderr[-2000:]
    [line] = without_progress(result.stderr)
    assert line == (f"eoctl: error: topic archive {archive}: {wrong} is not a topic archive file: it lacks the "
                    "record columns topic, partition, offset, headers (expected columns topic, partition, offset, "
                    "timestamp, key, value, headers; move the file out of the archive)"), line


def test_a_file_name_holding_control_characters_reaches_the_error_line_inert(tmp_path: Path) -> None:
    """A file of another schema named `zz-\\x1b[2J.parquet`: the line names it with the escape
    written out, and no control character reaches the terminal (before: raw)."""
    import duckdb

    chaos = recorded_copy(tmp_path)
    archive = chaos.config_path.parent / "topics" / "orders"
    wrong = archive / "zz-\x1b[2J\x07.parquet"
    duckdb.sql(f"copy (select 1 as order_id) to '{wrong}' (format parquet)")
    result = run_eoctl("--config", str(chaos.config_path), "--engine", "duckdb", "audit", "--no-record")
    assert result.code == 3, result.stderr[-2000:]
    [line] = without_progress(result.stderr)
    assert "zz-\\x1b[2J\\x07.parquet is not a topic archive file" in line
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
