"""The findings model: the catalog of codes and the typed results an audit returns.

JSON schema `eoctl.audit/v1` (documented in docs/commands.md): stable codes, severities and field names;
fields are only ever added within a major version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

SCHEMA = "eoctl.audit/v1"


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    CRITICAL = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.upper()]
        except KeyError:
            from eoctl.errors import UsageError

            raise UsageError(f"severity {text!r}: expected info, warning, error or critical") from None


@dataclass(frozen=True)
class Remedy:
    """What a finding means and what to do about it, declared with its code (docs/findings.md is
    generated from these). `command`: the first eoctl command to run; `{column}` is filled from
    the finding's first evidence row, `{endpoint}` from the finding; a value it lacks stays an
    UPPERCASE placeholder."""

    cause: str
    risk: str
    fix: str
    verify: str
    command: str = ""


@dataclass(frozen=True)
class VerdictRule:
    """What a finding on one message makes of that message's trace verdict (eoctl.trace.verdict).
    `verdict`: a value of eoctl.trace.model.Verdict; `rank`: the lowest decides when several
    findings name the message; `reason`: why, in words: a template over the finding's evidence,
    its `where` and `endpoint`, and the trace's facts (eoctl.trace.verdict.FACTS); `each`: one
    reason per finding with `each` of the same verdict (every blob at fault); `decide`: a function
    of eoctl.trace.verdict.DECIDERS that decides from the trace's facts instead (processed twice,
    or about to be)."""

    verdict: str
    rank: int
    reason: str = ""
    each: bool = False
    decide: str = ""


@dataclass(frozen=True)
class CodeInfo:
    """One finding code, declared once: `--select`, the findings history's item identity and the
    findings trace reports for a message read it from here."""

    code: str
    area: str
    severity: Severity
    title: str
    #: evidence columns that name what was found (never ages or counts): the history's item
    #: identity. Empty: every column except the aggregates (sinks, whose columns are the sink's own).
    identity: tuple[str, ...] = ()
    #: evidence columns that name the message(s) a finding concerns (a message id, or a list of
    #: them); empty: not about one message (a gap, a partition, a transaction, a sink key). `eoctl
    #: trace` runs the codes that have them over one message's rows and keeps the rows naming it.
    names_message: tuple[str, ...] = ()
    remedy: Remedy | None = None
    #: what is found, as the table of codes in docs/commands.md says it (generated from here, like the guide)
    summary: str = ""
    #: what looks alike but is not reported (that table's "not a finding" column)
    not_a_finding: str = ""
    #: what the check reads besides the records and store tables (INPUTS): an engine opens only
    #: what the selected codes need (inputs_of)
    inputs: tuple[str, ...] = ()
    #: the check: "module.function" of eoctl.expr giving its evidence per endpoint
    #: (eoctl.expr.catalog.CHECKS resolves it; only an engine imports the expressions)
    check: str = ""
    #: tables other checks read too (eoctl.expr.catalog.SHARED), computed once per run, in that order
    shared: tuple[str, ...] = ()
    #: in an incremental audit, the records it is given (a family of eoctl.expr.incremental);
    #: empty: it reads no records (store tables, sinks, listings, offsets)
    family: str = ""
    #: in an incremental audit, the view of a narrowed sink it reads ("by_message", "by_key": a
    #: `*_view` of eoctl.expr.sink_states)
    narrowed_view: str = ""
    #: what its finding on a message makes of the message's trace verdict
    verdict: VerdictRule | None = None
    #: the evidence column naming a pending outbox entry (its incoming message id) that the finding
    #: calls stuck: trace says so and gives this code's remedy
    stuck_entry: str = ""
    #: the run's `scanned` count that its evidence rows add to (read by the scan, seen by no other check)
    scanned_as: str = ""

    @property
    def message_scoped(self) -> bool:
        return bool(self.names_message)

    @property
    def anchor(self) -> str:
        """The stable link to this code's section of the findings guide."""
        return f"docs/findings.md#{self.code.lower()}"


