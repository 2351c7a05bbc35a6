"""The reference pipeline end to end on the real Kafka broker, with DuckDB and PostgreSQL stores:
clean runs leave exactly-once effects and no garbage; chaos runs leave a ledger whose every line
is true of the final state."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from samples.reference.chaos import default_plan, run
from samples.reference.spec import RunSpec
from tests.helpers.pipeline_state import PipelineState

pytestmark = pytest.mark.integration

ORDERS = 40


def _target(kind: str, tmp_path: Path, postgres_factory) -> str:
    return str(tmp_path / "state.duckdb") if kind == "duckdb" else postgres_factory()


@pytest.fixture()
def pg_database(request):
    """A fresh database on the session's PostgreSQL server, created only when asked for."""
    def create() -> str:
        import psycopg

        server = request.getfixturevalue("postgres")
        name = f"run_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            conn.execute(f"create database {name}")
        return server.conninfo(dbname=name)
    return create


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_clean_run_applies_every_effect_exactly_once_and_leaves_nothing(kafka, tmp_path, pg_database, kind) -> None:
    spec = RunSpec(kind, _target(kind, tmp_path, pg_database), kafka.bootstrap, str(tmp_path),
                   f"clean-{kind}-{uuid.uuid4().hex[:6]}-", ORDERS, {})
    ledger, kills = run(spec)
    assert (ledger.entries, kills) == ([], 0)
    state = PipelineState.read(spec)

    assert state.shipments_per_order() == Counter({o: 1 for o in range(ORDERS)})
    assert len({m for _, m in state.tables["shipping.shipments"]}) == ORDERS
    leftovers = {name: rows for name, rows in state.tables.items() if rows and name != "shipping.shipments"}
    assert leftovers == {}  # no tokens, no outbox entries, no intents anywhere

    assert len(state.orders) == ORDERS and len(state.invoices) == ORDERS
    published = {b["uri"]: b["sha256"] for r in state.invoices for b in r.blobs}
    assert state.blob_files() == published  # every blob is published with its hash; none is garbage
    assert all(r.headers["eo-producer"] == "billing" and r.headers["eo-causation-id"] for r in state.invoices)


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_chaos_run_ledger_lists_every_fault_and_each_is_true(kafka, tmp_path, pg_database, kind) -> None:
    plan = default_plan()
    spec = RunSpec(kind, _target(kind, tmp_path, pg_database), kafka.bootstrap, str(tmp_path),
                   f"chaos-{kind}-{uuid.uuid4().hex[:6]}-", ORDERS, plan)
    ledger, kills = run(spec)
    state = PipelineState.read(spec)

    # the ledger lists every planned fault exactly once, with the anomalies it leaves
    fired = sorted((e["order"], e["fault"], e["endpoint"], e.get("step")) for e in ledger.entries)
    planned = sorted((o, f.kind, f.endpoint, f.step if f.step else e_step(ledger, o)) for o, f in plan.items())
    assert fired == planned
    assert all(isinstance(e["expect"], list) and e["attempt_id"] and e["message_id"] for e in ledger.entries)
    crashes = sum(e["fault"] in ("crash", "crash_no_cleanup", "regenerate_tokens", "ghost") for e in ledger.entries)
    assert kills == crashes

    by_kind = {}
    for e in ledger.entries:
        by_kind.setdefault((e["fault"], e["endpoint"], e.get("step")), e)
    shipments = state.shipments_per_order()
    order_of = lambda key: by_kind[key]["order"]  # noqa: E731

    # stuck entries: pending, never dispatched, so no effect downstream
    for step, committed in (("entry_persisted", False), ("tokens_committed", True)):
        e = by_kind[("stuck", "billing", step)]
        assert (e["message_id"], committed) in state.tables["billing.eo_outbox"]
        assert shipments[e["order"]] == 0
    # a crash between token removal and entry removal leaves the entry pending too
    for ep in ("billing", "shipping"):
        e = by_kind[("crash", ep, "incoming_token_removed")]
        assert any(m == e["message_id"] for m, _ in state.tables[f"{ep}.eo_outbox"])
        assert shipments[e["order"]] == 1

    # effects applied twice
    for key in (("double_apply", "shipping", "entry_persisted"), ("regenerate_tokens", "billing", "dispatched")):
        rows = [m for o, m in state.tables["shipping.shipments"] if o == order_of(key)]
        assert len(rows) == 2 and len(set(rows)) == 1, key
    regen = [r for r in state.invoices if r.message_id == by_kind[("regenerate_tokens", "billing", "dispatched")]["outgoing"][0]]
    assert len({r.token_id for r in regen}) == 2  # one message id, two tokens (EO102)

    # the ghost: sent by an attempt that never committed, applied downstream, its blob gone
    ghost = by_kind[("ghost", "billing", "dispatched")]
    ghost_records = [r for r in state.invoices if r.headers["eo-attempt-id"] == ghost["attempt_id"]]
    assert [r.message_id for r in ghost_records] == ghost["outgoing"]
    assert ghost_records[0].blobs[0]["uri"] not in state.blob_files()
    ghost_rows = {m for o, m in state.tables["shipping.shipments"] if o == ghost["order"]}
    assert len(ghost_rows) == 2 and ghost["outgoing"][0] in ghost_rows
    real = [r for r in state.invoices if r.body["order_id"] == ghost["order"] and r.message_id not in ghost["outgoing"]]
    assert {r.headers["eo-sequence"] for r in real} == {ghost_records[0].headers["eo-sequence"]}  # EO103

    # shared blob name: the published hash is not the content's
    shared = [r for r in state.invoices if r.body["order_id"] == order_of(("shared_blob_name", "billing", "prepared"))]
    blob = shared[0].blobs[0]
    assert blob["uri"] == f"invoice-{shared[0].body['order_id']}.txt"
    assert state.blob_files()[blob["uri"]] != blob["sha256"]

    # garbage left because cleanup was skipped: one orphan blob, one orphan token
    published = {b["uri"] for r in state.invoices for b in r.blobs}
    pending = state.pending_blob_refs()
    assert len(pending - published) == 2  # the two stuck entries will publish their prepared invoices
    assert len(set(state.blob_files()) - published - pending) == 1
    carried = {r.token_id for r in state.invoices}
    stuck_tokens = 1  # the outgoing token of the entry stuck after its token checkpoint
    orphan_tokens = [t for t, _, _ in state.tables["shipping.eo_tokens"] if t not in carried]
    assert len(orphan_tokens) == 1 + stuck_tokens

    # duplicated deliveries: same id, same token, two offsets
    copies = Counter((r.message_id, r.token_id) for r in state.orders)
    for kind_ in ("duplicate_delivery", "lost_ack"):
        assert copies[(by_kind[(kind_, "shop", "dispatched")]["message_id"], next(
            r.token_id for r in state.orders if r.message_id == by_kind[(kind_, "shop", "dispatched")]["message_id"]))] == 2
    crash_dispatch = by_kind[("crash", "billing", "dispatched")]
    copies_inv = Counter((r.message_id, r.token_id) for r in state.invoices if r.body["order_id"] == crash_dispatch["order"])
    assert list(copies_inv.values()) == [2] and shipments[crash_dispatch["order"]] == 1

    # every other order: exactly one effect
    special = {e["order"] for e in ledger.entries if e["fault"] in ("stuck", "double_apply", "regenerate_tokens", "ghost")}
    assert all(shipments[o] == 1 for o in range(ORDERS) if o not in special)


def e_step(ledger, order: int) -> str | None:
    return next((e.get("step") for e in ledger.entries if e["order"] == order), None)
