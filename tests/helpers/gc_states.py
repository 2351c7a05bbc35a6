"""Random pipeline states for the gc property tests, written as real files: a topic archive
(Parquet, Kafka record schema), a DuckDB store per endpoint and a blob folder.

A state is a list of cells. A cell is one incoming message M that endpoint `src` processed, with
an outcome (what src's outbox and the topic say about it) and 1-3 items (tokens in `dst`'s store,
blobs under src's prefix) tied to M in some way. Every item carries the generator's own label of
what it is, so the oracle is what the generator made, not a second implementation of the rules.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import random
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.configs import write_config

GRACE = dt.timedelta(hours=24)
OUTCOMES = ("entry_committed", "entry_uncommitted", "sent", "unknown")
TOKEN_KINDS = ("on_inflight", "on_processed", "in_entry_out", "entry_incoming", "intent", "bare")
BLOB_KINDS = ("published_inflight", "published_processed", "in_entry", "intent", "bare")


@dataclass(frozen=True)
class Item:
    what: str  # token | blob
    kind: str
    age_minutes: int


@dataclass(frozen=True)
class Cell:
    outcome: str
    items: tuple[Item, ...]


def effective_kind(cell: Cell, item: Item) -> str:
    """What an item really is once the cell's outcome is applied: outgoing token ids exist only
    in an entry whose tokens are committed, blob references only in a pending entry."""
    if item.what == "token" and item.kind == "in_entry_out" and cell.outcome != "entry_committed":
        return "intent"
    if item.what == "blob" and item.kind == "in_entry" and not cell.outcome.startswith("entry"):
        return "intent"
    return item.kind


def must_remove(cell: Cell, item: Item) -> bool:
    """Garbage past the grace period: registered by an attempt or bare, on no record, in no
    pending entry, older than the grace period."""
    return effective_kind(cell, item) in ("intent", "bare") and item.age_minutes * 60 > GRACE.total_seconds()


def young_garbage(cell: Cell, item: Item) -> bool:
    """Registered by an attempt that lost (the message's outcome is known: its entry has committed
    tokens, or, with no entry, its messages were sent), but still young: gc classifies it as
    garbage and leaves it for a later run."""
    # With no pending entry, copies sent for the message (any item on a record) also settle it.
    on_records = any(effective_kind(cell, i) in ("on_inflight", "on_processed", "published_inflight",
                                                 "published_processed") for i in cell.items)
    known = cell.outcome in ("entry_committed", "sent") or (cell.outcome == "unknown" and on_records)
    return (effective_kind(cell, item) == "intent" and known
            and item.age_minutes * 60 <= GRACE.total_seconds())


# An item's age in minutes, by class; never within 5 minutes of the grace boundary, which the
# oracle (must_remove) is not meant to pin down to the second.
_GRACE_MIN = int(GRACE.total_seconds() // 60)
_AGES = {"young": (0, _GRACE_MIN - 6), "old": (_GRACE_MIN + 6, 2 * _GRACE_MIN)}
_ITEM_SHAPES = [(what, kind, age) for what, kinds in (("token", TOKEN_KINDS), ("blob", BLOB_KINDS))
                for kind in kinds for age in _AGES]


def every_shape(rng: random.Random) -> list[Cell]:
    """One cell of every shape: each outcome with each multiset of one to three items, an item
    being a kind (token or blob) and an age class (young, or past the grace period); 9,196 cells.
    The ages within a class are drawn from `rng`."""
    return [Cell(outcome, tuple(Item(what, kind, rng.randint(*_AGES[age])) for what, kind, age in items))
            for outcome in OUTCOMES for size in (1, 2, 3)
            for items in itertools.combinations_with_replacement(_ITEM_SHAPES, size)]


def shape(cell: Cell) -> tuple:
    """What `every_shape` tells cells apart by: the outcome and the items' kinds and age classes."""
    return cell.outcome, tuple(sorted((i.what, i.kind, "old" if i.age_minutes * 60 > GRACE.total_seconds() else "young")
                                      for i in cell.items))


def generated_cells(count: int, seed: int) -> list[Cell]:
    """`count` cells from `seed`: every shape once (a random subset of them when `count` is
    smaller), then random cells of one to three items, in a random order."""
    rng = random.Random(seed)
    cells = every_shape(rng)
    rng.shuffle(cells)
    while len(cells) < count:
        cells.append(Cell(rng.choice(OUTCOMES), tuple(
            Item(what, kind, rng.randint(*_AGES[age])) for what, kind, age in
            (rng.choice(_ITEM_SHAPES) for _ in range(rng.randint(1, 3))))))
    rng.shuffle(cells)
    return cells[:count]


