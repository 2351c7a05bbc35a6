"""`eoctl abort-transaction`: the hanging Kafka transactions EO601 finds, aborted through Kafka's
Admin API (KIP-664: DescribeProducers, then AbortTransaction, which writes the abort marker the
dead producer never wrote), so `read_committed` consumers read past the last stable offset again.

Plan by default; with `execute`, under the command's lease, each hanging transaction is aborted
once and the partition's last stable offset is read again to say whether it moved. Safe to run
twice and to kill: an abort marker for a transaction already ended changes nothing, and a second
run finds the partition no longer hanging.

Which transaction holds a partition: the active producer whose current transaction starts at the
partition's last stable offset (the first offset a `read_committed` reader cannot pass).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from eoctl.config.model import Config, KafkaConnection
from eoctl.run_ids import new_run_id
from eoctl.sources.kafka import ProducerState

COMMAND = "abort-transaction"
SCHEMA = "eoctl.abort-transaction/v1"


class TransactionAdmin(Protocol):
    """Kafka's Admin API for transactions, on one cluster (eoctl.engine.spark.kafka_admin)."""

    def producers(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], list[ProducerState]]: ...

    def abort(self, topic: str, partition: int, state: ProducerState) -> None: ...

    def close(self) -> None: ...


@dataclass
class AbortOptions:
    transaction_timeout: dt.timedelta = dt.timedelta(minutes=15)
    endpoints: list[str] | None = None
    execute: bool = False
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))


@dataclass
class HangingTransaction:
    endpoint: str
    kafka: str  # the [kafka.*] connection
    topic: str
    partition: int
    last_stable_offset: int
    high_watermark: int
    age_seconds: int
    producer_id: int | None = None
    producer_epoch: int | None = None
    coordinator_epoch: int | None = None
    start_offset: int | None = None
    #: planned | aborted (the last stable offset moved past it) | failed | no producer (the leader
    #: names no transaction at the last stable offset: nothing to abort by eoctl)
    status: str = "planned"
    reason: str = ""
    last_stable_offset_after: int | None = None


@dataclass
class AbortResult:
    run_id: str
    executed: bool
    transactions: list[HangingTransaction]
    transaction_timeout_seconds: int
    duration_seconds: float = 0.0
    command: str = COMMAND

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.transactions:
            out[t.status] = out.get(t.status, 0) + 1
        return out

    def summary(self) -> dict[str, Any]:
        return {"command": COMMAND, "run_id": self.run_id, "executed": self.executed, **self.counts()}

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "run_id": self.run_id, "executed": self.executed,
                "transaction_timeout_seconds": self.transaction_timeout_seconds,
                "counts": self.counts(), "duration_seconds": round(self.duration_seconds, 3),
                "transactions": [asdict(t) for t in self.transactions]}

    def failed(self) -> bool:
        return any(t.status == "failed" for t in self.transactions)


def find_hanging(config: Config, options: AbortOptions) -> list[HangingTransaction]:
    """EO601's rule (eoctl.sources.kafka.hanging_partitions) over every live input of the selected
    endpoints; a partition several endpoints read is listed once, under the first."""
    from eoctl.ops.gc_flow import selected
    from eoctl.sources.kafka import hanging_partitions

    found: dict[tuple[str, str, int], HangingTransaction] = {}
    for name, ep in selected(config, options.endpoints).items():
        if ep.input is None or not ep.input.kafka:
            continue
        conn = config.kafka[ep.input.kafka]
        for topic, partition, stable, high, _since, age in hanging_partitions(
                conn, ep.input.topics, options.now, options.transaction_timeout):
            found.setdefault((ep.input.kafka, topic, partition), HangingTransaction(
                name, ep.input.kafka, topic, partition, stable, high, age))
    return list(found.values())


def _holder(states: list[ProducerState], stable: int) -> ProducerState | None:
    """The producer whose open transaction starts at the last stable offset."""
    return next((s for s in states if s.transaction_start_offset == stable), None)


def abort_transactions(config: Config, options: AbortOptions,
                       admin_for: Callable[[KafkaConnection], TransactionAdmin],
                       progress: Callable[[str], None] = lambda _m: None) -> AbortResult:
    """Plan (options.execute False) or abort the hanging transactions; `admin_for` opens Kafka's
    Admin API on a connection (a JVM: called only when something hangs)."""
    from eoctl.ops.gc_flow import run_changing

    started = time.monotonic()
    run_id = new_run_id(options.now)
    timeout = int(options.transaction_timeout.total_seconds())
    progress("asking the brokers for last stable offsets")
    hanging = find_hanging(config, options)
    admins: dict[str, TransactionAdmin] = {}

    def admin(kafka: str) -> TransactionAdmin:
        if kafka not in admins:
            progress(f"opening Kafka's Admin API on {kafka}")
            admins[kafka] = admin_for(config.kafka[kafka])
        return admins[kafka]

    def describe() -> None:
        for kafka in sorted({t.kafka for t in hanging}):
            mine = [t for t in hanging if t.kafka == kafka]
            states = admin(kafka).producers([(t.topic, t.partition) for t in mine])
            for t in mine:
                holder = _holder(states.get((t.topic, t.partition), []), t.last_stable_offset)
                if holder is None:
                    t.status, t.reason = "no producer", ("the partition leader names no open transaction at the "
                                                         "last stable offset (it may have ended meanwhile)")
                    continue
                t.producer_id, t.producer_epoch = holder.producer_id, holder.producer_epoch
                t.coordinator_epoch, t.start_offset = holder.coordinator_epoch, holder.transaction_start_offset

    def work(_lease: Any, _log: Any) -> AbortResult:
        from eoctl.interrupts import deferred
        from eoctl.sources.kafka import partition_offsets

        describe()
        for t in hanging:
            if t.producer_id is None:
                continue
            progress(f"aborting producer {t.producer_id}'s transaction on {t.topic}[{t.partition}]")
            try:
                with deferred():  # a signal waits for the abort in flight: one marker, never half a call
                    admin(t.kafka).abort(t.topic, t.partition, ProducerState(
                        t.producer_id, t.producer_epoch or 0, t.coordinator_epoch if t.coordinator_epoch is not None
                        else -1, t.start_offset))
            except Exception as exc:  # noqa: BLE001 - one failed abort never stops the others
                from eoctl.engine.errors import message_of

                t.status, t.reason = "failed", message_of(exc).strip().splitlines()[0][:300]
                continue
            after = {(p.topic, p.partition): p for p in partition_offsets(config.kafka[t.kafka], [t.topic])}
            now = after[(t.topic, t.partition)]
            t.last_stable_offset_after = now.last_stable
            if now.last_stable > t.last_stable_offset:
                t.status = "aborted"
            else:
                t.status, t.reason = "failed", "the abort was accepted but the last stable offset did not move"
        return AbortResult(run_id, True, hanging, timeout)

    try:
        if not hanging:
            result = AbortResult(run_id, options.execute, [], timeout)
        elif not options.execute:
            describe()
            result = AbortResult(run_id, False, hanging, timeout)
        else:
            result = run_changing(config, COMMAND, run_id, work)
    finally:
        for a in admins.values():
            a.close()
    result.duration_seconds = time.monotonic() - started
    return result
