"""The reference endpoint: the final token algorithm of the token-based-deduplication seed, with
register-cleanup for tokens and prepared blobs, as an integrator would write it.

    handle(incoming):
      1  token check            no token in my store -> the message is a duplicate: drop it
      2  handler (new entry)    register blob intents, prepare blobs under per-attempt names,
                                then business state + outbox entry in one transaction
      3  token checkpoint       if the outgoing messages have no tokens yet: register token
                                intents, create new tokens (new ids, per attempt) in the
                                destinations' stores, persist their ids in the entry (version check)
      4  dispatch               send the outgoing messages with the committed token ids
      5  remove incoming token  the duplicate check of every later copy now drops it
      6  remove entry           version check
      7  cleanup                delete tokens and blobs registered by attempts that did not commit

Three endpoints: `shop` (the origin; places orders), `billing` (orders -> invoice blob + invoice
message), `shipping` (invoices -> a row in the `shipping.shipments` sink).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from samples.reference.faults import Injector
from samples.reference.store import ConcurrencyConflict, OutboxEntry, Store, now

H_MESSAGE_ID, H_TOKEN_ID, H_PRODUCER = "eo-message-id", "eo-token-id", "eo-producer"
H_SEQUENCE, H_CAUSATION, H_ATTEMPT, H_BLOBS = "eo-sequence", "eo-causation-id", "eo-attempt-id", "eo-blobs"


def new_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True)
class Incoming:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, str]

    @property
    def message_id(self) -> str:
        return self.headers[H_MESSAGE_ID]

    @property
    def token_id(self) -> str:
        return self.headers[H_TOKEN_ID]

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(self.value)


class Dispatcher:
    """An idempotent confluent-kafka producer that waits for every delivery report."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})

    def send(self, messages: list[dict[str, Any]]) -> None:
        errors: list[str] = []
        for m in messages:
            headers = [(k, v.encode()) for k, v in m["headers"].items()]
            headers.append((H_TOKEN_ID, m["token_id"].encode()))
            self.producer.produce(
                m["topic"], key=m["key"].encode() if m["key"] else None, value=m["value"].encode(),
                headers=headers, on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
            )
        if self.producer.flush(30) != 0 or errors:
            raise RuntimeError(f"dispatch failed: {errors or 'flush timed out'}")


