"""MySQL and MariaDB stores (`[stores.X] type = "mysql"`), against a real MariaDB server the tests
start, holding the recorded chaos sample's state (tests/helpers/mysql_state.py):

- both engines give the findings the sample's DuckDB file gives (Spark through Connector/J, DuckDB
  through connectorx);
- an NServiceBus-style outbox on MySQL (`Dispatched bit`, the byte 0 or 1): sent rows are not
  pending, EO303 on both engines, gc-outbox executes and restores, replay marks a row sent;
- the lease is a row of the control store on MySQL: a second holder is refused until release;
- the password never shows: not in `config check`, not in an unreachable store's line, not in doctor.
(gc-tokens and gc-blobs on MySQL, executed and restored: tests/ops/test_gc_chaos.py.)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from pathlib import Path

import pytest

from eoctl.audit import select_codes
from eoctl.errors import LeaseHeld
from eoctl.ops import gc_outbox
from eoctl.ops.gc_flow import GcOptions
from eoctl.ops.lease import Lease
from eoctl.ops.replay import ReplayOptions, _delete_entry, find_stuck
from eoctl.stores.layout import StoreLayout
from tests.helpers.audits import audit_duckdb, audit_spark
from tests.helpers.chaos import ChaosRun, recorded_copy, settled
from tests.helpers.cli import run_eoctl
from tests.helpers.findings import canonical
from tests.helpers.mysql_state import mysql_copy

pytestmark = pytest.mark.integration

NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def _options():
    return dataclasses.replace(settled(), now=NOW)


@pytest.fixture
def on_mysql(mariadb, tmp_path: Path) -> tuple[ChaosRun, ChaosRun]:
    """(the recorded sample, the same state in MySQL)."""
    chaos = recorded_copy(tmp_path)
    return chaos, mysql_copy(chaos, mariadb)


def _q(run: ChaosRun, sql: str, params=()) -> list[tuple]:
    from samples.reference.store import Store

    store = Store.open(run.store_kind, run.store_target)
    try:
        return store.q(sql, params)
    finally:
        store.close()


def test_both_engines_find_on_mysql_what_they_find_in_the_duckdb_file(spark, on_mysql) -> None:
    chaos, mysql = on_mysql
    codes = select_codes(None, None)
    expected = canonical(audit_duckdb(chaos.config, _options(), codes))
    assert {k[0] for k in expected} >= {"EO102", "EO201", "EO301", "EO501", "EO502"}
    assert canonical(audit_duckdb(mysql.config, _options(), codes)) == expected
    assert canonical(audit_spark(spark, mysql.config, _options(), codes)) == expected


def test_binary_ids_are_read_as_their_uuids_text_on_both_engines(spark, mariadb, tmp_path: Path) -> None:
    """Ids kept as BINARY(16) (UUID_TO_BIN's): before, both engines read the bytes as text, matched no
    record's id and reported every token an orphan. Read as the UUID's text, the findings are the
    DuckDB file's."""
    chaos = recorded_copy(tmp_path)
    mysql = mysql_copy(chaos, mariadb, binary_ids=True)
    assert _q(mysql, "select data_type, character_octet_length from information_schema.columns where "
                     "table_schema = 'billing' and table_name = 'eo_tokens' and column_name = 'token_id'") == [
        ("binary", 16)]
    codes = select_codes(None, None)
    expected = canonical(audit_duckdb(chaos.config, _options(), codes))
    assert canonical(audit_duckdb(mysql.config, _options(), codes)) == expected
    assert canonical(audit_spark(spark, mysql.config, _options(), codes)) == expected


def _nservicebus_outbox(mysql: ChaosRun) -> set[str]:
    """billing's outbox given NServiceBus's flag (BIT(1)) and time columns and sent rows: three past
    the week's retention, two within it. Returns the old ones' ids."""
    _q(mysql, "alter table billing.eo_outbox add column Dispatched bit(1) not null default b'0', "
              "add column DispatchedAt datetime(6) null")
    old = set()
    for i in range(5):
        at = (NOW - dt.timedelta(days=8 if i < 3 else 0, hours=1 + i)).replace(tzinfo=None)
        _q(mysql, "insert into billing.eo_outbox values ('billing', %s, %s, %s, '[]', %s, %s, %s, 2, b'1', %s)",
           [f"sent-{i}", f"tok-sent-{i}", f"att-sent-{i}", at, at, at, at])
        if i < 3:
            old.add(f"sent-{i}")
    mysql.config_path.write_text(mysql.config_path.read_text() + '\n[endpoints.billing.outbox]\n'
                                 'sent_column = "Dispatched"\nretention = "7d"\n')
    from eoctl.config import load_config

    mysql.config = load_config(mysql.config_path, environ=mysql.environ)
    return old


def test_an_nservicebus_outbox_on_mysql(spark, on_mysql) -> None:
    chaos, mysql = on_mysql
    old = _nservicebus_outbox(mysql)
    codes = select_codes(None, None)
    expected = canonical(audit_duckdb(chaos.config, _options(), codes))
    for report in (audit_duckdb(mysql.config, _options(), codes), audit_spark(spark, mysql.config, _options(), codes)):
        found = canonical(report)
        assert {k: v for k, v in found.items() if k[0] != "EO303"} == expected  # sent rows are not stuck
        assert {r["incoming_message_id"] for f in report.findings if f.code == "EO303" for r in f.evidence} == old

    layout = StoreLayout(mysql.config)
    stuck = find_stuck(layout, ReplayOptions(stuck_after=dt.timedelta(0), now=NOW, endpoints=["billing"]))
    assert stuck and not [e for e in stuck if e.entry_id.startswith("sent-")]

    before = _q(mysql, "select * from billing.eo_outbox order by incoming_message_id")
    plan = gc_outbox.gc_outbox(mysql.config, GcOptions(now=NOW))
    assert [(t.endpoint, t.garbage, t.planned) for t in plan.tallies] == [("billing", 5, 3)]
    done = gc_outbox.gc_outbox(mysql.config, GcOptions(now=NOW, execute=True, batch_size=2))
    assert done.totals()["deleted"] == 3
    left = {r[0] for r in _q(mysql, "select incoming_message_id from billing.eo_outbox")}
    assert left == {r[1] for r in before} - old
    assert gc_outbox.restore(mysql.config, done.run_id).restored["outbox rows"] == 3
    assert _q(mysql, "select * from billing.eo_outbox order by incoming_message_id") == before

    # replay's last step marks the row sent (the bit set), one version up
    entry = stuck[0]
    _delete_entry(layout, entry, NOW)
    ((flag, version),) = _q(mysql, "select Dispatched + 0, version from billing.eo_outbox "
                                   "where incoming_message_id = %s", [entry.entry_id])
    assert (flag, version) == (1, entry.version + 1)


def test_the_lease_is_a_row_of_the_control_store(on_mysql) -> None:
    _chaos, mysql = on_mysql
    config = mysql.config.model_copy(update={"ops": mysql.config.ops.model_copy(update={"store": "billing"})})
    first = Lease(config, "gc-tokens", "run-1").acquire()
    with pytest.raises(LeaseHeld, match="already running: run run-1"):
        Lease(config, "gc-tokens", "run-2").acquire()
    assert _q(mysql, "select run_id from billing.eoctl_leases where name = 'gc-tokens'") == [("run-1",)]
    first.release()
    Lease(config, "gc-tokens", "run-2").acquire().release()


def test_the_password_never_shows(mariadb, on_mysql) -> None:
    _chaos, mysql = on_mysql
    env = mysql.environ
    for args in (("config", "check"), ("--engine", "duckdb", "doctor")):
        result = run_eoctl("--config", str(mysql.config_path), *args, env=env)
        assert result.code == 0, result.stderr
        assert mariadb.password not in result.stdout + result.stderr
        assert "MySQL eoctl@127.0.0.1" in result.stdout + result.stderr or args[0] == "config"
    # a wrong password: one line, the server's reason, no secret
    wrong = {**env, "EOCTL_TEST_MYSQL_PASSWORD": "wrong-" + mariadb.password}
    result = run_eoctl("--config", str(mysql.config_path), "--engine", "duckdb", "audit", env=wrong)
    assert result.code == 3, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "is not reachable" in line and "Access denied" in line and mariadb.password not in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("binary_ids", [False, True], ids=["text ids", "binary(16) ids"])
def test_replay_finishes_every_stuck_entry_on_mysql(kafka, mariadb, tmp_path: Path, binary_ids: bool) -> None:
    """Every write of replay's steps on MySQL: intents and tokens created for entries whose tokens
    were not committed, the entry updated under its version, the incoming token and the entry
    removed; the messages reach the broker; a second run finds nothing. With ids kept as BINARY(16)
    too: each written and looked up as the column keeps it (before: no entry's row was found)."""
    import json

    from confluent_kafka.admin import AdminClient, NewTopic

    from eoctl.config import load_config
    from eoctl.ops.replay import replay
    from tests.helpers.chaos import id_text

    mysql = mysql_copy(recorded_copy(tmp_path), mariadb, binary_ids=binary_ids)
    entries = [(e, id_text(m), o) for e, m, o in _q(
        mysql, "select 'billing', incoming_message_id, cast(outgoing as char) from billing.eo_outbox union all "
               "select 'shipping', incoming_message_id, cast(outgoing as char) from shipping.eo_outbox")]
    assert entries
    topics = {m["topic"] for _e, _m, text in entries for m in json.loads(text)}
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    names = {t: f"mysql-{t}-{uuid.uuid4().hex[:8]}" for t in topics}
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names.values()]).values():
        f.result(60)
    for ep in ("billing", "shipping"):  # the outgoing messages go to this run's own topics
        for topic, name in names.items():
            _q(mysql, f"update {ep}.eo_outbox set outgoing = replace(outgoing, %s, %s)",
               [f'"topic": "{topic}"', f'"topic": "{name}"'])
    # the recorded run's topics (rec-orders, rec-invoices) are the inputs' topics of this run
    text = mysql.config_path.read_text()
    for topic, name in names.items():
        for configured in ("orders", "invoices"):
            if topic.endswith(configured):
                text = text.replace(f'topics = ["{configured}"]', f'topics = ["{name}"]')
    mysql.config_path.write_text(f'[kafka.main]\nbootstrap_servers = "{kafka.bootstrap}"\n\n' + text)
    config = load_config(mysql.config_path, environ=mysql.environ)

    options = {"now": NOW, "stuck_after": dt.timedelta(0)}
    plan = replay(config, ReplayOptions(**options))
    assert {o.entry_id for o in plan.outcomes} == {m for _e, m, _t in entries}
    done = replay(config, ReplayOptions(execute=True, **options))
    assert {o.status for o in done.outcomes} == {"replayed"}, [(o.entry_id, o.status, o.reason) for o in done.outcomes]
    assert _q(mysql, "select count(*) from billing.eo_outbox")[0][0] == 0
    assert _q(mysql, "select count(*) from shipping.eo_outbox")[0][0] == 0
    created = sum(o.tokens_created for o in done.outcomes)
    # replay's intents: marked by their attempt id in a text column, made now in a column of UUIDs
    mine = "created_at >= %s" if binary_ids else "attempt_id like 'eoctl-replay-%%'"
    params = [NOW.replace(tzinfo=None)] if binary_ids else []
    assert _q(mysql, f"select count(*) from billing.eo_intents where {mine}", params)[0][0] \
        + _q(mysql, f"select count(*) from shipping.eo_intents where {mine}", params)[0][0] == created
    assert replay(config, ReplayOptions(execute=True, **options)).outcomes == []
