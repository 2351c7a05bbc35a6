"""`eoctl audit --since-last`: an incremental audit reports exactly what a full audit reports, while
reading from the source only the records the last recorded run did not see."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path

import pytest

from eoctl import history, incremental
from eoctl.audit import select_codes
from tests.helpers.audits import audit_duckdb, audit_spark
from eoctl.config import load_config
from eoctl.config.model import Config
from eoctl.errors import Misconfigured, UsageError
from eoctl.expr.incremental import STATES
from eoctl.options import AuditOptions
from eoctl.findings import AuditReport
from tests.helpers.chaos import append_orders, recorded_copy, settled, state_names
from tests.helpers.cli import run_eoctl
from tests.helpers.configs import write_config
from tests.helpers.findings import canonical, identities

CODES = select_codes(None, None)


def _options(**kw) -> AuditOptions:
    opts = settled()
    for k, v in kw.items():
        setattr(opts, k, v)
    return opts


def _recorded(spark, config: Config, codes: list[str] = CODES, **kw) -> AuditReport:
    """An audit that keeps its record index, recorded: on Spark, or on DuckDB when `spark` is None."""
    if spark is None:
        report = audit_duckdb(config, _options(keep_index=True, **kw), codes)
    else:
        report = audit_spark(spark, config, _options(keep_index=True, **kw), codes)
    incremental.record(spark, config, report)
    return report


def _rows(report: AuditReport, code: str) -> list[dict]:
    return [r for f in report.findings if f.code == code for r in f.evidence]


def _full_on_duckdb(config: Config) -> AuditReport:
    return audit_duckdb(config, settled(), CODES)


@pytest.mark.integration
def test_an_incremental_audit_after_appending_reports_what_a_full_audit_reports(tmp_path: Path) -> None:
    """On the DuckDB engine (seconds): what is kept, continued and merged is eoctl.incremental's rule
    on both; Spark's runs of it (continuing, and merging, an index DuckDB wrote) are
    test_a_run_on_one_engine_continues_from_a_run_on_the_other."""
    spark = None
    chaos = recorded_copy(tmp_path)
    # the first run audits the topic checks only: it still keeps every state, so the next one
    # continues every check
    first = _recorded(spark, chaos.config, select_codes(["EO1"], None))
    states = first.run["scan"].pop("states")
    assert first.run["scan"] == {"mode": "full", "new_records": first.scanned["records"], "indexed_records": 0}
    assert set(states) == set(STATES) and all(s["bytes"] > 0 for s in states.values())
    # the chaos sample's messages seen twice (EO101's and EO102's), as the state of the next run
    assert states["repeated_keys"]["rows"] == len({(r["message_id"]) for code in ("EO101", "EO102")
                                                   for r in _rows(first, code)})
    index = Path(incremental.records_root(chaos.config)) / first.run["id"]
    assert index.is_dir() and not list(index.parent.glob("partial-*"))
    # the run's folder holds its segment of records and its states
    assert {p.name for p in index.iterdir()} == {"records", "state"}
    assert {p.name for p in (index / "state").iterdir()} == set(STATES)

    appended = append_orders(chaos.config_path.parent, "part-1.parquet")
    incr = _recorded(spark, chaos.config, since_last=True)
    full = _full_on_duckdb(chaos.config)

    # the first run read no sink: the shipping sink is read whole once, and its states kept
    assert set(incr.run["scan"].pop("states")) == state_names(chaos.config)
    assert incr.run["scan"] == {"mode": "incremental", "base_run": first.run["id"], "new_records": appended,
                                "indexed_records": first.scanned["records"], "continued": sorted(STATES),
                                "sinks": {"shipping/shipments": "whole: the last run kept no state for this "
                                                                "sink's configuration"},
                                "index_read": "narrow"}
    assert incr.scanned == full.scanned
    assert identities(incr) == identities(full)
    # the boundary cases are there: each pairs an appended record with one the index holds
    for code, where in (("EO101", "orders"), ("EO102", "orders"), ("EO103", "orders")):
        assert len(identities(full)[(code, "billing", where)][1]) > len(identities(first).get(
            (code, "billing", where), (0, []))[1])

    # The next run continues from the incremental one: nothing is new, the appended records (in
    # flight: the consumer has not committed them) come from the index.
    again = _recorded(spark, chaos.config, since_last=True)
    assert again.run["scan"]["base_run"] == incr.run["id"] and again.run["scan"]["new_records"] == 0
    assert again.run["scan"]["continued"] == sorted(state_names(chaos.config))
    assert identities(again) == identities(full)
    # once the consumer commits them, they come from the index, now processed
    offsets = chaos.config_path.parent / "topics" / "orders" / "_committed_offsets.json"
    offsets.write_text(json.dumps({"orders": {"0": 22, "1": 26}}))
    committed = _recorded(spark, chaos.config, since_last=True)
    assert committed.run["scan"]["new_records"] == 0
    assert identities(committed) == identities(_full_on_duckdb(chaos.config))
    assert identities(committed) != identities(full)  # the appended records are processed now
    # The index is layered: the first run's segment, then the appended records' own; the runs
    # that read nothing new added no segment, only their states. Only the folders the two newest
    # indexes read stay: the segments' and the states of `again` and `committed`.
    assert [Path(s.path).parent.name for s in committed.index.segments] == [first.run["id"], incr.run["id"]]
    assert {Path(f.path).parent.parent.name for f in committed.index.states.values()} == {committed.run["id"]}
    kept = sorted(p.name for p in index.parent.iterdir())
    assert kept == sorted([first.run["id"], incr.run["id"], again.run["id"], committed.run["id"]])

    # A second append as large as the first: the two newest segments are merged into one, and the
    # findings still equal a full audit's.
    append_orders(chaos.config_path.parent, "part-2.parquet")
    merged = _recorded(spark, chaos.config, since_last=True)
    assert merged.run["scan"]["new_records"] == appended
    assert identities(merged) == identities(_full_on_duckdb(chaos.config))
    assert [(Path(s.path).parent.name, Path(s.path).name, s.records) for s in merged.index.segments] == [
        (first.run["id"], "records", first.scanned["records"]), (merged.run["id"], "merged", 2 * appended)]
    assert not (index.parent / merged.run["id"] / "records").exists()


def _sinkidentities(report: AuditReport) -> dict[str, list]:
    """EO501's source message ids and EO502's order ids, as the audit reported them."""
    found = {f.code: f for f in report.findings}
    return {"EO501": sorted(r["source_message_id"] for r in found["EO501"].evidence) if "EO501" in found else [],
            "EO502": sorted((r["order_id"] for r in found["EO502"].evidence), key=_nulls_first)
            if "EO502" in found else []}


def _nulls_first(value):
    return (value is not None, value)


def _sink_truth(store: str) -> dict[str, list]:
    """The same, computed by DuckDB from the whole sink table."""
    import duckdb

    with duckdb.connect(store, read_only=True) as db:
        twice = db.execute("select source_message_id from shipping.shipments group by 1 having count(*) > 1 "
                           "order by 1").fetchall()
        conflicting = db.execute("select order_id from shipping.shipments group by 1 having count(distinct "
                                 "(invoice_id, source_message_id)) > 1 order by 1").fetchall()
    return {"EO501": [r[0] for r in twice], "EO502": sorted((r[0] for r in conflicting), key=_nulls_first)}


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_sink_rows_added_removed_or_rewritten_after_the_last_run_are_seen(spark, tmp_path: Path, engine: str) -> None:
    """A run continuing from the index reads the rows written since the last run (the shipping
    sink's applied_at is its watermark column) and the groups they touch: rows added after the
    last run, deleted ones, and old rows rewritten in place are seen as a full audit sees them."""
    import duckdb

    spark = spark if engine == "spark" else None
    chaos = recorded_copy(tmp_path)
    codes = select_codes(["EO5"], None)
    with duckdb.connect(chaos.store_target) as db:  # a row without an order: the NULL key's one row
        db.execute("alter table shipping.shipments alter column order_id drop not null")
        db.execute("insert into shipping.shipments values ('null-0', NULL, 'inv-n0', 'message-n0', now())")
    first = _recorded(spark, chaos.config, codes)
    assert _sinkidentities(first) == _sink_truth(chaos.store_target) and _sinkidentities(first)["EO501"]
    assert None not in _sinkidentities(first)["EO502"]

    # written after the first run: a second row for an old message (EO501), another invoice for an
    # old order (EO502), another for the NULL key (a group of its own: EO502 over both of its
    # rows), a normal row
    with duckdb.connect(chaos.store_target) as db:
        old = db.execute("select order_id, invoice_id, source_message_id from shipping.shipments "
                         "where order_id in (0, 1) order by order_id").fetchall()
        db.executemany("insert into shipping.shipments values (?, ?, ?, ?, now())", [
            ("late-0", old[0][0], old[0][1], old[0][2]), ("late-1", old[1][0], "inv-late", "late-message"),
            ("late-2", 1000, "inv-1000", "message-1000"), ("null-1", None, "inv-n1", "message-n1")])
    incr = _recorded(spark, chaos.config, codes, since_last=True)
    assert incr.run["scan"]["mode"] == "incremental"
    assert incr.run["scan"]["continued"] == sorted(state_names(chaos.config))
    assert incr.run["scan"]["sinks"] == {"shipping/shipments": "new rows and the rows of the groups they or the "
                                                               "states name"}
    assert _sinkidentities(incr) == _sink_truth(chaos.store_target)
    assert old[0][2] in _sinkidentities(incr)["EO501"] and old[1][0] in _sinkidentities(incr)["EO502"]
    assert None in _sinkidentities(incr)["EO502"]

    # the repair: the second row of order 0 is deleted, and the finding is gone
    with duckdb.connect(chaos.store_target) as db:
        db.execute("delete from shipping.shipments where shipment_id = 'late-0'")
    repaired = _recorded(spark, chaos.config, codes, since_last=True)
    assert _sinkidentities(repaired) == _sink_truth(chaos.store_target)
    assert old[0][2] not in _sinkidentities(repaired)["EO501"]

    # an old row rewritten in place (which sets applied_at, the sink's watermark column) is seen too
    with duckdb.connect(chaos.store_target) as db:
        db.execute("update shipping.shipments set order_id = 2, applied_at = now() where order_id = 3")
    rewritten = _recorded(spark, chaos.config, codes, since_last=True)
    assert 2 in _sink_truth(chaos.store_target)["EO502"]
    assert _sinkidentities(rewritten) == _sink_truth(chaos.store_target)


@pytest.mark.integration
def test_a_watermark_that_cannot_be_kept_reads_the_sink_whole_and_says_why(spark, tmp_path: Path) -> None:
    """A watermark column of text is no mark: the sink is read whole, as a full audit reads it,
    and run.scan says why. A watermark column the sink lacks is a configuration problem, the same
    one line on both engines."""
    import duckdb

    chaos = recorded_copy(tmp_path)
    text = chaos.config_path.read_text()
    chaos.config_path.write_text(text.replace('watermark_column = "applied_at"', 'watermark_column = "invoice_id"'))
    config = load_config(chaos.config_path)
    codes = select_codes(["EO5"], None)
    _recorded(None, config, codes)
    with duckdb.connect(chaos.store_target) as db:  # another invoice for an old order: EO502
        db.execute("insert into shipping.shipments select 'late-0', order_id, 'inv-late', source_message_id, now() "
                   "from shipping.shipments where order_id = 0")
    incr = _recorded(None, config, codes, since_last=True)
    assert incr.run["scan"]["sinks"] == {"shipping/shipments": "whole: its watermark_column invoice_id holds string, "
                                                               "not an integer or a time"}
    assert set(incr.run["scan"]["continued"]) == set(STATES)
    assert 0 in _sinkidentities(incr)["EO502"] and _sinkidentities(incr) == _sink_truth(chaos.store_target)

    chaos.config_path.write_text(text.replace('watermark_column = "applied_at"', 'watermark_column = "written_at"'))
    config = load_config(chaos.config_path)
    for engine in (None, spark):
        with pytest.raises(Misconfigured, match="sink shipments has no column 'written_at'") as refused:
            _recorded(engine, config, codes, since_last=True)
        assert refused.value.exit_code == 6 and "applied_at" in str(refused.value)
        assert "which endpoints.shipping.sinks[0].watermark_column names" in str(refused.value)


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_token_checks_after_offsets_moved_back_or_old_tokens_restored(spark, tmp_path: Path, engine: str) -> None:
    import duckdb

    chaos = recorded_copy(tmp_path)
    codes = select_codes(["EO2"], None)

    def audit(**kw) -> AuditReport:
        if engine == "spark":
            return _recorded(spark, chaos.config, codes, **kw)
        report = audit_duckdb(chaos.config, _options(keep_index=True, **kw), codes)
        incremental.record(None, chaos.config, report)
        return report

    def full() -> AuditReport:  # on DuckDB (seconds; the parity tests hold the engines equal)
        return audit_duckdb(chaos.config, settled(), codes)

    audit()
    # new in-flight records whose tokens are in no store (EO202 candidates), and old ones again
    append_orders(chaos.config_path.parent, "part-1.parquet")
    incr = audit(since_last=True)
    assert incr.run["scan"]["mode"] == "incremental"
    assert identities(incr) == identities(full())

    # the consumer's offset is reset 3 records back: those are in flight again
    offsets = chaos.config_path.parent / "topics" / "orders" / "_committed_offsets.json"
    committed = json.loads(offsets.read_text())
    committed["orders"]["0"] -= 3
    offsets.write_text(json.dumps(committed))
    back = audit(since_last=True)
    assert back.run["scan"]["mode"] == "incremental" and identities(back) == identities(full())

    # a processed record's token put back with its old creation time (as gc-tokens --restore does):
    # the token is leaked
    with duckdb.connect() as db:
        token, message = db.execute(
            "select list_filter(headers, lambda h: h.key = 'eo-token-id')[1].value::varchar, "
            "list_filter(headers, lambda h: h.key = 'eo-message-id')[1].value::varchar from "
            f"read_parquet('{chaos.config_path.parent}/topics/orders/*.parquet') "
            "where \"partition\" = 0 and \"offset\" = 0").fetchone()
    with duckdb.connect(chaos.store_target) as db:
        assert db.execute("select count(*) from billing.eo_tokens where token_id = ?", [token]).fetchone()[0] == 0
        db.execute("insert into billing.eo_tokens values (?, ?, 'billing', 'restored', timestamptz '2020-01-01')",
                   [token, message])
    restored = audit(since_last=True)
    assert identities(restored) == identities(full())
    assert any(token in item for item in identities(restored)[("EO203", "billing", "eo_tokens")][1])


def _copies_on_a_second_topic(folder: Path) -> tuple[str, str, str]:
    """billing reads a second topic, `orders-retry`, whose three records are processed; two of
    their messages, A and B, each have a second record in flight on `orders` under a new token:
    A's in no store (unheld), B's in billing's. Neither is a loss (each has a processed copy), but
    only a look-up of the other topic, or the copy carried from the last run, shows it. The
    message ids of A and B and B's new token."""
    import duckdb

    archive = folder / "topics" / "orders"
    ids = [uuid.uuid4().hex for _ in range(3)]
    held = uuid.uuid4().hex

    def record(topic: str, partition: int, offset: str, mid: str, token: str) -> str:
        headers = ", ".join(f"{{'key': '{k}', 'value': encode('{v}')}}"
                            for k, v in (("eo-message-id", mid), ("eo-token-id", token), ("eo-producer", "retry")))
        return (f"select '{topic}' as topic, {partition} as \"partition\", {offset}::bigint as \"offset\", "
                f"now() as timestamp, encode('{mid}') as key, encode('v') as value, [{headers}] as headers")

    db = duckdb.connect()
    db.execute(f"create table old as select * from read_parquet('{archive}/*.parquet')")
    end = "(select max(\"offset\") + 1 from old where \"partition\" = 0)"
    retry = [record("orders-retry", 0, str(i), mid, uuid.uuid4().hex) for i, mid in enumerate(ids)]
    again = [record("orders", 0, end, ids[0], uuid.uuid4().hex), record("orders", 0, f"{end} + 1", ids[1], held)]
    for name, rows in (("retry.parquet", retry), ("again.parquet", again)):
        db.execute(f"copy ({' union all '.join(rows)}) to '{archive / name}' (format parquet)")
    with duckdb.connect(str(folder / "state.duckdb")) as store:
        store.execute("insert into billing.eo_tokens values (?, ?, 'billing', 'again', now())", [held, ids[1]])
    offsets = archive / "_committed_offsets.json"
    committed = json.loads(offsets.read_text())
    committed["orders-retry"] = {"0": 3}  # every record of it processed: they lie below the in-flight floor
    offsets.write_text(json.dumps(committed))
    config = folder / "eoctl.toml"
    config.write_text(config.read_text().replace('topics = ["orders"]', 'topics = ["orders", "orders-retry"]'))
    return ids[0], ids[1], held


@pytest.mark.integration
def test_a_message_in_flight_without_its_token_keeps_its_processed_copy_on_another_topic(tmp_path: Path) -> None:
    """EO202 across topics, on the DuckDB engine (the one that reads the index by key): a record in
    flight whose token is gone is no loss while its message has a processed record on another
    topic. A message the last run saw so is not looked up again: its processed record is carried
    (unheld_messages); one whose token went since is looked up."""
    import duckdb

    chaos = recorded_copy(tmp_path)
    a, b, b_token = _copies_on_a_second_topic(chaos.config_path.parent)
    config = load_config(chaos.config_path)
    codes = select_codes(["EO1", "EO2"], None)

    def losses(report: AuditReport) -> set[str]:
        return {r["message_id"] for f in report.findings if f.code == "EO202" for r in f.evidence}

    first = _recorded(None, config, codes)
    assert not {a, b} & losses(first)
    carried = _recorded(None, config, codes, since_last=True)  # A unheld as the last run saw it: carried
    full = audit_duckdb(config, settled(), codes)
    assert carried.run["scan"]["index_read"] == "narrow"
    assert identities(carried) == identities(full) and not {a, b} & losses(carried)

    with duckdb.connect(chaos.store_target) as store:  # B's token goes: B is unheld now, looked up
        store.execute("delete from billing.eo_tokens where token_id = ?", [b_token])
    looked_up = _recorded(None, config, codes, since_last=True)
    full = audit_duckdb(config, settled(), codes)
    assert looked_up.run["scan"]["index_read"] == "narrow"
    assert identities(looked_up) == identities(full) and not {a, b} & losses(looked_up)


@pytest.mark.integration
def test_a_message_whose_token_went_since_is_no_loss_with_its_sink_row_written_before(tmp_path: Path) -> None:
    """EO202 over a narrowed sink (billing's invoices, watermarked): a record in flight whose token
    went after the last run is no loss when the sink holds its message's row, written before that
    run (below the mark): the messages without a held token are among the ids whose sink rows the
    run reads (UNHELD in `touched`)."""
    import duckdb

    from tests.helpers.appends import BILLING_SINK

    chaos = recorded_copy(tmp_path)
    chaos.config_path.write_text(chaos.config_path.read_text() + BILLING_SINK)
    folder = chaos.config_path.parent
    mid, token = uuid.uuid4().hex, uuid.uuid4().hex
    headers = ", ".join(f"{{'key': '{k}', 'value': encode('{v}')}}"
                        for k, v in (("eo-message-id", mid), ("eo-token-id", token), ("eo-producer", "late")))
    with duckdb.connect() as db:  # a record past billing's committed offset: in flight
        db.execute(f"copy (select topic, \"partition\", max(\"offset\") + 1 as \"offset\", now() as timestamp, "
                   f"encode('{mid}') as key, encode('v') as value, [{headers}] as headers from read_parquet("
                   f"'{folder}/topics/orders/*.parquet') where \"partition\" = 0 group by all) "
                   f"to '{folder}/topics/orders/in-flight.parquet' (format parquet)")
    with duckdb.connect(chaos.store_target) as store:  # its token held, its invoice written
        store.execute("insert into billing.eo_tokens values (?, ?, 'billing', 'a', now())", [token, mid])
        store.execute("insert into billing.invoices select min(order_id) - 1, 'inv-late', 1, '', ?, 'a' "
                      "from billing.invoices", [mid])  # an early write: below the mark the run keeps
    config = load_config(chaos.config_path)
    codes = select_codes(["EO2", "EO5"], None)

    def losses(report: AuditReport) -> set[str]:
        return {r["message_id"] for f in report.findings if f.code == "EO202" for r in f.evidence}

    assert mid not in losses(_recorded(None, config, codes))
    with duckdb.connect(chaos.store_target) as store:
        store.execute("delete from billing.eo_tokens where token_id = ?", [token])
    incr = _recorded(None, config, codes, since_last=True)
    assert incr.run["scan"]["sinks"]["billing/invoices"].startswith("new rows and the rows of the groups")
    assert identities(incr) == identities(audit_duckdb(config, settled(), codes)) and mid not in losses(incr)


@pytest.mark.integration
def test_a_causation_a_pending_entry_names_keeps_its_ghosts_in_view(tmp_path: Path) -> None:
    """EO302 by a pending entry, on the DuckDB engine (the one that reads the index by key): a
    record sent under another attempt than the one billing's pending entry names is a ghost. A
    causation an entry named for the last run is not looked up again: its records are carried
    (pending_causations); one an entry names since is looked up."""
    import duckdb

    chaos = recorded_copy(tmp_path)
    codes = select_codes(["EO302"], None)
    with duckdb.connect() as db:  # two records billing sent, below every partition's committed offset
        first_two = db.execute(
            "select list_filter(headers, lambda h: h.key = 'eo-causation-id')[1].value::varchar from read_parquet("
            f"'{chaos.config_path.parent}/topics/invoices/*.parquet') where \"partition\" = 0 and \"offset\" < 2 "
            "order by \"offset\"").fetchall()
    (c1,), (c2,) = first_two

    def pending(causation: str) -> None:  # billing's entry for it, under an attempt that never sent
        with duckdb.connect(chaos.store_target) as store:
            store.execute("insert into billing.eo_outbox values ('billing', ?, ?, ?, '[]', null, now(), now(), 1)",
                          [causation, uuid.uuid4().hex, uuid.uuid4().hex])

    def ghosts(report: AuditReport) -> set[str]:
        return {r["causation_id"] for f in report.findings if f.code == "EO302" for r in f.evidence}

    pending(c1)
    assert c1 in ghosts(_recorded(None, chaos.config, codes))
    carried = _recorded(None, chaos.config, codes, since_last=True)
    assert carried.run["scan"]["index_read"] == "narrow"
    assert identities(carried) == identities(audit_duckdb(chaos.config, settled(), codes)) and c1 in ghosts(carried)

    pending(c2)
    looked_up = _recorded(None, chaos.config, codes, since_last=True)
    assert looked_up.run["scan"]["index_read"] == "narrow"
    assert identities(looked_up) == identities(audit_duckdb(chaos.config, settled(), codes))
    assert {c1, c2} <= ghosts(looked_up)


@pytest.mark.integration
def test_without_an_earlier_run_or_with_other_inputs_it_is_a_full_scan(tmp_path: Path) -> None:
    """On the DuckDB engine: choosing the base run is the same code on both."""
    chaos = recorded_copy(tmp_path)
    alone = audit_duckdb(chaos.config, _options(since_last=True), CODES)
    assert alone.run["scan"]["mode"] == "full" and alone.run["scan"]["reason"].startswith(incremental.NO_BASE)
    assert "the findings history has no run yet" in alone.run["scan"]["reason"]
    # a recorded run without --since-last keeps no index: said so, with how to start one
    incremental.record(None, chaos.config, audit_duckdb(chaos.config, settled(), CODES))
    unindexed = audit_duckdb(chaos.config, _options(since_last=True, keep_index=True), CODES)
    assert unindexed.run["scan"]["mode"] == "full"
    assert ("the 1 recorded run(s) kept no record index: only a recorded `eoctl audit --since-last` keeps one; "
            "this run keeps one") in unindexed.run["scan"]["reason"]
    _audit_on("duckdb", None, chaos.config)

    # the same endpoints, but shipping reads another archive: its index rows are not that input's
    text = chaos.config_path.read_text().replace('archive = "topics/invoices"', 'archive = "topics/invoices2"')
    import shutil

    shutil.copytree(chaos.config_path.parent / "topics" / "invoices", chaos.config_path.parent / "topics" / "invoices2")
    other = write_config(chaos.config_path.parent, text, name="other.toml")
    changed = load_config(other)
    report = audit_duckdb(changed, _options(since_last=True), CODES)
    assert report.run["scan"] == {"mode": "full", "new_records": report.scanned["records"], "indexed_records": 0,
                                  "reason": incremental.no_base_reason(changed, False)}
    assert "no recorded index covers these inputs" in report.run["scan"]["reason"]

    # a subset of the recorded endpoints continues from it
    subset = audit_duckdb(chaos.config, _options(since_last=True, endpoints=["shipping"]), CODES)
    assert subset.run["scan"]["mode"] == "incremental" and subset.run["scan"]["new_records"] == 0

    with pytest.raises(UsageError, match="--since-last"):
        audit_duckdb(chaos.config, _options(since_last=True, since=settled().now), CODES)


@pytest.mark.integration
def test_a_run_on_one_engine_continues_from_a_run_on_the_other(spark, tmp_path: Path) -> None:
    """The record index is the same Parquet on both engines: Spark continues from a DuckDB run,
    DuckDB from a Spark run, each reporting what a full audit reports."""
    chaos = recorded_copy(tmp_path)
    on_duckdb = audit_duckdb(chaos.config, _options(keep_index=True), CODES)
    incremental.record(None, chaos.config, on_duckdb)
    appended = append_orders(chaos.config_path.parent, "part-1.parquet")

    on_spark = _recorded(spark, chaos.config, since_last=True)
    assert set(on_spark.run["scan"].pop("states")) == state_names(chaos.config)
    assert on_spark.run["scan"].pop("sinks") == {"shipping/shipments": "new rows and the rows of the groups they "
                                                                       "or the states name"}
    assert on_spark.run["scan"] == {"mode": "incremental", "base_run": on_duckdb.run["id"], "new_records": appended,
                                    "indexed_records": on_duckdb.scanned["records"],
                                    "continued": sorted(state_names(chaos.config)), "index_read": "whole"}
    # the full audits to compare with run on DuckDB (seconds; the parity tests hold the engines equal)
    assert identities(on_spark) == identities(_full_on_duckdb(chaos.config))

    append_orders(chaos.config_path.parent, "part-2.parquet")
    back = audit_duckdb(chaos.config, _options(keep_index=True, since_last=True), CODES)
    incremental.record(None, chaos.config, back)
    assert back.run["scan"]["base_run"] == on_spark.run["id"] and back.run["scan"]["new_records"] == appended
    at_same_time = _options(now=dt.datetime.fromisoformat(back.run["started_at"]))
    assert canonical(back) == canonical(audit_duckdb(chaos.config, at_same_time, CODES))
    # DuckDB merged Spark's segment with its own: Spark reads the merged file next
    assert [Path(s.path).name for s in back.index.segments] == ["records", "merged"]
    again = _recorded(spark, chaos.config, since_last=True)
    assert again.run["scan"]["base_run"] == back.run["id"] and again.run["scan"]["new_records"] == 0
    assert identities(again) == identities(_full_on_duckdb(chaos.config))

    # Twice as many records as DuckDB merged: Spark merges that segment with its own
    more = append_orders(chaos.config_path.parent, "part-3.parquet") + append_orders(
        chaos.config_path.parent, "part-4.parquet")
    merged = _recorded(spark, chaos.config, since_last=True)
    assert merged.run["scan"]["new_records"] == more == 2 * appended
    assert identities(merged) == identities(_full_on_duckdb(chaos.config))
    assert [(Path(s.path).parent.name, Path(s.path).name, s.records) for s in merged.index.segments] == [
        (on_duckdb.run["id"], "records", on_duckdb.scanned["records"]), (merged.run["id"], "merged", 4 * appended)]


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_a_killed_audit_leaves_no_index_a_later_run_would_trust(spark, tmp_path: Path, engine: str) -> None:
    chaos = recorded_copy(tmp_path)
    spark = spark if engine == "spark" else None
    codes = ["EO101"]  # the index is every record's, whatever the checks
    report = (audit_spark(spark, chaos.config, _options(keep_index=True), codes) if spark else
              audit_duckdb(chaos.config, _options(keep_index=True), codes))
    # killed before the run was recorded: the index is in place, but no history row names it
    assert incremental.find_base(spark, chaos.config, dict(chaos.config.endpoints)) == (None, None)
    partial = Path(incremental.partial_path(chaos.config, "dead00000000"))
    partial.mkdir(parents=True)  # a killed audit's half-written working copy
    incremental.record(spark, chaos.config, report)
    base, why = incremental.find_base(spark, chaos.config, dict(chaos.config.endpoints))
    assert base is not None and base.run_id == report.run["id"] and why is None
    assert partial.exists()  # young: it may be a running audit's; removed once older than a day


@pytest.mark.integration
def test_an_old_history_without_record_indexes_gains_the_column(tmp_path: Path) -> None:
    """On the DuckDB engine: the findings history is the same code on both."""
    import duckdb

    chaos = recorded_copy(tmp_path)
    with duckdb.connect(chaos.config.history.path) as db:
        db.execute("create table eoctl_audit_runs (run_id varchar primary key, started_at timestamptz, "
                   "finished_at timestamptz, config_digest varchar, endpoints varchar, codes varchar, "
                   "counts varchar, scanned varchar)")
    assert history.indexed_runs(chaos.config) == []
    first = _recorded(None, chaos.config)
    assert [r for r, _ in history.indexed_runs(chaos.config)] == [first.run["id"]]


@pytest.mark.integration
def test_the_cli_flag_reports_the_scan_mode(tmp_path: Path) -> None:
    """The flag from the command line, on the DuckDB engine (seconds; the Spark engine's runs of
    the same code path are the tests above, in process)."""
    chaos = recorded_copy(tmp_path)
    audit = ("--engine", "duckdb", "--config", str(chaos.config_path), "--format", "json", "audit",
             "--fail-on", "critical")
    plain = run_eoctl(*audit)
    assert plain.code in (0, 1), plain.stderr
    records = chaos.config_path.parent / "eoctl-history.records"
    assert not records.exists() or not any(records.iterdir())  # a plain audit keeps no copy of the records
    args = (*audit, "--since-last")
    first = run_eoctl(*args)
    assert first.code in (0, 1), first.stderr
    assert json.loads(first.stdout)["run"]["scan"]["mode"] == "full"
    assert "no earlier run to continue from: full scan" in first.stderr
    append_orders(chaos.config_path.parent, "part-1.parquet")
    second = run_eoctl(*args)
    scan = json.loads(second.stdout)["run"]["scan"]
    states, sinks = scan.pop("states"), scan.pop("sinks")
    assert scan == {"mode": "incremental", "base_run": json.loads(first.stdout)["run"]["id"], "new_records": 6,
                    "indexed_records": json.loads(first.stdout)["scanned"]["records"],
                    "continued": sorted(state_names(chaos.config)), "index_read": "narrow"}
    assert set(states) == state_names(chaos.config) and all(set(s) == {"rows", "bytes"} for s in states.values())
    assert list(sinks) == ["shipping/shipments"]
    assert json.loads(second.stdout)["scanned"]["records"] == json.loads(first.stdout)["scanned"]["records"] + 6
    bad = run_eoctl("--config", str(chaos.config_path), "audit", "--since-last", "--range", "orders:0")
    assert bad.code == 2 and "--since-last" in bad.stderr and "Traceback" not in bad.stderr


def _message(partition: int, mid: str, token: str, seq: int, producer: str = "shop") -> dict:
    return {"partition": partition, "value": b"v", "headers": [
        ("eo-message-id", mid.encode()), ("eo-token-id", token.encode()), ("eo-producer", producer.encode()),
        ("eo-sequence", str(seq).encode())]}


def _audit_on(engine: str, spark, config: Config, record: bool = True, **kw) -> AuditReport:
    """An audit of every code on `engine` (recorded, keeping an index, unless `record` is false)."""
    if engine == "spark":
        return _recorded(spark, config, **kw) if record else audit_spark(spark, config, _options(**kw), CODES)
    report = audit_duckdb(config, _options(keep_index=record, **kw), CODES)
    if record:
        incremental.record(None, config, report)
    return report


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_on_a_live_topic_it_reads_only_new_offsets_and_finds_what_a_full_audit_finds(
        spark, kafka, tmp_path: Path, engine: str) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from tests.helpers.configs import live_input_config
    from tests.helpers.kafka_data import commit_group_offsets, produce

    topic = f"incr-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    # m1-1 is redelivered on partition 0 (EO101), its first copy is among what retention takes below
    produce(kafka.bootstrap, topic, [_message(p, f"m{p}-{i}", f"t{p}-{i}", 10 * i + p) for p in (0, 1)
                                     for i in range(10)] + [_message(0, "m1-1", "t1-1", 11)])
    commit_group_offsets(kafka.bootstrap, "billing", topic, {0: 4})
    config = load_config(live_input_config(tmp_path, kafka.bootstrap, topic))
    first = _audit_on(engine, spark, config)
    assert first.scanned["records"] == 21
    assert any("m1-1" in item for item in identities(first)[("EO101", "billing", topic)][1])

    # more records: across the boundary, a redelivery (EO101), a new token for an old message
    # (EO102), an old (producer, sequence) on a new message (EO103); and normal ones
    produce(kafka.bootstrap, topic, [
        _message(0, "m1-5", "t1-5", 51), _message(1, "m0-3", "t0-3-again", 30), _message(1, "n-1", "tn-1", 50),
        _message(0, "n-2", "tn-2", 200), _message(1, "n-3", "tn-3", 210, producer="late")])
    commit_group_offsets(kafka.bootstrap, "billing", topic, {0: 6})  # the consumer moved on
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})  # kept alive until the futures resolve
    for f in admin.delete_records([TopicPartition(topic, 1, 3)]).values():  # retention took 0..2 of partition 1
        f.result(30)

    incr = _audit_on(engine, spark, config, since_last=True)
    full = _audit_on(engine, spark, config, record=False)
    # each partition is read from what the index read (11 and 10), whatever the committed offsets;
    # the index gives partition 0's offsets 0..10 (4..10 now processed up to 6) and partition 1's
    # 3..9 (0..2 are gone)
    # retention took indexed records: EO104's ranges are read from every record again, said in a note
    assert set(incr.run["scan"].pop("states")) == set(STATES)
    assert incr.run["scan"].pop("note").startswith("retention took indexed records since the last run")
    # retention took indexed records: the carried records may name some of them, so every indexed
    # row is probed
    assert incr.run["scan"] == {"mode": "incremental", "base_run": first.run["id"], "new_records": 2 + 3,
                                "indexed_records": 11 + 7, "continued": sorted(STATES), "index_read": "whole"}
    assert incr.scanned == full.scanned == {"records": 23}
    assert identities(incr) == identities(full)
    # m1-1's other copy is gone: the finding is gone too, as in a full audit
    assert not any("m1-1" in item for item in identities(incr)[("EO101", "billing", topic)][1])
    codes = {code for code, _, _ in identities(full)}
    assert {"EO101", "EO102", "EO103"} <= codes


