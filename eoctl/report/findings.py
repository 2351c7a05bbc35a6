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
    code: str
    area: str
    severity: Severity
    title: str


CATALOG: dict[str, CodeInfo] = {
    c.code: c
    for c in [
        CodeInfo("EO101", "topics", Severity.INFO, "redelivered copy: same message id and token at another offset"),
        CodeInfo("EO102", "topics", Severity.CRITICAL, "one message id under several tokens: will be processed twice"),
        CodeInfo("EO103", "topics", Severity.ERROR, "one (producer, sequence) on several message ids"),
        CodeInfo("EO104", "topics", Severity.WARNING, "gap in a producer's sequence"),
        CodeInfo("EO105", "topics", Severity.ERROR, "record without usable protocol headers"),
        CodeInfo("EO201", "tokens", Severity.WARNING, "orphan token past the grace period (gc candidate)"),
        CodeInfo("EO202", "tokens", Severity.CRITICAL, "in-flight record without token or effect: silent loss"),
        CodeInfo("EO203", "tokens", Severity.WARNING, "token of a processed record still present"),
        CodeInfo("EO204", "tokens", Severity.CRITICAL, "committed offset below the log start offset: records lost"),
        CodeInfo("EO301", "outbox", Severity.ERROR, "outbox entry pending longer than the threshold (replay candidate)"),
        CodeInfo("EO302", "outbox", Severity.CRITICAL, "ghost message: sent by an attempt that never committed"),
        CodeInfo("EO401", "blobs", Severity.WARNING, "orphan prepared blob past the grace period (gc candidate)"),
        CodeInfo("EO402", "blobs", Severity.CRITICAL, "record references a blob that does not exist"),
        CodeInfo("EO403", "blobs", Severity.CRITICAL, "blob content does not match the sha256 its message carries"),
        CodeInfo("EO501", "sinks", Severity.CRITICAL, "the same source message applied more than once"),
        CodeInfo("EO502", "sinks", Severity.ERROR, "one idempotency key with conflicting values"),
        CodeInfo("EO601", "transactions", Severity.CRITICAL, "hanging Kafka transaction: last stable offset stuck"),
    ]
}


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
