"""The DuckDB engine reads the same records the Spark engine reads (docs/engines.md)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eoctl.engine.duckdb.records import read_archive
from eoctl.engine.duckdb.files import archive_files
from eoctl.engine.duckdb.sql import table_of_rows, connect
from eoctl.errors import SourceError
from tests.helpers.chaos import CHAOS


def _rows(rows) -> list[tuple]:
    return sorted((r["topic"], r["partition"], r["offset"], r["timestamp"], r["key"], r["value"],
                   tuple((h["key"], h["value"]) for h in r["headers"] or ())) for r in rows)


@pytest.mark.integration
@pytest.mark.parametrize("topic", ["orders", "invoices"])
def test_a_parquet_archive_reads_as_spark_reads_it(spark, topic: str) -> None:
    from eoctl.engine.spark.sources import read_archive as spark_archive

    path = str(CHAOS / "topics" / topic)
    con = connect()
    read_archive(con, "records", path, "parquet", [topic])
    duck = con.sql("select * from records").to_arrow_table().to_pylist()
    sparks = [r.asDict(recursive=True) for r in spark_archive(spark, path, "parquet", [topic]).collect()]
    for r in sparks:  # Spark gives the session's (UTC) wall time with the zone; DuckDB the wall time
        r["timestamp"] = r["timestamp"].replace(tzinfo=None)
        r["key"], r["value"] = (bytes(v) if v is not None else None for v in (r["key"], r["value"]))
        r["headers"] = [{"key": h["key"], "value": bytes(h["value"])} for h in r["headers"] or ()]
    assert len(duck) == len(sparks) > 0
    assert _rows(duck) == _rows(sparks)


@pytest.mark.unit
def test_archive_files_are_listed_as_spark_lists_them(tmp_path: Path) -> None:
    for name in ("part-0.parquet", "sub/part-1.parquet", "_committed_offsets.json", "_SUCCESS",
                 ".part-0.parquet.crc", "_temporary/part-9.parquet"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert archive_files(str(tmp_path), "parquet") == [str(tmp_path / "part-0.parquet"),
                                                       str(tmp_path / "sub" / "part-1.parquet")]
    with pytest.raises(SourceError, match="does not exist"):
        archive_files(str(tmp_path / "nope"), "parquet")


@pytest.mark.unit
def test_a_run_lists_ahead_each_archive_its_endpoints_read_once(tmp_path: Path) -> None:
    """list_archives, which a run calls while its stores are copied: every archive the selected
    endpoints read (one shared by two endpoints once), as archive_files lists it; no live topic."""
    from eoctl.config import load_config
    from eoctl.engine.duckdb.records import list_archives
    from tests.helpers.configs import write_config

    for name in ("p/part-0.parquet", "p/_SUCCESS", "j/part-0.json", "j/part-1.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    config = load_config(write_config(tmp_path, """
        [kafka.k]
        bootstrap_servers = "localhost:1"
        [endpoints.a.input]
        topics = ["t"]
        archive = "p"
        [endpoints.b.input]
        topics = ["u"]
        archive = "p"
        [endpoints.c.input]
        topics = ["v"]
        archive = "j"
        archive_format = "json"
        [endpoints.d.input]
        topics = ["w"]
        kafka = "k"
        group = "d"
        [endpoints.e]
        """))
    p, j = config.endpoints["a"].input.archive, config.endpoints["c"].input.archive
    assert list_archives(config, list(config.endpoints)) == {p: archive_files(p, "parquet"),
                                                             j: archive_files(j, "json")}
    assert [Path(f).name for f in list_archives(config, ["c"])[j]] == ["part-0.json", "part-1.json"]
    assert list_archives(config, ["d", "e"]) == {}
    (tmp_path / "j" / "part-0.json").unlink()
    (tmp_path / "j" / "part-1.json").unlink()
    with pytest.raises(SourceError, match="holds no json files"):
        list_archives(config, ["c"])


@pytest.mark.unit
def test_a_blob_listing_names_blobs_relative_to_the_prefix_with_size_time_and_hash(tmp_path: Path) -> None:
    import datetime as dt
    import hashlib
    import os

    from eoctl.engine.duckdb.stores import list_blobs

    prefix = tmp_path / "blobs"
    for name, body in {"a.txt": b"alpha", "attempt-1/b.bin": b"\x00\x01", "_tmp/c.txt": b"x", ".d.crc": b"y"}.items():
        (prefix / name).parent.mkdir(parents=True, exist_ok=True)
        (prefix / name).write_bytes(body)
    os.utime(prefix / "a.txt", (0, 1_700_000_000.123456))
    con = connect()
    list_blobs(con, f"file://{prefix}", "listing", with_hash=True)
    rows = con.sql("select * from listing order by name").to_arrow_table().to_pylist()
    # hidden names are not blobs (Spark's file sources skip them too); times to the millisecond, as Hadoop's
    assert rows == [
        {"name": "a.txt", "size": 5, "modified": dt.datetime(2023, 11, 14, 22, 13, 20, 123000),
         "actual_sha256": hashlib.sha256(b"alpha").hexdigest()},
        {"name": "attempt-1/b.bin", "size": 2, "modified": rows[1]["modified"],
         "actual_sha256": hashlib.sha256(b"\x00\x01").hexdigest()},
    ]
    with pytest.raises(SourceError, match="blob prefix .*nothing-here cannot be listed: it does not exist"):
        list_blobs(con, str(tmp_path / "nothing-here"), "empty", with_hash=False)


@pytest.mark.unit
def test_a_blob_modified_just_short_of_a_millisecond_keeps_that_millisecond(tmp_path: Path) -> None:
    """Hadoop truncates a file's time to the millisecond; .1239998 s as float seconds rounds to
    .124000 at the microsecond, and a listing from those (fsspec's) said .124."""
    import datetime as dt
    import os

    from eoctl.engine.duckdb.stores import list_blobs

    (tmp_path / "a.bin").write_bytes(b"a")
    os.utime(tmp_path / "a.bin", ns=(0, 1_700_000_000_123_999_800))
    con = connect()
    list_blobs(con, str(tmp_path), "listing", with_hash=False)
    assert con.execute("select modified from listing").fetchall() == [(dt.datetime(2023, 11, 14, 22, 13, 20, 123000),)]


@pytest.mark.unit
def test_evidence_past_the_kept_rows_goes_to_parquet_with_secrets_masked(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from eoctl.engine.duckdb.run import materialize

    con = connect()
    sql = ("select i, 'postgresql://app:hunter2@db/x' as url from range(5) t(i)")
    count, rows, path = materialize(con, sql, 2, tmp_path / "ev", "run-EO999-e")
    assert count == 5 and len(rows) == 2
    assert all("hunter2" not in r["url"] for r in rows)
    written = pq.read_table(path).to_pylist()
    assert sorted(r["i"] for r in written) == [0, 1, 2, 3, 4]
    assert all("hunter2" not in r["url"] and "app:" in r["url"] for r in written)
    assert not list((tmp_path / "ev").glob("*.partial"))
    assert materialize(con, "select 1 as x where false", 2, tmp_path / "ev", "none") == (0, [], None)


_FLAT = pa.schema([("s", pa.string()), ("i", pa.int32()), ("n", pa.int64()), ("b", pa.bool_()),
                   ("t", pa.timestamp("us")), ("z", pa.timestamp("us", tz="UTC")), ("d", pa.float64()),
                   ("f", pa.float32()), ("h", pa.int16()), ("y", pa.int8()), ("day", pa.date32()),
                   ("x", pa.binary())])
_ZONES = st.sampled_from([None, dt.timezone.utc, dt.timezone(dt.timedelta(hours=5, minutes=30)),
                          dt.timezone(-dt.timedelta(hours=8))])
_FLAT_ROW = st.fixed_dictionaries({
    "s": st.none() | st.text(max_size=8), "i": st.none() | st.integers(-2**31, 2**31 - 1),
    "n": st.none() | st.integers(-2**63, 2**63 - 1), "b": st.none() | st.booleans(),
    "t": st.none() | st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2200, 1, 1), timezones=_ZONES),
    "z": st.none() | st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2200, 1, 1), timezones=_ZONES),
    "d": st.none() | st.floats(allow_nan=False), "f": st.none() | st.floats(width=32, allow_nan=False),
    "h": st.none() | st.integers(-2**15, 2**15 - 1), "y": st.none() | st.integers(-128, 127),
    "day": st.none() | st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)), "x": st.none() | st.binary(max_size=8)})


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(_FLAT_ROW, max_size=12))
def test_a_flat_table_of_rows_equals_its_arrow_copy(rows: list[dict]) -> None:
    """Rows in as list parameters (no pandas import) give the table Arrow gives: the same types,
    values and order; times with and without a zone are taken as Arrow takes them."""
    import duckdb

    con = duckdb.connect()  # in memory: a file per example is slow, and the paths do not differ
    con.execute("SET TimeZone = 'America/New_York'")  # not UTC: a conversion through the zone would show
    try:
        table_of_rows(con, "by_rows", rows, _FLAT)
        con.register("arrow_rows", pa.Table.from_pylist(rows, schema=_FLAT))
        by_arrow = con.execute("SELECT * FROM arrow_rows").fetchall()
        assert con.execute("DESCRIBE by_rows").fetchall() == con.execute("DESCRIBE arrow_rows").fetchall()
        assert con.execute("SELECT * FROM by_rows").fetchall() == by_arrow
    finally:
        con.close()


