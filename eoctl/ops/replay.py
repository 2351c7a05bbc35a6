"""`eoctl replay-outbox`: finish stuck outbox entries exactly as the algorithm's tail does.

Per entry, under the single-runner lease, with a fresh attempt id:
  0 validate       outgoing JSON, known topics, record sizes: a poison entry is skipped before
                   anything changes (no garbage tokens for it)
  1 checkpoint     only if its tokens are not committed yet: new token ids, registered as intents
                   in the sender's store, created in each destination's token store, then persisted
                   with the entry under its version (optimistic concurrency). Once committed, token
                   ids are never generated again: that is the seed's key lesson.
  2 dispatch       every outgoing message with its committed token id, through an idempotent
                   producer, waiting for every delivery report
  3 incoming token removed from the sender's token store
  4 entry deleted  under its version (in an outbox that keeps sent rows: marked sent, as the
                   pipeline marks it, and left for gc-outbox)
A lost version check (the endpoint finished or changed the entry meanwhile) is reported and the
entry left to its owner: no lost update, no new tokens. A kill at any step leaves a state the next
run finishes: before 1 commits, fresh tokens are made again (the earlier ones are garbage of an
attempt that lost, for gc); after, the same tokens are sent again and the receiver drops the copy.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from eoctl.config.model import Config
from eoctl.errors import Interrupted, Misconfigured, SourceError, UsageError
from eoctl.inert import inert
from eoctl.interrupts import deferred
from eoctl.ops.gc_flow import new_run_id, selected
from eoctl.ops.lease import Lease, RunLog, utcnow
from eoctl.stores import sql
from eoctl.stores.db import Db, open_db
from eoctl.stores.layout import EndpointTable, StoreLayout

COMMAND = "replay-outbox"


class ConcurrencyConflict(Exception):
    """The entry changed since it was read: its owner moved it on."""


class PoisonEntry(Exception):
    """The entry cannot be sent as it is (bad JSON, unknown topic, oversized record)."""


@dataclass
class ReplayOptions:
    stuck_after: dt.timedelta = dt.timedelta(minutes=15)
    endpoints: list[str] | None = None
    entries: list[str] | None = None  # incoming message ids
    max_entries: int = 100
    rate: float | None = None  # entries per second
    execute: bool = False
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))


@dataclass
class StuckEntry:
    endpoint: str
    entry_id: str  # the incoming message id
    incoming_token_id: str | None
    age_seconds: int
    messages: int
    tokens_committed: bool
    version: int
    outgoing: Any = field(repr=False, default=None)


@dataclass
class EntryOutcome:
    endpoint: str
    entry_id: str
    age_seconds: int
    messages: int
    tokens_committed: bool  # before this run
    status: str  # planned | replayed | skipped | conflict | failed
    reason: str | None = None
    tokens_created: int = 0
    messages_sent: int = 0


@dataclass
class ReplayResult:
    run_id: str
    executed: bool
    outcomes: list[EntryOutcome]
    duration_seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.status] = out.get(o.status, 0) + 1
        return out

    def summary(self) -> dict[str, Any]:
        return {"command": COMMAND, "run_id": self.run_id, "executed": self.executed, **self.counts(),
                "duration_seconds": round(self.duration_seconds, 3), "entries": [asdict(o) for o in self.outcomes]}


# ------------------------------------------------------------------------------ finding them


def find_stuck(layout: StoreLayout, options: ReplayOptions) -> list[StuckEntry]:
    """Pending entries older than --stuck-after (or the --entry ones), oldest first, at most
    --max-entries: after an outage the outbox may hold millions, and only a run's worth is read.
    In an outbox several endpoints share, each endpoint's own rows (layout)."""
    found: list[StuckEntry] = []
    for name in selected(layout.config, options.endpoints):
        t = layout.table(name, "outbox")
        if t is None:
            continue
        owned, owner = t.owned_cond()
        pending, sent_values = t.pending_cond()
        with open_db(t.store, read_only=True) as db:
            entry_id, token_id = db.ids(t.table, t.col("incoming_message_id")), db.ids(t.table, t.col("incoming_token_id"))
            if options.entries:
                chosen = sql.fragment(":entry in :ids", entry=_c(t, "incoming_message_id"),
                                      ids=entry_id.params(len(options.entries)))
                params: list[Any] = list(options.entries)
            else:
                chosen = sql.fragment(":created < %s", created=_c(t, "created_at"))
                params = [options.now - options.stuck_after]
            rows = db.execute(sql.statement(
                "select :entry_text, :token_text, cast(:outgoing as varchar), :committed, :created, :version "
                "from :t where :cond order by :created, :entry limit %s",
                entry_text=entry_id.text(_c(t, "incoming_message_id")),
                token_text=token_id.text(_c(t, "incoming_token_id")),
                outgoing=_c(t, "outgoing"), committed=_c(t, "tokens_committed_at"), created=_c(t, "created_at"),
                version=_c(t, "version"), t=db.table(t.table), cond=sql.every(chosen, owned, pending),
                entry=_c(t, "incoming_message_id")), [*params, *owner, *sent_values, options.max_entries])
        for entry_id, token, outgoing, committed_at, created_at, version in rows:
            created = created_at if created_at.tzinfo else created_at.replace(tzinfo=dt.timezone.utc)
            try:
                messages = json.loads(outgoing)
                count = len(messages) if isinstance(messages, list) else 0
                committed = bool(count) and all(isinstance(m, dict) and m.get("token_id") for m in messages)
            except (TypeError, ValueError):
                messages, count, committed = outgoing, 0, False
            found.append(StuckEntry(name, entry_id, token, int((options.now - created).total_seconds()), count,
                                    committed_at is not None and committed, int(version), messages))
    found.sort(key=lambda e: (-e.age_seconds, e.endpoint, e.entry_id))
    return found[:options.max_entries]


