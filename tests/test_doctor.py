"""`eoctl doctor`: green on the sample; red, with which and why, when a part is broken."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from eoctl.config import load_config
from eoctl.doctor import Status, run_doctor
from tests.helpers.cli import run_eoctl
from tests.helpers.configs import write_config
from tests.helpers.servers import REPO

pytestmark = pytest.mark.integration

SAMPLE = REPO / "samples" / "basic"


def _rows(report) -> dict[tuple[str, str], tuple[Status, str]]:
    return {(r.component, r.check): (r.status, r.detail) for r in report.results}


@pytest.mark.parametrize("engine", ["spark", "duckdb"])
@pytest.mark.parametrize("sample", ["basic", "chaos"])
def test_doctor_is_green_on_the_sample_configurations(spark_jars: Path, sample: str, engine: str) -> None:
    result = run_eoctl("--config", str(REPO / "samples" / sample / "eoctl.toml"), "--engine", engine, "--format",
                       "json", "doctor", env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["counts"]["fail"] == 0 and report["counts"]["skip"] == 0
    checks = {(c["component"], c["check"]) for c in report["checks"]}
    if engine == "spark":
        assert ("spark", "session starts and runs a job") in checks
    else:  # no JVM: the engine's own rows instead of Java's and Spark's
        assert ("duckdb", "engine runs a query") in checks and not any(c[0] in ("java", "spark") for c in checks)
        assert ("endpoints.billing.input", "topic archive readable") in checks
    if sample == "basic":
        assert ("stores.state", "table eo_tokens (endpoints.billing.tokens)") in checks
        assert ("endpoints.billing.sinks.invoices", "readable with its columns") in checks
    else:
        assert ("stores.shipping", "table eo_outbox (endpoints.shipping.outbox)") in checks
        assert ("endpoints.shipping.sinks.shipments", "readable with its columns") in checks


@pytest.fixture()
def sample_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "basic"
    shutil.copytree(SAMPLE, dest)
    return dest


def test_missing_table_and_missing_column_are_named(spark, sample_copy: Path) -> None:
    import duckdb

    with duckdb.connect(str(sample_copy / "state.duckdb")) as db:
        db.execute("drop table eo_intents")
        db.execute("alter table eo_tokens drop column attempt_id")
    report = run_doctor(load_config(sample_copy / "eoctl.toml"), lambda: spark)
    rows = _rows(report)
    assert not report.ok
    # a store without intents works (no register-cleanup): a warning that says what is skipped
    status, detail = rows[("stores.state", "table eo_intents (endpoints.billing.intents)")]
    assert status is Status.WARN and detail.startswith("table eo_intents does not exist in schema main: no "
                                                       "register-cleanup evidence")
    status, detail = rows[("stores.state", "table eo_tokens (endpoints.billing.tokens)")]
    assert status is Status.FAIL and detail.startswith("table eo_tokens (DuckDB file ") and detail.endswith(
        "has no column 'attempt_id', which endpoints.billing.tokens.columns.attempt_id names (its columns: "
        "token_id, message_id, destination, created_at)")
    assert rows[("stores.state", "table eo_outbox (endpoints.billing.outbox)")][0] is Status.OK


def test_remapped_column_satisfies_the_check(spark, sample_copy: Path) -> None:
    import duckdb

    with duckdb.connect(str(sample_copy / "state.duckdb")) as db:
        db.execute('alter table eo_tokens rename column attempt_id to "AttemptId"')
    config_text = (sample_copy / "eoctl.toml").read_text().replace(
        'store = "state"\nblobs', 'store = "state"\ntokens = { columns = { attempt_id = "AttemptId" } }\nblobs'
    )
    (sample_copy / "eoctl.toml").write_text(config_text)
    report = run_doctor(load_config(sample_copy / "eoctl.toml"), lambda: spark)
    assert report.ok, [r for r in report.results if r.status is Status.FAIL]


def test_owner_columns_of_shared_and_unshared_tables(spark, sample_copy: Path) -> None:
    # an outbox remapped to a column the table does not have: the table is the endpoint's alone
    config = sample_copy / "eoctl.toml"
    mapped = 'outbox = { columns = { endpoint = "owner" } }\n'
    config.write_text(config.read_text().replace('store = "state"\nblobs', f'store = "state"\n{mapped}blobs'))
    rows = _rows(run_doctor(load_config(config), lambda: spark))
    status, detail = rows[("stores.state", "table eo_outbox (endpoints.billing.outbox)")]
    assert status is Status.WARN and detail == "table eo_outbox has no column owner: every row is taken as billing's"
    # a second endpoint on the same tables: the tokens are told apart by destination, the outbox cannot be
    config.write_text(config.read_text() + f'\n[endpoints.audit]\nstore = "state"\n{mapped}')
    report = run_doctor(load_config(config), lambda: spark)
    rows = _rows(report)
    assert not report.ok
    status, detail = rows[("stores.state", "table eo_outbox (endpoints.billing.outbox)")]
    assert status is Status.FAIL and detail.startswith("table eo_outbox is shared by billing, audit but has no "
                                                       "column owner")
    status, detail = rows[("stores.state", "table eo_tokens (endpoints.billing.tokens)")]
    assert status is Status.OK and detail.endswith("shared by billing, audit, each reads the rows its name is in")


def test_missing_sink_column_and_blob_prefix(spark, sample_copy: Path) -> None:
    shutil.rmtree(sample_copy / "blobs")
    text = (sample_copy / "eoctl.toml").read_text().replace(
        'key_columns = ["order_id"]', 'key_columns = ["order_no"]\nwatermark_column = "ingested_at"')
    (sample_copy / "eoctl.toml").write_text(text)
    rows = _rows(run_doctor(load_config(sample_copy / "eoctl.toml"), lambda: spark))
    status, detail = rows[("endpoints.billing.sinks.invoices", "readable with its columns")]
    assert status is Status.FAIL and detail.startswith(
        "sink invoices has no column 'order_no', which endpoints.billing.sinks[0].key_columns names (its columns: ")
    on_duckdb = _rows(run_doctor(load_config(sample_copy / "eoctl.toml", overrides={"kind": "duckdb"}), pytest.fail))
    assert on_duckdb[("endpoints.billing.sinks.invoices", "readable with its columns")] == (status, detail)
    status, detail = rows[("endpoints.billing.blobs", "blob prefix listable")]
    assert status is Status.FAIL and "does not exist" in detail


def test_live_kafka_and_postgres_then_kafka_stopped(spark, postgres, tmp_path: Path) -> None:
    """A dedicated broker: doctor is green with it running and red, saying why, once it stops."""
    import psycopg

    from tests.helpers.kafka_broker import KafkaBroker
    from tests.helpers.kafka_data import commit_group_offsets, produce

    schema = f"doctor_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        conn.execute(f"create schema {schema}")
        conn.execute(f"create table {schema}.eo_tokens (token_id text primary key, message_id text,"
                     " destination text, attempt_id text, created_at timestamptz)")
        conn.execute(f"create table {schema}.eo_outbox (endpoint text, incoming_message_id text,"
                     " incoming_token_id text, attempt_id text, outgoing jsonb, tokens_committed_at timestamptz,"
                     " created_at timestamptz, updated_at timestamptz, version bigint)")
        conn.execute(f"create table {schema}.eo_intents (intent_id text, endpoint text, incoming_message_id text,"
                     " attempt_id text, kind text, ref text, created_at timestamptz)")

    broker = KafkaBroker()
    broker.start()
    try:
        broker.create_topic("orders", partitions=2)
        produce(broker.bootstrap, "orders", [{"value": b"v", "partition": 0}])
        commit_group_offsets(broker.bootstrap, "billing", "orders", {0: 1})
        path = write_config(tmp_path, f"""
            [kafka.main]
            bootstrap_servers = "{broker.bootstrap}"
            timeout_seconds = 5

            [stores.pg]
            type = "postgres"
            port = {postgres.port}
            database = "{postgres.database}"
            user = "{postgres.user}"
            password = "${{EOCTL_TEST_PGPASSWORD}}"
            schema = "{schema}"

            [endpoints.billing]
            store = "pg"

            [endpoints.billing.input]
            topics = ["orders"]
            kafka = "main"
            group = "billing"
        """)
        config = load_config(path, environ={"EOCTL_TEST_PGPASSWORD": postgres.password})
        green = run_doctor(config, lambda: spark)
        assert green.ok, [r for r in green.results if r.status is not Status.OK]
        rows = _rows(green)
        assert rows[("endpoints.billing.input", "topics present")] == (Status.OK, "orders (2 partitions)")
        assert rows[("endpoints.billing.input", "consumer-group offsets readable")] == (
            Status.OK, "group billing: 1 partition with committed offsets")
        assert rows[("endpoints.billing.input", "Spark Kafka connector loads")][0] is Status.OK
        assert rows[("stores.pg", "Spark reads it through JDBC")][0] is Status.OK
        on_duckdb = run_doctor(load_config(path, overrides={"kind": "duckdb"},
                                           environ={"EOCTL_TEST_PGPASSWORD": postgres.password}), pytest.fail)
        assert on_duckdb.ok, [r for r in on_duckdb.results if r.status is not Status.OK]
        rows = _rows(on_duckdb)
        assert rows[("endpoints.billing.input", "offsets readable for the DuckDB engine")] == (
            Status.OK, "2 partitions, 1 offsets to read (read_committed)")
        assert rows[("stores.pg", "the DuckDB engine reads it through ADBC")] == (
            Status.OK, "eo_tokens copied through ADBC")
    finally:
        broker.stop()

    red = run_doctor(config, lambda: spark)
    rows = _rows(red)
    assert not red.ok
    status, detail = rows[("kafka.main", "broker reachable")]
    assert status is Status.FAIL and broker.bootstrap in detail and "not reachable" in detail
    assert rows[("endpoints.billing.input", "topics present")] == (
        Status.SKIP, "Kafka connection main is not reachable")
    assert rows[("stores.pg", "reachable")][0] is Status.OK  # one broken part never hides the others


def test_doctor_cli_exit_code_is_1_when_a_check_fails(spark_jars: Path, sample_copy: Path) -> None:
    (sample_copy / "state.duckdb").unlink()
    args = ("--config", str(sample_copy / "eoctl.toml"))
    env = {"EOCTL_JARS_DIR": str(spark_jars)}
    result = run_eoctl(*args, "--format", "json", "doctor", env=env)
    assert result.code == 1
    failed = [c for c in json.loads(result.stdout)["checks"] if c["status"] == "fail"]
    assert [(c["component"], c["detail"]) for c in failed] == [
        ("stores.state", f"DuckDB file {sample_copy / 'state.duckdb'} does not exist")
    ]
    assert failed[0]["fix"] == "check the path"
    # the store's table checks are not left out in silence: skipped, saying why
    skipped = [(c["check"], c["detail"]) for c in json.loads(result.stdout)["checks"] if c["component"] == "stores.state"
               and c["status"] == "skip"]
    assert [c for c, _ in skipped] == ["table eo_tokens (endpoints.billing.tokens)",
                                       "table eo_outbox (endpoints.billing.outbox)",
                                       "table eo_intents (endpoints.billing.intents)"]
    assert {d for _, d in skipped} == {"store state is not reachable"}
    text = run_eoctl(*args, "--engine", "duckdb", "doctor", env=env)  # the same check, without a JVM
    assert text.code == 1 and text.stdout == ""
    assert "FAIL" in text.stderr and "1 check(s) failed" in text.stderr
    import re

    assert re.search(r"\d+ ok, \d+ warnings?, 1 failed, 3 skipped", " ".join(text.stderr.split())), text.stderr


def test_doctor_in_a_pipe_is_a_table_a_log_shows_whole() -> None:
    """Off a terminal the console is 1000 columns wide (no id is cut); doctor's table of prose was
    ~370 columns wide there. It is PIPE_TABLE_WIDTH wide, its paths folded, never cut."""
    from eoctl.report.terminal import PIPE_TABLE_WIDTH

    result = run_eoctl("--config", str(REPO / "samples" / "chaos" / "eoctl.toml"), "--engine", "duckdb", "doctor")
    assert result.code == 0, result.stderr[-2000:]
    table = [line for line in result.stderr.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line.rstrip()) for line in table) == PIPE_TABLE_WIDTH
    assert "…" not in result.stderr


def test_a_configuration_without_endpoints_is_warned_of_by_config_check_and_doctor(tmp_path: Path) -> None:
    import duckdb

    duckdb.connect(str(tmp_path / "state.duckdb")).close()
    config = tmp_path / "eoctl.toml"
    config.write_text('[stores.state]\ntype = "duckdb"\npath = "state.duckdb"\n')
    checked = run_eoctl("--config", str(config), "--format", "json", "config", "check")
    assert checked.code == 0 and json.loads(checked.stdout)["warnings"] == [
        "no endpoints are configured: every command has nothing to read (add an [endpoints.NAME] with its store, "
        "input or sinks; `eoctl config init` writes a starter)"]
    assert "eoctl: warning: no endpoints are configured" in run_eoctl("--config", str(config), "config", "check").stderr
    doctor = run_eoctl("--config", str(config), "--engine", "duckdb", "--format", "json", "doctor")
    warned = [c for c in json.loads(doctor.stdout)["checks"] if c["status"] == "warn"]
    assert [c["detail"] for c in warned] == json.loads(checked.stdout)["warnings"]
