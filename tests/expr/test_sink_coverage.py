"""EO503 (eoctl.expr.sinks.missing_effects) against a plain-Python reading of the end-to-end seed's
sink perspective: every message an endpoint processed (a copy below its committed offset, with
protocol headers) must have a row in a sink configured with `every_message`; one without is lost
downstream. Each such message once, at its first processed copy (record time, topic, partition,
offset), with its hour's counts (processed messages, with a row, missing). Not judged: a message
whose pending outbox entry is in progress; never reported: copies in flight only, records with a
header problem (EO105), sinks without `every_message`.

Hypothesis drives DuckDB over small states with many ties; one fixed rich state on Spark too.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from tests.helpers.check_tables import CheckTables, differences, record, store_row

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])
T0 = dt.datetime(2026, 11, 1, 10, 0)


def _config():
    from eoctl.config.model import Config

    sink = {"format": "parquet", "message_id_column": "mid"}
    return Config.model_validate({
        "stores": {"s": {"type": "duckdb", "path": "/nowhere.duckdb"}},
        "endpoints": {
            "billing": {"store": "s", "sinks": [{"name": "effects", "path": "/nowhere/e", "every_message": True,
                                                 **sink},
                                                {"name": "audit_log", "path": "/nowhere/a", **sink}]},
            "shipping": {"store": "s", "sinks": [{"name": "shipments", "path": "/nowhere/s", "every_message": True,
                                                  **sink}]}}})


CONFIG = _config()
SINK_TYPES = {("billing", "effects"): {"mid": "string", "amount": "int64"},
              ("billing", "audit_log"): {"mid": "string", "amount": "int64"},
              ("shipping", "shipments"): {"mid": "string", "amount": "int64"}}
COLUMNS = ("message_id", "topic", "partition", "offset", "timestamp", "hour", "hour_processed", "hour_with_effect",
           "hour_missing")


def oracle(t: CheckTables) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, ep in CONFIG.endpoints.items():
        for sink in ep.sinks:
            if not sink.every_message:
                continue
            first: dict[str, dict[str, Any]] = {}
            in_hour: dict[dt.datetime, set[str]] = defaultdict(set)  # messages with a processed copy there
            for r in t.records:
                if r["endpoint"] != name or not r["processed"] or r["message_id"] is None or r["problem"]:
                    continue
                key = (r["timestamp"], r["topic"], r["partition"], r["offset"])
                m = r["message_id"]
                in_hour[r["timestamp"].replace(minute=0, second=0, microsecond=0)].add(m)
                if m not in first or key < (first[m]["timestamp"], first[m]["topic"], first[m]["partition"],
                                            first[m]["offset"]):
                    first[m] = r
            effects = {str(row["mid"]) for row in t.sinks.get((name, sink.name), []) if row["mid"] is not None}
            pending = {e["incoming_message_id"] for e in t.stores.get("outbox", []) if e["ep"] == name}
            for m, r in first.items():
                if m in effects or m in pending:
                    continue
                hour = r["timestamp"].replace(minute=0, second=0, microsecond=0)
                messages = in_hour[hour]
                out.setdefault(name, []).append({
                    "message_id": m, "topic": r["topic"], "partition": r["partition"], "offset": r["offset"],
                    "timestamp": r["timestamp"], "hour": hour, "hour_processed": len(messages),
                    "hour_with_effect": len(messages & effects),
                    "hour_missing": len(messages - effects - pending)})
    return out


def _canonical(evidence: dict[str, list[dict[str, Any]]]) -> dict[str, list[tuple]]:
    def value(v: Any) -> Any:
        if isinstance(v, dt.datetime):
            return v.replace(tzinfo=None).isoformat() if v.tzinfo is None else \
                v.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat()
        if isinstance(v, str) and len(v) >= 19 and v[4] == "-" and v[10] == "T":
            return value(dt.datetime.fromisoformat(v))
        return v

    return {ep: sorted(tuple((c, value(r[c])) for c in COLUMNS) for r in rows) for ep, rows in evidence.items()}


@st.composite
def states(draw) -> CheckTables:
    records, offsets = [], defaultdict(int)
    for _ in range(draw(st.integers(0, 14))):
        endpoint = draw(st.sampled_from(["billing", "shipping"]))
        topic = draw(st.sampled_from(["t", "u"]))
        partition = draw(st.integers(0, 1))
        offsets[(endpoint, topic, partition)] += 1
        records.append(record(
            endpoint=endpoint, topic=topic, partition=partition, offset=offsets[(endpoint, topic, partition)],
            timestamp=T0 + dt.timedelta(minutes=draw(st.sampled_from([0, 30, 59, 60, 61, 150]))),
            processed=draw(st.booleans()), message_id=draw(st.sampled_from([None, "m1", "m2", "m3", "m4", "m5"])),
            token_id="k", problem=draw(st.sampled_from([None, None, None, "no eo-producer header"]))))
    ids = st.sampled_from([None, "m1", "m2", "m3", "m4", "m5", "zz"])
    sinks = {key: [{"mid": draw(ids), "amount": 1} for _ in range(draw(st.integers(0, 5)))] for key in SINK_TYPES}
    outbox = [store_row("outbox", draw(st.sampled_from(["billing", "shipping"])), incoming_message_id=m)
              for m in draw(st.lists(st.sampled_from(["m1", "m2", "m3"]), max_size=2, unique=True))]
    return CheckTables(CONFIG, records=records, stores={"outbox": outbox}, sinks=sinks, sink_types=SINK_TYPES)


@pytest.mark.unit
def test_every_processed_message_without_a_row_in_an_every_message_sink_is_missing() -> None:
    seen = {"states": 0, "found": 0, "excluded": 0}

    @SETTINGS
    @given(t=states())
    def run(t: CheckTables) -> None:
        expected = oracle(t)
        got, want = _canonical(t.evidence("EO503", "duckdb")), _canonical(expected)
        assert got == want, f"check (left) and oracle (right) differ: {differences(got, want)}"
        seen["states"] += 1
        seen["found"] += bool(expected)
        pending = {e["incoming_message_id"] for e in t.stores["outbox"]}
        seen["excluded"] += any(r["processed"] and r["message_id"] in pending for r in t.records)

    run()
    assert seen["found"] >= seen["states"] // 4 and seen["excluded"] >= 3, seen


def _rich() -> CheckTables:
    """Two hours; copies of one message in both; a header problem; a pending entry; the other sink."""
    r = [record(offset=0, timestamp=T0, processed=True, message_id="a"),
         record(offset=1, timestamp=T0 + dt.timedelta(minutes=70), processed=True, message_id="a"),
         record(offset=2, timestamp=T0 + dt.timedelta(minutes=10), processed=True, message_id="b"),
         record(offset=3, timestamp=T0 + dt.timedelta(minutes=20), processed=True, message_id="c"),
         record(offset=4, timestamp=T0 + dt.timedelta(minutes=65), processed=True, message_id="d"),
         record(offset=5, timestamp=T0 + dt.timedelta(minutes=66), processed=False, message_id="e"),
         record(offset=6, timestamp=T0 + dt.timedelta(minutes=67), processed=True, message_id="f",
                problem="no eo-producer header"),
         record(offset=7, timestamp=T0 + dt.timedelta(minutes=68), processed=True, message_id="g")]
    return CheckTables(CONFIG, records=r, stores={"outbox": [store_row("outbox", "billing", incoming_message_id="g")]},
                       sinks={("billing", "effects"): [{"mid": "b", "amount": 1}],
                              ("billing", "audit_log"): [{"mid": "a", "amount": 1}, {"mid": "c", "amount": 1}]},
                       sink_types=SINK_TYPES)


@pytest.mark.unit
def test_a_fixed_state_names_the_messages_and_their_hours() -> None:
    found = _canonical(_rich().evidence("EO503", "duckdb"))
    rows = [dict(r) for r in found["billing"]]
    # a's second copy is in hour 11: it counts there too (processed, missing), its row stays at 10
    assert [(r["message_id"], r["hour"], r["hour_processed"], r["hour_with_effect"], r["hour_missing"])
            for r in rows] == [("a", "2026-11-01T10:00:00", 3, 1, 2), ("c", "2026-11-01T10:00:00", 3, 1, 2),
                               ("d", "2026-11-01T11:00:00", 3, 0, 2)]
    assert found == _canonical(oracle(_rich()))


@pytest.mark.integration
def test_spark_finds_what_duckdb_finds(spark) -> None:
    t = _rich()
    assert _canonical(t.evidence("EO503", "spark", spark)) == _canonical(t.evidence("EO503", "duckdb"))
