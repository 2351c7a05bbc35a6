"""`eoctl audit` as a user runs it: exit codes by --fail-on, JSON/Markdown reports, bad input."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tests.helpers.cli import run_eoctl
from tests.helpers.servers import REPO

CHAOS = str(REPO / "samples" / "chaos" / "eoctl.toml")


@pytest.mark.integration
def test_json_report_and_exit_code_on_the_chaos_sample(spark_jars: Path) -> None:
    """On DuckDB, chosen by the environment (seconds): Spark's audit of the same sample from the
    command line is README's first command (tests/test_doctor.py), its findings held equal to
    DuckDB's in tests/expr/test_engine_parity.py."""
    result = run_eoctl("--config", CHAOS, "--format", "json", "audit", "--grace", "0s", "--fail-on", "critical",
                       "--no-record", env={"EOCTL_JARS_DIR": str(spark_jars), "EOCTL_ENGINE": "duckdb"})
    assert result.code == 1, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["schema"] == "eoctl.audit/v1"
    assert report["run"]["engine"] == "duckdb"
    assert {c: r["count"] for c, r in report["summary"].items()} == {
        "EO101": 3, "EO102": 1, "EO103": 1, "EO201": 1, "EO301": 4, "EO302": 1, "EO401": 1, "EO402": 1,
        "EO403": 1, "EO501": 2, "EO502": 1}
    assert all(f["evidence_complete"] and len(f["evidence"]) == f["count"] for f in report["findings"])
    assert report["scanned"]["records"] == 83


@pytest.mark.integration
def test_markdown_to_a_file_and_fail_on_below_the_worst(spark_jars: Path, tmp_path: Path) -> None:
    out = tmp_path / "incident.md"
    result = run_eoctl("--config", CHAOS, "--engine", "duckdb", "--format", "markdown", "audit", "--select", "EO1",
                       "--ignore", "EO102,EO103",
                       "--fail-on", "warning", "--output", str(out), env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert result.code == 0, result.stderr[-2000:]  # only EO101 (info) is left: below warning
    assert result.stdout == "" and f"report written to {out}" in result.stderr
    text = out.read_text()
    assert "| EO101 | info | 3 |" in text and "EO102" not in text
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.integration
def test_the_output_files_extension_gives_its_format_unless_format_says_otherwise(tmp_path: Path) -> None:
    audit = ("--config", CHAOS, "--engine", "duckdb", "audit", "--select", "EO101", "--no-record", "--output")
    for name, check in (("r.json", lambda t: json.loads(t)["schema"] == "eoctl.audit/v1"),
                        ("r.md", lambda t: t.startswith("## eoctl audit ")),
                        ("r.txt", lambda t: t.startswith("eoctl audit run "))):
        result = run_eoctl(*audit, str(tmp_path / name))
        assert result.code == 0 and check((tmp_path / name).read_text()), (name, result.stderr)
    forced = run_eoctl(*audit, str(tmp_path / "x.json"), "--format", "markdown")
    assert forced.code == 0 and (tmp_path / "x.json").read_text().startswith("## eoctl audit ")


@pytest.mark.parametrize(("args", "message"), [
    (["--select", "EO999"], "--select 'EO999': no such finding code"),
    (["--grace", "soon"], "--grace 'soon': expected a duration like 90s, 15m, 24h or 7d"),
    (["--fail-on", "fatal"], "'--fail-on': Value error, 'fatal' is not one of 'info', 'warning', 'error', 'critical'"),
    (["--since", "yesterday"], "--since 'yesterday': expected an ISO time"),
    (["--endpoint", "nope"], "unknown endpoint 'nope' (configured: billing, shipping, shop)"),
    # a typo in a topic must not look like a clean topic (0 records scanned)
    (["--range", "t:99"], "--range t:99: no endpoint audited reads topic 't' (topics read: invoices, orders)"),
    (["--endpoint", "billing", "--range", "invoices:0"], "(topics read: orders)"),
])
def test_bad_audit_options_are_usage_errors(args: list[str], message: str) -> None:
    result = run_eoctl("--config", CHAOS, "audit", *args)
    assert result.code == 2 and message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--engine", "duckdb", "--master", "local[1]", "audit"],
     "--master/--remote means the Spark engine: it does not combine with --engine duckdb"),
    (["--engine", "flink", "audit"], "Invalid value for '--engine'"),
    (["--engine", "duckdb", "audit", "--since-last", "--range", "orders:0"], "--since-last continues a full scan"),
])
def test_bad_engine_choices_are_usage_errors(args: list[str], message: str) -> None:
    result = run_eoctl("--config", CHAOS, *args)
    assert result.code == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.integration
