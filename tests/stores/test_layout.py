"""Store layouts real pipelines have (eoctl.stores.layout), on the chaos sample:

- one outbox, intents and tokens table shared by every endpoint (DuckDB and PostgreSQL): every
  finding, reconcile class, gc plan and replay plan names each row under its own endpoint exactly
  once, as with a schema per endpoint; gc never deletes another endpoint's rows;
- a store without intents tables: the audit runs with the same findings (less the register-cleanup
  evidence) and says so; gc collects orphans by age past the grace period only;
- on each shared layout, trace shows every message exactly the findings the audit names it in
  (on PostgreSQL: the shared layout's reads are the same SQL on DuckDB, and tests/trace/test_chaos_verdicts.py
  holds trace to the audit on the sample as recorded, a DuckDB schema per endpoint).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from eoctl.audit import select_codes
from tests.helpers.audits import audit_duckdb
from eoctl.config import load_config
from eoctl.ops import gc_tokens
from eoctl.ops.gc_flow import GcOptions
from eoctl.ops.reconcile import run_reconcile
from eoctl.ops.replay import ReplayOptions, replay
from eoctl.findings import Severity
from eoctl.stores.layout import StoreLayout
from tests.helpers.chaos import CHAOS, recorded_copy, settled, store_rows
from tests.helpers.cli import run_eoctl
from tests.helpers.layouts import drop_intents, shared_tables
from tests.helpers.trace_agreement import assert_agree, named_messages, trace_all

pytestmark = pytest.mark.integration

#: one clock for every run compared here (evidence carries ages)
NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)
REGISTERED = {"registered_by_message", "registered_by_attempt"}


def _findings(report, folder: Path, drop: set[str] = frozenset()) -> dict[tuple, list[str]]:
    """(code, endpoint, where, count) -> the evidence rows (without `drop` columns), order-free; the
    sample's folder (in blob prefixes) is left out of `where`."""
    return {(f.code, f.endpoint, f.where.replace(str(folder), "<sample>"), f.count): sorted(
        json.dumps({k: v for k, v in row.items() if k not in drop}, sort_keys=True, default=str)
        for row in f.evidence) for f in report.findings}


def _on_duckdb(path: Path, environ: dict[str, str] | None = None):
    """The configuration at `path` on the DuckDB engine: these tests compare layouts, and
    tests/expr/test_engine_parity.py holds the engines equal on them (shared PostgreSQL tables, no
    intents) and on the per-schema sample."""
    return load_config(path, overrides={"kind": "duckdb"}, environ=environ or {})


def _audit(config):
    return audit_duckdb(config, dataclasses.replace(settled(), now=NOW), select_codes(None, None))


def _plans(config) -> dict[str, object]:
    reconcile = run_reconcile(None, config, grace=dt.timedelta(0), now=NOW)
    gc = gc_tokens.gc_tokens(None, config, GcOptions(grace=dt.timedelta(0), now=NOW))
    stuck = replay(config, ReplayOptions(stuck_after=dt.timedelta(0), now=NOW))
    return {
        "reconcile": (reconcile.counts, sorted((e.endpoint, e.cls, e.count, sorted(
            json.dumps(r, sort_keys=True, default=str) for r in e.rows)) for e in reconcile.evidence)),
        "gc-tokens": ([dataclasses.astuple(t) for t in gc.tallies], sorted(map(str, gc.sample))),
        "replay-outbox": sorted((o.endpoint, o.entry_id, o.messages, o.tokens_committed) for o in stuck.outcomes),
    }


def _trace_agrees(spark, config, report) -> None:
    """trace, on every message the audit's findings name, shows exactly those findings (and no
    critical one with a verdict that needs no action), on this layout too."""
    named = named_messages(report)
    assert_agree(report, trace_all(spark, config, sorted(named), NOW, dt.timedelta(0), dt.timedelta(0)))


