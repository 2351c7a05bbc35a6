"""reconcile-tokens, gc-tokens and gc-blobs as cron runs them: JSON, metrics file, exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl


@pytest.fixture
def chaos(tmp_path: Path) -> Path:
    return recorded_copy(tmp_path).config_path


ENGINES = pytest.mark.parametrize("engine", [[], ["--engine", "duckdb"]], ids=["spark", "duckdb"])


@pytest.mark.integration
@ENGINES
def test_reconcile_tokens_json_counts_every_class(spark_jars: Path, chaos: Path, engine: list[str]) -> None:
    result = run_eoctl("--config", str(chaos), *engine, "--format", "json", "reconcile-tokens", "--grace", "0s",
                       env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert result.code == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["schema"] == "eoctl.reconcile-tokens/v1"
    assert report["counts"]["shipping"] == {"live": 0, "referenced": 1, "leaked": 0, "garbage": 1, "young": 0,
                                            "missing": 0}
    assert report["counts"]["billing"]["referenced"] == 2
    garbage = next(e for e in report["evidence"] if e["class"] == "garbage")
    assert garbage["rows"][0]["registered_by"] == "billing" and garbage["rows"][0]["collectable"] is True


@pytest.mark.integration
def test_gc_tokens_cron_run_one_json_line_and_metrics(spark_jars: Path, chaos: Path, tmp_path: Path) -> None:
    """On the DuckDB engine (seconds): the same run on Spark, with its metrics file, is in
    tests/test_secrets_outputs.py; the engines' plans agree in tests/expr/test_engine_parity.py."""
    engine = ["--engine", "duckdb"]
    metrics = tmp_path / "textfile" / "eoctl_gc_tokens.prom"
    metrics.parent.mkdir()  # node_exporter's textfile folder (a missing one: tests/cli/test_writes.py)
    result = run_eoctl("--config", str(chaos), *engine, "--format", "json", "gc-tokens", "--grace", "0s", "--execute",
                       "--metrics-file", str(metrics), env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert result.code == 0, result.stderr[-2000:]
    assert len(result.stdout.strip().splitlines()) == 1
    summary = json.loads(result.stdout)
    assert (summary["schema"], summary["executed"], summary["planned"], summary["deleted"]) == ("eoctl.gc/v1", True, 1, 1)
    text = metrics.read_text()
    assert 'eoctl_gc_tokens_deleted{endpoint="shipping"} 1' in text
    assert "eoctl_gc_tokens_last_run_success 1" in text
    success = re.search(r"^eoctl_gc_tokens_last_success_timestamp_seconds (\d+)$", text, re.M)
    assert success and int(success.group(1)) > 1_700_000_000
    for line in text.splitlines():  # every sample line is `name{labels} value`
        assert line.startswith("#") or re.fullmatch(r"eoctl_gc_tokens_[a-z_]+(\{endpoint=\"\w+\"\})? [\d.]+", line)

    # run twice: nothing left to do
    again = run_eoctl("--config", str(chaos), *engine, "--format", "json", "gc-tokens", "--grace", "0s", "--execute",
                      env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert again.code == 0 and (json.loads(again.stdout)["planned"], json.loads(again.stdout)["deleted"]) == (0, 0)

    # a failing run keeps the last success time and says it failed
    broken = chaos.parent / "broken.toml"
    broken.write_text(chaos.read_text().replace('path = "state.duckdb"', 'path = "missing.duckdb"'))
    failed = run_eoctl("--config", str(broken), *engine, "gc-tokens", "--execute", "--metrics-file", str(metrics),
                       env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert failed.code == 3 and "Traceback" not in failed.stderr
    after = metrics.read_text()
    assert "eoctl_gc_tokens_last_run_success 0" in after
    assert f"eoctl_gc_tokens_last_success_timestamp_seconds {success.group(1)}" in after


@pytest.mark.parametrize(("args", "message", "code"), [
    (["gc-tokens", "--restore", "20261121T000000Z-00000000"], "no gc-tokens run with this id", 2),
    (["gc-blobs", "--grace", "later"], "--grace 'later': expected a duration", 2),
    (["gc-tokens", "--max-deletes", "0"], "--max-deletes", 2),
    (["gc-tokens", "--endpoint", "nope"], "unknown endpoint 'nope'", 2),
    (["gc-tokens", "--restore", "20261121T000000Z-00000000", "--execute"], "no gc-tokens run with this id", 2),
])
def test_bad_gc_options_are_one_line_errors(chaos: Path, args: list[str], message: str, code: int) -> None:
    result = run_eoctl("--config", str(chaos), *args)
    assert result.code == code and message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.integration
def test_dry_run_is_the_plan_and_the_later_of_execute_or_dry_run_wins(chaos: Path) -> None:
    state = (chaos.parent / "state.duckdb").read_bytes()
    for flags in (["--dry-run"], ["--execute", "--dry-run"]):
        result = run_eoctl("--config", str(chaos), "--engine", "duckdb", "--format", "json", "gc-tokens",
                           "--grace", "0s", *flags)
        assert result.code == 0, result.stderr
        plan = json.loads(result.stdout)
        assert plan["executed"] is False and plan["planned"] == 1 and plan["deleted"] == 0
        assert plan["duration_seconds"] > 0  # the plan's wall time (it was 0.0)
    assert (chaos.parent / "state.duckdb").read_bytes() == state
