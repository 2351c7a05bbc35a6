"""The DuckDB engine's connection and SQL helpers: a connection with the run's limits, a statement
run in the background, quoting, UTC wall times, and small tables of Python rows."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb


def connect(memory_limit: str | None = None, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB database of this run, in its temporary folder, with spilling there too."""
    import duckdb

    from eoctl.scratch import subdir

    folder = subdir("duckdb-engine")
    con = duckdb.connect(str(folder / f"engine-{uuid.uuid4().hex[:8]}.duckdb"))
    con.execute(f"SET temp_directory = '{sql_text(str(folder / 'spill'))}'")
    con.execute("SET TimeZone = 'UTC'")
    if memory_limit:
        con.execute(f"SET memory_limit = '{sql_text(memory_limit)}'")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def keep_table(con: duckdb.DuckDBPyConnection, name: str, sql: str) -> None:
    """The rows of `sql` as TEMP TABLE `name`, in no order (as a Spark engine keeps them; what reads
    a kept table orders it). Without insertion order DuckDB need not hold a statement's output to
    keep its order: a GROUP BY of 100M message ids ran out of memory under a 1.5GB memory_limit."""
    con.execute("SET preserve_insertion_order = false")
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {ident(name)} AS {sql}")
    finally:
        con.execute("RESET preserve_insertion_order")


class Background:
    """`job(stopping)` run on connection `con` by a thread of its own, while the main thread does
    Python work that DuckDB need not wait for (imports, compiles): DuckDB's statements let go of
    the interpreter, so the two overlap. Until wait() or stop() the connection is the thread's
    alone. wait() raises what the job raised; stop() (an interrupt, a failure of the main thread)
    sets `stopping` (a threading.Event the job may look at between statements), interrupts the
    statement under way and waits for the thread."""

    def __init__(self, con: duckdb.DuckDBPyConnection, job: Callable[[Any], Any]) -> None:
        import threading

        self._con = con
        self._error: BaseException | None = None
        self._stopping = threading.Event()
        # waited for on an event of its own, not by Thread.join: Python 3.11's join, cut short
        # by a signal, takes a thread still running for ended, and a later join returns at once
        # (the run then ends with DuckDB's statement under way, and the process aborts)
        self._done = threading.Event()

        def run() -> None:
            try:
                job(self._stopping)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread by wait()
                self._error = exc
            finally:
                self._done.set()

        threading.Thread(target=run, name="eoctl-duckdb-background", daemon=True).start()

    def wait(self) -> None:
        self._done.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def stop(self) -> None:
        self._stopping.set()
        self._con.interrupt()
        self._done.wait()


def sql_utc_wall_time(column: str, sql_type: str | None = None) -> str:
    """SQL of `column` (of DuckDB type `sql_type`) as TIMESTAMP: an instant's UTC wall time, as
    the cast gives it in the run's UTC session. An instant goes by its microseconds since the
    epoch: the cast goes through ICU's calendar, about 20x slower (0.45 s of CPU per 10M values
    here, paid by every query of a view). The infinities keep the cast's values. `sql_type` None:
    TIMESTAMP or TIMESTAMP WITH TIME ZONE, either (for a TIMESTAMP the same value)."""
    if sql_type in ("TIMESTAMP WITH TIME ZONE", None):
        return (f"CASE WHEN isfinite({column}) THEN make_timestamp(epoch_us({column})) "
                f"ELSE CAST({column} AS TIMESTAMP) END")
    return f"CAST({column} AS TIMESTAMP)"


def sql_text(value: str) -> str:
    return value.replace("'", "''")


def repr_sql(value: str) -> str:
    return f"'{sql_text(value)}'"


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


#: Arrow types of flat tables built from Python rows (table_of_rows), as DuckDB types
_FLAT_SQL_TYPES = {"string": "VARCHAR", "large_string": "VARCHAR", "int8": "TINYINT", "int16": "SMALLINT",
                   "int32": "INTEGER", "int64": "BIGINT", "bool": "BOOLEAN", "float": "FLOAT", "double": "DOUBLE",
                   "date32[day]": "DATE", "timestamp[us]": "TIMESTAMP", "timestamp[us, tz=UTC]": "TIMESTAMPTZ",
                   "binary": "BLOB"}


def no_rows(types: dict[str, str]) -> str:
    """A SELECT of no rows with these columns of these DuckDB types: an input that has none."""
    return "SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {ident(c)}" for c, t in types.items()) + " WHERE false"


def flat_table(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict], columns: dict[str, str]) -> None:
    """A table of the run's database from Python rows (offsets, broker metadata, blob listings,
    what trace found) whose `columns` (name -> DuckDB type, a value of _FLAT_SQL_TYPES) are flat.

    Each column goes in as one list parameter, unnested side by side, without PyArrow (its import
    with numpy's is 0.07 s of a command's 1.3 s): any conversion of Python values to Arrow also
    makes pyarrow import pandas (0.2 s), and executemany costs 0.17 ms a row. As Arrow stores
    them, a time with a zone in a column without one is its UTC wall time, and a time without a
    zone in a UTC column is taken as UTC."""
    values = [[row.get(c) for row in rows] for c in columns]
    for column, sql_type in zip(values, columns.values()):
        if sql_type in ("TIMESTAMP", "TIMESTAMPTZ"):
            column[:] = [_utc_wall_time(v) if sql_type == "TIMESTAMP" else _utc_instant(v) for v in column]
    select = ", ".join(f"unnest(?::{t}[]) AS {ident(c)}" for c, t in columns.items())
    con.execute(f"CREATE OR REPLACE TABLE {ident(name)} AS SELECT {select}", values)


def table_of_rows(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict], schema) -> None:
    """flat_table for an Arrow `schema` (trace's tables, of Ibis schemas); nested columns go
    through Arrow."""
    types = [_FLAT_SQL_TYPES.get(str(f.type)) for f in schema]
    if all(types):
        flat_table(con, name, rows, {f.name: t for f, t in zip(schema, types)})
        return
    import pyarrow as pa

    con.register(f"{name}_arrow", pa.Table.from_pylist(rows, schema=schema))
    con.execute(f"CREATE OR REPLACE TABLE {ident(name)} AS SELECT * FROM {ident(name + '_arrow')}")
    con.unregister(f"{name}_arrow")


def _utc_wall_time(value: dt.datetime | None) -> dt.datetime | None:
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(dt.timezone.utc).replace(tzinfo=None)


def _utc_instant(value: dt.datetime | None) -> dt.datetime | None:
    """A time without a zone is UTC (as Arrow takes it), whatever the session's zone."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=dt.timezone.utc)


def rows_by_endpoint(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, list[dict]]:
    """The rows of a check's SQL (one `endpoint` column), by endpoint, without that column."""
    out: dict[str, list[dict]] = {}
    for row in con.sql(sql).to_arrow_table().to_pylist():
        out.setdefault(row.pop("endpoint"), []).append(row)
    return out