def _scan_rows(df) -> int:
    """Rows the Parquet scan of `df` (a filtered file scan, no exchange) returned to the filter
    above it: what the row groups it did not skip held."""
    df.collect()
    leaves = df._jdf.queryExecution().executedPlan().collectLeaves()
    return sum(leaves.apply(i).metrics().apply("numOutputRows").value() for i in range(leaves.size()))


@pytest.mark.integration
def test_the_archive_predicate_keeps_new_and_unknown_rows_and_skips_old_row_groups(spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    from eoctl.incremental import PartitionPlan
    from eoctl.engine.spark.records import archive_predicate

    plans = [PartitionPlan("orders", 0, 990), PartitionPlan("orders", 2, 995), PartitionPlan("orders", 3, 1000)]
    # orders has partitions 0-4 (1 and 4 unknown to the index), refunds is unknown; rows ordered
    # by topic and offset, as an archive is written: every row group holds every partition
    rows = spark.range(1000).select(F.col("id").alias("offset")).crossJoin(
        spark.createDataFrame([("orders", p) for p in range(5)] + [("refunds", 0)], "topic string, partition int"))
    path = str(tmp_path / "archive")
    rows.orderBy("topic", "offset", "partition").coalesce(1).write.option("parquet.block.size", 8 * 1024).parquet(path)
    picked = spark.read.parquet(path).where(archive_predicate(plans))
    got = {(r["topic"], r["partition"]): (r["n"], r["low"]) for r in picked.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("n"), F.min("offset").alias("low")).collect()}
    assert got == {("orders", 0): (10, 990), ("orders", 1): (1000, 0), ("orders", 2): (5, 995),
                   ("orders", 4): (1000, 0), ("refunds", 0): (1000, 0)}

    # with every partition known, only the row groups holding new offsets are read
    known = [PartitionPlan("orders", p, 990) for p in range(5)] + [PartitionPlan("refunds", 0, 990)]
    read = _scan_rows(spark.read.parquet(path).where(archive_predicate(known)))
    # 60 new rows of 6,000, in 17 row groups of about 350 rows; NOT(known partitions) read 5,290
    assert 60 <= read <= 1000, read