_INSTANTS = st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30), timezones=_ZONES)


@pytest.mark.unit
@settings(max_examples=60, deadline=None)
@given(instants=st.lists(st.none() | _INSTANTS, max_size=20))
def test_an_instant_becomes_the_utc_wall_time_the_cast_gives(instants: list) -> None:
    """sql_utc_wall_time (by microseconds since the epoch) gives what the cast to TIMESTAMP gives in
    the run's UTC session, for instants, a column without a zone, NULL and the infinities; and
    sql_utc_instant what timezone('UTC', ...) gives, in any session's zone."""
    from eoctl.engine.duckdb.sql import sql_utc_wall_time
    from eoctl.stores.snapshots import sql_utc_instant

    con = connect()
    try:
        con.execute("CREATE TABLE t AS SELECT unnest(?::TIMESTAMPTZ[]) AS z", [instants])
        con.execute("INSERT INTO t VALUES ('infinity'), ('-infinity'), (NULL)")
        con.execute("ALTER TABLE t ADD COLUMN w TIMESTAMP")
        con.execute("UPDATE t SET w = CAST(z AS TIMESTAMP)")
        for column, sql_type in (("z", "TIMESTAMP WITH TIME ZONE"), ("z", None), ("w", None), ("w", "TIMESTAMP")):
            fast = con.execute(f"SELECT CAST({sql_utc_wall_time(column, sql_type)} AS VARCHAR) FROM t").fetchall()
            cast = con.execute(f"SELECT CAST(CAST({column} AS TIMESTAMP) AS VARCHAR) FROM t").fetchall()
            assert fast == cast, (column, sql_type)
        con.execute("SET TimeZone = 'America/New_York'")  # timezone('UTC', ...) does not depend on it
        fast = con.execute(f"SELECT CAST({sql_utc_instant('w')} AS VARCHAR) FROM t").fetchall()
        assert fast == con.execute("SELECT CAST(timezone('UTC', w) AS VARCHAR) FROM t").fetchall()
        con.execute("SET TimeZone = 'UTC'")
        expected = [i if i is None or i.tzinfo is None else i.astimezone(dt.timezone.utc).replace(tzinfo=None)
                    for i in instants]  # a time without a zone goes in as UTC (the run's session)
        assert [r[0] for r in con.execute(f"SELECT {sql_utc_wall_time('z')} FROM t").fetchall()][:len(instants)] == expected
    finally:
        con.close()


