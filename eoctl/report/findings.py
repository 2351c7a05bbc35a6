"""The findings model: the catalog of codes and the typed results an audit returns.

JSON schema `eoctl.audit/v1` (documented in README.md): stable codes, severities and field names;
fields are only ever added within a major version.
"""

from __future__ import annotations

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

    @property
    def message_scoped(self) -> bool:
        return bool(self.names_message)


_C = CodeInfo
CATALOG: dict[str, CodeInfo] = {
    c.code: c
    for c in [
        _C("EO101", "topics", Severity.INFO, "redelivered copy: same message id and token at another offset",
           ("topic", "message_id", "token_id"), ("message_id",)),
        _C("EO102", "topics", Severity.CRITICAL, "one message id under several tokens: will be processed twice",
           ("topic", "message_id"), ("message_id",)),
        _C("EO103", "topics", Severity.ERROR, "one (producer, sequence) on several message ids",
           ("topic", "producer", "sequence"), ("message_ids",)),
        _C("EO104", "topics", Severity.WARNING, "gap in a producer's sequence",
           ("topic", "producer", "missing_from", "missing_to")),
        _C("EO105", "topics", Severity.ERROR, "record without usable protocol headers",
           ("topic", "partition", "offset"), ("message_id",)),
        _C("EO106", "topics", Severity.ERROR, "archive line that is not a record: no check saw it",
           ("file", "line")),
        # registered_by_message: the incoming message whose processing registered the token or blob
        _C("EO201", "tokens", Severity.WARNING, "orphan token past the grace period (gc candidate)",
           ("token_id",), ("message_id", "registered_by_message")),
        _C("EO202", "tokens", Severity.CRITICAL, "in-flight record without token or effect: silent loss",
           ("topic", "partition", "offset"), ("message_id",)),
        _C("EO203", "tokens", Severity.WARNING, "token of a processed record still present",
           ("token_id",), ("message_id",)),
        _C("EO204", "tokens", Severity.CRITICAL, "committed offset below the log start offset: records lost",
           ("topic", "partition")),
        # an entry concerns the message it processes and the messages it holds to send
        _C("EO301", "outbox", Severity.ERROR, "outbox entry pending longer than the threshold (replay candidate)",
           ("endpoint", "incoming_message_id"), ("incoming_message_id", "message_ids")),
        _C("EO302", "outbox", Severity.CRITICAL, "ghost message: sent by an attempt that never committed",
           ("topic", "producer", "causation_id", "ghost_attempt"), ("message_ids",)),
        _C("EO401", "blobs", Severity.WARNING, "orphan prepared blob past the grace period (gc candidate)",
           ("name",), ("registered_by_message",)),
        _C("EO402", "blobs", Severity.CRITICAL, "record references a blob that does not exist",
           ("name", "topic", "partition", "offset"), ("message_id",)),
        _C("EO403", "blobs", Severity.CRITICAL, "blob content does not match the sha256 its message carries",
           ("name", "topic", "partition", "offset"), ("message_id",)),
        _C("EO501", "sinks", Severity.CRITICAL, "the same source message applied more than once",
           (), ("source_message_id",)),
        _C("EO502", "sinks", Severity.ERROR, "one idempotency key with conflicting values"),
        _C("EO601", "transactions", Severity.CRITICAL, "hanging Kafka transaction: last stable offset stuck",
           ("topic", "partition", "last_stable_offset")),
    ]
}


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

    def to_dict(self) -> dict[str, Any]:
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
        }


@dataclass
class AuditReport:
    findings: list[Finding] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    scanned: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the run could not use (a store without intents)
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
            "summary": self.summary(),
            "findings": [f.to_dict() for f in self.findings],
        }