@pytest.fixture(scope="module")
def per_schema() -> dict[str, object]:
    """The recorded sample as recorded (a schema per endpoint): what every layout must give."""
    config = _on_duckdb(CHAOS / "eoctl.toml")
    report = _audit(config)
    return {"findings": _findings(report, CHAOS), "worst": report.worst(), **_plans(config)}


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_shared_tables_name_each_row_under_its_own_endpoint_once(per_schema, request, tmp_path: Path,
                                                                  kind: str) -> None:
    postgres = request.getfixturevalue("postgres") if kind == "postgres" else None
    shared = shared_tables(recorded_copy(tmp_path), kind, postgres)
    config = _on_duckdb(shared.config_path, shared.environ)
    layout = StoreLayout(config)
    assert {(t.endpoint, t.owner_column, t.shared) for t in layout.tables("outbox")} == {
        ("shop", "endpoint", True), ("billing", "endpoint", True), ("shipping", "endpoint", True)}

    report = _audit(config)
    assert _findings(report, shared.config_path.parent) == per_schema["findings"]
    if kind == "postgres":
        _trace_agrees(request.getfixturevalue("spark"), shared.config, report)  # trace runs on Spark
    entries = store_rows(shared, "select count(*) from shared.eo_outbox")[0][0]
    assert sum(f.count for f in report.findings if f.code == "EO301") == entries  # each pending entry once
    assert _plans(config) == {k: per_schema[k] for k in ("reconcile", "gc-tokens", "replay-outbox")}

    # gc of billing alone: the garbage token in the shared table is shipping's, so nothing of it goes
    garbage = {r[0] for r in store_rows(shared, "select token_id from shared.eo_tokens")}
    billing = gc_tokens.gc_tokens(None, config, GcOptions(grace=dt.timedelta(0), execute=True,
                                                          endpoints=["billing"]))
    assert billing.totals()["deleted"] == 0
    assert {r[0] for r in store_rows(shared, "select token_id from shared.eo_tokens")} == garbage
    # ... and the guarded delete itself never takes another endpoint's row, even when asked to
    shipping_tokens = [r[0] for r in store_rows(shared, "select token_id from shared.eo_tokens "
                                                        "where destination = 'shipping'")]
    taken = gc_tokens._journal_and_delete_tokens(layout, layout.table("billing", "tokens"), shipping_tokens,
                                                 "test-run", NOW + dt.timedelta(days=1))
    assert taken == set()
    every = gc_tokens.gc_tokens(None, config, GcOptions(grace=dt.timedelta(0), execute=True))
    assert [(t.endpoint, t.deleted) for t in every.tallies if t.deleted] == [("shipping", 1)]


@pytest.mark.parametrize("layout_kind", ["duckdb-per-schema", "postgres-shared"])
def test_a_store_without_intents_is_audited_and_collected_by_age(spark_jars, per_schema, request,
                                                                 tmp_path: Path, layout_kind: str) -> None:
    chaos = recorded_copy(tmp_path)
    if layout_kind == "postgres-shared":
        chaos = shared_tables(chaos, "postgres", request.getfixturevalue("postgres"))
    recorded = max(r[0] for r in store_rows(chaos, "select created_at from "
                                            + ("shipping" if layout_kind.endswith("schema") else "shared")
                                            + ".eo_tokens"))
    young = GcOptions(now=recorded + dt.timedelta(hours=1))  # the default 24h grace
    config = _on_duckdb(chaos.config_path, chaos.environ)
    with_intents = gc_tokens.gc_tokens(None, config, young).totals()
    # the garbage token's attempt lost (its intent says so): garbage even when young
    assert (with_intents["garbage"], with_intents["skipped_young"]) == (1, 1)
    drop_intents(chaos)

    report = _audit(config)
    assert _findings(report, chaos.config_path.parent, REGISTERED) == {key: sorted(
        json.dumps({k: v for k, v in json.loads(row).items() if k not in REGISTERED}, sort_keys=True)
        for row in rows) for key, rows in per_schema["findings"].items()}
    assert report.worst() is Severity.CRITICAL
    assert len(report.notes) == 1 and report.notes[0].startswith("no intents table for shop, billing, shipping: "
                                                                 "no register-cleanup evidence")
    assert "registered_by_attempt" not in str(report.to_dict()["findings"])
    if layout_kind == "postgres-shared":
        _trace_agrees(request.getfixturevalue("spark"), chaos.config, report)  # trace runs on Spark

    # gc: garbage only by age past the grace period (a young token of a lost attempt is just young)
    plan = gc_tokens.gc_tokens(None, config, young)
    assert (plan.totals()["garbage"], plan.totals()["skipped_young"]) == (0, 0)
    assert plan.notes == report.notes
    settled_plan = gc_tokens.gc_tokens(None, config, GcOptions(grace=dt.timedelta(0), execute=True))
    assert settled_plan.totals()["deleted"] == 1  # the orphan, past a zero grace

    if layout_kind == "duckdb-per-schema":  # as an operator runs it: exit 1 (findings), the note on stderr
        proc = run_eoctl("--config", str(chaos.config_path), "--engine", "duckdb", "audit", "--no-record",
                         "--grace", "0s", env={"EOCTL_JARS_DIR": str(spark_jars)})
        assert proc.code == 1, proc.stderr[-2000:]
        assert "note: no intents table for shop, billing, shipping" in " ".join(proc.stderr.split())


