"""The verdict rules of `eoctl trace`, on hand-made evidence (no servers): the paths the chaos
pipeline does not reach."""

from __future__ import annotations

import datetime as dt

from eoctl.trace import Copy, Entry, MessageTrace, SinkRow, TokenRow, TraceOptions, Verdict, _verdict

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
OPTIONS = TraceOptions(now=NOW, stuck_after=dt.timedelta(minutes=15))


def _copy(offset: int, token: str, *, processed: bool, present: bool | None) -> Copy:
    return Copy("billing", "orders", 0, offset, NOW - dt.timedelta(hours=1), token, "shop", str(offset), None,
                "a1", None, processed, 5, present)


def _verdict_of(**parts) -> tuple[Verdict, list[str]]:
    return _verdict(OPTIONS, MessageTrace("m1", Verdict.not_found, [], **parts), [], {})


def test_nothing_anywhere_is_not_found() -> None:
    verdict, _ = _verdict_of()
    assert verdict is Verdict.not_found and verdict.bad


def test_tokens_without_any_copy_or_entry_were_never_sent() -> None:
    token = TokenRow("billing", "t1", "m1", "billing", "a1", NOW - dt.timedelta(days=2))
    verdict, reasons = _verdict_of(tokens=[token])
    assert verdict is Verdict.never_sent and not verdict.bad
    assert "no copy" in reasons[0]


def test_a_pending_entry_holding_it_is_in_flight_and_says_when_stuck() -> None:
    entry = Entry("shop", "c1", None, "a1", None, NOW - dt.timedelta(hours=2), [{"message_id": "m1"}],
                  age_seconds=7200)
    verdict, reasons = _verdict_of(emitted_by=entry)
    assert verdict is Verdict.in_flight and "stuck" in reasons[0] and "2.0h" in reasons[0]
    entry.age_seconds = 60
    assert "stuck" not in _verdict_of(emitted_by=entry)[1][0]


def test_a_waiting_copy_whose_token_is_gone_is_lost_unless_processed_elsewhere() -> None:
    waiting = _copy(7, "t1", processed=False, present=False)
    assert _verdict_of(copies=[waiting])[0] is Verdict.lost
    # a redelivery of a message the consumer already processed is not a loss
    done = _copy(3, "t1", processed=True, present=False)
    assert _verdict_of(copies=[done, waiting])[0] is Verdict.processed_once
    # nor is one whose effect is in the sink
    row = SinkRow("billing", "invoices", {"source_message_id": "m1"})
    assert _verdict_of(copies=[waiting], sink_rows=[row])[0] is not Verdict.lost
    # with its token present it will be processed
    assert _verdict_of(copies=[_copy(7, "t1", processed=False, present=True)])[0] is Verdict.in_flight


def test_two_consumed_tokens_are_processed_twice_without_a_sink() -> None:
    copies = [_copy(3, "t1", processed=True, present=False), _copy(4, "t2", processed=True, present=False)]
    verdict, reasons = _verdict_of(copies=copies)
    assert verdict is Verdict.processed_twice and "2 different tokens" in reasons[0]
    # one token still present: only one was consumed so far
    copies[1].token_present = True
    assert _verdict_of(copies=copies)[0] is Verdict.processed_once


def test_a_copy_waiting_under_another_present_token_will_be_processed_twice() -> None:
    # processed once under t1 (consumed), a second copy in flight under a regenerated t2 still present
    done, waiting = _copy(3, "t1", processed=True, present=False), _copy(9, "t2", processed=False, present=True)
    verdict, reasons = _verdict_of(copies=[done, waiting])
    assert verdict is Verdict.will_be_processed_twice and verdict.bad
    assert "orders/0@9" in reasons[0] and "token t2" in reasons[0] and "token t1" in reasons[0]
    # two copies waiting under two present tokens: each will be let through
    other = _copy(10, "t3", processed=False, present=True)
    assert _verdict_of(copies=[waiting, other])[0] is Verdict.will_be_processed_twice
    # a regenerated copy whose token is gone is dropped as a duplicate
    gone = _copy(9, "t2", processed=False, present=False)
    verdict, reasons = _verdict_of(copies=[done, gone])
    assert verdict is Verdict.processed_once and "2 copies under 2 tokens" in reasons[1]
