"""An engine that runs out of memory says so in one line naming what to set, on both engines; a
reader does not take it for an unreadable source."""

from __future__ import annotations

from pathlib import Path

import pytest

from eoctl.engine.errors import out_of_memory, said_by_main
from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl, without_progress


@pytest.mark.unit
@pytest.mark.parametrize(("message", "expected"), [
    ("Out of Memory Error: failed to allocate data of size 16.0 MiB (1.3 GiB/1.3 GiB used)\n\nPossible solutions:",
     "the DuckDB engine ran out of memory: failed to allocate data of size 16.0 MiB (1.3 GiB/1.3 GiB used) "
     "(raise [engine] memory_limit, or run on Spark: eoctl --engine spark)"),
    ("An error occurred while calling o12.count.\n: java.lang.OutOfMemoryError: Java heap space\n\tat x.y(Z.java:1)",
     "the Spark engine ran out of memory: Java heap space (raise spark.driver.memory or spark.executor.memory in "
     "[engine.conf])"),
    ("Binder Error: column memory not found", None),
])
def test_running_out_of_memory_is_named_with_what_to_set(message: str, expected: str | None) -> None:
    assert out_of_memory(message) == expected
    assert said_by_main(message) is (expected is not None)


@pytest.mark.integration
def test_a_duckdb_audit_past_its_memory_limit_is_one_line_and_records_nothing(tmp_path: Path) -> None:
    """Before, the archive's reader took DuckDB's error for an unreadable archive ('topic archive
    cannot be read as parquet: Out of Memory Error ...'): the operator was sent to the files."""
    chaos = recorded_copy(tmp_path)
    config = chaos.config_path
    config.write_text(config.read_text() + '\n[engine]\nmemory_limit = "1MB"\n')
    history = config.parent / "eoctl-history.duckdb"
    before = history.read_bytes() if history.exists() else None
    result = run_eoctl("--config", str(config), "--engine", "duckdb", "audit")
    assert result.code == 3, result.stderr[-2000:]
    [line] = without_progress(result.stderr)
    assert line.startswith("eoctl: error: the DuckDB engine ran out of memory: failed to allocate"), line
    assert line.endswith("(raise [engine] memory_limit, or run on Spark: eoctl --engine spark)"), line
    assert (history.read_bytes() if history.exists() else None) == before
