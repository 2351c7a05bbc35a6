"""The audit on the chaos pipeline: every anomaly of the ledger under its code, and nothing else,
on the recorded topic archive (DuckDB) and on live Kafka (DuckDB and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from eoctl.audit import select_codes
from tests.helpers.audits import audit_duckdb, audit_spark
from eoctl.config import load_config
from eoctl.options import AuditOptions
from tests.helpers import ledger_oracle
from tests.helpers.chaos import CHAOS, live_run, read_ledger, settled
from tests.helpers.findings import canonical
from tests.helpers.pipeline_state import topic_records

pytestmark = pytest.mark.integration


def _tables(query) -> dict[str, list[tuple]]:
    return {
        "tokens": [r for ep in ("billing", "shipping") for r in query(f"select token_id, message_id from {ep}.eo_tokens")],
        "intents": [r for ep in ("shop", "billing", "shipping") for r in query(f"select ref, incoming_message_id from {ep}.eo_intents")],
    }


def test_audit_of_the_recorded_archive_matches_the_ledger(spark) -> None:
    config = load_config(CHAOS / "eoctl.toml")
    report = audit_spark(spark, config, settled(), select_codes(None, None))
    with duckdb.connect() as db:
        db.execute(f"attach '{CHAOS / 'state.duckdb'}' as st (read_only)")
        db.execute("use st")
        rows = db.execute(f"""
            select list_filter(headers, lambda h: h.key = 'eo-message-id')[1].value.decode(),
                   list_filter(headers, lambda h: h.key = 'eo-token-id')[1].value.decode(), value.decode(),
                   list_filter(headers, lambda h: h.key = 'eo-blobs')[1].value.decode()
            from read_parquet('{CHAOS}/topics/*/*.parquet')""").fetchall()
        index = ledger_oracle.build_index([(m, t, json.loads(v), b) for m, t, v, b in rows],
                                          _tables(lambda sql: db.execute(sql).fetchall()))
    assert ledger_oracle.found(report, index) == ledger_oracle.expected(read_ledger(CHAOS / "ledger.jsonl"))
    assert report.scanned["records"] == 83


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_audit_of_live_kafka_matches_the_ledger(spark, kafka, request, tmp_path: Path, kind: str) -> None:
    from samples.reference.store import Store

    postgres = request.getfixturevalue("postgres") if kind == "postgres" else None
    chaos = live_run(kind, tmp_path, kafka, postgres)
    options = settled()
    options.evidence_rows = 100_000
    report = audit_spark(spark, chaos.config, options, select_codes(None, None))
    # the DuckDB engine reads the live topics through confluent-kafka: the same findings
    assert canonical(audit_duckdb(chaos.config, options, select_codes(None, None))) == canonical(report)

    records = [(r.message_id, r.token_id, r.body, r.headers.get("eo-blobs"))
               for t in chaos.spec.topics.values() for r in topic_records(kafka.bootstrap, t)]
    store = Store.open(kind, chaos.store_target)
    try:
        index = ledger_oracle.build_index(records, _tables(store.q))
    finally:
        store.close()
    assert ledger_oracle.found(report, index) == ledger_oracle.expected(chaos.ledger)


def test_audit_of_a_generated_state_matches_its_ground_truth(spark, tmp_path: Path) -> None:
    """Every code the generator injects, counted exactly; young tokens, pending entries' tokens and
    blobs, redelivered copies whose effect exists: not findings."""
    from samples.generator import DEFAULT_MIX, GenSpec, generate

    truth = generate(GenSpec(20_000, tmp_path / "gen", partitions=4, blob_every=50,
                             mix={c: r * 10 for c, r in DEFAULT_MIX.items()}))
    config = load_config(tmp_path / "gen" / "eoctl.toml")
    report = audit_spark(spark, config, AuditOptions(), select_codes(None, None))
    found = {code: row["count"] for code, row in report.summary().items()}
    assert found == {code: v["count"] for code, v in truth["codes"].items() if v["count"]}
    # EO202 after EO101/EO102 looks for processed copies in their state; alone, among every record
    alone = audit_spark(spark, config, AuditOptions(), ["EO202"])
    def rows(findings):
        return [(f.count, sorted(json.dumps(r, sort_keys=True) for r in f.evidence)) for f in findings]
    assert rows(alone.findings) == rows(f for f in report.findings if f.code == "EO202")
