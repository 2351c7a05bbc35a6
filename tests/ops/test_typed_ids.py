"""Store SQL typed against the columns it meets: a PostgreSQL tokens table whose ids are `uuid`
beside an outbox whose token column is `varchar` (a pipeline's own DDL). gc-tokens' guard compares
the two; before, `--execute` stopped with `operator does not exist: uuid = character varying`
right after the plan. The guard still keeps a token a pending entry holds, whatever the case of
its text.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from eoctl.stores.connection import comparable_ids, id_family
from tests.helpers.chaos import recorded_copy, store_rows
from tests.helpers.cli import run_eoctl
from tests.helpers.layouts import shared_tables

NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


@pytest.mark.unit
def test_ids_of_two_families_compare_as_their_hex_digits() -> None:
    from eoctl.config.model import MySQLStore, PostgresStore

    pg = PostgresStore(type="postgres", database="d", user="u")
    my = MySQLStore(type="mysql", database="d", user="u")
    assert (id_family("uuid"), id_family("character varying"), id_family("binary")) == ("uuid", "text", "binary")
    from eoctl.stores import sql

    def compared(store, left: str, right: str) -> str:
        mine, theirs = comparable_ids(store, (sql.column("a"), left), (sql.column("b"), right))
        return sql.render(store, sql.fragment(":mine = :theirs", mine=mine, theirs=theirs))

    assert compared(pg, "uuid", "uuid") == '"a" = "b"'
    assert compared(pg, "uuid", "character varying") == (
        "LOWER(REPLACE(CAST(\"a\" AS VARCHAR), '-', '')) = LOWER(REPLACE(CAST(\"b\" AS VARCHAR), '-', ''))")
    assert compared(my, "binary", "char") == "LOWER(HEX(`a`)) = LOWER(REPLACE(CAST(`b` AS CHAR), '-', ''))"
    assert compared(pg, "bytea", "text") == "ENCODE(\"a\", 'hex') = LOWER(REPLACE(CAST(\"b\" AS VARCHAR), '-', ''))"


@pytest.mark.integration
def test_gc_tokens_executes_and_restores_uuid_tokens_beside_a_varchar_outbox(tmp_path: Path, postgres) -> None:
    chaos = shared_tables(recorded_copy(tmp_path), "postgres", postgres)
    store_rows(chaos, "alter table shared.eo_tokens alter column token_id type uuid using token_id::uuid")
    # an old token a pending entry holds, its id in upper case in the outbox's varchar column
    held = "6C3F5B1E-0000-4000-8000-0000000000AA"
    store_rows(chaos, "insert into shared.eo_tokens values (%s, 'm-held', 'billing', 'a-held', %s)",
       [held.lower(), NOW - dt.timedelta(days=30)])
    store_rows(chaos, "insert into shared.eo_outbox values ('shop', 'in-held', %s, 'a', '[]', null, %s, %s, 1)",
       [held, NOW, NOW])
    before = sorted(tuple(map(str, r)) for r in store_rows(chaos, "select * from shared.eo_tokens"))

    def eoctl(*args: str):
        result = run_eoctl("--config", str(chaos.config_path), "--format", "json", "--engine", "duckdb", *args,
                           env=chaos.environ)
        assert result.code == 0, result.stderr[-2000:]
        return json.loads(result.stdout)

    plan = eoctl("gc-tokens", "--grace", "0s")
    done = eoctl("gc-tokens", "--grace", "0s", "--execute")
    # the plan compares the ids' text as the engine reads it (case and all) and plans the held
    # token; the guard, typed in the deleting transaction, keeps it
    assert done["deleted"] == plan["planned"] - 1 > 0 and done["skipped_changed"] == 1
    left = {str(r[0]) for r in store_rows(chaos, "select token_id from shared.eo_tokens")}
    assert held.lower() in left  # the pending entry's token stays, its text in another case
    restored = eoctl("gc-tokens", "--restore", done["run_id"], "--execute")["restore"]
    assert restored["restored"]["tokens"] == done["deleted"] and restored["not_restored"] == []
    assert sorted(tuple(map(str, r)) for r in store_rows(chaos, "select * from shared.eo_tokens")) == before
