"""The findings history: audits recorded; list, show, diff; a repair shows as exactly what it resolved."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from eoctl import history
from eoctl.audit import select_codes
from tests.helpers.audits import audit_spark
from eoctl.config.model import Config
from tests.helpers.chaos import recorded_copy, settled
from tests.helpers.cli import run_eoctl


def test_item_identity_ignores_ages_and_aggregates() -> None:
    a = {"endpoint": "billing", "incoming_message_id": "m1", "age_seconds": 10, "created_at": "x"}
    assert history.item_key("EO301", a) == history.item_key("EO301", {**a, "age_seconds": 99})
    assert history.item_key("EO301", a) != history.item_key("EO301", {**a, "incoming_message_id": "m2"})
    sink = {"order_id": 7, "distinct_values": 2, "values": [1, 2]}  # EO502: the sink's own key columns
    assert json.loads(history.item_key("EO502", sink)) == {"order_id": 7}


def test_the_config_digest_is_stable_and_hides_secrets() -> None:
    raw = {"stores": {"p": {"type": "postgres", "database": "d", "user": "u", "password": "s3cret"}}}
    digest = history.config_digest(Config.model_validate(raw))
    assert digest == history.config_digest(Config.model_validate(raw))
    assert digest != history.config_digest(Config.model_validate({**raw, "stores": {}}))
    assert "s3cret" not in json.dumps(Config.model_validate(raw).model_dump(mode="json"))

    def with_key(key: str) -> Config:  # a secret in an option table: the digest must not tell one from another
        account_key = "spark.hadoop.fs.azure.account.key.a.dfs.core.windows.net"
        return Config.model_validate({**raw, "engine": {"conf": {account_key: key}}})

    assert history.config_digest(with_key("key-1")) == history.config_digest(with_key("key-2"))
    # which engine runs it is no part of the pipeline's configuration: one digest on either
    engines = [{"kind": "duckdb"}, {"kind": "spark", "master": "spark://h:7077"}, {"kind": "spark", "remote": "sc://h:1"}]
    assert {history.config_digest(Config.model_validate({**raw, "engine": e})) for e in engines} == {digest}


@pytest.mark.integration
def test_a_repair_between_two_audits_shows_as_exactly_what_it_resolved(spark, spark_jars: Path, tmp_path: Path) -> None:
    from eoctl.ops import gc_blobs, gc_tokens
    from eoctl.ops.gc_flow import GcOptions

    from tests.helpers.audits import audit_duckdb
    from eoctl.config import load_config

    chaos = recorded_copy(tmp_path)
    first = audit_spark(spark, chaos.config, settled(), select_codes(None, None))
    history.record(chaos.config, first)
    # the repair and the second audit on the DuckDB engine: a finding's identity in the history
    # does not depend on the engine that found it, so only what the repair resolved changes
    on_duckdb = load_config(chaos.config_path, overrides={"kind": "duckdb"})
    gc = GcOptions(grace=dt.timedelta(0), execute=True)  # the repair: collect the garbage
    gc_tokens.gc_tokens(None, on_duckdb, gc)
    gc_blobs.gc_blobs(None, on_duckdb, gc)
    second = audit_duckdb(on_duckdb, settled(), select_codes(None, None))
    history.record(chaos.config, second)

    result = history.diff(chaos.config, "previous", "last")
    assert (result.run_a, result.run_b) == (first.run["id"], second.run["id"])
    resolved = {(c.code, c.endpoint): c.resolved for c in result.changes if c.resolved}
    assert set(resolved) == {("EO201", "shipping"), ("EO401", "billing")}
    assert [r["token_id"] for r in resolved[("EO201", "shipping")]] == [first.findings[[
        f.code for f in first.findings].index("EO201")].evidence[0]["token_id"]]
    assert result.totals()["new"] == 0
    kept = sum(len(f.evidence) for f in first.findings if f.code not in ("EO201", "EO401"))
    assert result.totals()["persisting"] == kept  # everything else is still there, item by item

    # the same through the CLI, as JSON
    env = {"EOCTL_JARS_DIR": str(spark_jars)}
    listed = run_eoctl("--config", str(chaos.config_path), "--format", "json", "findings", "list", env=env)
    assert listed.code == 0 and [r["run_id"] for r in json.loads(listed.stdout)["runs"]] == [second.run["id"],
                                                                                       first.run["id"]]
    assert json.loads(listed.stdout)["schema"] == "eoctl.findings-list/v1"
    assert "T" in json.loads(listed.stdout)["runs"][0]["started_at"]  # ISO 8601, as every command's JSON
    shown = json.loads(run_eoctl("--config", str(chaos.config_path), "--format", "json", "findings", "show",
                                 first.run["id"], env=env).stdout)
    assert {f["code"] for f in shown["findings"]} == {f.code for f in first.findings}
    # the audit's report, as the audit gave it: titles, remedies, in severity order
    assert shown["recorded_run"]["run_id"] == first.run["id"]
    assert [f["severity"] for f in shown["findings"]] == sorted((f["severity"] for f in shown["findings"]),
                                                               key=["critical", "error", "warning", "info"].index)
    assert all(f["title"] and f["remedy"]["fix"] for f in shown["findings"])
    text = run_eoctl("--config", str(chaos.config_path), "findings", "show", first.run["id"], env=env).stderr
    assert "findings by code" in text and "what to do:" in text and "next: eoctl --config" in text
    diffed = json.loads(run_eoctl("--config", str(chaos.config_path), "--format", "json", "findings", "diff",
                                  first.run["id"], second.run["id"], env=env).stdout)
    assert diffed["totals"] == result.totals()


def test_unknown_runs_and_a_missing_history_are_one_line_errors(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    missing = run_eoctl("--config", str(chaos.config_path), "findings", "list")
    assert missing.code == 2 and "no findings history yet at" in missing.stderr and "Traceback" not in missing.stderr


def _report(run_id: str, started: str, tokens: list[str]) -> object:
    from eoctl.findings import AuditReport, Finding

    evidence = [{"token_id": t, "created_at": "2026-11-20T00:00:00", "attempt_id": "a"} for t in tokens]
    findings = [Finding("EO201", "shipping", "eo_tokens", len(tokens), evidence)] if tokens else []
    return AuditReport(findings, {"id": run_id, "started_at": started, "endpoints": ["shipping"], "codes": ["EO201"]},
                       {"records": 10})


def _history_config(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Config, object]:
    """A configuration whose history is in a new DuckDB file or PostgreSQL database (`kind`), and
    a function counting the rows of its items table."""
    import uuid

    name = f"hist_{uuid.uuid4().hex[:8]}"
    if kind == "duckdb":
        import duckdb

        path = tmp_path / "history.duckdb"
        def items() -> int:
            with duckdb.connect(str(path)) as con:
                return con.execute("select count(*) from eoctl_audit_items").fetchone()[0]
        return Config.model_validate({"history": {"path": str(path)}}), items
    import psycopg

    server = request.getfixturevalue("postgres")
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(f"create database {name}")
    store = {"type": "postgres", "port": server.port, "database": name, "user": server.user,
             "password": server.password}

    def count() -> int:
        with psycopg.connect(server.conninfo(dbname=name)) as conn:
            return conn.execute("select count(*) from public.eoctl_audit_items").fetchone()[0]
    return Config.model_validate({"stores": {"h": store}, "history": {"store": "h"}}), count


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_the_history_lives_in_any_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Every evidence item is recorded (one array parameter per finding) and compared, in a DuckDB
    file and in PostgreSQL."""
    config, items = _history_config(kind, request, tmp_path)
    first = [f"t{i:04d}" for i in range(1200)]
    second = first[1:] + ["t-new"]
    history.record(config, _report("r1", "2026-11-20T01:00:00+00:00", first))
    history.record(config, _report("r2", "2026-11-21T01:00:00+00:00", second))
    assert [r.run_id for r in history.list_runs(config)] == ["r2", "r1"]
    assert history.show(config, "previous").summary.counts == {"EO201": 1200}
    result = history.diff(config, "r1", "r2")
    (change,) = result.changes
    assert ([r["token_id"] for r in change.new], [r["token_id"] for r in change.resolved],
            len(change.persisting)) == (["t-new"], ["t0000"], 1199)
    assert items() == 2400
    with pytest.raises(Exception, match="run 'r9' is not in the findings history"):
        history.show(config, "r9")