def test_a_large_table_of_rows_keeps_every_row_in_order() -> None:
    import duckdb

    rows = [{"name": f"blob-{i}", "size": i, "modified": dt.datetime(2026, 1, 1) + dt.timedelta(seconds=i)}
            for i in range(50_000)]
    schema = pa.schema([("name", pa.string()), ("size", pa.int64()), ("modified", pa.timestamp("us"))])
    with duckdb.connect() as con:
        table_of_rows(con, "listing", rows, schema)
        assert con.execute("SELECT count(*), count(DISTINCT name), bool_and(name = 'blob-' || size), "
                           "bool_and(modified = TIMESTAMP '2026-01-01' + to_seconds(size)) FROM listing"
                           ).fetchall() == [(50_000, 50_000, True, True)]
        table_of_rows(con, "empty", [], schema)
        assert con.execute("DESCRIBE empty").fetchall() == con.execute("DESCRIBE listing").fetchall()
        assert con.execute("SELECT count(*) FROM empty").fetchall() == [(0,)]


_RUN_AND_SAY_IF_IMPORTED = """
import sys
from eoctl.cli.main import main

for args in {commands!r}:
    try:
        main(["--config", {config!r}, "--engine", "duckdb", "--format", "json", *args])
    except SystemExit as exc:
        assert exc.code in (0, 1), (args, exc.code)
print({module!r} in sys.modules)
"""


