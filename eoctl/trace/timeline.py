"""A message's story in time order: what the stores, topics, blobs and sinks say of it."""

from __future__ import annotations

import datetime as dt
import json

from eoctl.trace.model import Event, MessageTrace, position


def timeline(t: MessageTrace) -> list[Event]:
    events: list[Event] = []
    for tok in t.tokens:
        events.append(Event(tok.created_at, f"token {tok.token_id} created in {tok.endpoint}'s store by attempt "
                                            f"{tok.attempt_id} (still present)"))
    for i in t.intents:
        events.append(Event(i.created_at, f"intent: {i.endpoint} attempt {i.attempt_id} registered {i.kind} {i.ref}"))
    if t.emitted_by is not None:
        e = t.emitted_by
        events.append(Event(e.created_at, f"outbox entry at {e.endpoint} (incoming {e.incoming_message_id}, attempt "
                                          f"{e.attempt_id}) holds it"))
        if e.tokens_committed_at:
            events.append(Event(e.tokens_committed_at, "tokens committed in that entry"))
    for c in t.copies:
        state = "processed" if c.processed else "in flight"
        token = "" if c.token_present is None else (" (token present)" if c.token_present else " (token gone)")
        cause = f" while processing {c.causation_id}" if c.causation_id else ""
        events.append(Event(c.timestamp, f"copy at {position(c)}: token {c.token_id}{token}, sent by {c.producer} (seq "
                                         f"{c.sequence}, attempt {c.attempt_id}){cause}; {state} by {c.consumer}"))
    for e in t.caused_entries:
        events.append(Event(e.created_at, f"its processing at {e.endpoint} (attempt {e.attempt_id}) left an outbox "
                                          f"entry of {e.outgoing_messages} message(s), still pending"))
    for m in t.caused_messages:
        events.append(Event(None, f"caused {m['message_id']} on {m['topic']} ({m['copies']} copies, attempt "
                                  f"{m['attempt_id']})"))
    for b in t.blobs:
        state = {None: "not checked", True: "present", False: "missing"}[b.present]
        if b.registered_only:
            state += "; prepared by its processing (an intent names it), published by no copy"
        elif b.present:
            state += ", sha256 " + {None: "not carried", True: "ok", False: "MISMATCH"}[b.sha256_ok]
        events.append(Event(None, f"blob {b.name} of {b.producer}: {state}"))
    for s in t.sink_rows:
        events.append(Event(None, f"sink {s.sink} ({s.endpoint}) row: {json.dumps(s.row, default=str, sort_keys=True)}"))
    for e in events:  # a store's time without a zone is UTC (docs/configuration.md): one clock for every event
        if isinstance(e.at, dt.datetime) and e.at.tzinfo is None:
            e.at = e.at.replace(tzinfo=dt.timezone.utc)
    floor = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    return sorted(events, key=lambda e: e.at if isinstance(e.at, dt.datetime) else floor)
