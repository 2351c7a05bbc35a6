"""eoctl.stores.db: the short writes of the commands that change things, on a real PostgreSQL."""

from __future__ import annotations

import threading

import pytest

from eoctl.config.model import PostgresStore
from eoctl.stores.db import open_db

pytestmark = pytest.mark.integration


@pytest.fixture
def pg_store(postgres, request) -> PostgresStore:
    import psycopg

    schema = f"db_{request.node.name[:40].lower()}"
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        conn.execute(f"drop schema if exists {schema} cascade")
        conn.execute(f"create schema {schema}")
        conn.execute(f"create table {schema}.intents (intent_id text primary key, kind text, ref text)")
    return PostgresStore(type="postgres", host="127.0.0.1", port=postgres.port, database=postgres.database,
                         user=postgres.user, password=postgres.password, schema=schema)


def test_processes_creating_one_journal_at_the_same_moment_all_go_on(pg_store) -> None:
    """gc-tokens and gc-blobs both journal the intents they delete in one table, and the first batch
    of each may create it at the same moment: PostgreSQL's IF NOT EXISTS looked before it created,
    and the later of two creations failed on the catalog's unique index (pg_type_typname_nsp_index),
    stopping a gc run that was free to go on (seen in CI, tests/ops/test_overlap.py)."""
    extra = (("eoctl_run_id", "varchar"), ("eoctl_removed_at", "timestamptz"))
    for round_ in range(6):
        copy = f"eoctl_journal_intents_{round_}"
        start = threading.Barrier(8, timeout=30)
        failures: list[BaseException] = []

        def create() -> None:
            try:
                with open_db(pg_store) as db:
                    start.wait()
                    assert db.ensure_copy_table("intents", copy, extra) == ["intent_id", "kind", "ref"]
            except BaseException as exc:  # noqa: BLE001 - every thread's outcome is asserted below
                failures.append(exc)

        threads = [threading.Thread(target=create) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert failures == [], f"round {round_}: {failures[0]!r}"
        with open_db(pg_store) as db:
            assert db.columns(copy) == ["intent_id", "kind", "ref", "eoctl_run_id", "eoctl_removed_at"]


def test_made_tables_are_used_without_the_lock_of_ddl(pg_store) -> None:
    """Once the findings history and gc-blobs' journal exist, opening them takes neither the
    advisory lock of DDL nor the table's exclusive lock: a recording or a batch goes on while
    another session holds that lock and reads the tables in an open transaction (PostgreSQL's
    ALTER ... ADD COLUMN IF NOT EXISTS takes the exclusive lock even when the column is there)."""
    import psycopg

    from eoctl import history
    from eoctl.config.model import Config
    from eoctl.ops import gc_blobs
    from eoctl.stores.db import _lock_key

    config = Config.model_validate({"stores": {"h": pg_store}, "history": {"store": "h"}})
    with history.history_db(config, create=True):
        pass
    with open_db(pg_store) as db:
        gc_blobs._ensure_journal(db)
        tables = [db.table(history.RUNS), db.table(gc_blobs.JOURNAL)]
    finished: list[str] = []

    def open_both() -> None:
        with history.history_db(config, create=True):
            finished.append("history")
        with open_db(pg_store) as db:
            gc_blobs._ensure_journal(db)
            finished.append("journal")

    with psycopg.connect(f"host=127.0.0.1 port={pg_store.port} dbname={pg_store.database} user={pg_store.user} "
                         f"password={pg_store.password.get_secret_value()}") as reader:
        for table in tables:  # held until the block ends: the open transaction
            reader.execute("select pg_advisory_xact_lock(%s)", [_lock_key(table)])
            reader.execute(f"select count(*) from {table}")
        worker = threading.Thread(target=open_both, daemon=True)
        worker.start()
        worker.join(20)
        assert finished == ["history", "journal"]