@pytest.mark.integration
def test_no_duckdb_command_imports_pandas(tmp_path: Path) -> None:
    """pandas costs a command 0.2 s of imports (pyarrow imports it to convert any Python value,
    DuckDB to hand it any Arrow object): every command on the chaos sample runs without it."""
    from tests.helpers.chaos import recorded_copy

    chaos = recorded_copy(tmp_path)
    message = chaos.ledger[0]["message_id"]
    commands = [["audit", "--no-record", "--grace", "0s"], ["gc-tokens"], ["gc-blobs"], ["reconcile-tokens"],
                ["replay-outbox"], ["trace", message]]
    assert not _imported_by("pandas", commands, chaos.config_path, tmp_path)


@pytest.mark.integration
def test_the_plans_never_import_pyarrow(tmp_path: Path) -> None:
    """PyArrow with numpy is 0.07 s of a 1.2 s gc plan: the plans and reconcile read their rows
    as Python values and build their small tables from lists (flat_table)."""
    from tests.helpers.chaos import recorded_copy

    chaos = recorded_copy(tmp_path)
    commands = [["gc-tokens", "--grace", "0s"], ["gc-blobs", "--grace", "0s"], ["reconcile-tokens"], ["replay-outbox"]]
    assert not _imported_by("pyarrow", commands, chaos.config_path, tmp_path)


@pytest.mark.integration
def test_json_off_a_terminal_never_imports_richs_console(tmp_path: Path) -> None:
    """Rich's console is 15 ms of a command's start: a command whose output is JSON and whose
    stderr is no terminal (cron, a script) says its phases in plain lines and renders nothing.
    (Ibis imports a few of Rich's modules for its own display; not the console.)"""
    from tests.helpers.chaos import recorded_copy

    chaos = recorded_copy(tmp_path)
    message = chaos.ledger[0]["message_id"]
    commands = [["audit", "--no-record", "--grace", "0s"], ["gc-tokens"], ["gc-blobs"], ["reconcile-tokens"],
                ["replay-outbox"], ["trace", message]]
    assert not _imported_by("rich.console", commands, chaos.config_path, tmp_path)
    assert _imported_by("rich.console", [["--format", "text", "gc-tokens"]], chaos.config_path, tmp_path)


def _imported_by(module: str, commands: list[list[str]], config: Path, tmp_path: Path) -> bool:
    """Whether `commands`, run one after another in one fresh interpreter, imported `module`."""
    code = _RUN_AND_SAY_IF_IMPORTED.format(commands=commands, config=str(config), module=module)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "EOCTL_TMPDIR": str(tmp_path / "tmp")})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1] == "True"


