"""Recording a chaos run as a server-free sample, as samples/chaos was produced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eoctl.config import load_config
from eoctl.sources import input_committed_offsets
from eoctl.engine.spark.sources import read_input
from samples.reference.record import record

pytestmark = pytest.mark.integration


def test_record_writes_a_sample_eoctl_reads_like_the_committed_one(kafka, spark, tmp_path: Path) -> None:
    out = tmp_path / "chaos"
    record(out, kafka.bootstrap, orders=40)
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    assert len(ledger) == 26

    config = load_config(out / "eoctl.toml")
    orders = read_input(spark, config, config.endpoints["billing"].input)
    invoices = read_input(spark, config, config.endpoints["shipping"].input)
    # 40 orders + 2 re-deliveries; 38 dispatched invoices + 1 re-dispatch + 1 regenerated + 1 ghost
    assert (orders.count(), invoices.count()) == (42, 41)
    assert orders.where("message_id is null or token_id is null").count() == 0
    assert input_committed_offsets(config, config.endpoints["billing"].input)["orders"] != {}

    committed = load_config(Path(__file__).resolve().parents[2] / "samples" / "chaos" / "eoctl.toml")
    # stores, endpoints and the history file are paths of each folder; everything else is equal
    folder_bound = {"stores", "endpoints", "history"}
    assert committed.model_dump(exclude=folder_bound) == config.model_dump(exclude=folder_bound)
    assert sorted(committed.endpoints) == sorted(config.endpoints) == ["billing", "shipping", "shop"]
