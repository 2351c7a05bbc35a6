"""Compare an audit report with a chaos ledger: both reduced to the set of (code, order number)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from eoctl.findings import AuditReport

# evidence fields that name a message, token, blob or entry, and the sink key
_ID_FIELDS = ("message_id", "message_ids", "token_id", "incoming_message_id", "source_message_id", "name")


def expected(ledger: Iterable[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(code, e["order"]) for e in ledger for code in e["expect"]}


def build_index(records: Iterable[tuple[str, str, dict, str | None]], tables: dict[str, list[tuple]]) -> dict[str, int]:
    """id -> order from (message_id, token_id, body, eo-blobs) records and the store's tables."""
    index: dict[str, int] = {}
    for message_id, token_id, body, blobs in records:
        order = int(body["order_id"])
        index[message_id] = index[token_id] = order
        for b in json.loads(blobs or "[]"):
            index[b["uri"]] = order
    for token_id, message_id in tables.get("tokens", []):
        if message_id in index:
            index[token_id] = index[message_id]
    for ref, incoming in tables.get("intents", []):
        if incoming in index:
            index.setdefault(ref, index[incoming])
    return index


def found(report: AuditReport, index: dict[str, int]) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for f in report.findings:
        assert f.count == len(f.evidence), f"{f.code}: evidence must be complete for the oracle"
        for row in f.evidence:
            orders = {int(row["order_id"])} if "order_id" in row else set()
            for key in _ID_FIELDS:
                values = row.get(key)
                for v in values if isinstance(values, list) else [values]:
                    if v in index:
                        orders.add(index[v])
            assert len(orders) == 1, f"{f.code} evidence {row} maps to orders {orders}"
            out.add((f.code, orders.pop()))
    return out
