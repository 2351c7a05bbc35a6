"""The verdict rules of `eoctl trace`, on hand-made evidence (no servers): the paths the chaos
pipeline does not reach."""

from __future__ import annotations

import datetime as dt

from eoctl.findings import CATALOG, Severity
from eoctl.trace import Copy, Entry, MessageTrace, SinkRow, TokenRow, Verdict
from eoctl.trace.verdict import VERDICT_OF, decide_verdict

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)


def _copy(offset: int, token: str, *, processed: bool, present: bool | None) -> Copy:
    return Copy("billing", "orders", 0, offset, NOW - dt.timedelta(hours=1), token, "shop", str(offset), None,
                "a1", None, processed, 5, present)


def _verdict_of(*codes: str, **parts) -> tuple[Verdict, list[str]]:
    """The verdict of a message with these facts and findings of `codes` (the checks' output,
    here made by hand: the rules that map one to the other are what is tested)."""
    findings = parts.pop("findings", [_finding(code) for code in codes])
    return decide_verdict(MessageTrace("m1", Verdict.not_found, [], findings=findings, **parts), [])


def _finding(code: str, **evidence) -> dict:
    return {"code": code, "endpoint": "billing", "where": "orders", "evidence": {"message_id": "m1", **evidence}}


def test_nothing_anywhere_is_not_found() -> None:
    verdict, _ = _verdict_of()
    assert verdict is Verdict.not_found and not verdict.bad  # exit 5, not 1


def test_tokens_without_any_copy_or_entry_were_never_sent() -> None:
    token = TokenRow("billing", "t1", "m1", "billing", "a1", NOW - dt.timedelta(days=2))
    verdict, reasons = _verdict_of(tokens=[token])
    assert verdict is Verdict.never_sent and not verdict.bad
    assert "no copy" in reasons[0]


def test_a_pending_entry_holding_it_is_in_flight_or_stuck_when_eo301_names_its_entry() -> None:
    entry = Entry("shop", "c1", None, "a1", None, NOW - dt.timedelta(hours=2), [{"message_id": "m1"}],
                  age_seconds=7200)
    stuck = {"code": "EO301", "endpoint": "shop", "where": "eo_outbox",
             "evidence": {"incoming_message_id": "c1", "message_ids": ["m1"]}}
    verdict, reasons = _verdict_of(emitted_by=entry, findings=[stuck])
    assert verdict is Verdict.stuck and verdict.bad and "stuck" in reasons[0] and "2.0h" in reasons[0]
    # the age alone does not make it stuck: the check decides (its --stuck-after)
    calm, reasons = _verdict_of(emitted_by=entry)
    assert calm is Verdict.in_flight and "stuck" not in reasons[0]


def test_a_message_whose_copy_is_gone_but_whose_processing_entry_waits_is_in_flight_or_stuck() -> None:
    """No copy left on the topics read (retention took it), and the entry its processing left is
    pending: it was consumed and its effects wait, which is no `not found`."""
    entry = Entry("shop", "m1", None, "a1", None, NOW - dt.timedelta(hours=2), [], 5000, age_seconds=7200,
                  message_ids=frozenset(f"out-{i}" for i in range(5000)))
    stuck = {"code": "EO301", "endpoint": "shop", "where": "eo_outbox", "evidence": {"incoming_message_id": "m1"}}
    verdict, reasons = _verdict_of(caused_entries=[entry], findings=[stuck])
    assert verdict is Verdict.stuck and "5,000 message(s)" in reasons[0] and "replay-outbox" in reasons[0]
    calm, reasons = _verdict_of(caused_entries=[entry])
    assert calm is Verdict.in_flight and "pending 2.0h" in reasons[0] and "stuck" not in reasons[0]


def test_every_critical_finding_on_a_message_gives_a_verdict_to_act_on() -> None:
    """The rule that keeps trace and the catalog in step: a code that names a message and is
    critical has a verdict, and that verdict is bad, whatever the facts beside it."""
    critical = {c for c, info in CATALOG.items() if info.message_scoped and info.severity is Severity.CRITICAL}
    assert critical == set(VERDICT_OF)
    calm = dict(copies=[_copy(3, "t1", processed=True, present=False)],
                sink_rows=[SinkRow("billing", "invoices", {"source_message_id": "m1"})])
    for code in sorted(critical):
        verdict, reasons = _verdict_of(code, **calm)
        assert verdict.bad and reasons, code
    # and an error or warning alone does not change the verdict
    assert _verdict_of("EO101", "EO103", "EO203", **calm)[0] is Verdict.processed_once


