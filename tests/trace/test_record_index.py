"""trace on a live topic finds every copy that decides a verdict: a recorded audit's record index is
looked up (and the source read past its end); without one, a window trace chose itself says what it
left unread and never gives a verdict an older copy could change as the whole answer."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from eoctl import incremental
from eoctl.trace import Lookup, TraceOptions, Verdict
from tests.helpers.audits import audit_duckdb, audit_spark, trace_duckdb, trace_spark
from tests.helpers.chaos import settled

pytestmark = pytest.mark.integration


def _record(message: str, token: str, when: dt.datetime) -> dict:
    return {"value": b"v", "timestamp": int(when.timestamp() * 1000),
            "headers": [("eo-message-id", message.encode()), ("eo-token-id", token.encode())]}


def _regenerated(kafka, tmp_path: Path):
    """A message processed 3 days ago under token t-old (used up: gone from the store), sent again
    5 minutes ago under a token made again (t-new, in the store) and waiting above the committed
    offset: EO102, about to be processed twice. Ten other messages between them."""
    from tests.helpers.configs import live_tokens_pipeline
    from tests.helpers.kafka_data import commit_group_offsets, produce

    topic = f"regen-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic)
    now = dt.datetime.now(dt.timezone.utc)
    old = now - dt.timedelta(days=3)
    produce(kafka.bootstrap, topic, [_record("m-regen", "t-old", old)]
            + [_record(f"other-{i}", f"t-other-{i}", old + dt.timedelta(minutes=i + 1)) for i in range(10)]
            + [_record("m-regen", "t-new", now - dt.timedelta(minutes=5))])
    commit_group_offsets(kafka.bootstrap, "billing", topic, {0: 11})  # all but the second copy processed
    config = live_tokens_pipeline(tmp_path, kafka.bootstrap, topic,
                                  [("t-new", "m-regen", "billing", "a2", now - dt.timedelta(minutes=6))])
    return config, topic


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_a_copy_processed_before_its_token_was_made_again(spark, kafka, tmp_path: Path, engine: str) -> None:
    """Before: the default read started at the new token's creation, missed the processed copy and
    said IN FLIGHT, exit 0, where the audit says EO102. Now, without a record index, the verdict
    says the older records it left unread; with a recorded audit's index, the processed copy is
    found there (the source read only past the index's end) and the verdict is the audit's."""
    from tests.helpers.kafka_data import produce

    config, topic = _regenerated(kafka, tmp_path)
    session = spark if engine == "spark" else None

    def trace():
        if session is None:
            return trace_duckdb(config, Lookup("message_id", "m-regen"), TraceOptions(window=dt.timedelta(hours=1)))
        return trace_spark(session, config, Lookup("message_id", "m-regen"), TraceOptions(window=dt.timedelta(hours=1)))

    windowed = trace()
    (m,) = windowed.messages
    assert [c.offset for c in m.copies] == [11]  # the processed copy is older than the window read
    assert m.verdict is Verdict.in_flight
    assert m.unread and "billing" in m.unread and "--full-scan" in m.unread
    assert windowed.scans[0].unread == ["billing"] and windowed.scans[0].indexed == 0
    assert json.loads(json.dumps(windowed.to_dict(), default=str))["messages"][0]["unread"] == m.unread

    options = settled()
    options.keep_index = True
    report = (audit_duckdb(config, options, ["EO102"]) if session is None
              else audit_spark(session, config, options, ["EO102"]))
    run_id = incremental.record(session, config, report)
    assert [r["message_id"] for f in report.findings for r in f.evidence] == ["m-regen"]

    indexed = trace()
    (m,) = indexed.messages
    assert [c.offset for c in m.copies] == [0, 11]
    assert m.verdict is Verdict.will_be_processed_twice and m.unread is None
    assert "processed at" in m.reasons[0] and "t-old" in m.reasons[0]
    first = indexed.scans[0]
    assert (first.indexed, first.records_read, first.unread) == (12, 0, [])
    assert f"record index of audit run {run_id}" in first.bounds
    assert "EO102" in {f["code"] for f in m.findings}

    # a copy sent after the audit is read from the source, past the index's end
    produce(kafka.bootstrap, topic, [_record("m-regen", "t-new", dt.datetime.now(dt.timezone.utc))])
    later = trace()
    assert [c.offset for c in later.messages[0].copies] == [0, 11, 12]
    assert (later.scans[0].indexed, later.scans[0].records_read) == (12, 1)


def test_a_full_scan_or_a_final_verdict_is_never_hedged(kafka, tmp_path: Path) -> None:
    """--full-scan reads every record: nothing is left unread. A window that starts before every
    record leaves nothing unread either."""
    config, _topic = _regenerated(kafka, tmp_path)
    full = trace_duckdb(config, Lookup("message_id", "m-regen"), TraceOptions(full_scan=True))
    (m,) = full.messages
    assert m.verdict is Verdict.will_be_processed_twice and m.unread is None and full.scans[0].unread == []
    wide = trace_duckdb(config, Lookup("message_id", "m-regen"), TraceOptions(window=dt.timedelta(days=5)))
    assert wide.scans[0].unread == [] and wide.messages[0].verdict is Verdict.will_be_processed_twice


def test_a_damaged_record_index_is_never_read_and_said(kafka, tmp_path: Path) -> None:
    """A record index whose segment is gone is not looked up: trace says why in a note and reads a
    window, saying what it left unread, never a verdict from half an index."""
    import shutil

    config, _topic = _regenerated(kafka, tmp_path)
    options = settled()
    options.keep_index = True
    report = audit_duckdb(config, options, ["EO102"])
    run_id = incremental.record(None, config, report)
    (segment,) = report.index.segments
    shutil.rmtree(segment.path)
    result = trace_duckdb(config, Lookup("message_id", "m-regen"), TraceOptions(window=dt.timedelta(hours=1)))
    assert any(f"record index of run {run_id} is not as recorded" in n and "within a window" in n
               for n in result.notes), result.notes
    assert result.scans[0].indexed == 0 and result.messages[0].unread
