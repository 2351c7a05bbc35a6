"""A message's verdict: it follows the catalog's findings that name the message (each code's
CodeInfo.verdict); the facts trace gathered only refine it (processed twice or about to be) and
say why in words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eoctl.findings import CATALOG, VerdictRule
from eoctl.trace.model import Entry, MessageTrace, Verdict, age_text, position

#: what a finding on a message makes of it, lowest rank first (held complete by a unit test: no
#: message with a critical finding gets a verdict that is not bad)
RULES: dict[str, VerdictRule] = dict(sorted(((code, info.verdict) for code, info in CATALOG.items() if info.verdict),
                                            key=lambda item: item[1].rank))
VERDICT_OF: dict[str, Verdict] = {code: Verdict(rule.verdict) for code, rule in RULES.items()}
#: the codes whose findings call a pending outbox entry stuck -> the evidence column naming it
STUCK_ENTRY = {code: info.stuck_entry for code, info in CATALOG.items() if info.stuck_entry}


class _Words(dict):
    """A reason's fields; one the evidence lacks reads as None, as the evidence's JSON would say."""

    def __missing__(self, key: str) -> str:
        return "None"


def _processed_copy(t: MessageTrace, evidence: dict[str, Any]) -> str:
    done = next((c for c in t.copies if c.processed), None)
    return (f"at {position(done)} by {done.consumer}" if done is not None else
            f"at {evidence.get('topic')}/{evidence.get('partition')}@{evidence.get('offset')}")


#: the trace's facts a reason may name beside the finding's evidence
FACTS: dict[str, Callable[[MessageTrace, dict[str, Any]], str]] = {"processed_copy": _processed_copy}


def _reason(rule: VerdictRule, t: MessageTrace, finding: dict[str, Any]) -> str:
    ev = finding["evidence"]
    words = _Words(ev)
    words.update({name: fact(t, ev) for name, fact in FACTS.items() if "{" + name + "}" in rule.reason})
    words.update(where=finding["where"], endpoint=finding["endpoint"])
    return rule.reason.format_map(words)


def decide_verdict(t: MessageTrace, hits: list[dict[str, Any]]) -> tuple[Verdict, list[str]]:
    """The verdict follows the message's findings (t.findings, from the checks); the facts only
    refine it (processed twice or about to be) and say why in words."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for f in t.findings:
        rows.setdefault(f["code"], []).append(f)
    for code, rule in RULES.items():
        if code not in rows:
            continue
        if rule.decide:
            return DECIDERS[rule.decide](t)
        if rule.each:
            return Verdict(rule.verdict), [_reason(RULES[f["code"]], t, f) for f in t.findings
                                           if f["code"] in RULES and RULES[f["code"]].each
                                           and RULES[f["code"]].verdict == rule.verdict]
        return Verdict(rule.verdict), [_reason(rule, t, rows[code][0])]

    processed = [c for c in t.copies if c.processed]
    waiting = [c for c in t.copies if not c.processed]
    stuck = {(f["endpoint"], f["evidence"].get(STUCK_ENTRY[f["code"]])) for f in t.findings if f["code"] in STUCK_ENTRY}

    def is_stuck(e: Entry) -> bool:
        return (e.endpoint, e.incoming_message_id) in stuck

    # in flight: not sent yet, waiting on the topic, or its processing's entry still pending
    if not t.copies:
        if t.emitted_by is not None:
            e = t.emitted_by
            return Verdict.stuck if is_stuck(e) else Verdict.in_flight, [f"not sent yet: pending in the outbox of {e.endpoint} "
                                       f"(entry {e.incoming_message_id}, {age_text(e.age_seconds)} old"
                                       + (", stuck: replay-outbox sends it" if is_stuck(e) else "") + ")"]
        if t.caused_entries:  # consumed, its copy gone from the topics read, its effects waiting
            e = t.caused_entries[0]
            return Verdict.stuck if is_stuck(e) else Verdict.in_flight, [
                f"no copy on the topics read, but its processing at {e.endpoint} left an outbox entry of "
                f"{e.outgoing_messages:,} message(s), pending {age_text(e.age_seconds)}"
                + (", stuck: replay-outbox sends them" if is_stuck(e) else "")]
        if t.tokens or t.intents:
            return Verdict.never_sent, ["the stores know it (tokens or intents) but no copy is on any topic and no "
                                        "pending entry holds it: left by an attempt that did not send it"]
        if t.sink_rows:
            return Verdict.processed_once, ["its effect is in the sink; no copy is left on the topics read"]
        return Verdict.not_found, ["no copy on the topics read, nothing in the stores or sinks"]
    if not processed:
        c = waiting[0]
        return Verdict.in_flight, [f"at {position(c)}, above {c.consumer}'s committed offset {c.committed_offset}; "
                                   f"its token is {'present' if c.token_present else 'unknown'}"]
    open_entries = [e for e in t.caused_entries if not _entry_sent(e, hits)]
    if open_entries:
        e = open_entries[0]
        return Verdict.stuck if is_stuck(e) else Verdict.in_flight, [f"consumed by {e.endpoint}, but the messages its processing emits are pending "
                                   f"in the outbox ({age_text(e.age_seconds)} old"
                                   + (", stuck: replay-outbox sends them" if is_stuck(e) else "") + ")"]
    reasons = [f"consumed by {processed[0].consumer} at {position(processed[0])}"]
    if len(t.copies) > 1:
        tokens = {c.token_id for c in t.copies}
        reasons.append(f"{len(t.copies)} copies with one token: redeliveries the consumer dropped" if len(tokens) == 1
                       else f"{len(t.copies)} copies under {len(tokens)} tokens on different topics or consumers")
    if t.sink_rows:
        reasons.append(f"one row in sink {t.sink_rows[0].sink}")
    for e in t.caused_entries:
        reasons.append(f"its entry at {e.endpoint} is still pending although its messages were sent")
    return Verdict.processed_once, reasons