@pytest.mark.integration
def test_eo204_on_an_archive_continues_from_the_first_offsets_the_index_kept(spark, tmp_path: Path) -> None:
    from eoctl.history import RUNS, history_db
    from samples.generator import GenSpec, generate

    generate(GenSpec(2000, tmp_path / "g", partitions=2, log_start_gap=True))
    config = load_config(tmp_path / "g" / "eoctl.toml")
    first = _recorded(spark, config, ["EO204"])
    (finding,) = first.findings
    assert [(r["partition"], r["log_start"]) for r in finding.evidence] == [(0, 1)]
    assert first.index.lows == {finding.endpoint: {"orders": {0: 1, 1: 0}}}

    again = _recorded(spark, config, ["EO204"], since_last=True)
    assert again.run["scan"]["mode"] == "incremental"
    assert identities(again) == identities(first)
    assert again.index.lows == first.index.lows

    # the log start comes from the lows the index kept, not from reading the index: a low edited
    # in the history is what the next run reports
    with history_db(config, create=False) as db:
        ((text,),) = db.execute(f"select record_index from {db.table(RUNS)} where run_id = %s", [again.run["id"]])
        edited = json.loads(text)
        edited["lows"][finding.endpoint]["orders"]["1"] = 10**9
        db.execute(f"update {db.table(RUNS)} set record_index = %s where run_id = %s",
                   [json.dumps(edited), again.run["id"]])
    report = audit_spark(spark, config, _options(since_last=True), ["EO204"])
    assert report.run["scan"]["base_run"] == again.run["id"]
    assert sorted((r["partition"], r["log_start"]) for r in report.findings[0].evidence) == [(0, 1), (1, 10**9)]

    # an index written without lows: the first offsets come from every record, and are kept
    with history_db(config, create=False) as db:
        del edited["lows"]
        db.execute(f"update {db.table(RUNS)} set record_index = %s where run_id = %s",
                   [json.dumps(edited), again.run["id"]])
    gained = _recorded(spark, config, ["EO204"], since_last=True)
    assert gained.run["scan"]["base_run"] == again.run["id"]
    assert identities(gained) == identities(first)
    assert gained.index.lows == first.index.lows


