"""A wrong name is a configuration problem, never a finding (eoctl.stores.layout.Misnamed).

An endpoint renamed in the configuration while its rows keep the old name in the shared tables
(tokens `destination`, outbox and intents `endpoint`) reads as empty: judged, every in-flight record
would be a silent loss (EO202) and every pending entry's tokens orphans. Each command must instead
name the names found and the key to set, judge nothing that depends on those rows, change nothing,
and exit 6; on both engines, on DuckDB and PostgreSQL stores.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from eoctl.audit import select_codes
from tests.helpers.audits import audit_duckdb, audit_spark
from eoctl.config import load_config
from eoctl.errors import ExitCode
from eoctl.ops import gc_blobs, gc_tokens
from eoctl.ops.gc_flow import GcOptions
from eoctl.ops.reconcile import run_reconcile
from eoctl.stores.layout import StoreLayout
from tests.helpers.chaos import recorded_copy, settled, snapshot, store_rows
from tests.helpers.cli import run_eoctl
from tests.helpers.findings import canonical
from tests.helpers.layouts import shared_tables

pytestmark = pytest.mark.integration

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


def _renamed(path: Path, old: str, new: str, extra: str = "") -> Path:
    """The configuration at `path` with endpoint `old` renamed `new` (its tables unchanged)."""
    text = path.read_text().replace(f"[endpoints.{old}]", f"[endpoints.{new}]{extra}").replace(
        f"[endpoints.{old}.", f"[endpoints.{new}.").replace(f"[[endpoints.{old}.", f"[[endpoints.{new}.")
    out = path.with_name(f"eoctl-{new}.toml")
    out.write_text(text)
    return out


def _duckdb(path: Path, environ: dict[str, str] | None = None):
    return load_config(path, overrides={"kind": "duckdb"}, environ=environ or {})


def _text(report) -> str:
    import io

    from rich.console import Console

    from eoctl.report.render import render_text

    out = io.StringIO()
    render_text(report, Console(file=out, width=200))
    return " ".join(out.getvalue().split())


def _audit(config):
    return audit_duckdb(config, dataclasses.replace(settled(), now=NOW), select_codes(None, None))


def test_a_renamed_endpoint_is_named_with_the_names_its_rows_carry_and_nothing_is_judged(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    path = _renamed(chaos.config_path, "billing", "invoicing")
    config = _duckdb(path)
    before = snapshot(chaos)

    misnamed = StoreLayout(config).misnamed()
    tokens = store_rows(chaos, "select count(*) from billing.eo_tokens")[0][0]
    assert [(m.endpoint, m.kind, m.column, m.name, m.found, m.key) for m in misnamed] == [
        ("invoicing", "tokens", "destination", "invoicing", (("billing", tokens),), "endpoints.invoicing.name_in_store"),
        ("invoicing", "outbox", "endpoint", "invoicing",
         (("billing", store_rows(chaos, "select count(*) from billing.eo_outbox")[0][0]),),
         "endpoints.invoicing.name_in_store"),
        ("invoicing", "intents", "endpoint", "invoicing",
         (("billing", store_rows(chaos, "select count(*) from billing.eo_intents")[0][0]),),
         "endpoints.invoicing.name_in_store")]

    # the audit: no finding at all (a misnamed outbox holds other endpoints' tokens and sequences),
    # a note per table naming the names found and the key, then why the others are not judged
    report = _audit(config)
    assert report.findings == []
    assert [m["kind"] for m in report.misnamed] == ["tokens", "outbox", "intents"]
    assert "'billing'" in report.notes[0] and "set endpoints.invoicing.name_in_store" in report.notes[0]
    assert report.notes[3].startswith("endpoints shipping, shop not judged either")
    text = _text(report)  # not "no findings": nothing was judged
    assert "no findings" not in text and "not judged: invoicing, shipping, shop" in text
    # reconcile and gc classify nothing, and --execute changes nothing
    reconciled = run_reconcile(None, config, grace=dt.timedelta(0), now=NOW)
    assert reconciled.counts == {} and len(reconciled.misnamed) == 3
    for gc in (gc_tokens.gc_tokens, gc_blobs.gc_blobs):
        result = gc(None, config, GcOptions(grace=dt.timedelta(0), now=NOW, execute=True))
        assert result.totals()["garbage"] == 0 and len(result.misnamed) == 3
    assert snapshot(chaos) == before

    # with the key set, the same configuration audits as the sample does
    fixed = _renamed(chaos.config_path, "billing", "invoicing", '\nname_in_store = "billing"')
    assert StoreLayout(_duckdb(fixed)).misnamed() == []
    assert {(c, e) for c, e, *_ in canonical(_audit(_duckdb(fixed)))} == {
        (c, "invoicing" if e == "billing" else e) for c, e, *_ in canonical(_audit(_duckdb(chaos.config_path)))}


def test_an_endpoint_without_rows_beside_its_neighbours_is_empty_not_misnamed(tmp_path: Path) -> None:
    """shop has no token: in a table shared with billing and shipping, whose names are claimed by
    their endpoints, that is an empty scope, and nothing is refused. shipping has no intent beside
    rows under a name no endpoint claims: it has tokens under its name, so it is named right."""
    import duckdb

    shared = shared_tables(recorded_copy(tmp_path), "duckdb")
    assert store_rows(shared, "select count(*) from shared.eo_tokens where destination = 'shop'") == [(0,)]
    config = _duckdb(shared.config_path)
    assert StoreLayout(config).misnamed() == []
    assert _audit(config).misnamed == []

    with duckdb.connect(shared.store_target) as db:
        db.execute("insert into shared.eo_intents select * replace ('unconfigured' as endpoint, intent_id || 'x' "
                   "as intent_id) from shared.eo_intents")
    assert store_rows(shared, "select count(*) from shared.eo_intents where endpoint = 'shipping'") == [(0,)]
    # shop has no row anywhere: beside a name nobody claims, it may be that name (said as an if)
    assert [(m.endpoint, m.kind) for m in StoreLayout(config).misnamed()] == [("shop", "intents")]


def _cli(path: Path, environ: dict[str, str], *args: str):
    return run_eoctl("--config", str(path), "--engine", "duckdb", *args, env=environ)


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_every_command_refuses_a_renamed_endpoint_of_shared_tables(request, tmp_path: Path, kind: str) -> None:
    postgres = request.getfixturevalue("postgres") if kind == "postgres" else None
    shared = shared_tables(recorded_copy(tmp_path), kind, postgres)
    path = _renamed(shared.config_path, "billing", "invoicing")
    env = shared.environ
    before = store_rows(shared, "select count(*) from shared.eo_tokens")

    doctor = _cli(path, env, "-f", "json", "doctor")
    assert doctor.code == ExitCode.FINDINGS, doctor.stderr[-2000:]
    failed = [r for r in json.loads(doctor.stdout)["checks"] if r["status"] == "fail"]
    assert {r["check"] for r in failed} == {"table eo_tokens (endpoints.shop.tokens)",
                                            "table eo_outbox (endpoints.shop.outbox)",
                                            "table eo_intents (endpoints.shop.intents)"}
    assert all("'billing'" in r["detail"] and "endpoints.invoicing.name_in_store" in r["fix"] for r in failed)

    audit = _cli(path, env, "-f", "json", "audit", "--no-record", "--grace", "0s", "--stuck-after", "0s")
    assert audit.code == ExitCode.MISCONFIGURED, audit.stderr[-2000:]
    out = json.loads(audit.stdout)
    assert out["findings"] == [] and {m["table"] for m in out["misnamed"]} == {"eo_tokens", "eo_outbox", "eo_intents"}
    # shop has no row anywhere, so beside an unclaimed name it may be that name too (said as an if);
    # shipping has no intent, but tokens under its name: named right
    assert {m["endpoint"] for m in out["misnamed"]} == {"invoicing", "shop"}
    assert "set endpoints.invoicing.name_in_store" in audit.stderr  # said on stderr too, for cron
    assert out["summary"] == {}

    text = _cli(path, env, "reconcile-tokens")
    assert text.code == ExitCode.MISCONFIGURED and "note: endpoint invoicing not judged" in text.stderr
    # piped, a note is one line, never wrapped: what it names and the key to set stay together
    assert any(line.startswith("note: endpoint invoicing not judged") and
               line.endswith("set endpoints.invoicing.name_in_store to it") for line in text.stderr.splitlines())
    for command in (("gc-tokens", "--execute", "--grace", "0s"), ("gc-blobs", "--execute", "--grace", "0s")):
        gc = _cli(path, env, "-f", "json", *command)
        assert gc.code == ExitCode.MISCONFIGURED, gc.stderr[-2000:]
        assert json.loads(gc.stdout)["deleted"] == 0
    replay = _cli(path, env, "replay-outbox", "--execute")
    assert replay.code == ExitCode.MISCONFIGURED
    assert ("replay-outbox refused: the tables of shop, invoicing hold no row under their names, but rows under "
            "'billing'") in replay.stderr
    assert "set endpoints.shop.name_in_store / endpoints.invoicing.name_in_store to the name" in replay.stderr
    pending = store_rows(shared, "select incoming_message_id from shared.eo_outbox where endpoint = 'billing' limit 1")
    trace = _cli(path, env, "-f", "json", "trace", pending[0][0])
    assert trace.code == ExitCode.MISCONFIGURED, trace.stderr[-2000:]
    assert {m["verdict"] for m in json.loads(trace.stdout)["messages"]} == {"not judged"}
    assert store_rows(shared, "select count(*) from shared.eo_tokens") == before


def test_spark_refuses_what_duckdb_refuses(spark, tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    path = _renamed(chaos.config_path, "billing", "invoicing")
    options = dataclasses.replace(settled(), now=NOW)
    on_spark = audit_spark(spark, load_config(path), options, select_codes(None, None))
    on_duckdb = _audit(_duckdb(path))
    assert on_spark.findings == [] and on_spark.misnamed == on_duckdb.misnamed and len(on_spark.misnamed) == 3
    assert on_spark.notes == on_duckdb.notes