_C = CodeInfo
_R = Remedy
_V = VerdictRule
CATALOG: dict[str, CodeInfo] = {
    c.code: c
    for c in [
        _C("EO101", "topics", Severity.INFO, "redelivered copy: same message id and token at another offset",
           ("topic", "message_id", "token_id"), ("message_id",),
           check="topics.redelivered", shared=("repeated_keys", "repeated_messages"), family="messages",
           summary='same message id and token at two offsets (redelivery)',
           remedy=_R("the consumer received a record again (a rebalance, a retry before the offset was committed): at-least-once delivery",
                     "none: the token is gone after the first processing, so the copy is dropped as a duplicate; "
                     "many of them cost throughput",
                     "nothing to repair; if they grow, look at the consumer group's rebalances and commit interval",
                     "the trace's verdict is processed once", "eoctl trace {message_id}")),
        _C("EO102", "topics", Severity.CRITICAL, "one message id under several tokens: processed twice, or about to be",
           ("topic", "message_id"), ("message_id",),
           check="topics.under_several_tokens", shared=("repeated_keys", "repeated_messages"), family="messages",
           verdict=_V("will be processed twice", rank=2, decide="several_tokens"),
           summary='one message id under several tokens: processed twice',
           remedy=_R("the sender dispatched the same message again with a newly generated token (a token regenerated "
                     "after a crash, or a resend that bypassed the outbox)",
                     "each token authorizes one processing: the receiver processes the message once per token",
                     "trace it to see which copies are processed and which are in flight; while a copy is in flight, "
                     "delete its extra token from the receiver's token store (keep the one already processed or the "
                     "first); then fix the sender to resend through its outbox (eoctl replay-outbox), never with a "
                     "new token",
                     "the trace's verdict is processed once and `eoctl audit --select EO102` finds nothing new",
                     "eoctl trace {message_id}")),
        _C("EO103", "topics", Severity.ERROR, "one (producer, sequence) on several message ids",
           ("topic", "producer", "sequence"), ("message_ids",),
           check="topics.sequence_reused", shared=("reused_sequence_keys",), family="sequences",
           summary='one (producer, sequence) on several message ids',
           remedy=_R("a producer used one sequence number for different messages (restarted without its sequence state, or "
                     "two instances share one producer name)",
                     "a consumer that deduplicates by (producer, sequence) drops all but one of them: loss",
                     "give every producer instance a name of its own or keep its sequence across restarts; trace the "
                     "messages to see whether each reached its sink",
                     "each message's trace shows it processed; later audits find no new EO103",
                     "eoctl trace {message_ids}")),
        _C("EO104", "topics", Severity.WARNING, "gap in a producer's sequence",
           ("topic", "producer", "missing_from", "missing_to"),
           check="topics.sequence_gaps", shared=("sequence_ranges",),
           summary="gap in a producer's sequence",
           not_a_finding='sequences a pending outbox entry still holds',
           remedy=_R("sequence numbers of a producer never reached the topic: not sent yet (a stuck outbox entry), lost "
                     "before the topic, or removed by retention",
                     "the missing messages' effects are missing downstream",
                     "look for the producer's stuck outbox entries and replay them; if retention removed the records "
                     "(EO204), recover them from the producer's side",
                     "the gap closes in a later audit", "eoctl replay-outbox --endpoint {producer}")),
        _C("EO105", "topics", Severity.ERROR, "record without usable protocol headers",
           ("topic", "partition", "offset"), ("message_id",),
           check="topics.without_protocol", family="problems",
           summary='record without usable protocol headers: missing, not UTF-8, unparsable `eo-sequence`, malformed `eo-blobs`',
           remedy=_R("a record lacks the protocol headers (eo-message-id, eo-token-id, ...): a producer outside the "
                     "protocol, or a header mapping in the configuration that does not match the pipeline's names",
                     "no deduplication, tracing or loss detection for these records",
                     "check the endpoint's header mapping against what `eoctl sources scan` reports as header "
                     "coverage; fix the producer that writes records without them",
                     "`eoctl sources scan` shows full header coverage", "eoctl sources scan {endpoint}")),
        _C("EO106", "topics", Severity.ERROR, "archive line that is not a record: no check saw it",
           ("file", "line"),
           check="topics.undecodable_archive_lines", scanned_as="undecodable",
           summary='a line of a JSON topic archive that is not a record (malformed JSON, a field of the wrong type, no topic, partition or offset): named by file and line; `scanned.undecodable` counts them',
           inputs=('undecodable',),
           remedy=_R("a line of a JSON topic archive is not a record (a truncated or corrupt file)",
                     "no check saw that record: findings about it are missing",
                     "restore the file from a backup or archive that range of the topic again; or move the file away "
                     "if the range is archived elsewhere",
                     "`eoctl audit --select EO106` finds nothing", "eoctl sources scan {endpoint}")),
        # registered_by_message: the incoming message whose processing registered the token or blob
        _C("EO201", "tokens", Severity.WARNING, "orphan token past the grace period (gc candidate)",
           ("token_id",), ("message_id", "registered_by_message"),
           check="tokens.orphan_tokens", family="tokens",
           summary='orphan token: on no record, in no pending entry, older than `--grace`',
           not_a_finding='young tokens; tokens a pending entry holds',
           remedy=_R("a token is on no record in flight and in no pending outbox entry, older than the grace period: "
                     "its attempt never committed, or its message was never sent",
                     "none for correctness; the token store grows",
                     "collect them: the plan first, then --execute (from cron: gc-tokens --execute)",
                     "`eoctl reconcile-tokens` counts no garbage past the grace period", "eoctl gc-tokens")),
        _C("EO202", "tokens", Severity.CRITICAL, "in-flight record without token or effect: silent loss",
           ("topic", "partition", "offset"), ("message_id",),
           check="tokens.silent_loss", family="messages", narrowed_view="by_message",
           verdict=_V("lost", rank=5, reason="in flight at {topic}/{partition}@{offset} but its token {token_id} is gone: the "
                      "consumer will drop it as a duplicate, and its effect is in no sink"),
           summary='in-flight record whose token is gone and whose effect is nowhere: silent loss',
           not_a_finding='copies of a processed message; messages with a pending entry',
           inputs=('sinks',),
           remedy=_R("a record in flight has no token in the receiver's store and no effect in the sink: the token was "
                     "removed before the effect committed (a manual clean-up, a gc that ignored this record)",
                     "the receiver will drop the record as a duplicate: its effect is lost",
                     "before the consumer reaches the offset, put the token back: if a gc run removed it, "
                     "`eoctl gc-tokens --restore RUN_ID --execute` (the run id is in `eoctl gc-tokens` JSON and the "
                     "run log); otherwise insert the token id of the evidence into the receiver's token store",
                     "the trace's verdict is in flight with its token, then processed once",
                     "eoctl trace {message_id}")),
        _C("EO203", "tokens", Severity.WARNING, "token of a processed record still present",
           ("token_id",), ("message_id",),
           check="tokens.leaked_tokens", family="tokens",
           summary='token of a processed record still present',
           not_a_finding='tokens a pending entry holds',
           remedy=_R("the receiver processed a record but did not remove its token (a crash between the effect and the "
                     "token's removal)",
                     "a redelivered copy would be processed again: a duplicate effect",
                     "confirm the effect is in the sink (trace), then delete the token from the receiver's store; "
                     "`eoctl reconcile-tokens` lists every leaked token",
                     "`eoctl reconcile-tokens` counts no leaked tokens", "eoctl trace {message_id}")),
        _C("EO204", "tokens", Severity.CRITICAL, "committed offset below the log start offset: records lost",
           ("topic", "partition"),
           check="tokens.committed_below_log_start",
           summary='committed offset below the log start offset',
           inputs=('log_starts',),
           remedy=_R("the consumer group's committed offset is below the partition's log start offset: retention removed "
                     "records the consumer never read",
                     "those records' effects are lost",
                     "recover the messages from their producers' side (outbox, source data); raise retention or fix the "
                     "consumer's lag; then move the group's offset to the log start (kafka-consumer-groups.sh "
                     "--reset-offsets --to-earliest)",
                     "`eoctl audit --select EO204` finds nothing", "eoctl sources scan {endpoint}")),
        # an entry concerns the message it processes and the messages it holds to send
        _C("EO301", "outbox", Severity.ERROR, "outbox entry pending longer than the threshold (replay candidate)",
           ("endpoint", "incoming_message_id"), ("incoming_message_id", "message_ids"),
           check="outbox.stuck_entries", stuck_entry="incoming_message_id",
           summary='outbox entry pending longer than `--stuck-after`',
           not_a_finding='fresh entries',
           remedy=_R("an outbox entry has been pending longer than --stuck-after: its endpoint crashed or gave up before "
                     "dispatching its messages",
                     "its outgoing messages are delayed, and its incoming message's effects are not visible downstream",
                     "replay it: the plan first, then --execute; the replay never generates new tokens",
                     "`eoctl audit --select EO301` no longer lists the entry",
                     "eoctl replay-outbox --endpoint {endpoint}")),
        _C("EO302", "outbox", Severity.CRITICAL, "ghost message: sent by an attempt that never committed",
           ("topic", "producer", "causation_id", "ghost_attempt"), ("message_ids",),
           check="outbox.ghost_messages", family="causations",
           verdict=_V("ghost", rank=0, reason="sent by attempt {ghost_attempt} of {producer}, which never committed; "
                      "attempt {committed_attempt} answered the same incoming message {causation_id}"),
           summary='ghost: a producer sent for one incoming message under an attempt that did not commit: the committed one is named by the pending entry (which may not have sent yet), else it is the last to send, across every topic eoctl reads',
           remedy=_R("a message was sent by an attempt that never committed its outbox entry (dispatched before the "
                     "commit, or a zombie instance)",
                     "the receiver may apply an effect the sender rolled back",
                     "trace the ghost messages; where a receiver applied one, compensate that effect by hand; fix the "
                     "sender to dispatch only committed entries",
                     "each ghost's trace shows no effect, or a compensated one", "eoctl trace {message_ids}")),
        # the table's upkeep, not a message's fate: trace does not run it
        _C("EO303", "outbox", Severity.WARNING, "sent outbox rows kept past their retention",
           ("endpoint", "incoming_message_id"),
           check="outbox.sent_past_retention",
           summary='sent rows of an outbox that keeps them (`sent_column`), older than its `retention` by `updated_at`',
           not_a_finding='pending rows (EO301), sent rows within the retention, outboxes without `retention`',
           inputs=("sent_outbox",),
           remedy=_R("the outbox keeps a row once its messages are sent, and nothing removed the rows older than the "
                     "retention: the cleanup job is missing, failing (an unbounded delete that times out), or "
                     "behind",
                     "the table grows for ever: inserts, the dispatcher's scans and backups slow down, and a late "
                     "cleanup becomes one huge delete that locks the table",
                     "delete them in small journaled batches with eoctl gc-outbox (the plan first, then --execute; "
                     "it never touches a pending row), from cron, and fix or remove the failing cleanup",
                     "`eoctl audit --select EO303` finds nothing", "eoctl gc-outbox --endpoint {endpoint}")),
        _C("EO401", "blobs", Severity.WARNING, "orphan prepared blob past the grace period (gc candidate)",
           ("name",), ("registered_by_message",),
           check="blobs.orphan_blobs", family="blobs",
           summary='orphan blob: published by no record and no pending entry, older than `--grace`',
           not_a_finding='young blobs',
           inputs=('blobs',),
           remedy=_R("a prepared blob is named by no record and no pending entry, older than the grace period: its "
                     "attempt never committed",
                     "none for correctness; storage grows",
                     "collect them: the plan first, then --execute (quarantined, restorable until --keep-removed)",
                     "`eoctl audit --select EO401` finds nothing", "eoctl gc-blobs")),
        _C("EO402", "blobs", Severity.CRITICAL, "record references a blob that does not exist",
           ("name", "topic", "partition", "offset"), ("message_id",),
           check="blobs.dangling_references", family="blobs",
           verdict=_V("lost", rank=3, reason="blob {name} it publishes does not exist", each=True),
           summary='a record publishes a blob that does not exist',
           inputs=('blobs',),
           remedy=_R("a record publishes a blob that does not exist (removed by hand, by a lifecycle rule, or by a gc that "
                     "did not see the record)",
                     "the receiver cannot apply the message: its effect is lost",
                     "put the blob back: if a gc-blobs run quarantined it, `eoctl gc-blobs --restore RUN_ID --execute`; "
                     "otherwise from a backup or object versioning",
                     "the trace shows the blob present", "eoctl trace {message_id}")),
        _C("EO403", "blobs", Severity.CRITICAL, "blob content does not match the sha256 its message carries",
           ("name", "topic", "partition", "offset"), ("message_id",),
           check="blobs.hash_mismatches", family="blobs",
           verdict=_V("lost", rank=4, reason="blob {name} it publishes does not match its sha256: it was overwritten",
                      each=True),
           summary='blob content does not match the sha256 its message carries',
           inputs=('blobs', 'blob_hashes'),
           remedy=_R("a blob's content differs from the sha256 its message carries: the blob was overwritten or corrupted "
                     "after it was prepared",
                     "the receiver applies content the sender did not publish",
                     "restore the published version (object versioning, backup); never write to a prepared name twice",
                     "the trace shows the blob's hash matching", "eoctl trace {message_id}")),
        _C("EO501", "sinks", Severity.CRITICAL, "the same source message applied more than once",
           (), ("source_message_id",),
           check="sinks.applied_twice", shared=("messages_applied_twice",), narrowed_view="by_message",
           verdict=_V("processed twice", rank=1, reason="{rows} rows in sink {where} ({endpoint})"),
           summary='the same source message applied to a sink more than once',
           inputs=('sinks',),
           remedy=_R("one source message was applied to the sink more than once: deduplication failed (its token was "
                     "regenerated, restored or never removed)",
                     "a duplicate effect (a double charge, a double shipment)",
                     "trace the source message to see which copies were applied and why; remove or compensate the "
                     "extra sink rows",
                     "`eoctl audit --select EO501` no longer lists it", "eoctl trace {source_message_id}")),
        _C("EO502", "sinks", Severity.ERROR, "one idempotency key with conflicting values",
           check="sinks.conflicting_values", shared=("differing_keys",), narrowed_view="by_key",
           summary='one idempotency key with conflicting values',
           inputs=('sinks',),
           remedy=_R("two messages wrote different values under one idempotency key of the sink",
                     "the sink holds one of them: which one depends on the order they arrived",
                     "trace the key's rows to find the messages, decide which value is right, and repair the row",
                     "`eoctl audit --select EO502` no longer lists the key", "eoctl trace --by {sink_key}")),
        _C("EO503", "sinks", Severity.CRITICAL, "a processed message with no row in a sink that must hold every message",
           ("message_id",), ("message_id",),
           check="sinks.missing_effects", shared=("effect_states",), family="effects",
           verdict=_V("lost", rank=6, reason="processed {processed_copy} (offset committed, token gone), and its effect is in "
                      "no row of sink {where}, which must hold every message"),
           summary='a message processed (below the committed offset, with protocol headers) without a row in a sink '
                   'with `every_message = true`; the counts of its hour beside it',
           not_a_finding='messages with a pending outbox entry, messages in flight (EO202), records without headers '
                         '(EO105), sinks without `every_message`',
           inputs=('sinks',),
           remedy=_R("the consumer committed its offset past the message (and removed its token) without the effect "
                     "reaching the sink: a write that failed or went elsewhere after the commit, a sink truncated or "
                     "restored from an older backup, or a handler that skips some messages by design",
                     "the message's effect is lost downstream: nothing will process it again, since its token is gone "
                     "and its offset committed",
                     "trace the message to see its copies and what the stores hold; look at the hours where missing "
                     "starts; re-apply its effect from the record (or re-publish it with a new message id through "
                     "the producer's outbox); if the handler skips such messages on purpose, turn every_message off",
                     "`eoctl audit --select EO503` no longer lists it", "eoctl trace {message_id}")),
        _C("EO601", "transactions", Severity.CRITICAL, "hanging Kafka transaction: last stable offset stuck",
           ("topic", "partition", "last_stable_offset"),
           check="transactions.hanging_transactions",
           summary='hanging transaction: last stable offset behind the high watermark longer than `--transaction-timeout` (live Kafka)',
           not_a_finding='open transactions younger than that',
           inputs=('transactions',),
           remedy=_R("a producer began a Kafka transaction and stopped without committing or aborting it (killed, "
                     "fenced without recovery)",
                     "read_committed consumers stop at the last stable offset: every later record of the partition "
                     "waits, for every consumer group",
                     "abort it: `eoctl abort-transaction` lists the transaction holding each partition (producer id, "
                     "epoch, start offset, age); with --execute it aborts them through Kafka's Admin API",
                     "the last stable offset reaches the high watermark; `eoctl audit --select EO601` finds nothing",
                     "eoctl abort-transaction --endpoint {endpoint}")),
    ]
}