@pytest.mark.integration
def test_an_endpoint_without_an_outbox_or_tokens_says_so_and_is_audited(tmp_path: Path) -> None:
    """`tokens = false` / `outbox = false`: the table is not there, and that is the layout, not an
    error (before, the only form was a missing table: exit 3). Nothing of it is read."""
    import duckdb

    from eoctl.config import load_config
    from tests.helpers.cli import run_eoctl

    chaos = recorded_copy(tmp_path)
    with duckdb.connect(chaos.store_target) as db:
        db.execute("drop table shop.eo_tokens")
        db.execute("drop table shipping.eo_outbox")
    args = ("--config", str(chaos.config_path), "--engine", "duckdb", "--format", "json")
    missing = run_eoctl(*args, "audit", "--no-record")
    assert missing.code == 3 and "table eo_tokens does not exist" in missing.stderr
    text = chaos.config_path.read_text()
    text = text.replace('[endpoints.shop]\nstore = "shop"\n', '[endpoints.shop]\nstore = "shop"\ntokens = false\n')
    text = text.replace('[endpoints.shipping]\nstore = "shipping"\n',
                        '[endpoints.shipping]\nstore = "shipping"\noutbox = false\n')
    chaos.config_path.write_text(text)
    config = load_config(chaos.config_path)
    assert config.endpoints["shop"].store_of(config.endpoints["shop"].tokens) is None
    assert config.endpoints["shop"].store_of(config.endpoints["shop"].outbox) == "shop"
    audit = run_eoctl(*args, "audit", "--no-record")
    assert audit.code == 1, audit.stderr[-2000:]
    found = {(f["code"], f["endpoint"]) for f in json.loads(audit.stdout)["findings"]}
    assert ("EO301", "billing") in found and ("EO301", "shipping") not in found
    assert run_eoctl(*args, "doctor").code == 0
    assert run_eoctl(*args, "gc-tokens").code == 0


@pytest.mark.unit
def test_a_time_column_must_be_of_a_type_that_holds_times() -> None:
    """The types each store names (information_schema's data_type): times and text pass, numbers,
    flags, JSON and uuids do not, and the sentence names the column, its type and the key."""
    from eoctl.stores.connection import TableColumns
    from eoctl.stores.layout import wrong_type

    columns = {"token_id": "token_id", "message_id": "message_id", "destination": "destination",
               "attempt_id": "attempt_id", "created_at": "made"}

    def found(data_type: str) -> TableColumns:
        table = TableColumns()
        table.append("made")
        table.types["made"] = data_type
        return table

    for ok in ("timestamp with time zone", "timestamp without time zone", "datetime", "date", "timestamp_ns",
               "character varying", "varchar", "text"):
        assert wrong_type("table t", found(ok), "endpoints.b.tokens", "tokens", columns) is None, ok
    for bad in ("bigint", "integer", "double precision", "boolean", "json", "uuid", "blob"):
        sentence = wrong_type("table t", found(bad), "endpoints.b.tokens", "tokens", columns)
        assert sentence == (f"table t has column 'made' of type {bad}, which endpoints.b.tokens.columns.created_at "
                            "names as a time (a timestamp, datetime or date column, or text holding ISO times)")
    assert wrong_type("table t", ["made"], "endpoints.b.tokens", "tokens", columns) is None  # types unknown