#: what to do about a verdict no finding decides (one line); a finding's verdict takes its remedy
_ACTION = {
    Verdict.processed_once: "nothing: it was processed once",
    Verdict.never_sent: "nothing for this message; its leftover tokens and intents are garbage that gc-tokens collects",
    Verdict.not_found: "check the id, or widen what was read (--since, --until, --full-scan)",
    Verdict.not_judged: "fix the configuration the notes name (eoctl doctor names each table), then trace again",
    Verdict.in_flight: "wait for the consumer; if its offset does not move, check the consumer",
}


def what_to_do(t: MessageTrace) -> str:
    """The one line under a verdict: the remedy of the finding that decided it, else what the
    verdict asks (a stuck entry: replay it)."""
    codes = {f["code"] for f in t.findings}
    if t.verdict.bad:
        code = next((c for c in RULES if c in codes), None)
        remedy = CATALOG[code].remedy if code else None
        if remedy is not None:
            return remedy.fix
    if t.verdict is Verdict.stuck:
        remedy = CATALOG[next(iter(STUCK_ENTRY))].remedy
        return remedy.fix if remedy else _ACTION[Verdict.in_flight]
    return _ACTION.get(t.verdict, "")


def _several_tokens(t: MessageTrace) -> tuple[Verdict, list[str]]:
    """A message under several tokens: processed twice when two of its tokens were used up, else about to be.

    A token is used up when a copy under it was processed, or is gone from the consumer's store
    although a copy under it exists: only processing removes a token a record carries (gc never
    does), so a copy still in flight whose token is gone was processed before its offset was
    committed. A copy waiting under a token still present will be processed."""
    processed = [c for c in t.copies if c.processed]
    used = {c.token_id for c in processed} | {c.token_id for c in t.copies if c.token_present is False}
    if len(used) > 1:
        return Verdict.processed_twice, [f"{len(used)} different tokens were consumed: {', '.join(sorted(used))}"]
    ahead = [c for c in t.copies if not c.processed and c.token_present is not False and c.token_id not in used]
    if not ahead:  # EO102 groups copies per consumer and topic; these facts do not say more
        tokens = sorted({c.token_id for c in t.copies if c.token_id})
        return Verdict.will_be_processed_twice, [f"it travels under {len(tokens)} tokens: {', '.join(tokens)}"]
    c = ahead[0]
    if used:
        first = next(p for p in t.copies if p.token_id in used)
        before = (f"it was processed at {position(first)} under token {first.token_id}" if first.processed
                  else f"token {first.token_id} of its copy at {position(first)} was consumed")
    else:
        other = next((a.token_id for a in ahead if a.token_id != c.token_id), "?")
        before = f"another copy waits under token {other}"
    store = "which is present in its store" if c.token_present else "whose store eoctl does not read"
    return Verdict.will_be_processed_twice, [
        f"copy at {position(c)} waits above {c.consumer}'s committed offset under token {c.token_id}, {store}: the "
        f"consumer will process it; {before}"]


def _entry_sent(e: Entry, hits: list[dict[str, Any]]) -> bool:
    """Every outgoing message of a pending entry is on a topic read (with a token)."""
    sent = {h["message_id"] for h in hits if h["causation_id"] == e.incoming_message_id}
    return e.message_ids <= sent  # an entry with nothing to send has sent everything


#: the decisions a VerdictRule's `decide` names
DECIDERS: dict[str, Callable[[MessageTrace], tuple[Verdict, list[str]]]] = {"several_tokens": _several_tokens}
