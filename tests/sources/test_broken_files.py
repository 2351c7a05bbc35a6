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