#: a process that writes a DuckDB store (the pipeline): holds the file for argv[2] seconds
_WRITER = """
import sys, time
import duckdb
con = duckdb.connect(sys.argv[1])
con.execute("insert into s.t values (3)")
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def _writer_holding(path: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


@pytest.mark.integration
def test_a_store_table_is_copied_once_the_writer_lets_go_of_the_file(tmp_path: Path) -> None:
    """The copy of a store table waits while another process writes the DuckDB file (DuckDB lets
    no other process open it meanwhile), then copies what the writer committed; past
    lock_wait_seconds it is one line naming the file."""
    import time

    import duckdb

    from eoctl.config.model import DuckDBStore
    from eoctl.engine.duckdb.stores import _snapshot

    path = tmp_path / "state.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute("create schema s; create table s.t (x integer); insert into s.t values (1), (2)")
    store = DuckDBStore.model_validate({"type": "duckdb", "path": str(path), "schema": "s", "lock_wait_seconds": 30})
    writer = _writer_holding(path, 1.5)
    con, started = connect(), time.monotonic()
    source = _snapshot(con, {}, store, "t")
    assert time.monotonic() - started > 0.5  # it waited for its turn
    assert writer.wait(timeout=30) == 0
    assert con.execute(f"select sum(x) from {source}").fetchone() == (6,)

    writer = _writer_holding(path, 30)
    try:
        short = store.model_copy(update={"lock_wait_seconds": 0.5})
        with pytest.raises(SourceError, match=r"DuckDB file .*state.duckdb stayed in use by another process for 0.5s"):
            _snapshot(connect(), {}, short, "t")
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.integration
def test_copies_ahead_never_wait_for_a_store_another_process_holds(tmp_path: Path) -> None:
    """The copies made ahead (while Ibis is imported) stop at the first store that is not free at
    once, and leave the waiting, and its notice, to the run's own copy in its order."""
    import threading
    import time

    import duckdb

    from eoctl.config import load_config
    from eoctl.engine.duckdb.stores import copy_stores_ahead
    from eoctl.stores.layout import StoreLayout

    path = tmp_path / "state.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute("create schema s; create table s.t (x integer); insert into s.t values (1), (2)")
    (tmp_path / "eoctl.toml").write_text('[stores.s]\ntype = "duckdb"\npath = "state.duckdb"\nschema = "s"\n'
                                         'lock_wait_seconds = 30\n[endpoints.e]\nstore = "s"\n'
                                         '[endpoints.e.tokens]\ntable = "t"\n')
    config = load_config(tmp_path / "eoctl.toml")
    copies: dict = {}
    writer = _writer_holding(path, 30)
    try:
        started = time.monotonic()
        # the layout's lookup ahead does not wait either
        copy_stores_ahead(connect(), config, ["e"], copies, threading.Event(), StoreLayout(config))
        assert time.monotonic() - started < 5 and copies == {}
    finally:
        writer.kill()
        writer.wait()
    copy_stores_ahead(con := connect(), config, ["e"], copies, threading.Event())
    [source] = copies.values()
    assert con.execute(f"select sum(x) from {source}").fetchone() == (6,)  # the writer's row too