def test_bad_evidence_becomes_eo105_never_a_crash(spark, tmp_path: Path) -> None:
    from eoctl.audit import select_codes
    from tests.helpers.audits import audit_spark
    from eoctl.config import load_config
    from eoctl.options import AuditOptions
    from eoctl.engine.spark.sources import record_schema

    ts = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    good = [("eo-message-id", b"m1"), ("eo-token-id", b"t1"), ("eo-producer", b"p"), ("eo-sequence", b"1")]
    rows = [
        ("t", 0, 0, ts, None, b"{}", good),
        ("t", 0, 1, ts, None, b"{}", [("eo-message-id", b"\xff\xfe"), ("eo-token-id", b"t2")]),
        ("t", 0, 2, ts, None, b"{}", [("eo-message-id", b"m3"), ("eo-token-id", b"t3"), ("eo-blobs", b"{not json")]),
        ("t", 0, 3, ts, None, b"{}", [("eo-message-id", b"m4"), ("eo-token-id", b"t4"), ("eo-sequence", b"four")]),
        ("t", 0, 4, ts, None, b"{}", None),
    ]
    spark.createDataFrame(rows, record_schema()).write.parquet(str(tmp_path / "archive"))
    (tmp_path / "eoctl.toml").write_text(
        '[endpoints.e.input]\ntopics = ["t"]\narchive = "archive"\ncommitted_offsets = { t = { "0" = 5 } }\n')
    options = AuditOptions(evidence_rows=2, evidence_dir=tmp_path / "evidence")
    report = audit_spark(spark, load_config(tmp_path / "eoctl.toml"), options, select_codes(None, None))
    (eo105,) = [f for f in report.findings if f.code == "EO105"]
    assert eo105.count == 4 and len(eo105.evidence) == 2  # the rest went to Parquet, not memory
    assert eo105.evidence_file is not None
    problems = {r["offset"]: r["problem"] for r in spark.read.parquet(eo105.evidence_file).collect()}
    assert problems == {1: "protocol header is not UTF-8", 2: "eo-blobs is not a JSON list of {uri, sha256}",
                        3: "eo-sequence is not an integer", 4: "missing eo-message-id or eo-token-id header"}
    assert [f.code for f in report.findings] == ["EO105"]


@pytest.mark.integration
def test_audit_for_cron_quiet_with_metrics_that_follow_the_findings(tmp_path: Path) -> None:
    """--quiet leaves stderr to errors; --metrics-file holds every selected code per endpoint (0 where
    nothing was found, so a resolved finding's alert clears), the records and the outcome; a failed
    run keeps the last success's time."""
    import re
    import shutil

    folder = tmp_path / "chaos"
    shutil.copytree(Path(CHAOS).parent, folder, ignore=shutil.ignore_patterns("eoctl-history*"))
    args = ("--config", str(folder / "eoctl.toml"), "--engine", "duckdb")
    metrics = tmp_path / "eoctl_audit.prom"
    quiet = run_eoctl(*args, "audit", "--no-record", "--quiet", "--metrics-file", str(metrics))
    assert quiet.code == 1 and quiet.stderr == "" and quiet.stdout == ""
    report = json.loads(run_eoctl(*args, "-f", "json", "audit", "--no-record").stdout)
    text = metrics.read_text()
    samples = {m.group(1, 2): int(m.group(3)) for m in re.finditer(
        r'^eoctl_audit_findings\{endpoint="([^"]+)",code="(EO\d+)",severity="\w+"\} (\d+)$', text, re.MULTILINE)}
    expected = {(f["endpoint"], f["code"]): f["count"] for f in report["findings"]}
    assert {k: v for k, v in samples.items() if v} == expected
    assert len(samples) == len(report["run"]["endpoints"]) * len(report["run"]["codes"])  # the zeros too
    assert f"eoctl_audit_records_scanned {report['scanned']['records']}" in text
    assert "eoctl_audit_last_run_success 1" in text
    last = re.search(r"^eoctl_audit_last_success_timestamp_seconds (\d+)$", text, re.MULTILINE).group(1)

    shutil.rmtree(folder / "topics" / "orders")  # the next run fails
    failed = run_eoctl(*args, "audit", "--no-record", "--quiet", "--metrics-file", str(metrics))
    assert failed.code == 3 and failed.stderr.startswith("eoctl: error:")
    text = metrics.read_text()
    assert "eoctl_audit_last_run_success 0" in text and f"eoctl_audit_last_success_timestamp_seconds {last}" in text
    assert "eoctl_audit_findings{" not in text  # no stale findings under a failed run


@pytest.mark.integration
def test_the_chaos_sample_shows_every_fault_of_its_ledger_from_a_fresh_clone(tmp_path: Path) -> None:
    """A clone's files carry the checkout's time: the sample's [audit] grace = "0s" keeps its
    orphan blob an EO401 however recent the clone; a flag still wins over the configuration."""
    import os
    import shutil
    import time

    folder = tmp_path / "chaos"
    shutil.copytree(Path(CHAOS).parent, folder, ignore=shutil.ignore_patterns("eoctl-history*"))
    for blob in (folder / "blobs").rglob("*"):
        os.utime(blob, (time.time(), time.time()))  # as git checks them out
    ledger = [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines()]
    expected = {code for entry in ledger for code in entry.get("expect", [])}
    args = ("--config", str(folder / "eoctl.toml"), "--engine", "duckdb", "-f", "json", "audit", "--no-record")
    found = {f["code"] for f in json.loads(run_eoctl(*args).stdout)["findings"]}
    assert "EO401" in expected and expected <= found, expected - found
    flagged = json.loads(run_eoctl(*args, "--grace", "24h").stdout)
    assert "EO401" not in {f["code"] for f in flagged["findings"]} and flagged["run"]["grace_seconds"] == 86400
