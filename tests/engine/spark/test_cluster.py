"""The same read on a real standalone cluster and through Spark Connect: only --master/--remote change."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from eoctl.config import load_config
from eoctl.engine.spark.summary import summarize_input
from tests.helpers.cli import run_eoctl
from tests.helpers.configs import live_input_config
from tests.helpers.kafka_data import commit_group_offsets, produce
from tests.helpers.servers import unavailable

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def live_config(kafka, tmp_path_factory) -> Path:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=3)
    records = [
        {"partition": i % 3, "value": f"v{i}".encode(),
         "headers": [("eo-message-id", f"m{i % 40}".encode()), ("eo-token-id", f"t{i}".encode())]}
        for i in range(120)
    ]
    records += [{"partition": 0, "value": b"no headers"}]
    produce(kafka.bootstrap, topic, records)
    commit_group_offsets(kafka.bootstrap, "billing", topic, {0: 30, 1: 10})
    return live_input_config(tmp_path_factory.mktemp("live"), kafka.bootstrap, topic)


@pytest.fixture(scope="module")
def local_summary(spark, live_config: Path) -> dict:
    summary = summarize_input(spark, load_config(live_config), "billing").to_dict()
    parts = {p["partition"]: p for p in summary["partitions"]}
    assert summary["records"] == 121
    assert (parts[0]["records"], parts[0]["committed_offset"], parts[0]["in_flight"]) == (41, 30, 11)
    assert (parts[1]["committed_offset"], parts[1]["in_flight"]) == (10, 30)
    assert (parts[2]["committed_offset"], parts[2]["in_flight"]) == (None, 40)
    assert parts[0]["with_protocol_headers"] == 40  # the record without headers is counted apart
    assert [p["distinct_message_ids"] for p in parts.values()] == [40, 40, 40]  # i % 40 spread over i % 3
    return summary


def _scan(live_config: Path, spark_jars: Path, *engine_flags: str) -> dict:
    result = run_eoctl(*engine_flags, "--config", str(live_config), "--format", "json", "sources", "scan", "billing",
                       env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert result.code == 0, result.stderr[-2000:]
    scanned = json.loads(result.stdout)
    assert scanned.pop("schema") == "eoctl.sources-scan/v1"
    assert scanned.pop("run")["command"] == "sources scan"  # the envelope; the rest is the summary
    return scanned


def test_same_read_on_the_duckdb_engine(live_config: Path, spark_jars: Path, local_summary: dict) -> None:
    """confluent-kafka into DuckDB instead of Spark's Kafka source: the same summary."""
    assert _scan(live_config, spark_jars, "--engine", "duckdb") == local_summary
    ranged = run_eoctl("--engine", "duckdb", "--config", str(live_config), "--format", "json", "sources", "scan",
                       "billing", "--range", f"{local_summary['partitions'][0]['topic']}:0:5:25")
    assert ranged.code == 0, ranged.stderr
    [part] = json.loads(ranged.stdout)["partitions"]
    assert (part["partition"], part["records"], part["first_offset"], part["last_offset"]) == (0, 20, 5, 24)


def _started(server, what: str):
    try:
        server.start()
    except Exception as exc:
        server.stop()
        unavailable(what, str(exc))
    return server


def test_same_read_on_a_standalone_cluster(live_config: Path, spark_jars: Path, local_summary: dict) -> None:
    from tests.helpers.spark_cluster import StandaloneCluster

    cluster = _started(StandaloneCluster(), "Spark standalone cluster")
    try:
        assert _scan(live_config, spark_jars, "--master", cluster.master_url) == local_summary
        # the work really ran on the cluster's executor, not in a local driver
        assert any((cluster.dir / "work").glob("app-*/*/stderr"))
    finally:
        cluster.stop()


def test_same_read_through_spark_connect(live_config: Path, spark_jars: Path, local_summary: dict) -> None:
    from tests.helpers.spark_cluster import ConnectServer

    server = _started(ConnectServer(spark_jars), "Spark Connect server")
    try:
        assert _scan(live_config, spark_jars, "--remote", server.url) == local_summary
    finally:
        server.stop()
