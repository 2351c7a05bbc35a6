"""One trace: the stores first (they date the message and name more ids), then at most two scans of
the topics through the engine's TraceReader (eoctl.trace.reader), the sinks, the blobs, the
catalog's findings on the message (eoctl.trace.findings) and its verdict. Everything here is
engine-free; the reader is the configured engine's (eoctl.engine.run.open_trace_reader)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config
from eoctl.findings import names_message
from eoctl.stores.layout import refused
from eoctl.trace.blobs import blob_refs, check_blob
from eoctl.trace.findings import message_findings
from eoctl.trace.model import (
    Copy,
    Entry,
    Intent,
    Lookup,
    MessageTrace,
    TokenRow,
    TraceOptions,
    TraceResult,
    Verdict,
    age_text,
    utc,
)
from eoctl.trace.reader import Bounds, Clause, ScanNote, SinkRow
from eoctl.trace.sinks import find_by_sink_key, sink_config
from eoctl.trace.stores import StoreLookups
from eoctl.trace.timeline import timeline
from eoctl.trace.verdict import decide_verdict, what_to_do

if TYPE_CHECKING:
    from eoctl.incremental import IndexedRead
    from eoctl.trace.reader import TraceReader

# A producer's clock (record CreateTime) and the store's clock may disagree by this much.
_CLOCK_SKEW = dt.timedelta(minutes=15)


def run_trace(spark: Any, config: Config, lookup: Lookup, options: TraceOptions | None = None,
              progress: Callable[[str], None] | None = None) -> TraceResult:
    """Trace `lookup` on the configured engine (eoctl.engine.run.open_trace_reader; `spark`: a
    session, or a function that starts one, unused on DuckDB)."""
    from eoctl.engine.run import open_trace_reader

    step = progress or (lambda _m: None)
    reader = open_trace_reader(spark, config, step)
    step("tracing")
    try:
        return _run_trace(reader, config, lookup, options)
    finally:
        reader.close()


def _run_trace(reader: TraceReader, config: Config, lookup: Lookup, options: TraceOptions | None) -> TraceResult:
    from eoctl.sources import input_committed_offsets

    options = options or TraceOptions()
    stores = StoreLookups(config)
    misnamed = stores.layout.misnamed()
    notes: list[str] = stores.layout.notes(None, misnamed)
    sink_hits: list[SinkRow] = []
    ids: set[str] = set()
    token_ids: set[str] = set()
    if lookup.kind == "message_id":
        ids = set(lookup.values)
    elif lookup.kind == "token_id":
        token_ids = set(lookup.values)
    else:
        assert lookup.column is not None
        ids, sink_hits = find_by_sink_key(reader, config, lookup.column, lookup.value)
        if not ids:
            notes.append(f"no sink row has {lookup.column} = {lookup.value!r}")

    # what the stores know first: it dates the message and names more ids (the stores held for
    # these lookups only, never across a scan of the inputs)
    with stores.held():
        tokens = stores.tokens(message_ids=ids, token_ids=token_ids)
        ids |= {t.message_id for t in tokens if t.message_id and t.token_id in token_ids}
        entries = stores.entries(incoming=ids, outgoing=ids, tokens=token_ids)
    for e in entries:
        ids |= {m["message_id"] for m in e.outgoing if m.get("token_id") in token_ids and m.get("message_id")}
    if not ids and not token_ids:
        return TraceResult(lookup, [], [], notes)

    committed = {n: input_committed_offsets(config, ep.input) for n, ep in config.endpoints.items() if ep.input}
    index = None
    if not (options.since or options.until or options.full_scan):
        index, refused_index = reader.record_index(config)
        if refused_index:
            notes.append(f"{refused_index}: copies are read within a window instead")
    bounds = _auto_bounds(options, tokens, entries, ids, index)
    scans: list[ScanNote] = []
    searched = set(ids)
    # the stores' tokens of the message too: a record carrying one is what keeps it from being an orphan
    hits, note = reader.scan(config, bounds, committed,
                       [{"message_id": ids}, {"token_id": token_ids | {t.token_id for t in tokens}},
                        {"causation_id": ids}],
                       "copies of the message and the messages it caused")
    scans.append(note)
    ids |= {h["message_id"] for h in hits if h["token_id"] in token_ids and h["message_id"]}

    # second pass, within --window of the copies: copies of ids a token revealed, every attempt that
    # answered the same incoming message (EO302), and the records sharing a copy's (producer,
    # sequence) (EO103)
    new_ids = ids - searched
    mine = [h for h in hits if h["message_id"] in ids]
    parents = {(h["producer"], h["causation_id"]) for h in mine if h["producer"] and h["causation_id"]}
    sequences = {(h["producer"], h["sequence"]) for h in mine if h["producer"] and h["sequence"]}
    if new_ids or parents or sequences:
        times = [utc(h["timestamp"]) for h in mine if h["timestamp"] is not None]
        if options.since or options.until or options.full_scan or bounds.index is not None or not times:
            second = bounds  # an index lookup costs no more than a window's read
        else:
            second = Bounds(min(times) - options.window, max(times) + options.window,
                             f"within --window {age_text(int(options.window.total_seconds()))} of the copies")
        clauses: list[Clause] = [{"message_id": new_ids}, {"causation_id": new_ids},
                                 {"causation_id": {c for _, c in parents}, "producer": {p for p, _ in parents}}]
        clauses += [{"producer": {p}, "sequence": {q}} for p, q in sorted(sequences)]
        more, note = reader.scan(config, second, committed, clauses,
                           "other attempts for the same incoming message, records of the same sequence"
                           + (", copies by token" if new_ids else ""))
        scans.append(note)
        seen = {_where(h) for h in hits}
        hits += [h for h in more if _where(h) not in seen]

    all_tokens = {h["token_id"] for h in hits if h["message_id"] in ids and h["token_id"]} | token_ids
    with stores.held():
        tokens = stores.tokens(message_ids=ids, token_ids=all_tokens)
        causes = {h["causation_id"] for h in hits if h["message_id"] in ids and h["causation_id"]}
        entries = stores.entries(incoming=ids | causes, outgoing=ids, tokens=token_ids)
        blob_uris = {r["uri"] for h in hits if h["message_id"] in ids for r in blob_refs(h["blobs"])}
        intents = stores.intents(incoming=ids, refs=all_tokens | {t.token_id for t in tokens} | blob_uris)
        registered = {i.ref for i in intents if i.kind == "token" and i.ref} - all_tokens
        if registered:  # tokens an attempt processing the message made: present ones are its garbage
            tokens += stores.tokens(message_ids=set(), token_ids=registered)
    sink_rows, sink_schemas = reader.sink_rows(config, ids)
    for row in sink_hits:
        if row not in sink_rows:
            sink_rows.append(row)

    messages = [_assemble(config, options, m, hits, tokens, entries, intents, sink_rows) for m in sorted(ids)]
    found = [] if not messages else message_findings(config, options, hits, stores, sink_rows, sink_schemas, messages)
    refused_endpoints = refused(misnamed, list(config.endpoints))
    for m in messages:
        m.findings = [f for f in found if m.message_id in names_message(f["code"], f["evidence"])
                      and f["endpoint"] not in refused_endpoints]
        m.verdict, m.reasons = decide_verdict(m, hits)
        touched = _endpoints_of(m) & refused_endpoints
        if touched:  # what its tables say cannot be trusted: no verdict from them
            m.verdict, m.reasons = Verdict.not_judged, [
                f"{', '.join(sorted(touched))} not judged: the configuration and the store disagree on "
                "an endpoint's name (see the notes)"]
        m.unread = _unread(scans[0], m)
        if m.unread:
            m.reasons.append(m.unread)
        m.what_to_do = what_to_do(m)
        m.timeline = timeline(m)
    history_run = _attach_recorded_findings(config, messages, notes)
    return TraceResult(lookup, messages, scans, notes, history_run, [x.to_dict() for x in misnamed])


def _endpoints_of(m: MessageTrace) -> set[str]:
    """Every endpoint whose input, store or sink holds something of the message."""
    return ({c.consumer for c in m.copies} | {t.endpoint for t in m.tokens} | {e.endpoint for e in m.caused_entries}
            | ({m.emitted_by.endpoint} if m.emitted_by else set()) | {i.endpoint for i in m.intents}
            | {r.endpoint for r in m.sink_rows} | {b.producer for b in m.blobs})


def _where(h: dict[str, Any]) -> tuple:
    """A record as one consumer reads it (two endpoints may read one topic)."""
    return h["consumer"], h["topic"], h["partition"], h["offset"]


def _copy(h: dict[str, Any]) -> Copy:
    return Copy(h["consumer"], h["topic"], h["partition"], h["offset"], utc(h["timestamp"]), h["token_id"],
                h["producer"], h["sequence"], h["causation_id"], h["attempt_id"], h["blobs"], h["processed"],
                h.get("committed"))


#: verdicts no older copy can change: it adds a use of the message, never takes one away
_FINAL = {Verdict.processed_twice, Verdict.lost, Verdict.ghost, Verdict.not_judged}


def _unread(first: ScanNote, m: MessageTrace) -> str | None:
    """Why a verdict may not be the whole answer: the first pass read a window trace chose, and
    inputs hold older records it did not read, where a copy of the message could be (a copy
    processed before its token was made again: EO102)."""
    if not first.unread or m.verdict in _FINAL:
        return None
    return (f"as far as was read: {', '.join(first.unread)} hold older records than the window read, where a "
            "copy of the message could change this verdict; --full-scan reads them, and after an `eoctl audit "
            "--since-last` trace looks copies up in its record index instead")


def _auto_bounds(options: TraceOptions, tokens: list[TokenRow], entries: list[Entry], ids: set[str],
                 index: IndexedRead | None) -> Bounds:
    if options.since or options.until:
        return Bounds(options.since, options.until, "from --since/--until")
    if options.full_scan:
        return Bounds(None, None, "full scan (--full-scan)")
    if index is not None:
        return Bounds(None, None, f"the record index of audit run {index.base.run_id} ({index.records:,} records, "
                                  "every record that audit read) and the source past its end", index=index)
    # Tokens of a message and the entry holding it are made before any copy is sent.
    known = [t.created_at for t in tokens if t.message_id in ids and isinstance(t.created_at, dt.datetime)]
    known += [e.created_at for e in entries if isinstance(e.created_at, dt.datetime)
              and any(m.get("message_id") in ids for m in e.outgoing)]
    if not known:
        return Bounds(None, None, "full scan: nothing in the stores dates this message (give --since to narrow)")
    start = min(known) - options.window - _CLOCK_SKEW
    window = age_text(int(options.window.total_seconds()))
    return Bounds(start, None, f"from {start.isoformat(timespec='seconds')}: the stores' first sign of the "
                                f"message less --window {window} (--full-scan reads everything)", chosen=True)


def _assemble(config: Config, options: TraceOptions, message_id: str, hits: list[dict[str, Any]],
              tokens: list[TokenRow], entries: list[Entry], intents: list[Intent],
              sink_rows: list[SinkRow]) -> MessageTrace:
    """What trace found of one message: its copies, store rows, blobs and sink rows (no verdict yet)."""
    copies = sorted((_copy(h) for h in hits if h["message_id"] == message_id),
                    key=lambda c: (c.timestamp or dt.datetime.min.replace(tzinfo=dt.timezone.utc), c.topic,
                                   c.partition, c.offset))
    present = {(t.endpoint, t.token_id) for t in tokens}
    for c in copies:
        ep = config.endpoints[c.consumer]
        c.token_present = (c.consumer, c.token_id) in present if ep.store_of(ep.tokens) else None
    registered = {i.ref for i in intents if i.incoming_message_id == message_id and i.kind == "token"}
    my_tokens = [t for t in tokens if t.message_id == message_id or t.token_id in {c.token_id for c in copies}
                 or t.token_id in registered]
    emitted_by = next((e for e in entries if any(m.get("message_id") == message_id for m in e.outgoing)), None)
    caused_entries = [e for e in entries if e.incoming_message_id == message_id]
    for e in entries:
        if e is not None and isinstance(e.created_at, dt.datetime):
            e.age_seconds = int((options.now - e.created_at).total_seconds())
    caused: dict[tuple, dict[str, Any]] = {}
    for h in hits:
        if h["causation_id"] == message_id:
            k = (h["message_id"], h["topic"], h["attempt_id"])
            caused.setdefault(k, {"message_id": h["message_id"], "topic": h["topic"], "producer": h["producer"],
                                  "attempt_id": h["attempt_id"], "copies": 0})["copies"] += 1
    named = {(c.producer, r["uri"]): r.get("sha256") for c in copies for r in blob_refs(c.blobs)}
    if emitted_by is not None:
        for m in emitted_by.outgoing:
            if m.get("message_id") == message_id:
                header = (m.get("headers") or {}).get(config.protocol.headers.blobs)
                for r in blob_refs(header):
                    named.setdefault((emitted_by.endpoint, r["uri"]), r.get("sha256"))
    blobs = [check_blob(config, p, uri, sha) for (p, uri), sha in sorted(named.items(), key=str)]
    published = {b.name for b in blobs}
    # what its processing published: blobs on the messages it caused, sent or still pending
    published |= {r["uri"] for h in hits if h["causation_id"] == message_id for r in blob_refs(h["blobs"])}
    published |= {uri for e in caused_entries for uri in e.blob_uris}
    for i in intents:  # blobs an attempt processing the message prepared and nothing publishes
        if i.incoming_message_id == message_id and i.kind == "blob" and i.ref and i.ref not in published:
            blob = check_blob(config, i.endpoint, i.ref, None)
            blob.registered_only = True
            blobs.append(blob)
            published.add(blob.name)
    mine = {t.token_id for t in my_tokens} | {c.token_id for c in copies if c.token_id} | {b.name for b in blobs}
    my_intents = [i for i in intents if i.incoming_message_id == message_id or i.ref in mine]
    my_sink = [s for s in sink_rows
               if str(s.row.get(sink_config(config, s).message_id_column)) == message_id]
    return MessageTrace(message_id, Verdict.not_found, [], copies, my_tokens, emitted_by, caused_entries,
                        sorted(caused.values(), key=lambda x: (x["topic"], x["message_id"])), my_intents, blobs,
                        my_sink)


def _attach_recorded_findings(config: Config, messages: list[MessageTrace], notes: list[str]) -> str | None:
    """Findings of the last recorded audit whose evidence names the message, its tokens or blobs."""
    from eoctl import history
    from eoctl.errors import EoctlError
    from eoctl.trace.verdict import STUCK_ENTRY

    try:
        run, rows = history.evidence_of_last_run(config)
    except EoctlError as exc:
        notes.append(f"no recorded audit to compare with ({exc.one_line()})")
        return None
    texts = [(code, ep, row, json.dumps(row, default=str)) for code, ep, row in rows]
    for m in messages:
        needles = {m.message_id, *(c.token_id for c in m.copies if c.token_id), *(t.token_id for t in m.tokens),
                   *(b.name for b in m.blobs)}
        holder = m.emitted_by.incoming_message_id if m.emitted_by else None  # a stuck entry's finding names it
        m.recorded_findings = [{"code": code, "endpoint": ep, "evidence": row} for code, ep, row, text in texts
                               if any(n and n in text for n in needles)
                               or (holder is not None and code in STUCK_ENTRY and row.get(STUCK_ENTRY[code]) == holder)]
        m.findings_differ = findings_differ(m, run)
    return run


def findings_differ(m: MessageTrace, run: str) -> list[str]:
    """Why trace's own findings and the last recorded audit's differ for one message: a code the
    audit runs across many messages (a sink key, a sequence two messages share, a gap) is not one
    trace can see from this message's records; and either may be newer than the other."""
    from eoctl.findings import CATALOG

    own = {f["code"] for f in m.findings}
    recorded = {f["code"] for f in m.recorded_findings}
    out = []
    for code in sorted(recorded - own):
        if not CATALOG[code].message_scoped:
            out.append(f"{code}: in audit run {run}, not checked by trace: it is not about one message "
                       f"({CATALOG[code].title}); the audit's evidence names this message, a token or a blob of it")
        else:
            out.append(f"{code}: in audit run {run}, not found now: the audit compared records of other messages "
                       "trace does not read (the same producer sequence, token or blob), or the state has changed "
                       "since that run")
    for code in sorted(own - recorded):
        out.append(f"{code}: found now, not in audit run {run}: new since that run, or outside what it read")
    return out