#: what a check may read besides the records and the store tables, each opened by the engine only
#: when a selected code declares it (CodeInfo.inputs) and read in one place per engine
INPUTS = {
    "sinks": "each configured sink's rows",
    "sent_outbox": "the sent rows of outboxes that keep them (sent_column)",
    "blobs": "the listing of each blob prefix (name, size, modified)",
    "blob_hashes": "the sha256 of each blob's content (reads every blob)",
    "log_starts": "each input partition's first offset",
    "transactions": "the brokers' word on open transactions of live inputs",
    "undecodable": "the lines of JSON topic archives that are not records",
}


def code_of(check: str) -> str:
    """The code whose check is `check` (CodeInfo.check): how text elsewhere names a code without
    listing it a second time."""
    return next(code for code, info in CATALOG.items() if info.check == check)


def inputs_of(codes: Sequence[str]) -> frozenset[str]:
    """What the checks of `codes` read besides the records and the store tables (INPUTS)."""
    return frozenset(i for c in codes for i in CATALOG[c].inputs)


#: the columns EO502's evidence adds after the sink's key columns
_SINK_AGGREGATES = ("distinct_values", "values")


def fill_command(template: str, values: dict[str, Any], options: Sequence[str] = ()) -> str:
    """`template` with each `{column}` replaced by its value, shell-quoted (a list: its items); a
    column without a value stays an UPPERCASE placeholder. `options`: the global options the user
    ran eoctl with (--config, --engine, ...), repeated after `eoctl` so that the command works
    when pasted where the user ran it."""
    import re

    from eoctl.inert import shell_word

    def one(match: re.Match) -> str:
        value = values.get(match[1])
        items = value if isinstance(value, (list, tuple)) else [value]
        items = [str(v) for v in items if v not in (None, "")]
        return " ".join(shell_word(v) for v in items) if items else match[1].upper()

    command = re.sub(r"\{(\w+)\}", one, template)
    if options and command.startswith("eoctl "):
        command = "eoctl " + " ".join(shell_word(o) for o in options) + command[len("eoctl"):]
    return command


