"""Trace of a message in (or processed into) a batch job's pending entry: the entry's messages are
read one at a time and only those naming a traced id are kept past SHOWN_MESSAGES; the verdict,
the blobs and the findings are those of the whole entry, as the audit gives them. (Time and memory
at a million messages: bench/large_entry_bench.py --trace.)"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import duckdb
import pytest

from eoctl.audit import select_codes
from eoctl.trace import Lookup, TraceOptions, Verdict
from tests.helpers.audits import audit_duckdb, trace_duckdb
from tests.helpers.chaos import add_batch_entry, recorded_copy, settled
from tests.helpers.trace_agreement import named_messages

pytestmark = pytest.mark.integration


def test_a_batch_entry_shows_the_traced_messages_and_judges_them_all(tmp_path: Path, monkeypatch) -> None:
    from eoctl.expr import outbox
    from eoctl.trace import stores

    chaos = recorded_copy(tmp_path)
    entry, attempt, out = add_batch_entry(chaos.store_target, 300)
    with duckdb.connect(chaos.store_target) as db:  # its processing prepared a blob a pending message publishes
        db.execute("insert into billing.eo_intents values (?, 'billing', ?, ?, 'blob', 'batch-7.txt', now())",
                   [str(uuid.uuid4()), entry, attempt])
    monkeypatch.setattr(outbox, "STREAMED_ENTRY", 1_000)  # read as a batch's entry is, by the audit and trace
    options = dataclasses.replace(settled(), evidence_rows=10_000)
    report = audit_duckdb(chaos.config, options, select_codes(None, None))
    ids = [entry, out[7]["message_id"], out[150]["message_id"]]
    trace_options = TraceOptions(now=options.now, grace=options.grace, stuck_after=options.stuck_after,
                                 full_scan=True)

    def trace():
        result = trace_duckdb(chaos.config, Lookup("message_id", ids[0], values=ids), trace_options)
        return {m.message_id: m for m in result.messages}, result

    whole, _ = trace()  # 300 messages: every one shown
    monkeypatch.setattr(stores, "SHOWN_MESSAGES", 50)
    traced, result = trace()

    processed_into = traced[entry]
    assert processed_into.verdict is Verdict.stuck  # its copy is on no topic read: no `not found`
    (caused,) = processed_into.caused_entries
    assert (caused.outgoing, caused.outgoing_messages) == ([out[7], out[150]], 300)  # the two traced
    assert caused.message_ids == {m["message_id"] for m in out}
    assert not [b.name for b in processed_into.blobs if b.registered_only]  # batch-7.txt is published
    assert "entry of 300 message(s)" in " ".join(e.what for e in processed_into.timeline)
    for i in (7, 150):
        held = traced[out[i]["message_id"]]
        assert held.verdict is Verdict.stuck
        assert held.emitted_by.outgoing_messages == 300 and out[i] in held.emitted_by.outgoing
    assert len(whole[out[7]["message_id"]].emitted_by.outgoing) == 300
    alone = trace_duckdb(chaos.config, Lookup("message_id", out[150]["message_id"]), trace_options).messages[0]
    assert alone.emitted_by.outgoing == [out[150]]

    # what is shown changes no answer, and the answer is the audit's
    named = named_messages(report)
    for message_id in ids:
        assert traced[message_id].verdict is whole[message_id].verdict
        assert traced[message_id].findings == whole[message_id].findings
        assert {f["code"] for f in traced[message_id].findings} == named[message_id]
    assert "EO301" in named[entry]

    written = result.to_dict()
    entry_json = written["messages"][[m["message_id"] for m in written["messages"]].index(out[7]["message_id"])]
    assert set(entry_json["emitted_by"]) >= {"outgoing", "outgoing_messages"}
    assert not {"message_ids", "blob_uris"} & set(entry_json["emitted_by"])  # read, not written
    json.dumps(written)
