"""eoctl.trace.run on the DuckDB engine: the findings trace gives every message are those the audit's
findings name it in (its own check loop over the message's rows), and a lookup that finds nothing
says so and what to widen."""

from __future__ import annotations

import pytest

from eoctl.audit import select_codes
from eoctl.trace import Lookup, TraceOptions
from tests.helpers.audits import audit_duckdb, trace_duckdb
from tests.helpers.chaos import recorded_copy, settled
from tests.helpers.trace_agreement import assert_agree, named_messages


@pytest.mark.integration
def test_trace_names_every_finding_the_audit_names_for_each_message(tmp_path) -> None:
    import dataclasses

    config = recorded_copy(tmp_path).config
    options = dataclasses.replace(settled(), evidence_rows=10_000)
    report = audit_duckdb(config, options, select_codes(None, None))
    named = named_messages(report)
    assert len(named) >= 5
    ids = sorted(named)
    result = trace_duckdb(config, Lookup("message_id", ids[0], values=ids),
                          TraceOptions(now=options.now, grace=options.grace, stuck_after=options.stuck_after,
                                       full_scan=True))
    assert {m.message_id for m in result.messages} == set(ids)
    assert_agree(report, result)


@pytest.mark.integration
def test_a_message_no_store_or_topic_holds_is_no_message(tmp_path) -> None:
    config = recorded_copy(tmp_path).config
    from eoctl.trace import Verdict

    result = trace_duckdb(config, Lookup("message_id", "no-such-message"), TraceOptions())
    (missing,) = result.messages
    assert missing.verdict is Verdict.not_found and not missing.copies and not missing.findings
    assert "--full-scan" in missing.what_to_do
    by_sink = trace_duckdb(config, Lookup("sink", "999999", "order_id"), TraceOptions())
    assert by_sink.messages == [] and "no sink row has order_id = '999999'" in by_sink.notes


@pytest.mark.integration
def test_a_processed_message_whose_sink_row_is_gone_is_lost_when_the_sink_holds_every_message(tmp_path) -> None:
    """EO503 in trace: shipping's shipments sink made `every_message`, one processed message's row
    deleted: the audit names it, and trace gives it the finding and the verdict lost (the others
    the audit names still agree)."""
    import dataclasses

    import duckdb

    from eoctl.config import load_config
    from eoctl.trace import Verdict

    chaos = recorded_copy(tmp_path)
    text = chaos.config_path.read_text()
    chaos.config_path.write_text(text.replace('watermark_column = "applied_at"',
                                              'watermark_column = "applied_at"\nevery_message = true'))
    config = load_config(chaos.config_path)
    options = dataclasses.replace(settled(), evidence_rows=10_000)
    assert not [f for f in audit_duckdb(config, options, ["EO503"]).findings]
    with duckdb.connect(chaos.store_target) as db:
        (gone,) = db.execute("select source_message_id from shipping.shipments where source_message_id in "
                             "(select source_message_id from shipping.shipments group by 1 having count(*) = 1) "
                             "order by 1 limit 1").fetchone()
        db.execute("delete from shipping.shipments where source_message_id = ?", [gone])
    report = audit_duckdb(config, options, select_codes(None, None))
    assert [r["message_id"] for f in report.findings if f.code == "EO503" for r in f.evidence] == [gone]
    result = trace_duckdb(config, Lookup("message_id", gone),
                          TraceOptions(now=options.now, grace=options.grace, stuck_after=options.stuck_after,
                                       full_scan=True))
    (message,) = result.messages
    assert message.verdict is Verdict.lost and "EO503" in {f["code"] for f in message.findings}
    named = named_messages(report)
    ids = sorted(named)
    everyone = trace_duckdb(config, Lookup("message_id", ids[0], values=ids),
                            TraceOptions(now=options.now, grace=options.grace, stuck_after=options.stuck_after,
                                         full_scan=True))
    assert_agree(report, everyone)
