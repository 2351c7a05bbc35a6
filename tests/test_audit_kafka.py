"""Findings only a live broker shows: a hanging transaction (EO601) and records lost to retention
below the committed offset (EO204)."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.audits import audit_duckdb, audit_spark
from eoctl.config import load_config
from eoctl.options import AuditOptions
from tests.helpers.configs import live_input_config
from tests.helpers.kafka_data import commit_group_offsets, hang_a_transaction, produce

pytestmark = pytest.mark.integration

def _config(tmp_path: Path, bootstrap: str, topic: str) -> Path:
    return live_input_config(tmp_path, bootstrap, topic)


ENGINES = pytest.mark.parametrize("engine", ["spark", "duckdb"])


def _audit(engine: str, spark, config, options: AuditOptions, codes: list[str]):
    """The audit on `engine`: Spark's Kafka source, or confluent-kafka into DuckDB."""
    return audit_spark(spark, config, options, codes) if engine == "spark" else audit_duckdb(config, options, codes)


@ENGINES
def test_hanging_transaction(spark, kafka, tmp_path: Path, engine: str) -> None:
    topic = f"hang-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic)
    produce(kafka.bootstrap, topic, [{"value": b"ok", "headers": [("eo-message-id", b"m0"), ("eo-token-id", b"t0")]}])
    hang_a_transaction(kafka.bootstrap, topic, f"{topic}-tx")
    config = load_config(_config(tmp_path, kafka.bootstrap, topic))
    time.sleep(1.1)

    report = _audit(engine, spark, config, AuditOptions(transaction_timeout=dt.timedelta(seconds=1)), ["EO601"])
    (finding,) = report.findings
    (row,) = finding.evidence
    assert (row["topic"], row["partition"], row["last_stable_offset"], row["high_watermark"]) == (topic, 0, 1, 2)
    assert row["age_seconds"] >= 1
    young = _audit(engine, spark, config, AuditOptions(transaction_timeout=dt.timedelta(minutes=15)), ["EO601"])
    assert young.findings == []  # an open transaction younger than the timeout is not hanging


@ENGINES
def test_committed_offset_below_log_start(spark, kafka, tmp_path: Path, engine: str) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = f"retention-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic)
    produce(kafka.bootstrap, topic, [{"value": b"v", "headers": [("eo-message-id", f"m{i}".encode()),
                                                                  ("eo-token-id", f"t{i}".encode())]} for i in range(10)])
    commit_group_offsets(kafka.bootstrap, "billing", topic, {0: 3})
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 7)]).values():  # retention took offsets 0..6
        f.result(30)
    report = _audit(engine, spark, load_config(_config(tmp_path, kafka.bootstrap, topic)), AuditOptions(),
                    ["EO204", "EO105"])
    (finding,) = report.findings  # the three records left are read from offset 7: nothing without headers
    assert finding.evidence == [{"topic": topic, "partition": 0, "committed": 3, "log_start": 7, "records_lost": 4}]
    assert report.scanned["records"] == 3