@pytest.mark.integration
def test_a_history_that_cannot_be_written_is_a_warning_and_the_report_stands(tmp_path: Path) -> None:
    """A damaged history file: the audit prints its report and exits as its findings say, with a
    warning naming the history and why (before: exit 3, an internal error, no report)."""
    chaos = recorded_copy(tmp_path)
    args = ("--config", str(chaos.config_path), "--engine", "duckdb", "--format", "json", "audit")
    assert run_eoctl(*args).code == 1
    path = chaos.config_path.parent / "eoctl-history.duckdb"
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size // 2)
    damaged = run_eoctl(*args)
    assert damaged.code == 1, damaged.stderr[-2000:]
    assert json.loads(damaged.stdout)["findings"]
    assert f"eoctl: warning: the run was not recorded in the findings history: findings history {path} cannot " \
           "be written" in damaged.stderr and "internal error" not in damaged.stderr


@pytest.mark.integration
def test_audits_creating_the_history_at_once_are_all_recorded(tmp_path: Path) -> None:
    """Ten audits ending together on a configuration without a history yet: each run is recorded in
    the one file (before, a later creation renamed an empty file over the recorded one: 1-4 runs
    lost, and one audit exited 3)."""
    import subprocess
    import sys

    chaos = recorded_copy(tmp_path)
    cmd = [sys.executable, "-m", "eoctl", "--config", str(chaos.config_path), "--engine", "duckdb", "--format",
           "json", "audit", "--select", "EO101"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(10)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 10, [err[-500:] for _, err in outs if "warning" in err or err]
    ids = {json.loads(out)["run"]["id"] for out, _ in outs}
    assert all("not recorded" not in err for _, err in outs)
    listed = run_eoctl("--config", str(chaos.config_path), "--format", "json", "findings", "list", "--limit", "20")
    assert listed.code == 0, listed.stderr
    assert {r["run_id"] for r in json.loads(listed.stdout)["runs"]} == ids