@pytest.mark.integration
def test_a_run_copies_each_store_table_once(tmp_path: Path) -> None:
    """What the copies ahead made, the run uses: one temporary copy per store table, whichever
    thread made it, and the same rows as a run whose copies were all made by the main thread.
    The run's layout is looked up ahead too, through the run's connection: no store is opened
    for it, and it resolves the tables as a lookup of its own does."""
    from eoctl.config import load_config
    from eoctl.engine.duckdb import run as duckdb_audit
    from eoctl.engine.duckdb import stores as duckdb_stores
    from eoctl.options import AuditOptions
    from eoctl.stores import connection
    from eoctl.stores.layout import KINDS
    from tests.helpers.chaos import recorded_copy

    config = load_config(recorded_copy(tmp_path).config_path, overrides={"kind": "duckdb"})
    tables = {(config.endpoints[n].store_of(getattr(config.endpoints[n], k)), getattr(config.endpoints[n], k).table)
              for n in config.endpoints for k in ("tokens", "outbox", "intents")
              if config.endpoints[n].store_of(getattr(config.endpoints[n], k))}

    def opened() -> tuple[list[str], list[tuple], list[tuple]]:
        run = duckdb_audit.DuckDBRun(config, AuditOptions(), lambda _m: None)
        try:
            copies = [r[0] for r in run.con.execute("select table_name from duckdb_tables() where temporary "
                                                    "and table_name like 'store_copy_%' order by 1").fetchall()]
            counts = run.con.execute("select (select count(*) from tokens), (select count(*) from outbox), "
                                     "(select count(*) from intents)").fetchall()
            resolved = [(t.endpoint, t.kind, t.table, t.owner_column, t.shared)
                        for kind in KINDS for t in run.scope.layout.tables(kind)]
            return copies, counts, resolved
        finally:
            run.release()

    original, made = duckdb_audit.copy_stores_ahead, []
    copy, copied = duckdb_stores._copy_from_duckdb_store, []
    store_open, opens = connection.connect, []

    def counted(con, config, endpoints, copies, stopping, layout=None) -> None:
        original(con, config, endpoints, copies, stopping, layout)
        made.append(len(copies))

    def copying(con, store, table, name, wait=True) -> None:
        copied.append((store.schema_name, table))
        copy(con, store, table, name, wait)

    def opening(store, **kwargs):
        opens.append(store.schema_name)
        return store_open(store, **kwargs)

    duckdb_audit.copy_stores_ahead, duckdb_stores._copy_from_duckdb_store = counted, copying
    connection.connect = opening
    try:
        ahead, counts, resolved = opened()
        assert made == [len(tables)]  # every store table copied ahead (a sink's store table by the run)
        assert len(copied) == len(set(copied)) == len(ahead)  # and none copied again
        assert opens == [] and resolved  # looked up ahead: no store opened for it
        duckdb_audit.copy_stores_ahead = lambda *_args: None  # every copy and lookup made by the run itself
        assert opened() == (ahead, counts, resolved)
        assert opens  # ... which opens the stores for its lookup
    finally:
        duckdb_audit.copy_stores_ahead, duckdb_stores._copy_from_duckdb_store = original, copy
        connection.connect = store_open


def test_a_background_statement_stops_at_once_and_its_error_reaches_the_main_thread() -> None:
    import time

    from eoctl.engine.duckdb.sql import Background

    con = connect()
    endless = Background(con, lambda _stopping: con.execute("select count(*) from range(1000000000000)").fetchall())
    time.sleep(0.3)
    started = time.monotonic()
    endless.stop()
    assert time.monotonic() - started < 5
    assert con.execute("select 42").fetchall() == [(42,)]  # the connection is the main thread's again

    failing = Background(con, lambda _stopping: con.execute("select * from no_such_table"))
    with pytest.raises(Exception, match="no_such_table"):
        failing.wait()
    con.close()


@pytest.mark.integration
def test_a_run_released_while_its_records_are_kept_stops_at_once(tmp_path: Path) -> None:
    """records_for keeps the records on a thread while the flow compiles; a flow that fails or is
    interrupted meanwhile releases the run, which stops that statement rather than fail to close
    a busy connection (DuckDB refuses) or wait for it."""
    import time

    from eoctl.config import load_config
    from eoctl.engine.duckdb.run import DuckDBRun
    from eoctl.options import AuditOptions
    from tests.helpers.chaos import recorded_copy

    config = load_config(recorded_copy(tmp_path).config_path, overrides={"kind": "duckdb"})
    run = DuckDBRun(config, AuditOptions(), lambda _m: None, keep_records=False)
    run.con.execute("CREATE OR REPLACE VIEW records AS SELECT CAST(i AS VARCHAR) AS tok FROM range(1000000000000) t(i)")
    assert run.records_for(["tok"]) == "flow_records"
    time.sleep(0.3)
    started = time.monotonic()
    run.release()
    assert time.monotonic() - started < 5
