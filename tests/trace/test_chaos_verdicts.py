"""`eoctl trace` on the chaos pipeline: the right verdict for a message of every fault kind, the
findings that concern it, lookups by token and sink key, and the fast paths on a live broker."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from eoctl.trace import Lookup, TraceOptions, Verdict, run_trace
from tests.helpers.audits import on_engine, trace_duckdb, trace_spark
from tests.helpers.chaos import ChaosRun, recorded_copy
from tests.helpers.cli import run_eoctl

pytestmark = pytest.mark.integration

# no grace or stuck threshold: everything the recorded run left is old enough to count
SETTLED = dict(stuck_after=dt.timedelta(0), grace=dt.timedelta(0))


@pytest.fixture(scope="module")
def chaos(tmp_path_factory) -> ChaosRun:
    return recorded_copy(tmp_path_factory.mktemp("trace"))


@pytest.fixture(scope="module")
def audited(spark, chaos: ChaosRun):
    """The settled audit of the sample (every code), and the time it was taken at."""
    from eoctl.audit import select_codes
    from tests.helpers.audits import audit_spark
    from eoctl.options import AuditOptions

    now, zero = dt.datetime.now(dt.timezone.utc), dt.timedelta(0)
    return now, audit_spark(spark, chaos.config, AuditOptions(now=now, grace=zero, stuck_after=zero),
                          select_codes(None, None))


def _trace(spark, chaos: ChaosRun, message_id: str):
    result = trace_spark(spark, chaos.config, Lookup("message_id", message_id), TraceOptions(**SETTLED))
    (message,) = result.messages
    assert message.message_id == message_id
    return message


def _trace_many(spark, chaos: ChaosRun, message_ids: list[str]) -> dict:
    """Several messages traced in one pass (each gets what it would alone: tests/trace/test_findings.py)."""
    result = trace_spark(spark, chaos.config, Lookup("message_id", message_ids[0], values=message_ids),
                       TraceOptions(**SETTLED))
    assert sorted(m.message_id for m in result.messages) == sorted(set(message_ids))
    return {m.message_id: m for m in result.messages}


def _codes(message) -> set[str]:
    return {f["code"] for f in message.findings}


def _entries(chaos: ChaosRun, kind: str) -> list[dict]:
    found = [e for e in chaos.ledger if e["fault"] == kind]
    assert found, f"the chaos sample has no {kind} fault"
    return found


def test_every_fault_kind_has_a_verdict_test() -> None:
    from samples.reference.faults import FAULT_KINDS

    tested = {name.removeprefix("test_verdict_") for name in globals() if name.startswith("test_verdict_")}
    assert tested == set(FAULT_KINDS)


def test_verdict_crash(spark, chaos) -> None:
    """A crash at any step, recovered by redelivery: processed once; a crash after the incoming
    token was removed leaves the entry pending (EO301) although its messages were sent."""
    crashes = _entries(chaos, "crash")
    traced = _trace_many(spark, chaos, [m for e in crashes for m in [e["message_id"], *e.get("outgoing", [])]])
    for e in crashes:
        m = traced[e["message_id"]]
        assert m.verdict is Verdict.processed_once, (e["step"], e["endpoint"], m.reasons)
        assert ("EO301" in _codes(m)) == (e["step"] == "incoming_token_removed"), e
        assert all(c.consumer == e["endpoint"] for c in m.copies)
        for out in e.get("outgoing", []):
            assert traced[out].verdict is Verdict.processed_once


def test_verdict_crash_no_cleanup(spark, chaos) -> None:
    """Processed once; the garbage the crashed attempt left (an orphan blob or token) shows as a
    finding of the message whose processing left it."""
    leftovers = _entries(chaos, "crash_no_cleanup")
    traced = _trace_many(spark, chaos, [e["message_id"] for e in leftovers])
    for e in leftovers:
        m = traced[e["message_id"]]
        assert m.verdict is Verdict.processed_once
        assert set(e["expect"]) <= _codes(m), (e, m.findings)
        if "EO401" in e["expect"]:
            (orphan,) = [b for b in m.blobs if b.registered_only]
            assert orphan.present and orphan.name in {i.ref for i in m.intents}


def test_verdict_duplicate_delivery(spark, chaos) -> None:
    _redelivered_once(spark, chaos, "duplicate_delivery")


def test_verdict_lost_ack(spark, chaos) -> None:
    _redelivered_once(spark, chaos, "lost_ack")


def _redelivered_once(spark, chaos: ChaosRun, kind: str) -> None:
    (e,) = _entries(chaos, kind)
    m = _trace(spark, chaos, e["message_id"])
    assert m.verdict is Verdict.processed_once
    assert len(m.copies) == 2 and len({c.token_id for c in m.copies}) == 1
    assert [c.token_present for c in m.copies] == [False, False]  # consumed once, the copy dropped
    assert _codes(m) == {"EO101"}


def test_verdict_regenerate_tokens(spark, chaos) -> None:
    (e,) = _entries(chaos, "regenerate_tokens")
    (out,) = e["outgoing"]
    m = _trace(spark, chaos, out)
    assert m.verdict is Verdict.processed_twice
    assert len({c.token_id for c in m.copies}) == 2 and len(m.sink_rows) == 2
    assert {"EO102", "EO501"} <= _codes(m)
    assert _trace(spark, chaos, e["message_id"]).verdict is Verdict.processed_once  # the order itself


def test_a_regenerated_copy_waiting_under_a_present_token_will_be_processed_twice(spark, tmp_path: Path) -> None:
    """The regenerate_tokens message, rewound to the moment before its second processing: its second
    copy (regenerated token) back in flight with that token in the store, one sink row. The audit
    calls it EO102; trace must not call it processed once."""
    import duckdb

    from tests.helpers.audits import audit_spark
    from tests.helpers.chaos import settled

    state = recorded_copy(tmp_path)
    (e,) = _entries(state, "regenerate_tokens")
    (out,) = e["outgoing"]
    first, second = sorted(_trace(spark, state, out).copies, key=lambda c: (c.timestamp, c.partition, c.offset))
    assert first.token_id != second.token_id
    offsets_file = state.config_path.parent / "topics" / "invoices" / "_committed_offsets.json"
    offsets = json.loads(offsets_file.read_text())
    offsets[second.topic][str(second.partition)] = second.offset  # the second copy is in flight again
    offsets_file.write_text(json.dumps(offsets))
    with duckdb.connect(state.store_target) as db:
        db.execute("insert into shipping.eo_tokens values (?, ?, 'shipping', ?, ?)",  # made before its copy
                   [second.token_id, out, second.attempt_id, second.timestamp - dt.timedelta(seconds=1)])
        db.execute("delete from shipping.shipments where source_message_id = ? and applied_at = (select "
                   "max(applied_at) from shipping.shipments where source_message_id = ?)", [out, out])

    m = _trace(spark, state, out)
    assert m.verdict is Verdict.will_be_processed_twice and m.verdict.bad
    assert f"{second.topic}/{second.partition}@{second.offset}" in m.reasons[0] and second.token_id in m.reasons[0]
    report = audit_spark(spark, state.config, settled(), ["EO102"])
    assert [row["message_id"] for f in report.findings for row in f.evidence] == [out]
    assert "EO102" in _codes(m)


def test_verdict_ghost(spark, chaos) -> None:
    (e,) = _entries(chaos, "ghost")
    (out,) = e["outgoing"]
    m = _trace(spark, chaos, out)
    assert m.verdict is Verdict.ghost
    assert e["attempt_id"] in m.reasons[0]
    assert {c.attempt_id for c in m.copies} == {e["attempt_id"]}
    assert {"EO302", "EO402"} <= _codes(m)  # and its blob was cleaned up with the attempt
    assert [b.present for b in m.blobs] == [False]


def test_verdict_shared_blob_name(spark, chaos) -> None:
    """Found by its sink key: the invoice whose blob another attempt overwrote has lost its data."""
    (e,) = _entries(chaos, "shared_blob_name")
    result = trace_spark(spark, chaos.config, Lookup("sink", str(e["order"]), "order_id"), TraceOptions(**SETTLED))
    (m,) = result.messages
    assert m.verdict is Verdict.lost
    assert "EO403" in _codes(m)
    (blob,) = m.blobs
    assert blob.present and blob.sha256_ok is False
    assert m.sink_rows and m.sink_rows[0].row["order_id"] == e["order"]


def test_verdict_stuck(spark, chaos) -> None:
    """The incoming message was consumed, but what its processing emits waits in the outbox."""
    stuck = _entries(chaos, "stuck")
    traced = _trace_many(spark, chaos, [m for e in stuck for m in [e["message_id"], *e["outgoing"]]])
    for e in stuck:
        m = traced[e["message_id"]]
        assert m.verdict is Verdict.stuck  # EO301 names the entry its processing left
        assert [x.incoming_message_id for x in m.caused_entries] == [e["message_id"]]
        (out,) = e["outgoing"]
        held = traced[out]
        assert held.verdict is Verdict.stuck and held.copies == []
        assert held.emitted_by is not None and held.emitted_by.incoming_message_id == e["message_id"]
        assert "EO301" in _codes(m) and "EO301" in _codes(held)


def test_verdict_double_apply(spark, chaos) -> None:
    (e,) = _entries(chaos, "double_apply")
    m = _trace(spark, chaos, e["message_id"])
    assert m.verdict is Verdict.processed_twice
    assert len(m.copies) == 1 and len(m.sink_rows) == 2
    assert "EO501" in _codes(m) and "EO102" not in _codes(m)


def test_trace_agrees_with_the_audit(spark, chaos, audited) -> None:
    """Every message the audit's findings name, traced in one pass: trace shows each finding that
    names it and no other, and no message with a critical finding gets a verdict that needs no
    action (a generated state: tests/trace/test_findings.py)."""
    from tests.helpers.trace_agreement import assert_agree, named_messages, trace_all

    now, report = audited
    zero = dt.timedelta(0)
    named = named_messages(report)
    result = trace_all(spark, chaos.config, sorted(named), now, zero, zero)
    assert sorted(m.message_id for m in result.messages) == sorted(named)
    assert_agree(report, result)
    # what the sample holds: every message-scoped code it injects shows on some message
    assert {c for codes in named.values() for c in codes} >= {"EO101", "EO102", "EO201", "EO301", "EO302",
                                                              "EO402", "EO403", "EO501"}
    # one pass over several messages gives each the verdict and findings it gets alone
    by_id = {m.message_id: m for m in result.messages}
    for code in ("EO302", "EO403"):
        alone_id = min(m for m, codes in named.items() if code in codes)
        alone = trace_spark(spark, chaos.config, Lookup("message_id", alone_id),
                          TraceOptions(now=now, grace=zero, stuck_after=zero, full_scan=True)).messages[0]
        together = by_id[alone_id]
        assert (alone.verdict, sorted(f["code"] for f in alone.findings)) == (
            together.verdict, sorted(f["code"] for f in together.findings)), code


def test_lookup_by_token_and_the_recorded_findings(spark, chaos, audited) -> None:
    from eoctl import history

    _, report = audited
    history.record(chaos.config, report)

    (ghost,) = _entries(chaos, "ghost")
    by_message = _trace(spark, chaos, ghost["outgoing"][0])
    recorded = {f["code"] for f in by_message.recorded_findings}
    assert set(ghost["expect"]) <= recorded, recorded  # EO103 and EO502 name it only in their evidence
    # where trace's own findings and the audit's differ, each code says why
    own = {f["code"] for f in by_message.findings}
    assert own != recorded
    explained = {line.split(":", 1)[0] for line in by_message.findings_differ}
    assert explained == own ^ recorded
    assert any(line.startswith("EO502: ") and "not about one message" in line for line in by_message.findings_differ)

    token = by_message.copies[0].token_id
    result = trace_spark(spark, chaos.config, Lookup("token_id", token), TraceOptions(**SETTLED))
    assert [m.message_id for m in result.messages] == [ghost["outgoing"][0]]
    assert result.messages[0].verdict is Verdict.ghost

    # the orphan token a crashed attempt left: found in the store, traced to its message
    (orphan,) = [f for f in report.findings if f.code == "EO201"]
    row = orphan.evidence[0]
    result = trace_spark(spark, chaos.config, Lookup("token_id", row["token_id"]), TraceOptions(**SETTLED))
    (m,) = result.messages
    assert m.verdict is Verdict.processed_once and "EO201" in _codes(m)

    missing = trace_spark(spark, chaos.config, Lookup("message_id", "no-such-message"), TraceOptions(**SETTLED))
    assert [m.verdict for m in missing.messages] == [Verdict.not_found]
    assert missing.nothing_found() and not missing.worst_is_bad()


def test_cli_json_text_and_usage_errors(spark_jars: Path, chaos) -> None:
    """The JSON answer from both engines; text and usage errors on DuckDB (the same code past the
    engine)."""
    env = {"EOCTL_JARS_DIR": str(spark_jars)}
    cfg = ("--config", str(chaos.config_path))
    (e,) = _entries(chaos, "regenerate_tokens")
    answers = []
    for engine in ("spark", "duckdb"):
        out = run_eoctl("--engine", engine, *cfg, "--format", "json", "trace", "--by", f"order_id={e['order']}",
                        env=env)
        assert out.code == 1, out.stderr  # processed twice: a verdict to act on
        data = json.loads(out.stdout)
        assert data["schema"] == "eoctl.trace/v1"
        assert [(m["message_id"], m["verdict"]) for m in data["messages"]] == [(e["outgoing"][0], "processed twice")]
        assert data["scans"][0]["full"] is True and data["scans"][0]["records_read"] == 83
        answers.append(data["messages"])
    assert answers[0] == answers[1]

    duck = ("--engine", "duckdb", *cfg)
    (d,) = _entries(chaos, "duplicate_delivery")
    text = run_eoctl(*duck, "trace", d["message_id"])
    assert text.code == 0, text.stderr
    assert "PROCESSED ONCE" in text.stderr and "orders/" in text.stderr and text.stdout == ""
    # a typo is not data loss: exit 5; with a processed-twice message beside it, 1 wins
    typo = run_eoctl(*duck, "trace", d["message_id"][:-1])
    assert typo.code == 5 and "NOT FOUND" in typo.stderr, typo.stderr
    both = run_eoctl(*duck, "trace", d["message_id"][:-1], e["outgoing"][0])
    assert both.code == 1, both.stderr

    for args, words in ((("trace",), "give a message id"), (("trace", "--by", "order_id"), "COLUMN=VALUE"),
                        (("trace", "--by", "colour=red"), "no configured sink has a column 'colour'"),
                        (("trace", "--by", "order_id=red"), "the sink column order_id holds numbers")):
        bad = run_eoctl(*duck, *args)
        assert bad.code == 2 and words in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_fast_paths_on_a_live_broker(spark, kafka, tmp_path: Path, engine: str) -> None:
    """--since reads only the records of that time (offsets asked of the broker); without it, a
    token in the store dates the message; with nothing to go on, every record is read, and said.
    On either engine."""
    from tests.helpers.configs import live_tokens_pipeline
    from tests.helpers.kafka_data import produce

    topic = f"trace-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic)
    now = dt.datetime.now(dt.timezone.utc)
    old = now - dt.timedelta(days=3)

    def record(i: int, when: dt.datetime, message: str) -> dict:
        return {"value": b"v", "timestamp": int(when.timestamp() * 1000),
                "headers": [("eo-message-id", message.encode()), ("eo-token-id", f"t-{message}".encode())]}

    produce(kafka.bootstrap, topic, [record(i, old + dt.timedelta(seconds=i), f"old-{i}") for i in range(40)]
            + [record(40, now - dt.timedelta(minutes=5), "target"), record(41, now, "after")])
    config = live_tokens_pipeline(tmp_path, kafka.bootstrap, topic,
                                  [("t-target", "target", "billing", "a1", now - dt.timedelta(minutes=6))])

    spark = spark if engine == "spark" else None
    config = on_engine(config, engine)
    fast = run_trace(spark, config, Lookup("message_id", "target"), TraceOptions(since=now - dt.timedelta(hours=1)))
    (m,) = fast.messages
    assert m.verdict is Verdict.in_flight and [c.offset for c in m.copies] == [40]
    assert m.copies[0].token_present is True
    assert (fast.scans[0].records_read, fast.scans[0].full) == (2, False)

    dated = run_trace(spark, config, Lookup("message_id", "target"), TraceOptions(window=dt.timedelta(hours=1)))
    assert [c.offset for c in dated.messages[0].copies] == [40]
    assert dated.scans[0].records_read == 2 and "first sign" in dated.scans[0].bounds

    blind = run_trace(spark, config, Lookup("message_id", "old-3"), TraceOptions())
    assert blind.messages[0].verdict is Verdict.lost  # in flight, and its token is gone
    assert (blind.scans[0].records_read, blind.scans[0].full) == (42, True)
    assert "full scan" in blind.scans[0].bounds


def _all_message_ids(chaos: ChaosRun) -> list[str]:
    """Every message id the sample's topics carry."""
    import duckdb

    topics = chaos.config_path.parent / "topics"
    return [r[0] for r in duckdb.sql(
        f"SELECT DISTINCT decode(list_filter(headers, lambda h: h.key = 'eo-message-id')[-1].value) AS m "
        f"FROM read_parquet('{topics}/*/*.parquet') WHERE m IS NOT NULL ORDER BY m").fetchall()]


