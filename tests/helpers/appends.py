"""Random changes to a copy of the chaos sample between two audits, as a pipeline makes them: records
appended to billing's `orders` archive (new messages, redeliveries across the boundary, regenerated
tokens, reused sequences, sequence gaps opened and closed, new attempts of a causation, records
without headers), rows added to billing's `invoices` sink (for a message, or another invoice's
key), sink rows rewritten (which moves the watermark) or deleted, tokens deleted from its store,
and its consumer's committed offsets moved (either way). What tests/test_incremental_property.py draws.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

#: billing's invoices as a sink that must hold every message (EO501, EO503 and EO202 read it),
#: keyed by invoice (EO502), whose increasing order_id every write sets (its watermark column)
BILLING_SINK = """
[[endpoints.billing.sinks]]
name = "invoices"
store = "billing"
table = "invoices"
message_id_column = "source_message_id"
key_columns = ["invoice_id"]
every_message = true
watermark_column = "order_id"
"""

# an operation: (kind, a number choosing the record or partition, a second number)
KINDS = ("new", "redeliver", "regenerate", "reuse_sequence", "gap", "close_gap", "new_attempt", "no_headers",
         "sink_row", "sink_conflict", "sink_rewrite", "sink_delete", "delete_token", "commit")
operations = st.tuples(st.sampled_from(KINDS), st.integers(0, 1_000), st.integers(-3, 3))
#: a step: the operations applied between two audits
steps = st.lists(operations, min_size=1, max_size=6)


@dataclass
class Pipeline:
    """The copy's billing endpoint, changed in place; `skipped`: sequence numbers a gap left out,
    by producer, for a later step to close."""

    folder: Path
    skipped: dict[str, list[int]]

    @property
    def archive(self) -> Path:
        return self.folder / "topics" / "orders"

    def apply(self, ops: list[tuple[str, int, int]], name: str) -> None:
        import duckdb

        db = duckdb.connect()
        old = db.sql(f"select * from read_parquet('{self.archive}/*.parquet') order by \"partition\", \"offset\""
                     ).to_arrow_table().to_pylist()
        new: list[dict] = []
        for kind, n, m in ops:
            row = old[n % len(old)]
            if kind == "new":
                new.append(self._message(n % 2, f"late-{n % 3}", self._next_seq(old + new, f"late-{n % 3}")))
            elif kind == "redeliver":
                new.append(dict(row))
            elif kind == "regenerate":
                new.append(_with(row, "eo-token-id", uuid.uuid4().hex))
            elif kind == "reuse_sequence":
                new.append(_with(row, "eo-message-id", uuid.uuid4().hex))
            elif kind == "gap":
                producer = f"late-{n % 3}"
                seq = self._next_seq(old + new, producer)
                self.skipped.setdefault(producer, []).extend(range(seq, seq + abs(m) + 1))
                new.append(self._message(n % 2, producer, seq + abs(m) + 1))
            elif kind == "close_gap":
                waiting = [(p, s) for p, seqs in sorted(self.skipped.items()) for s in seqs]
                if waiting:
                    producer, seq = waiting[n % len(waiting)]
                    self.skipped[producer].remove(seq)
                    new.append(self._message(n % 2, producer, seq))
            elif kind == "new_attempt":
                new.append(_with(row, "eo-attempt-id", uuid.uuid4().hex, "eo-message-id", uuid.uuid4().hex,
                                 "eo-token-id", uuid.uuid4().hex))
            elif kind == "no_headers":
                new.append({**row, "headers": [h for h in row["headers"] if h["key"] != "eo-token-id"]})
            elif kind == "sink_row":
                self._store(f"insert into billing.invoices select coalesce(max(order_id), 0) + 1, 'late', 1, '', "
                            f"{_text(_header(row, 'eo-message-id'))}, 'late' from billing.invoices")
            elif kind == "sink_conflict":  # another invoice's key, another amount
                self._store(f"insert into billing.invoices select (select max(order_id) + 1 from billing.invoices), "
                            f"invoice_id, amount + 1, blob_name, {_text(_header(row, 'eo-message-id'))}, 'late' "
                            f"from billing.invoices order by order_id limit 1 offset {n} % (select count(*) from "
                            "billing.invoices)")
            elif kind == "sink_rewrite":  # a write sets the watermark
                self._store(f"update billing.invoices set amount = amount + 1, order_id = (select max(order_id) + 1 "
                            f"from billing.invoices) where order_id = (select order_id from billing.invoices "
                            f"order by order_id limit 1 offset {n} % (select count(*) from billing.invoices))")
            elif kind == "sink_delete":
                self._store(f"delete from billing.invoices where order_id = (select order_id from billing.invoices "
                            f"order by order_id limit 1 offset {n} % (select count(*) from billing.invoices))")
            elif kind == "delete_token":
                self._store(f"delete from billing.eo_tokens where token_id = {_text(_header(row, 'eo-token-id'))}")
            elif kind == "commit":
                self._commit(n % 2, m)
        if new:
            self._write(db, old, new, name)

    def _message(self, partition: int, producer: str, seq: int) -> dict:
        headers = {"eo-message-id": uuid.uuid4().hex, "eo-token-id": uuid.uuid4().hex, "eo-producer": producer,
                   "eo-sequence": str(seq), "eo-causation-id": uuid.uuid4().hex, "eo-attempt-id": uuid.uuid4().hex}
        return {"topic": "orders", "partition": partition, "offset": 0, "timestamp": None, "key": b"k", "value": b"v",
                "headers": [{"key": k, "value": v.encode()} for k, v in headers.items()]}

    @staticmethod
    def _next_seq(rows: list[dict], producer: str) -> int:
        seqs = [int(_header(r, "eo-sequence")) for r in rows if _header(r, "eo-producer") == producer
                and (_header(r, "eo-sequence") or "").isdigit()]
        return max(seqs, default=-1) + 1

    def _write(self, db, old: list[dict], new: list[dict], name: str) -> None:
        import datetime as dt

        import pyarrow as pa
        import pyarrow.parquet as pq

        ends = {p: max(r["offset"] for r in old if r["partition"] == p) + 1 for p in {r["partition"] for r in old}}
        now = dt.datetime.now(dt.timezone.utc)
        for r in new:
            r["offset"] = ends[r["partition"]]
            ends[r["partition"]] += 1
            r["timestamp"] = now
        schema = pq.read_schema(next(self.archive.glob("*.parquet")))
        pq.write_table(pa.Table.from_pylist(new, schema=schema), self.archive / name)

    def _store(self, sql: str) -> None:
        import duckdb

        with duckdb.connect(str(self.folder / "state.duckdb")) as db:
            db.execute(sql)

    def _commit(self, partition: int, delta: int) -> None:
        import duckdb

        path = self.archive / "_committed_offsets.json"
        offsets = json.loads(path.read_text())
        end = duckdb.connect().execute(f"select max(\"offset\") + 1 from read_parquet('{self.archive}/*.parquet') "
                                       f"where \"partition\" = {partition}").fetchone()[0]
        now = offsets["orders"][str(partition)]
        offsets["orders"][str(partition)] = max(0, min(end, now + delta))
        path.write_text(json.dumps(offsets))


def _header(row: dict, key: str) -> str | None:
    for h in row["headers"]:
        if h["key"] == key and h["value"] is not None:
            return h["value"].decode(errors="replace")
    return None


def _with(row: dict, *pairs: str) -> dict:
    """`row` with headers replaced: key, value, key, value, ..."""
    values = dict(zip(pairs[::2], pairs[1::2]))
    return {**row, "headers": [{"key": h["key"], "value": values[h["key"]].encode()} if h["key"] in values else h
                               for h in row["headers"]]}


def _text(value: str | None) -> str:
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"