# ---------------------------------------------------------------------------------- routing


@dataclass
class Route:
    """Where an outgoing message goes: the endpoint consuming its topic and that endpoint's tokens."""

    destination: str
    kafka: str


def routes(config: Config) -> dict[str, Route]:
    """topic -> the endpoint that consumes it (its token store gets the token) and the Kafka
    connection to send through (the consumer's own, else the only one configured)."""
    only = next(iter(config.kafka)) if len(config.kafka) == 1 else None
    out: dict[str, Route] = {}
    for name, ep in config.endpoints.items():
        if ep.input is None:
            continue
        for topic in ep.input.topics:
            kafka = ep.input.kafka or only
            if kafka is not None:
                out[topic] = Route(name, kafka)
    return out


def _validate(config: Config, entry: StuckEntry, table: dict[str, Route], max_bytes: int) -> list[dict[str, Any]]:
    """The outgoing messages, or PoisonEntry saying why the entry cannot be sent as it is."""
    messages = entry.outgoing
    if not isinstance(messages, list):
        raise PoisonEntry("outgoing is not a JSON list of messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not m.get("message_id") or not m.get("topic"):
            raise PoisonEntry(f"outgoing[{i}] has no message_id or topic")
        if m["topic"] not in table:
            raise PoisonEntry(f"outgoing[{i}]: topic {m['topic']!r} is no configured endpoint's input")
        destination = config.endpoint(table[m["topic"]].destination)
        if not entry.tokens_committed and destination.store_of(destination.tokens) is None:
            raise PoisonEntry(f"outgoing[{i}]: destination {table[m['topic']].destination} has no token store")
        size = len(_bytes(m.get("value")) or b"") + len(_bytes(m.get("key")) or b"") + sum(
            len(k) + len(str(v)) for k, v in (m.get("headers") or {}).items())
        if size > max_bytes:
            raise PoisonEntry(f"outgoing[{i}] is {size} bytes, over the producer's message.max.bytes {max_bytes}")
    return messages


def _bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    return (value if isinstance(value, str) else json.dumps(value)).encode()


# ------------------------------------------------------------------------------- the steps


class Dispatcher:
    """One idempotent producer per Kafka connection; `send` waits for every delivery report."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.producers: dict[str, Any] = {}

    def producer(self, kafka: str) -> Any:
        if kafka not in self.producers:
            from confluent_kafka import Producer

            from eoctl.sources.kafka import client_config

            conn = self.config.kafka[kafka]
            self.producers[kafka] = Producer({**client_config(conn), "enable.idempotence": True, "acks": "all",
                                              "linger.ms": 5})
        return self.producers[kafka]

    def send(self, messages: list[dict[str, Any]], table: dict[str, Route], token_header: str) -> int:
        from confluent_kafka import KafkaException

        errors: list[str] = []
        used = set()
        for m in messages:
            kafka = table[m["topic"]].kafka
            used.add(kafka)
            headers = [(k, _bytes(v)) for k, v in (m.get("headers") or {}).items() if k != token_header]
            headers.append((token_header, m["token_id"].encode()))
            try:
                self.producer(kafka).produce(
                    m["topic"], key=_bytes(m.get("key")), value=_bytes(m.get("value")), headers=headers,
                    on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
            except (KafkaException, BufferError) as exc:
                errors.append(str(exc))
                break
        for kafka in used:
            if self.producers[kafka].flush(self.config.kafka[kafka].timeout_seconds * 6) != 0:
                errors.append("delivery reports did not all arrive in time")
        if errors:
            raise SourceError(f"dispatch failed: {errors[0]}")
        return len(messages)


def _checkpoint(layout: StoreLayout, entry: StuckEntry, messages: list[dict[str, Any]], table: dict[str, Route],
                attempt: str, now: dt.datetime, outcome: EntryOutcome) -> None:
    """New token ids: registered (when the sender keeps intents), created at each destination, then
    committed with the entry. Rows of shared tables carry the owner's name in the store."""
    for m in messages:
        m["token_id"] = str(uuid.uuid4())
    intents = layout.table(entry.endpoint, "intents")
    if intents is not None:
        with open_db(intents.store) as db:
            with db.tx():
                for m in messages:
                    _insert(db, intents, {"intent_id": str(uuid.uuid4()), "incoming_message_id": entry.entry_id,
                                          "attempt_id": attempt, "kind": "token", "ref": m["token_id"],
                                          "created_at": now})
    by_destination: dict[str, list[dict[str, Any]]] = {}
    for m in messages:
        by_destination.setdefault(table[m["topic"]].destination, []).append(m)
    for dest, group in by_destination.items():
        tokens = layout.table(dest, "tokens")
        assert tokens is not None  # _validate refused the entry before anything changed
        with open_db(tokens.store) as db:
            with db.tx():
                for m in group:
                    _insert(db, tokens, {"token_id": m["token_id"], "message_id": m["message_id"],
                                         "attempt_id": attempt, "created_at": now})
        outcome.tokens_created += len(group)  # counted even if the commit below loses the race
    _update_entry(layout, entry, messages, now)


def _insert(db: Db, t: EndpointTable, values: dict[str, Any]) -> None:
    """One row of an endpoint's table; its owner column (when the table has one) names the endpoint."""
    if t.owner_column is not None:
        values = {**values, t.owner_canonical: t.owner}
    ids = {c: db.ids(t.table, t.col(c)) for c in values}  # each bound as its column keeps it (IdSql)
    if "attempt_id" in ids and ids["attempt_id"].family in ("uuid", "uuid_bytes"):
        # a column of UUIDs takes replay's attempt id without its marking prefix
        values = {**values, "attempt_id": str(values["attempt_id"]).removeprefix(REPLAY_ATTEMPT)}
    db.execute("insert into :t (:cols) values (:vals)", list(values.values()), t=db.table(t.table),
               cols=[_c(t, c) for c in values], vals=[ids[c].param() for c in values])


#: what marks the attempt id of the tokens and intents replay makes (a text column: eoctl-replay-UUID)
REPLAY_ATTEMPT = "eoctl-replay-"


def _outbox(layout: StoreLayout, entry: StuckEntry) -> EndpointTable:
    t = layout.table(entry.endpoint, "outbox")
    assert t is not None  # the entry was read from it
    return t


def _update_entry(layout: StoreLayout, entry: StuckEntry, messages: list[dict[str, Any]], now: dt.datetime) -> None:
    t = _outbox(layout, entry)
    owned, owner = t.owned_cond()
    with open_db(t.store) as db:
        with db.tx():
            changed = db.rowcount(
                "update :t set :outgoing = %s, :committed = %s, :updated = %s, :version = :version + 1 where :cond",
                [json.dumps(messages), now, now, entry.entry_id, entry.version, *owner],
                t=db.table(t.table), outgoing=_c(t, "outgoing"), committed=_c(t, "tokens_committed_at"),
                updated=_c(t, "updated_at"), version=_c(t, "version"),
                cond=sql.every(_this_version(db, t), owned))
    if changed != 1:
        raise ConcurrencyConflict(f"entry changed since version {entry.version} while tokens were committed")
    entry.version += 1


def _remove_incoming_token(layout: StoreLayout, entry: StuckEntry) -> None:
    t = layout.table(entry.endpoint, "tokens")
    if t is None or not entry.incoming_token_id:
        return
    owned, owner = t.owned_cond()
    with open_db(t.store) as db:
        with db.tx():
            token = sql.fragment(":token = :id", token=_c(t, "token_id"), id=db.ids(t.table, t.col("token_id")).param())
            db.execute("delete from :t where :cond", [entry.incoming_token_id, *owner], t=db.table(t.table),
                       cond=sql.every(token, owned))


def _delete_entry(layout: StoreLayout, entry: StuckEntry, now: dt.datetime) -> None:
    """The algorithm's last step: the entry is gone, or, in an outbox that keeps its rows once sent,
    marked sent (its sent column set as the pipeline sets it; gc-outbox removes it later)."""
    t = _outbox(layout, entry)
    owned, owner = t.owned_cond()
    with open_db(t.store) as db:
        with db.tx():
            cond = sql.every(_this_version(db, t), owned)
            if t.keeps_sent:
                assert t.sent_column is not None
                value = _sent_value(db, t, now)
                gone = db.rowcount("update :t set :sent = %s, :updated = %s, :version = :version + 1 where :cond",
                                   [value, now, entry.entry_id, entry.version, *owner], t=db.table(t.table),
                                   sent=sql.column(t.sent_column), updated=_c(t, "updated_at"),
                                   version=_c(t, "version"), cond=cond)
            else:
                gone = db.rowcount("delete from :t where :cond", [entry.entry_id, entry.version, *owner],
                                   t=db.table(t.table), cond=cond)
    if gone != 1:
        raise ConcurrencyConflict(f"entry changed since version {entry.version} before it was deleted")


def _c(t: EndpointTable, canonical: str) -> Any:
    """The column of `t` a canonical name maps to, as a node of stores.sql."""
    return sql.column(t.col(canonical))


def _this_version(db: Db, t: EndpointTable) -> Any:
    """The entry's row at the version read (bound: its incoming message id, then the version)."""
    return sql.fragment(":entry = :id and :version = %s", entry=_c(t, "incoming_message_id"),
                        id=db.ids(t.table, t.col("incoming_message_id")).param(), version=_c(t, "version"))


def _sent_value(db: Any, t: EndpointTable, now: dt.datetime) -> Any:
    """What marks a row sent in `t`'s sent column: the first of sent_values, else true for a flag
    and the time for a time column (by the column's type in the store)."""
    if t.sent_values:
        return t.sent_values[0]
    rows = db.execute("select data_type from information_schema.columns where table_schema = %s and table_name = %s "
                      "and column_name = %s", [t.store.schema_name, t.table, t.sent_column])
    kind = str(rows[0][0]).lower() if rows else ""
    if kind.startswith(("bool", "bit", "tinyint")):
        return True
    if kind.startswith(("timestamp", "datetime", "date")):
        return now
    raise Misconfigured(f"outbox {t.table} of endpoint {t.endpoint}: cannot tell what marks a row sent in its "
                        f"column {t.sent_column} (type {kind or 'unknown'})",
                        hint=f"set endpoints.{t.endpoint}.outbox.sent_values to the value the pipeline writes")


def replay_entry(layout: StoreLayout, entry: StuckEntry, table: dict[str, Route], dispatcher: Dispatcher,
                 max_bytes: int, outcome: EntryOutcome) -> EntryOutcome:
    """The steps of the module doc; `outcome` records progress as it is made (also when a step fails)."""
    config = layout.config
    messages = _validate(config, entry, table, max_bytes)
    if messages and not entry.tokens_committed:
        _checkpoint(layout, entry, messages, table, f"{REPLAY_ATTEMPT}{uuid.uuid4()}", utcnow(), outcome)
    if messages:  # an entry with nothing to send only needs its incoming token and itself removed
        outcome.messages_sent = dispatcher.send(messages, table, config.protocol.headers.token_id)
    _remove_incoming_token(layout, entry)
    _delete_entry(layout, entry, utcnow())
    outcome.status = "replayed"
    return outcome


# ---------------------------------------------------------------------------------- the run


def refuse_misnamed(layout: StoreLayout) -> None:
    """A replay writes tokens, intents and outbox rows under endpoints' names in the store: with any
    endpoint table that never carries its endpoint's name (StoreLayout.misnamed), it would write
    rows no endpoint reads. Misconfigured (exit 6) before anything is read or written."""
    misnamed = layout.misnamed()
    if misnamed:
        names = list(dict.fromkeys(m.endpoint for m in misnamed))
        found = sorted({n for m in misnamed for n, _ in m.found})
        raise Misconfigured(
            f"{COMMAND} refused: the tables of {', '.join(names)} hold no row under {'its' if len(names) == 1 else 'their'}"
            f" name{'s' if len(names) > 1 else ''}, but rows under {', '.join(repr(inert(n)) for n in found)}",
            hint=f"set {' / '.join(m.key for m in misnamed if m.kind == misnamed[0].kind)} to the name the "
                 "rows carry; eoctl doctor names each table")


def replay(config: Config, options: ReplayOptions,
           progress: Callable[[int, int, str], None] = lambda _done, _total, _what: None) -> ReplayResult:
    """Plan (list the stuck entries) or, with options.execute, replay each; `progress(done, total, what)`."""
    started = time.monotonic()
    run_id = new_run_id(options.now)
    layout = StoreLayout(config)
    if not options.execute:
        refuse_misnamed(layout)
        return ReplayResult(run_id, False, [EntryOutcome(e.endpoint, e.entry_id, e.age_seconds, e.messages,
                                                         e.tokens_committed, "planned")
                                            for e in find_stuck(layout, options)])
    table = routes(config)
    log = RunLog(config)
    outcomes: list[EntryOutcome] = []
    # the lease first: a refused run reads nothing, and the entries read are the holder's to replay
    with Lease(config, COMMAND, run_id) as lease:
        refuse_misnamed(layout)  # the stores are read under the lease only
        _refuse_without_broker(config)  # before an entry is read: nothing could be sent
        stuck = find_stuck(layout, options)
        if options.entries:
            missing = set(options.entries) - {e.entry_id for e in stuck}
            if missing:
                raise UsageError(f"--entry {sorted(missing)[0]}: no pending outbox entry with this incoming message id")
        log.start(run_id, COMMAND)
        dispatcher = Dispatcher(config)
        try:
            for i, entry in enumerate(stuck):
                if options.rate and i:
                    time.sleep(1.0 / options.rate)
                progress(i, len(stuck), f"{entry.endpoint} {entry.entry_id}")
                with deferred():  # a signal stops the run between entries, never inside one
                    outcomes.append(_one(layout, entry, table, dispatcher))
                lease.renew()
            progress(len(stuck), len(stuck), "done")
        except Interrupted as exc:
            with deferred():
                log.set_status(run_id, "stopped")  # a signal: unfinished, as a failure is
            exc.hint = (f"{len(outcomes)} of {len(stuck)} entries done, none half-done; the next "
                        f"`eoctl {COMMAND} --execute` replays the rest")
            raise
        except BaseException:
            log.set_status(run_id, "failed")
            raise
        result = ReplayResult(run_id, True, outcomes, time.monotonic() - started)
        log.finish(run_id, "finished", result.summary())
    return result


def _refuse_without_broker(config: Config) -> None:
    if config.kafka:
        return
    archived = sorted(n for n, ep in config.endpoints.items() if ep.input is not None and ep.input.archive)
    raise UsageError("replay-outbox --execute sends the entries' messages through a live broker, and no "
                     "[kafka.NAME] connection is configured"
                     + (f" (endpoints {', '.join(archived)} read topic archives)" if archived else ""),
                     hint="add a [kafka.NAME] connection to the broker the pipeline produces to; the plan "
                          "(without --execute) needs none")


def _one(layout: StoreLayout, entry: StuckEntry, table: dict[str, Route], dispatcher: Dispatcher) -> EntryOutcome:
    """One entry's replay; whatever goes wrong with it is its outcome, never the run's end."""
    base = EntryOutcome(entry.endpoint, entry.entry_id, entry.age_seconds, entry.messages, entry.tokens_committed,
                        "failed")
    try:
        return replay_entry(layout, entry, table, dispatcher, _max_bytes(layout.config), base)
    except PoisonEntry as exc:
        base.status, base.reason = "skipped", str(exc)
    except ConcurrencyConflict as exc:
        base.status, base.reason = "conflict", f"the endpoint moved it on: {exc}"
    except (SourceError, OSError) as exc:
        base.reason = str(exc).splitlines()[0]
    except Exception as exc:  # a database or driver error on this entry: report it, go on
        base.reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return base


def _max_bytes(config: Config) -> int:
    """The producer's record size limit: librdkafka's default unless a connection sets it lower."""
    limits = [int(c.client_properties["message.max.bytes"]) for c in config.kafka.values()
              if "message.max.bytes" in c.client_properties]
    return min(limits, default=1_000_000)
