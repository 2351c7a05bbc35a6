"""The committed samples/chaos state agrees with its own ledger (no server needed)."""

from __future__ import annotations

import json
from collections import Counter

import duckdb

from samples.reference.chaos import default_plan
from tests.helpers.servers import REPO

CHAOS = REPO / "samples" / "chaos"


def _ledger() -> list[dict]:
    return [json.loads(line) for line in (CHAOS / "ledger.jsonl").read_text().splitlines()]


def test_ledger_covers_the_default_plan() -> None:
    plan = default_plan()
    assert sorted((e["order"], e["fault"], e["endpoint"]) for e in _ledger()) == sorted(
        (o, f.kind, f.endpoint) for o, f in plan.items())


def test_state_matches_the_ledger() -> None:
    ledger = _ledger()
    with duckdb.connect(str(CHAOS / "state.duckdb"), read_only=True) as db:
        pending = {m for (m,) in db.execute("select incoming_message_id from billing.eo_outbox").fetchall()}
        shipments = Counter(o for (o,) in db.execute("select order_id from shipping.shipments").fetchall())
        archived = db.execute(f"select count(*) from '{CHAOS}/topics/orders/*.parquet'").fetchone()[0]
    stuck = {e["message_id"] for e in ledger if e["fault"] == "stuck"}
    crashed = {e["message_id"] for e in ledger
               if (e["fault"], e["endpoint"], e["step"]) == ("crash", "billing", "incoming_token_removed")}
    assert pending == stuck | crashed
    twice = {e["order"] for e in ledger if e["fault"] in ("double_apply", "regenerate_tokens", "ghost")}
    assert {o for o, n in shipments.items() if n == 2} == twice
    assert all(shipments[e["order"]] == 0 for e in ledger if e["fault"] == "stuck")
    assert archived == 42


def test_fault_kinds_are_switchable() -> None:
    import pytest

    only = default_plan({"ghost", "stuck"})
    assert sorted(f.kind for f in only.values()) == ["ghost", "stuck", "stuck"]
    assert len(default_plan()) == 26
    with pytest.raises(ValueError, match="unknown fault kinds: nope"):
        default_plan({"nope"})