def names_message(code: str, row: dict[str, Any]) -> set[str]:
    """The message ids an evidence row of `code` names (CodeInfo.names_message)."""
    out: set[str] = set()
    for column in CATALOG[code].names_message:
        value = row.get(column)
        if isinstance(value, (list, tuple)):
            out |= {str(v) for v in value if v is not None}
        elif value is not None:
            out.add(str(value))
    return out


@dataclass
class Finding:
    """All occurrences of one code at one place (endpoint, or endpoint and sink/topic)."""

    code: str
    endpoint: str
    where: str
    count: int
    evidence: list[dict[str, Any]]  # the first rows, or all of them when count is small
    evidence_file: str | None = None  # every row, as Parquet, when there are too many for memory

    @property
    def info(self) -> CodeInfo:
        return CATALOG[self.code]

    @property
    def severity(self) -> Severity:
        return self.info.severity

    def to_dict(self, options: Invocation | Sequence[str] = ()) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.label,
            "title": self.info.title,
            "endpoint": self.endpoint,
            "where": self.where,
            "count": self.count,
            "evidence": self.evidence,
            "evidence_complete": self.evidence_file is None and len(self.evidence) == self.count,
            "evidence_file": self.evidence_file,
            "remedy": self.remedy(options),
        }

    def remedy(self, options: Invocation | Sequence[str] = ()) -> dict[str, str] | None:
        """The code's remedy with its command filled in from this finding (Remedy), after the
        global options the user ran eoctl with (`options`: an Invocation, or those options alone);
        the commands its prose names repeat them too, so each works where it is pasted."""
        r = self.info.remedy
        if r is None:
            return None
        invocation = options if isinstance(options, Invocation) else Invocation(list(options))
        first = self.evidence[0] if self.evidence else {}
        # the finding's endpoint is the configuration's name; an evidence row's `endpoint` is the
        # table's (name_in_store), which `--endpoint` does not take
        values = {**first, "endpoint": self.endpoint, "where": self.where}
        for column in ENDPOINT_COLUMNS:
            if isinstance(values.get(column), str):
                values[column] = invocation.endpoint_names.get(values[column], values[column])
        if self.info.area == "sinks" and first:  # a sink's first key column, as trace --by takes it
            key = next((c for c in first if c not in _SINK_AGGREGATES), None)
            if key is not None and first[key] is not None:
                values["sink_key"] = f"{key}={first[key]}"
        prose = {k: with_options(getattr(r, k), invocation.options) for k in ("cause", "risk", "fix", "verify")}
        return {**prose, "command": fill_command(r.command, values, invocation.options), "docs": self.info.anchor}