def test_eo202_is_lost_with_the_position_and_token() -> None:
    waiting = _copy(7, "t1", processed=False, present=False)
    lost = _finding("EO202", topic="orders", partition=0, offset=7, token_id="t1")
    verdict, reasons = _verdict_of(copies=[waiting], findings=[lost])
    assert verdict is Verdict.lost and "orders/0@7" in reasons[0] and "t1" in reasons[0]
    # without the finding (a processed copy elsewhere, its effect in a sink: the check said no) it is not
    done = _copy(3, "t1", processed=True, present=False)
    assert _verdict_of(copies=[done, waiting])[0] is Verdict.processed_once
    assert _verdict_of(copies=[_copy(7, "t1", processed=False, present=True)])[0] is Verdict.in_flight


def test_blob_findings_are_lost_and_name_every_blob() -> None:
    findings = [_finding("EO402", name="a.bin"), _finding("EO403", name="b.bin")]
    verdict, reasons = _verdict_of(copies=[_copy(3, "t1", processed=True, present=False)], findings=findings)
    assert verdict is Verdict.lost
    assert "a.bin" in reasons[0] and "does not exist" in reasons[0] and "b.bin" in reasons[1]


def test_ghost_and_applied_twice_say_which_attempt_and_sink() -> None:
    ghost = _finding("EO302", producer="shop", causation_id="c9", ghost_attempt="a2", committed_attempt="a3",
                     message_ids=["m1"])
    verdict, reasons = _verdict_of(findings=[ghost, _finding("EO501", rows=2)])
    assert verdict is Verdict.ghost and "a2" in reasons[0] and "a3" in reasons[0] and "c9" in reasons[0]
    verdict, reasons = _verdict_of("EO501", findings=[{**_finding("EO501", rows=3), "where": "invoices"}])
    assert verdict is Verdict.processed_twice and "3 rows in sink invoices" in reasons[0]


def test_two_used_tokens_are_processed_twice() -> None:
    """A token is used up when a copy under it was processed, or when it is gone although a copy
    under it is still in flight (only processing removes a token a record carries)."""
    copies = [_copy(3, "t1", processed=True, present=False), _copy(4, "t2", processed=True, present=False)]
    verdict, reasons = _verdict_of("EO102", copies=copies)
    assert verdict is Verdict.processed_twice and "2 different tokens" in reasons[0]
    copies[1].token_present = True  # processed, and its token leaked: processed all the same
    assert _verdict_of("EO102", copies=copies)[0] is Verdict.processed_twice
    gone = _copy(9, "t2", processed=False, present=False)  # processed before its offset was committed
    assert _verdict_of("EO102", copies=[copies[0], gone])[0] is Verdict.processed_twice


def test_a_copy_waiting_under_another_present_token_will_be_processed_twice() -> None:
    # processed once under t1 (consumed), a second copy in flight under a regenerated t2 still present
    done, waiting = _copy(3, "t1", processed=True, present=False), _copy(9, "t2", processed=False, present=True)
    verdict, reasons = _verdict_of("EO102", copies=[done, waiting])
    assert verdict is Verdict.will_be_processed_twice and verdict.bad
    assert "orders/0@9" in reasons[0] and "token t2" in reasons[0] and "token t1" in reasons[0]
    # two copies waiting under two present tokens: each will be let through
    other = _copy(10, "t3", processed=False, present=True)
    verdict, reasons = _verdict_of("EO102", copies=[waiting, other])
    assert verdict is Verdict.will_be_processed_twice and "another copy waits under token t3" in reasons[0]


def test_eo102s_title_says_what_traces_verdicts_on_its_messages_say() -> None:
    """One vocabulary: trace calls an EO102 message processed twice (two tokens used up) or will be
    processed twice; the finding's title must not promise only the second."""
    title = CATALOG["EO102"].title
    assert VERDICT_OF["EO102"] is Verdict.will_be_processed_twice
    assert Verdict.processed_twice.value in title and "about to be" in title, title