def _eo503(report: AuditReport) -> list[str]:
    """EO503's evidence rows, every column (the hour's counts too), as sorted JSON."""
    return canonical(report).get(("EO503", "billing", "invoices"), (0, []))[1]


def _continued_eo503(incr: AuditReport, config: Config) -> str:
    """How the run read EO503's records, after checking it found what a full audit finds."""
    full = _full_on_duckdb(config)
    assert incr.run["scan"]["mode"] == "incremental"
    assert identities(incr) == identities(full)
    assert _eo503(incr) == _eo503(full)
    return incr.run["scan"]["effects"]


_CONTINUED = "the records of the messages processed since the last run and of those it kept without a row"


@pytest.mark.integration
def test_eo503_continues_from_its_states_and_reads_every_record_when_sink_rows_go(spark, tmp_path: Path) -> None:
    """A sink with every_message (the generator's invoices): records appended after the last run and
    then committed, without invoices, are missing effects, counted in their hours beside the
    messages processed before; a pending outbox entry added for a missing message takes it out,
    and its removal brings it back. Each run continues from the states (on either engine) and
    names exactly the full audit's EO503, counts included. A row deleted from the sink below the
    kept mark, or a committed offset moved back, makes the run read every record for EO503, and
    says why; the run after it continues from the states again."""
    import duckdb

    from samples.generator import DEFAULT_MIX, GenSpec, generate

    out = tmp_path / "gen"
    truth = generate(GenSpec(3000, out, partitions=2, mix={**DEFAULT_MIX, "EO503": 0.01}))
    config = load_config(out / "eoctl.toml")
    first = _recorded(None, config)
    before = identities(first)[("EO503", "billing", "invoices")][1]
    assert len(before) == truth["codes"]["EO503"]["count"]

    def ends() -> dict[str, int]:
        return dict(duckdb.sql(f"select \"partition\"::varchar, max(\"offset\") + 1 from "
                               f"read_parquet('{out}/topics/orders/*.parquet') group by 1").fetchall())

    old_ends = ends()
    append_orders(out, "part-late.parquet")
    committed = out / "topics" / "orders" / "_committed_offsets.json"
    kept_offsets = committed.read_text()
    committed.write_text(json.dumps({"orders": ends()}))
    appended = _recorded(spark, config, since_last=True)
    assert _continued_eo503(appended, config) == _CONTINUED
    named = identities(appended)[("EO503", "billing", "invoices")][1]
    assert len(named) > len(before) + 1
    # a run that neither runs EO503 nor keeps states reads nothing for it
    only = audit_duckdb(config, _options(since_last=True), ["EO501"])
    assert only.run["scan"]["mode"] == "incremental" and "effects" not in only.run["scan"]
    assert identities(only) == {k: v for k, v in identities(appended).items() if k[0] == "EO501"}

    # a pending entry for a missing message: no longer judged; then the entry goes: missing again
    late = next(r["message_id"] for r in map(json.loads, _eo503(appended))
                if r["offset"] >= old_ends[str(r["partition"])])  # an appended record's message
    store = str(out / "state.duckdb")
    with duckdb.connect(store) as db:
        db.execute("insert into billing.eo_outbox select endpoint, ?, 'tok-pending', 'attempt-pending', outgoing, "
                   "null, now(), now(), 1, null from billing.eo_outbox limit 1", [late])
    pending = _recorded(None, config, since_last=True)
    assert _continued_eo503(pending, config) == _CONTINUED
    assert late not in json.dumps(_eo503(pending))
    with duckdb.connect(store) as db:
        db.execute("delete from billing.eo_outbox where incoming_message_id = ?", [late])
    gone_entry = _recorded(None, config, since_last=True)
    assert _continued_eo503(gone_entry, config) == _CONTINUED
    assert late in json.dumps(_eo503(gone_entry))

    # a row deleted from the sink, whose message the audit judges (a record with its headers, no
    # outbox entry) and that is its only row (the generator's ids are random)
    sinks = out / "sinks" / "invoices"
    segments = [str(p) for p in Path(incremental.records_root(config)).glob("*/*/*.parquet")]
    with duckdb.connect(store, read_only=True) as db:
        entries = [r[0] for r in db.execute("select incoming_message_id from billing.eo_outbox").fetchall()]
    gone, file = duckdb.sql(
        f"select source_message_id, filename from read_parquet('{sinks}/*.parquet', filename = true) "
        f"where source_message_id in (select message_id from read_parquet({segments!r}) where problem is null) "
        f"and source_message_id not in "
        f"(select unnest({entries!r}::varchar[])) and source_message_id in (select source_message_id from "
        f"read_parquet('{sinks}/*.parquet') group by 1 having count(*) = 1) order by 1 limit 1").fetchall()[0]
    sink = Path(file)
    duckdb.sql(f"copy (select * from read_parquet('{sink}') where source_message_id <> '{gone}') "
               f"to '{sink}.new' (format parquet)")
    Path(f"{sink}.new").replace(sink)
    deleted = _recorded(spark, config, since_last=True)
    why = _continued_eo503(deleted, config)
    assert why.startswith("every record: sink billing/invoices holds ") and "(rows deleted or rewritten)" in why
    assert gone in json.dumps(_eo503(deleted))
    again = _recorded(None, config, since_last=True)
    assert _continued_eo503(again, config) == _CONTINUED
    assert gone in json.dumps(_eo503(again))

    committed.write_text(kept_offsets)  # the consumer's offsets moved back: appended records in flight again
    moved_back = _recorded(None, config, since_last=True)
    assert _continued_eo503(moved_back, config) == ("every record: a committed offset moved back or is gone since "
                                                    "the last run")
    assert late not in json.dumps(_eo503(moved_back))


