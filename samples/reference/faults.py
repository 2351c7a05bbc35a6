"""Fault injection and the ledger: which message, which attempt, which fault, and what it leaves.

A plan maps an order number to one fault. Each fault fires once: before firing, the process that
injects it appends a line to `ledger.jsonl` (flushed and fsynced, so it survives the SIGKILL that
follows a crash fault). A restarted worker reads the ledger to know what has fired already.

Every ledger line carries `expect`: the anomalies the fault leaves in the final state, by the
finding codes of DESIGN.md §3. This is the oracle for audit, gc and replay tests.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: algorithm steps after which an endpoint can be killed (endpoint.py names them as it passes)
STEPS = (
    "token_checked",
    "prepared",
    "entry_persisted",
    "tokens_created",
    "tokens_committed",
    "dispatched",
    "incoming_token_removed",
    "entry_removed",
    "cleaned_up",
)

#: what a crash after each step leaves once the endpoint has recovered by redelivery
CRASH_LEAVES = {
    "dispatched": ["EO101"],  # the retry re-sends the same message with the same token
    "incoming_token_removed": ["EO301"],  # redelivery is dropped at the token check: entry stays
}

FAULT_KINDS = {
    "crash": "process killed (SIGKILL) after a step; recovered by redelivery",
    "crash_no_cleanup": "crash after a step, and the recovering attempt skips cleanup: garbage stays",
    "duplicate_delivery": "the sender dispatches the same message twice (same token)",
    "lost_ack": "the sender's delivery report is lost; it re-dispatches from its checkpoint",
    "regenerate_tokens": "crash after dispatch; the retry generates new tokens (the 'we are doomed' bug)",
    "ghost": "dispatch before commit, then a crash before the commit: a ghost message",
    "shared_blob_name": "blob written under a deterministic name; a concurrent attempt overwrites it",
    "stuck": "an outbox entry is left pending and its incoming record committed (never retried)",
    "double_apply": "the consumer applies its sink effect twice",
}


@dataclass(frozen=True)
class Fault:
    kind: str
    endpoint: str = "billing"
    step: str | None = None  # crash, crash_no_cleanup, stuck: where

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "endpoint": self.endpoint, "step": self.step}


@dataclass
class Ledger:
    path: Path
    entries: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path) -> Ledger:
        entries = []
        if path.exists():
            entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return cls(path, entries)

    def record(self, **entry: Any) -> None:
        entry["seq"] = len(self.entries) + 1
        self.entries.append(entry)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def fired(self, order: int, kind: str) -> bool:
        return any(e["order"] == order and e["fault"] == kind for e in self.entries)


class Injector:
    """Asked by the endpoints at each step; fires the planned fault for that message once."""

    def __init__(self, plan: dict[int, Fault], ledger: Ledger) -> None:
        self.plan = plan
        self.ledger = ledger

    def fault_for(self, order: int, endpoint: str) -> Fault | None:
        fault = self.plan.get(order)
        return fault if fault is not None and fault.endpoint == endpoint else None

    def pending(self, order: int, endpoint: str, kind: str) -> bool:
        """The fault of this kind is planned here and has not fired yet."""
        fault = self.fault_for(order, endpoint)
        return fault is not None and fault.kind == kind and not self.ledger.fired(order, kind)

    def fired(self, order: int, endpoint: str, kind: str) -> bool:
        fault = self.fault_for(order, endpoint)
        return fault is not None and fault.kind == kind and self.ledger.fired(order, kind)

    def at(self, step: str, *, order: int, endpoint: str, sends: bool = True, **context: Any) -> None:
        """Called after each step; kills this process when a crash is planned right here.
        `sends`: the endpoint has outgoing messages (a re-dispatch leaves copies only then)."""
        fault = self.fault_for(order, endpoint)
        if fault is None or fault.step != step or fault.kind not in ("crash", "crash_no_cleanup"):
            return
        if self.ledger.fired(order, fault.kind):
            return
        expect = [c for c in CRASH_LEAVES.get(step, []) if sends or c != "EO101"]
        if fault.kind == "crash_no_cleanup":
            expect += {"prepared": ["EO401"], "tokens_created": ["EO201"]}.get(step, [])
        self.record(fault.kind, order=order, endpoint=endpoint, step=step, expect=expect, **context)
        self.kill()

    def record(self, kind: str, **entry: Any) -> None:
        self.ledger.record(fault=kind, **entry)

    @staticmethod
    def kill() -> None:
        # A real crash: no exception handlers, no finally blocks, no flushes.
        os.kill(os.getpid(), signal.SIGKILL)