@pytest.mark.parametrize("lookup", ["every message", "token", "sink key"])
def test_trace_on_duckdb_reads_as_on_spark(spark, chaos, audited, lookup: str) -> None:
    """The same trace, to the JSON, on both engines: every message of the sample in one pass
    (copies, store and sink rows, blobs, findings with their evidence, verdicts, scans), and the
    lookups by token and by sink key."""
    now, report = audited
    zero = dt.timedelta(0)
    if lookup == "every message":
        ids = _all_message_ids(chaos)
        assert len(ids) > 40
        what = Lookup("message_id", ids[0], values=ids)
    elif lookup == "token":
        (orphan,) = [f for f in report.findings if f.code == "EO201"]
        what = Lookup("token_id", orphan.evidence[0]["token_id"])
    else:
        (e,) = _entries(chaos, "shared_blob_name")
        what = Lookup("sink", str(e["order"]), "order_id")
    options = TraceOptions(now=now, grace=zero, stuck_after=zero)
    on_spark = trace_spark(spark, chaos.config, what, options).to_dict()
    on_duckdb = trace_duckdb(chaos.config, what, options).to_dict()
    assert on_spark["messages"] and any(m["findings"] for m in on_spark["messages"])
    assert json.dumps(on_duckdb, sort_keys=True, default=str) == json.dumps(on_spark, sort_keys=True, default=str)