def _found(doc: dict) -> dict:
    """An audit's JSON as the findings history compares runs: per finding, its count and items."""
    from eoctl import history

    return {(f["code"], f["endpoint"], f["where"]): (f["count"], sorted(history.item_key(f["code"], r)
                                                                        for r in f["evidence"]))
            for f in doc["findings"]}


def _damage(root: Path, how: str) -> Path:
    """Damage one file of the newest recorded index under `root` (the records folder) `how`."""
    files = sorted(p for p in root.rglob("*.parquet") if "/partial-" not in str(p))
    victim = next(p for p in files if ("/state/" in str(p)) == (how == "state"))
    if how == "truncated":
        os.truncate(victim, victim.stat().st_size // 2)
    elif how == "rows removed":
        import duckdb

        kept = victim.with_name("kept.tmp")
        duckdb.sql(f"copy (select * from read_parquet('{victim}') limit 1) to '{kept}' (format parquet)")
        kept.replace(victim)
    elif how == "deleted":
        victim.unlink()
    elif how == "garbled":  # the same size, other bytes in the middle
        data = bytearray(victim.read_bytes())
        middle = len(data) // 2
        data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
        victim.write_bytes(bytes(data))
    else:  # a state of another schema in its place
        import duckdb

        duckdb.sql(f"copy (select 1 as other) to '{victim}' (format parquet)")
    return victim


@pytest.mark.integration
@pytest.mark.parametrize("how", ["truncated", "rows removed", "deleted", "state", "garbled"])
def test_a_damaged_index_means_a_full_audit_with_a_note_never_wrong_findings(tmp_path: Path, how: str) -> None:
    """Before: a truncated or garbled segment or state failed every later run (exit 3 or an
    internal error), and one with rows removed gave wrong findings with no note (EO101 x2 and EO102
    missed). Each folder's bytes and their checksum are recorded (a garbled file of the same size
    too); an index not as recorded is never read."""
    chaos = recorded_copy(tmp_path)
    audit = ("--engine", "duckdb", "--config", str(chaos.config_path), "--format", "json", "audit",
             "--fail-on", "critical", "--since-last")
    first = run_eoctl(*audit)
    assert first.code in (0, 1), first.stderr
    expected = _found(json.loads(first.stdout))
    victim = _damage(chaos.config_path.parent / "eoctl-history.records", how)
    damaged = run_eoctl(*audit)
    assert damaged.code in (0, 1), damaged.stderr[-2000:]
    doc = json.loads(damaged.stdout)
    assert doc["run"]["scan"]["mode"] == "full"
    assert f"is not as recorded ({victim.parent}" in doc["run"]["scan"]["reason"] and "never trusted" in (
        doc["run"]["scan"]["reason"])
    assert _found(doc) == expected  # the full audit's findings, every evidence item
    again = run_eoctl(*audit)  # the full run kept a sound index: the next continues from it
    assert json.loads(again.stdout)["run"]["scan"]["mode"] == "incremental"
    assert _found(json.loads(again.stdout)) == expected


def _late_file(archive: Path, name: str) -> None:
    """A file arriving late in `archive`: a record at an offset the index already read past (an
    exporter that wrote an earlier batch last)."""
    import duckdb

    duckdb.sql(f"copy (select * from read_parquet('{archive}/*.parquet') where \"partition\" = 0 "
               f"order by \"offset\" limit 1) to '{archive / name}' (format parquet)")


@pytest.mark.integration
@pytest.mark.parametrize(("engine", "how"), [("duckdb", "late"), ("duckdb", "rewritten"), ("spark", "late")])
def test_an_archive_no_longer_as_the_index_listed_it_means_a_full_audit(spark, tmp_path: Path, engine: str,
                                                                       how: str) -> None:
    """Before: a file added below the indexed end was never read (its records skipped, as if never
    sent), and a rewritten file's changes were not seen. Each index lists its archives' files; a
    file changed, or one added holding records below the indexed end, means a full audit that says
    which, with a full audit's findings. A file of new records only still continues the index."""
    chaos = recorded_copy(tmp_path)
    session = spark if engine == "spark" else None
    archive = chaos.config_path.parent / "topics" / "orders"
    first = _recorded(None, chaos.config)  # on DuckDB: the engine continues an index the other listed
    assert set(first.index.archives["billing"]) == {"part-0.parquet"}
    assert first.index.archives["billing"]["part-0.parquet"] == (archive / "part-0.parquet").stat().st_size
    append_orders(chaos.config_path.parent, "part-1.parquet")  # new records only: continued
    continued = _recorded(session, chaos.config, since_last=True)
    assert continued.run["scan"]["mode"] == "incremental", continued.run["scan"]
    assert continued.index.archives["billing"] == {f.name: f.stat().st_size for f in archive.glob("*.parquet")}
    if how == "late":
        _late_file(archive, "late-0.parquet")
        expected = "late-0.parquet of billing, added since run"
    else:
        import duckdb

        part = archive / "part-1.parquet"
        duckdb.sql(f"copy (select * from read_parquet('{part}') limit 1) to '{tmp_path / 'one.parquet'}' "
                   "(format parquet)")
        (tmp_path / "one.parquet").replace(part)
        expected = "archive file part-1.parquet of billing holds"
    report = _recorded(session, chaos.config, since_last=True)
    assert report.run["scan"]["mode"] == "full" and expected in report.run["scan"]["reason"], report.run["scan"]
    assert identities(report) == identities(_full_on_duckdb(chaos.config))
    again = _recorded(None, chaos.config, since_last=True)  # the full run listed the files as they are
    assert again.run["scan"]["mode"] == "incremental"