@dataclass
class WrittenState:
    folder: Path
    config_path: Path
    tokens: dict[str, tuple[Cell, Item]]  # token id -> what it is
    blobs: dict[str, tuple[Cell, Item]]  # blob name -> what it is
    environ: dict[str, str]  # what the configuration interpolates (the PostgreSQL password)

    @property
    def blob_dir(self) -> Path:
        return self.folder / "blobs" / "src"


def write_state(folder: Path, cells: list[Cell], now: dt.datetime, postgres=None) -> WrittenState:
    """Write the cells; the stores go to DuckDB (state.duckdb), or to a new database of the
    `postgres` test server when one is given."""
    import duckdb

    records: list[tuple] = []  # (offset placeholder, processed, headers dict)
    src_entries: list[tuple] = []
    dst_entries: list[tuple] = []
    intents: list[tuple] = []
    tokens: list[tuple] = []
    token_truth: dict[str, tuple[Cell, Item]] = {}
    blob_truth: dict[str, tuple[Cell, Item]] = {}
    blob_dir = folder / "blobs" / "src"
    blob_dir.mkdir(parents=True)

    def rec(processed: bool, msg: str, token: str, causation: str, blobs: list[str] | None = None) -> None:
        headers = {"eo-message-id": msg, "eo-token-id": token, "eo-producer": "src", "eo-causation-id": causation,
                   "eo-attempt-id": "a-won"}
        if blobs:
            headers["eo-blobs"] = json.dumps([{"uri": b, "sha256": "0" * 64} for b in blobs])
        records.append((processed, headers))

    for c, cell in enumerate(cells):
        m = f"c{c}-in"
        outgoing: list[dict] = []
        for j, item in enumerate(cell.items):
            kind = effective_kind(cell, item)
            born = now - dt.timedelta(minutes=item.age_minutes)
            ident = f"c{c}-{j}-{item.what}-{kind}"
            if item.what == "token":
                token_truth[ident] = (cell, item)
                tokens.append((ident, f"{ident}-msg", "dst", "a-any", born))
                if kind == "on_inflight":
                    rec(False, f"{ident}-msg", ident, m)
                elif kind == "on_processed":
                    rec(True, f"{ident}-msg", ident, m)
                elif kind == "in_entry_out":
                    outgoing.append({"message_id": f"{ident}-msg", "token_id": ident, "topic": "t", "key": None,
                                     "headers": {"eo-producer": "src"}, "value": "{}"})
                elif kind == "entry_incoming":
                    dst_entries.append(("dst", f"{ident}-msg", ident, "a-dst", "[]", None, born, born, 1))
                elif kind == "intent":
                    intents.append((f"{ident}-intent", "src", m, "a-lost", "token", ident, born))
            else:
                name = f"{ident}.bin"
                blob_truth[name] = (cell, item)
                path = blob_dir / name
                path.write_bytes(ident.encode())
                os.utime(path, (born.timestamp(), born.timestamp()))
                if kind in ("published_inflight", "published_processed"):
                    rec(kind == "published_processed", f"{ident}-msg", f"{ident}-tok", m, [name])
                elif kind == "in_entry":
                    outgoing.append({"message_id": f"{ident}-msg", "token_id": None, "topic": "t", "key": None,
                                     "headers": {"eo-producer": "src",
                                                 "eo-blobs": json.dumps([{"uri": name, "sha256": "0" * 64}])},
                                     "value": "{}"})
                elif kind == "intent":
                    intents.append((f"{ident}-intent", "src", m, "a-lost", "blob", name, born))
        if cell.outcome.startswith("entry"):
            committed = cell.outcome == "entry_committed"
            for o in outgoing:
                if committed and o["token_id"] is None:
                    o["token_id"] = f"{o['message_id']}-tok"
            src_entries.append(("src", m, f"{m}-tok", "a-won", json.dumps(outgoing),
                                now if committed else None, now, now, 2))
        elif cell.outcome == "sent":
            rec(True, f"c{c}-sent-msg", f"c{c}-sent-tok", m)

    processed = [h for p, h in records if p]
    inflight = [h for p, h in records if not p]
    ordered = processed + inflight
    stores = _write_tables(folder, postgres, tokens, src_entries, dst_entries, intents)
    db = duckdb.connect()
    try:
        db.execute('create temp table recs ("offset" bigint, headers varchar)')
        _insert_duckdb(db, "recs", [
            (i, json.dumps([{"key": k, "value": v} for k, v in h.items()])) for i, h in enumerate(ordered)])
        archive = folder / "topics" / "t"
        archive.mkdir(parents=True)
        db.execute(f"""
            copy (select 't' as topic, 0 as "partition", "offset", timestamp '2026-11-01 00:00:00' as "timestamp",
                         cast(null as blob) as "key", encode('{{}}') as "value",
                         list_transform(from_json(headers, '[{{"key": "VARCHAR", "value": "VARCHAR"}}]'),
                                        lambda h: {{'key': h.key, 'value': encode(h.value)}}) as headers
                  from recs order by "offset")
            to '{archive}/part-0.parquet' (format parquet)""")
    finally:
        db.close()
    path = write_config(folder, stores + textwrap.dedent(f"""
        [endpoints.src]
        store = "src"
        blobs = "blobs/src"

        [endpoints.dst]
        store = "dst"

        [endpoints.dst.input]
        topics = ["t"]
        archive = "topics/t"
        committed_offsets = {{t = {{"0" = {len(processed)}}}}}
    """))
    environ = {"EOCTL_TEST_PGPASSWORD": postgres.password} if postgres else {}
    return WrittenState(folder, path, token_truth, blob_truth, environ)