class BlobStore:
    """Prepared blobs: files under a folder; names are relative to it (the `eo-blobs` uri)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, content: bytes) -> str:
        path = self.root / name
        tmp = path.with_suffix(".partial")
        tmp.write_bytes(content)
        tmp.replace(path)
        return hashlib.sha256(content).hexdigest()

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)


@dataclass
class HandlerResult:
    outgoing: list[dict[str, Any]]  # messages without token ids yet
    apply_state: Callable[[Store], None]  # business state change, run in the entry's transaction


class Endpoint:
    name = ""
    destinations: tuple[str, ...] = ()

    def __init__(self, store: Store, dispatcher: Dispatcher, faults: Injector, blobs: BlobStore | None = None,
                 topics: dict[str, str] | None = None) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.faults = faults
        self.blobs = blobs
        self.topics = topics or {}

    # ------------------------------------------------------------------------- the algorithm

    def handle(self, msg: Incoming) -> str:
        """Process one incoming record; returns processed, duplicate or abandoned."""
        attempt = new_id()
        order = int(msg.body["order_id"])
        at = lambda step, **ctx: self.faults.at(step, order=order, endpoint=self.name, attempt_id=attempt,  # noqa: E731
                                                message_id=msg.message_id, sends=bool(self.destinations), **ctx)

        # 1. token check: absent token = already processed = duplicate
        if not self.store.has_token(self.name, msg.token_id):
            return "duplicate"
        at("token_checked")

        # 2. handler, business state and outbox entry
        entry = self.store.load_entry(self.name, msg.message_id)
        if entry is None:
            if self.faults.pending(order, self.name, "ghost"):
                self._ghost(msg, order, attempt)  # never returns
            result = self.handler(msg, attempt, order)
            at("prepared")
            entry = OutboxEntry(self.name, msg.message_id, msg.token_id, attempt, result.outgoing, None, 0)
            try:
                with self.store.tx():
                    result.apply_state(self.store)
                    self.store.insert_entry(entry)
            except ConcurrencyConflict:
                return "abandoned"  # another attempt committed first; its outcome stands
            if self.faults.pending(order, self.name, "shared_blob_name"):
                self._concurrent_duplicate(msg, order)
            at("entry_persisted")
            if self._stuck_here(order, "entry_persisted"):
                return self._stuck(msg, order, entry)

        # 3. token checkpoint: never create tokens again once they are committed ...
        regenerate = self.faults.fired(order, self.name, "regenerate_tokens")  # ... unless buggy
        if entry.outgoing and (not entry.has_tokens or regenerate):
            self._checkpoint(entry, msg, attempt)
            at("tokens_committed")
            if self._stuck_here(order, "tokens_committed"):
                return self._stuck(msg, order, entry)

        # 4. dispatch
        if entry.outgoing:
            self.dispatcher.send(entry.outgoing)
            if self.faults.pending(order, self.name, "regenerate_tokens"):
                self.faults.record("regenerate_tokens", order=order, endpoint=self.name, step="dispatched",
                                   message_id=msg.message_id, attempt_id=attempt,
                                   outgoing=[m["message_id"] for m in entry.outgoing], expect=["EO102", "EO501"])
                self.faults.kill()
        at("dispatched")

        # 5. remove the incoming token; 6. remove the entry
        self.store.remove_token(self.name, msg.token_id)
        at("incoming_token_removed")
        with self.store.tx():
            self.store.delete_entry(entry)
        at("entry_removed")

        # 7. cleanup of what attempts that did not commit registered
        if not self.faults.fired(order, self.name, "crash_no_cleanup"):
            self._cleanup(msg.message_id, entry)
        at("cleaned_up")
        return "processed"

    def _checkpoint(self, entry: OutboxEntry, msg: Incoming, attempt: str) -> None:
        order = int(msg.body["order_id"])
        for m in entry.outgoing:
            m["token_id"] = new_id()  # brand-new ids on every execution of this step
            self.store.register_intent(self.name, msg.message_id, attempt, "token", m["token_id"])
        for dest in self.destinations:
            self.store.create_tokens(dest, [(m["token_id"], m["message_id"], attempt) for m in entry.outgoing
                                            if m["destination"] == dest])
        self.faults.at("tokens_created", order=order, endpoint=self.name, attempt_id=attempt,
                       message_id=msg.message_id, outgoing=[m["message_id"] for m in entry.outgoing])
        with self.store.tx():
            self.store.commit_tokens(entry)

    def _cleanup(self, incoming_message_id: str, entry: OutboxEntry) -> None:
        committed = {m["token_id"] for m in entry.outgoing}
        committed |= {b["uri"] for m in entry.outgoing for b in json.loads(m["headers"].get(H_BLOBS, "[]"))}
        for _attempt, kind, ref in self.store.intents_of(self.name, incoming_message_id):
            if ref in committed:
                continue
            if kind == "token":
                for dest in self.destinations:
                    self.store.remove_token(dest, ref)
            elif kind == "blob" and self.blobs is not None:
                self.blobs.delete(ref)
        with self.store.tx():
            self.store.delete_intents(self.name, incoming_message_id)

    # ------------------------------------------------------------------------ special faults

    def _stuck_here(self, order: int, step: str) -> bool:
        fault = self.faults.fault_for(order, self.name)
        return fault is not None and fault.step == step and self.faults.pending(order, self.name, "stuck")

    def _stuck(self, msg: Incoming, order: int, entry: OutboxEntry) -> str:
        self.faults.record("stuck", order=order, endpoint=self.name, step="tokens_committed" if entry.has_tokens
                           else "entry_persisted", message_id=msg.message_id, attempt_id=entry.attempt_id,
                           tokens_committed=entry.has_tokens, outgoing=[m["message_id"] for m in entry.outgoing],
                           expect=["EO301"])
        return "abandoned"  # the caller commits the offset: this entry is never retried by the endpoint

    def _ghost(self, msg: Incoming, order: int, attempt: str) -> None:
        """The bug: tokens created and messages dispatched before the transaction commits."""
        result = self.handler(msg, attempt, order)
        entry = OutboxEntry(self.name, msg.message_id, msg.token_id, attempt, result.outgoing, None, 0)
        for m in entry.outgoing:
            m["token_id"] = new_id()
            self.store.register_intent(self.name, msg.message_id, attempt, "token", m["token_id"])
        for dest in self.destinations:
            self.store.create_tokens(dest, [(m["token_id"], m["message_id"], attempt) for m in entry.outgoing])
        self.dispatcher.send(entry.outgoing)
        # The attempt never commits. Downstream applies the ghost (its token exists), the retry applies
        # its own message too (two effects for one order: EO502), the retry's cleanup deletes the
        # ghost's blob (EO402), and both messages carry the same producer sequence (EO103).
        self.faults.record("ghost", order=order, endpoint=self.name, step="dispatched", message_id=msg.message_id,
                           attempt_id=attempt, outgoing=[m["message_id"] for m in entry.outgoing],
                           expect=["EO302", "EO402", "EO103", "EO502"])
        self.faults.kill()

    def _concurrent_duplicate(self, msg: Incoming, order: int) -> None:
        """A second copy, processed concurrently, prepares (overwriting the shared blob) and loses the
        optimistic-concurrency race at the entry insert."""
        attempt = new_id()
        result = self.handler(msg, attempt, order)
        entry = OutboxEntry(self.name, msg.message_id, msg.token_id, attempt, result.outgoing, None, 0)
        outcome = "committed"
        try:
            with self.store.tx():
                result.apply_state(self.store)
                self.store.insert_entry(entry)
        except ConcurrencyConflict:
            outcome = "lost the race"
        except Exception:  # the business table's own key may object first; it is the same race
            outcome = "lost the race"
        self.faults.record("shared_blob_name", order=order, endpoint=self.name, step="prepared",
                           message_id=msg.message_id, attempt_id=attempt, outcome=outcome, expect=["EO403"])

    # --------------------------------------------------------------------------- handlers

    def handler(self, msg: Incoming, attempt: str, order: int) -> HandlerResult:
        raise NotImplementedError

    def outgoing(self, dest: str, topic: str, key: str, body: dict[str, Any], causation: str, attempt: str,
                 sequence: int, blobs: list[dict[str, str]] | None = None) -> dict[str, Any]:
        headers = {H_MESSAGE_ID: new_id(), H_PRODUCER: self.name, H_SEQUENCE: str(sequence),
                   H_CAUSATION: causation, H_ATTEMPT: attempt}
        if blobs:
            headers[H_BLOBS] = json.dumps(blobs)
        return {"message_id": headers[H_MESSAGE_ID], "token_id": None, "topic": topic, "destination": dest,
                "key": key, "headers": headers, "value": json.dumps(body)}


class Billing(Endpoint):
    """orders -> an invoice (a prepared blob, published by the invoice message with its sha256)."""

    name = "billing"
    destinations = ("shipping",)

    def handler(self, msg: Incoming, attempt: str, order: int) -> HandlerResult:
        assert self.blobs is not None
        body = msg.body
        shared = self.faults.fault_for(order, self.name)
        # Per-attempt unique blob names isolate attempts; the shared_blob_name fault breaks that.
        name = f"invoice-{order}.txt" if shared and shared.kind == "shared_blob_name" else f"{attempt}.txt"
        self.store.register_intent(self.name, msg.message_id, attempt, "blob", name)  # register
        content = (f"INVOICE order={order} amount={body['amount']} attempt={attempt} "
                   f"issued_at={dt.datetime.now(dt.timezone.utc).isoformat()}\n").encode()  # not deterministic
        sha = self.blobs.write(name, content)  # prepare
        invoice_id = f"inv-{order}"
        message = self.outgoing("shipping", self.topics["invoices"], str(order),
                                {"order_id": order, "invoice_id": invoice_id, "amount": body["amount"]},
                                msg.message_id, attempt, int(msg.headers.get(H_SEQUENCE, order + 1)),
                                blobs=[{"uri": name, "sha256": sha}])

        def apply_state(store: Store) -> None:
            store.q("insert into billing.invoices values (%s, %s, %s, %s, %s, %s)",
                    (order, invoice_id, body["amount"], name, msg.message_id, attempt))

        return HandlerResult([message], apply_state)


class Shipping(Endpoint):
    """invoices -> one row per invoice in the shipping.shipments sink (no outgoing messages)."""

    name = "shipping"

    def handler(self, msg: Incoming, attempt: str, order: int) -> HandlerResult:
        body = msg.body
        twice = self.faults.pending(order, self.name, "double_apply")

        def apply_state(store: Store) -> None:
            for _ in range(2 if twice else 1):
                store.q("insert into shipping.shipments values (%s, %s, %s, %s, %s)",
                        (new_id(), order, body["invoice_id"], msg.message_id, now()))
            if twice:
                self.faults.record("double_apply", order=order, endpoint=self.name, step="entry_persisted",
                                   message_id=msg.message_id, attempt_id=attempt, expect=["EO501"])

        return HandlerResult([], apply_state)


class Shop:
    """The origin: places each order as an outbox entry of a synthetic incoming request, then runs
    the same checkpoint and dispatch tail so that the order message carries a committed token."""

    name = "shop"

    def __init__(self, store: Store, dispatcher: Dispatcher, faults: Injector, orders_topic: str) -> None:
        self.endpoint = Endpoint(store, dispatcher, faults)
        self.endpoint.name, self.endpoint.destinations = "shop", ("billing",)
        self.orders_topic = orders_topic

    def place(self, order: int, amount: int) -> None:
        ep, store = self.endpoint, self.endpoint.store
        request_id = f"request-{order}"
        attempt = new_id()
        message = ep.outgoing("billing", self.orders_topic, str(order), {"order_id": order, "amount": amount},
                              request_id, attempt, order + 1)
        entry = OutboxEntry("shop", request_id, request_id, attempt, [message], None, 0)
        with store.tx():
            store.insert_entry(entry)
        fake = Incoming(self.orders_topic, 0, 0, None, json.dumps({"order_id": order}).encode(),
                        {H_MESSAGE_ID: request_id, H_TOKEN_ID: request_id})
        ep._checkpoint(entry, fake, attempt)
        ep.dispatcher.send(entry.outgoing)
        for kind in ("duplicate_delivery", "lost_ack"):
            if ep.faults.pending(order, "shop", kind):
                ep.faults.record(kind, order=order, endpoint="shop", step="dispatched",
                                 message_id=message["message_id"], attempt_id=attempt, expect=["EO101"])
                ep.dispatcher.send(entry.outgoing)  # same message, same committed token
        with store.tx():
            store.delete_entry(entry)
        ep._cleanup(request_id, entry)