#: evidence columns that name an endpoint (as the store or the headers name it), which a remedy's
#: command passes to --endpoint: given as the configuration names it
ENDPOINT_COLUMNS = ("endpoint", "producer")


@dataclass
class Invocation:
    """How the user ran eoctl, for the commands a report prints: the global options to repeat
    (--config, --engine, ...) and the endpoints' names in the stores -> the configuration's."""

    options: list[str] = field(default_factory=list)
    endpoint_names: dict[str, str] = field(default_factory=dict)


def with_options(text: str, options: Sequence[str]) -> str:
    """Prose naming eoctl commands in backticks (`eoctl gc-tokens --restore RUN_ID --execute`)
    with the user's global options after each `eoctl`."""
    if not options:
        return text
    from eoctl.inert import shell_word

    return text.replace("`eoctl ", "`eoctl " + " ".join(shell_word(o) for o in options) + " ")


@dataclass
class AuditReport:
    findings: list[Finding] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    scanned: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the run could not use (a store without intents)
    #: how the user ran eoctl (--config, --engine, ...; the endpoints' names): every finding's next
    #: command repeats it, so that it works where it is pasted
    next_options: Invocation = field(default_factory=Invocation)
    #: endpoint tables whose owner column never holds the endpoint's name (StoreLayout.misnamed):
    #: those endpoints were not judged
    misnamed: list[dict[str, Any]] = field(default_factory=list)
    index: Any = field(default=None, repr=False)  # the run's record index (eoctl.incremental.RecordIndex)

    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)

    def summary(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for f in sorted(self.findings, key=lambda f: f.code):
            row = out.setdefault(f.code, {"severity": f.severity.label, "title": f.info.title, "count": 0})
            row["count"] += f.count
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "run": self.run,
            "scanned": self.scanned,
            "notes": self.notes,
            "misnamed": self.misnamed,
            "summary": self.summary(),
            "findings": [f.to_dict(self.next_options) for f in self.findings],
        }