_DDL = (
    "create table {s}.eo_tokens (token_id varchar primary key, message_id varchar, destination varchar, "
    "attempt_id varchar, created_at timestamptz)",
    "create table {s}.eo_outbox (endpoint varchar, incoming_message_id varchar primary key, incoming_token_id varchar, "
    "attempt_id varchar, outgoing json, tokens_committed_at timestamptz, created_at timestamptz, "
    "updated_at timestamptz, version bigint)",
    "create table {s}.eo_intents (intent_id varchar primary key, endpoint varchar, incoming_message_id varchar, "
    "attempt_id varchar, kind varchar, ref varchar, created_at timestamptz)",
)


def _write_tables(folder: Path, postgres, tokens: list, src_entries: list, dst_entries: list, intents: list) -> str:
    """Create and fill both endpoints' tables; returns the [stores.*] part of the configuration."""
    inserts = [("dst.eo_tokens", tokens), ("src.eo_outbox", src_entries), ("dst.eo_outbox", dst_entries),
               ("src.eo_intents", intents)]
    if postgres is None:
        import duckdb

        with duckdb.connect(str(folder / "state.duckdb")) as db:
            for schema in ("src", "dst"):
                db.execute(f"create schema {schema}")
                for ddl in _DDL:
                    db.execute(ddl.format(s=schema))
            for table, rows in inserts:
                _insert_duckdb(db, table, rows)
        return "".join(f'[stores.{s}]\ntype = "duckdb"\npath = "state.duckdb"\nschema = "{s}"\n\n' for s in ("src", "dst"))
    import uuid

    import psycopg

    name = f"gc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        conn.execute(f"create database {name}")
    with psycopg.connect(postgres.conninfo(dbname=name)) as conn:
        for schema in ("src", "dst"):
            conn.execute(f"create schema {schema}")
            for ddl in _DDL:
                conn.execute(ddl.format(s=schema))
        with conn.cursor() as cur:
            for table, rows in inserts:
                if rows:
                    cur.executemany(f"insert into {table} values ({', '.join(['%s'] * len(rows[0]))})", rows)
    return "".join(f'[stores.{s}]\ntype = "postgres"\nport = {postgres.port}\ndatabase = "{name}"\n'
                   f'user = "{postgres.user}"\npassword = "${{EOCTL_TEST_PGPASSWORD}}"\nschema = "{s}"\n\n'
                   for s in ("src", "dst"))


def _insert_duckdb(db, table: str, rows: list[tuple]) -> None:
    """Insert rows in one statement through Arrow: executemany costs a millisecond or more per
    row, minutes for the states of tens of thousands of cells."""
    import pyarrow as pa

    if rows:
        db.register("eoctl_rows", pa.table({f"c{i}": list(col) for i, col in enumerate(zip(*rows))}))
        db.execute(f"insert into {table} select * from eoctl_rows")
        db.unregister("eoctl_rows")
