"""`audit --since-last` on the DuckDB engine: the record index (eoctl.incremental) read and written
as the Spark engine reads and writes it, so a run on one engine continues from a run on the other.

The index's segments are the same Parquet records (RECORD_COLUMNS); its time column is written as
an instant (isAdjustedToUTC), which Spark reads as its TIMESTAMP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eoctl.engine.duckdb.files import archive_files
from eoctl.engine.duckdb.sql import flat_table, ident, repr_sql, sql_utc_wall_time

if TYPE_CHECKING:
    import duckdb

    from eoctl.config.model import Config, EndpointConfig
    from eoctl.incremental import ArchiveProbe, PartitionPlan, RecordIndex

_SEGMENT_FILE = "part-00000.zstd.parquet"


@dataclass
class IndexRun:
    """A DuckDB audit's part in the record index: the run it continues from (`base`, with `plans`:
    per endpoint, where the source is read from), and the partial folder it writes its own
    segment to (`partial`, when it keeps an index)."""

    base: RecordIndex | None = None
    plans: dict[str, list[PartitionPlan]] = field(default_factory=dict)
    partial: str | None = None
    fallback: str | None = None  # why a base found was given up (a full scan)
    committed: dict = field(default_factory=dict)  # the committed offsets the run read against

    archives: dict = field(default_factory=dict)  # the archives' files when the run started (RecordIndex.archives)

    @classmethod
    def open(cls, config: Config, endpoints: dict[str, EndpointConfig], since_last: bool,
             partial: str | None, probe: ArchiveProbe) -> IndexRun:
        """`probe`: the engine's archives (eoctl.engine.duckdb.records.ArchiveFiles)."""
        from eoctl import incremental

        run = cls(partial=partial)
        run.archives = incremental.archive_listings(probe, endpoints)  # before anything is read
        if since_last:
            base, run.fallback = incremental.find_base(None, config, endpoints)
            if base is not None:
                plans, reason = incremental.plan_reads(config, endpoints, base, probe, run.archives)
                if plans is None:
                    run.fallback = reason
                else:
                    run.base, run.plans = base, plans
        return run

    def kafka_ranges(self, endpoint: str):
        from eoctl.incremental import kafka_ranges

        plans = self.plans.get(endpoint)
        return kafka_ranges(plans) if plans is not None else None

    def archive_lows(self, archived: list[str]) -> list[dict] | None:
        """The first offset of each partition of the `archived` endpoints' archives as the base
        index kept them (RecordIndex.lows), as rows; None when it kept none for one of them."""
        lows = self.base.lows if self.base is not None else None
        if lows is None or any(n not in lows for n in archived):
            return None
        return [{"endpoint": n, "topic": t, "partition": p, "offset": o}
                for n in archived for t, parts in lows[n].items() for p, o in parts.items()]

    def files_to_read(self, con: duckdb.DuckDBPyConnection, endpoint: str, files: list[str]) -> list[str]:
        """The files of an endpoint's Parquet archive that may hold a record past where the index
        ends (archive_condition): by the row groups' statistics of topic, partition and offset. A
        file of old records is not opened again: DuckDB cannot skip row groups for a condition
        that spans several columns, and would read and decode every old record's headers."""
        plans = self.plans.get(endpoint)
        if not plans or not files:
            return files
        starts = {(p.topic, p.partition): p.start for p in plans}
        stats: dict[tuple[str, int], dict[str, tuple]] = {}
        listed = ", ".join(repr_sql(f) for f in files)
        for name, group, column, low, high in con.execute(
                "SELECT file_name, row_group_id, path_in_schema, stats_min_value, stats_max_value "
                f"FROM parquet_metadata([{listed}]) WHERE path_in_schema IN ('topic', 'partition', 'offset')"
        ).fetchall():
            stats.setdefault((name, group), {})[column] = (low, high)
        needed = {name for (name, _group), columns in stats.items() if _may_hold_new(columns, starts)}
        # a file without row groups' statistics (or without row groups) is read as before
        described = {name for name, _group in stats}
        return [f for f in files if f in needed or f not in described]

    def archive_branches(self, endpoint: str, split: bool) -> list[str] | None:
        """The rows of an endpoint's archive past where the index ends, as disjoint conditions
        (eoctl.incremental.archive_branches), each read by a query of its own, or (not `split`:
        JSON lines, where each query parses the files again) as one; None: every row."""
        from eoctl.incremental import archive_branches, archive_condition

        plans = self.plans.get(endpoint)
        if not plans:
            return None
        return archive_branches(plans, ident) if split else [archive_condition(plans, ident)]


def _may_hold_new(columns: dict[str, tuple], starts: dict[tuple[str, int], int]) -> bool:
    """Whether a row group with these (min, max) statistics may hold a row at or past its
    partition's start, or of a partition the index does not know."""
    try:
        (tmin, tmax), (pmin, pmax), omax = columns["topic"], columns["partition"], columns["offset"][1]
        pmin, pmax, omax = int(pmin), int(pmax), int(omax)
    except (KeyError, TypeError, ValueError):
        return True  # no statistics: read it
    if tmin != tmax:
        return True
    for partition in range(pmin, pmax + 1):
        start = starts.get((tmin, partition))
        if start is None or omax >= start:
            return True
    return False


def records_with_index(con: duckdb.DuckDBPyConnection, working_copy_sql: str, run: IndexRun,
                       committed: dict[str, dict[str, dict[int, int]]], kind: str) -> None:
    """`fresh`: the working copy of what this run read from the source (written as its segment
    when it keeps an index); `records` (a TEMP TABLE or VIEW: `kind`): those and the base index's rows
    this run takes from it, with `committed` and `processed` from the current committed offsets."""
    from eoctl.engine.files import FsspecFiles
    from eoctl.incremental import in_flight_floor

    run.committed = committed
    if run.partial is not None:
        folder = f"{run.partial}/records"
        FsspecFiles().mkdirs(folder)
        _copy(con, working_copy_sql, f"{folder}/{_SEGMENT_FILE}")
        con.execute(f"CREATE OR REPLACE VIEW fresh AS {_read_segments(archive_files(folder, 'parquet'))}")
    else:  # computed once when continuing: each family of the checks reads it
        fresh_kind = "TEMP TABLE" if run.base is not None else "VIEW"
        con.execute(f"CREATE OR REPLACE {fresh_kind} fresh AS {working_copy_sql}")
    if run.base is not None:
        # continuing: the checks read families of these (eoctl.expr.incremental), never every
        # record at once, so `records` stays a view that is computed by nobody
        _bounds(con, run, committed)
        con.execute(f"CREATE OR REPLACE VIEW indexed AS {_index_rows(run.base.segments) or 'SELECT * FROM fresh WHERE false'}")
        con.execute("CREATE OR REPLACE VIEW records AS SELECT * FROM fresh UNION ALL SELECT * FROM indexed")
        floor = in_flight_floor(run.plans, committed)
        con.execute("CREATE OR REPLACE VIEW indexed_in_flight AS SELECT * FROM indexed WHERE NOT processed"
                    + (f' AND "offset" >= {int(floor)}' if floor is not None else ""))
    else:
        con.execute(f"CREATE OR REPLACE {kind} records AS SELECT * FROM fresh")


def open_states(con: duckdb.DuckDBPyConnection, base: RecordIndex, schemas: dict) -> None:
    """A view `state_<name>` of each state of `schemas` (name -> column -> Ibis type) the recorded
    run kept, in those types whichever engine wrote it."""
    import ibis
    from ibis.backends.sql.datatypes import DuckDBType

    from eoctl.expr.inputs import state_view

    for name, schema in schemas.items():
        kept = (base.states or {}).get(name)
        if kept is None:
            continue
        files = archive_files(kept.path, "parquet", "record index state") if kept.rows else []
        columns = ", ".join(f"CAST({ident(c) if files else 'NULL'} AS {DuckDBType.to_string(t)}) AS {ident(c)}"
                            for c, t in ibis.schema(schema).items())
        # a state of no rows is read as none, whether the engine that kept it wrote a file or not
        source = f"FROM read_parquet([{', '.join(repr_sql(f) for f in files)}])" if files else "WHERE false"
        con.execute(f"CREATE OR REPLACE VIEW {ident(state_view(name))} AS SELECT {columns} {source}")


def keep_state(con: duckdb.DuckDBPyConnection, run: IndexRun, name: str, sql: str) -> tuple[int, int]:
    """Write a state for the next run into this run's partial folder: (rows, bytes)."""
    from eoctl.engine.files import FsspecFiles

    assert run.partial is not None
    folder = f"{run.partial}/state/{name}"
    files = FsspecFiles()
    files.mkdirs(folder)
    rows = con.execute(f"COPY ({sql}) TO {repr_sql(f'{folder}/{_SEGMENT_FILE}')} "
                       "(FORMAT parquet, COMPRESSION zstd)").fetchall()[0][0]
    return rows, files.size(folder)


def _bounds(con: duckdb.DuckDBPyConnection, run: IndexRun, committed: dict) -> None:
    """Per audited partition: which index rows still count (b_low <= offset < b_start) and its
    committed offset now."""
    rows = [{"b_endpoint": n, "b_topic": p.topic, "b_partition": p.partition, "b_start": p.start, "b_low": p.low,
             "b_committed": committed.get(n, {}).get(p.topic, {}).get(p.partition)}
            for n, plans in run.plans.items() for p in plans]
    flat_table(con, "index_bounds", rows, {"b_endpoint": "VARCHAR", "b_topic": "VARCHAR", "b_partition": "INTEGER",
                                           "b_start": "BIGINT", "b_low": "BIGINT", "b_committed": "BIGINT"})


def _segment_files(segments) -> list[str]:
    return [f for s in segments if s.records for f in archive_files(s.path, "parquet", "record index segment")]


def _index_rows(segments) -> str | None:
    """The SELECT of the index rows of `segments` this run takes (see _bounds); None when they
    hold no file (the base run read no record)."""
    files = _segment_files(segments)
    return _bounded_rows(f"read_parquet([{', '.join(repr_sql(f) for f in files)}])") if files else None


def _bounded_rows(source: str) -> str:
    """The SELECT of the rows of `source` (records as the index holds them) this run takes from
    the index, `committed` and `processed` from the current committed offsets (see _bounds)."""
    return ("SELECT i.endpoint, i.topic, CAST(i.\"partition\" AS INTEGER) AS \"partition\", "
            f"CAST(i.\"offset\" AS BIGINT) AS \"offset\", {sql_utc_wall_time('i.timestamp')} AS timestamp, "
            "coalesce(i.\"offset\" < b.b_committed, false) AS processed, b.b_committed AS committed, "
            "i.message_id, i.token_id, i.producer, CAST(i.seq AS BIGINT) AS seq, i.causation_id, i.attempt_id, "
            f"i.blobs, i.problem FROM {source} AS i "
            "JOIN index_bounds AS b ON i.endpoint = b.b_endpoint AND i.topic = b.b_topic "
            "AND i.\"partition\" = b.b_partition WHERE i.\"offset\" < b.b_start AND i.\"offset\" >= b.b_low")


#: at most this many indexed rows are fetched by row number for `indexed_reach` (each named in the
#: query); past it (a mass redelivery of old messages) the probes scan every indexed row, which
#: then costs about as much as fetching rows from most row groups
REACH_FETCH_MAX = 20_000


def reach(con: duckdb.DuckDBPyConnection, run: IndexRun, keys: dict[str, str | None]) -> bool:
    """`indexed_reach` (eoctl.expr.incremental.Continuation.reach_keys): the base's carried
    records, its rows at or past the lower in-flight floor of the two runs, and the rows whose key
    columns hold a key of `keys` (None: whose column is not null) and are not carried, found by
    reading those columns alone with each row's number, then fetched by number (Parquet skips the
    row groups holding none). Each row once. False, and nothing made, when the base kept no
    carried records or no committed offsets, a partition has no committed offset now or had none
    then (every indexed row may be in flight), or too many rows are looked up."""
    from eoctl.expr.inputs import state_view
    from eoctl.incremental import in_flight_floor

    base = run.base
    if base is None or base.committed is None or "carried_records" not in (base.states or {}):
        return False
    floors = [in_flight_floor(run.plans, run.committed), in_flight_floor(run.plans, base.committed)]
    if None in floors:  # a partition without a committed offset: every indexed row may be in flight
        return False
    floor = int(min(floors))
    files = _segment_files(base.segments)
    listed = ", ".join(repr_sql(f) for f in files)
    # the rows at or past the floor are all read (recent): the look-ups need only the others
    below = f' AND i."offset" < {floor}'
    position = 'endpoint, topic, "partition", "offset"'
    found = []
    scan = (f'SELECT i.filename, i.file_row_number, i.endpoint, i.topic, i."partition", i."offset" '
            f"FROM read_parquet([{listed}], filename = true, file_row_number = true) AS i")
    for n, (columns, sql) in enumerate(keys.items()):
        if not files:
            break
        if sql is None:  # the rows where the column is not null
            found.append(f"{scan} WHERE i.{ident(columns)} IS NOT NULL{below}")
            continue
        table = f"reach_keys_{n}"
        # CREATE TABLE ... AS answers the number of rows it wrote
        if not con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {sql}").fetchone()[0]:
            continue
        on = " AND ".join(f"i.{ident(c)} = k.{ident(c)}" for c in columns.split(","))
        found.append(f"{scan} SEMI JOIN {table} AS k ON {on} WHERE true{below}")
    rows: dict[str, list[int]] = {}
    if found:
        # less the carried records (a message in flight now that was seen twice has them there)
        fetched = con.execute(f"CREATE OR REPLACE TEMP TABLE reach_rows AS SELECT filename, file_row_number FROM "
                              f"({' UNION '.join(found)}) AS f ANTI JOIN (SELECT {position} FROM "
                              f"{ident(state_view('carried_records'))}) AS c USING ({position})").fetchone()[0]
        if fetched > REACH_FETCH_MAX:
            return False
        for name, numbers in con.execute(
                "SELECT filename, list(file_row_number ORDER BY file_row_number) FROM reach_rows GROUP BY 1").fetchall():
            rows[name] = numbers
    # three parts that hold no row twice (an indexed position is in one segment): the carried
    # records below the floor, the rows at or past it, and the rows found below it that are not
    # carried. Not a union made distinct by position: that window took 0.33 s of 0.40 (10M + 1%).
    parts = [f'SELECT * FROM ({_bounded_rows(ident(state_view("carried_records")))}) AS c WHERE "offset" < {floor}',
             f'SELECT * FROM indexed WHERE "offset" >= {floor}']
    parts += [_bounded_rows(f"(SELECT * EXCLUDE (file_row_number) FROM read_parquet({repr_sql(name)}, "
                            f"file_row_number = true) WHERE file_row_number IN ({', '.join(map(str, numbers))}))")
              for name, numbers in rows.items()]
    con.execute(f"CREATE OR REPLACE VIEW indexed_reach AS {' UNION ALL '.join(parts)}")
    return True


def _read_segments(files: list[str]) -> str:
    return (f"SELECT * REPLACE ({sql_utc_wall_time('timestamp')} AS timestamp) "
            f"FROM read_parquet([{', '.join(repr_sql(f) for f in files)}])")


def _copy(con: duckdb.DuckDBPyConnection, sql: str, path: str) -> int:
    """Write the rows of `sql` (RECORD_COLUMNS) as one zstd Parquet file, the time as an instant;
    the number written."""
    from eoctl.stores.snapshots import sql_utc_instant

    return con.execute(f"COPY (SELECT * REPLACE ({sql_utc_instant('timestamp')} AS timestamp) FROM ({sql})) "
                       f"TO {repr_sql(path)} (FORMAT parquet, COMPRESSION zstd)").fetchall()[0][0]


def fresh_stats(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, int, int, int, int]]:
    """(endpoint, topic, partition, end offset, records, lowest offset) per partition read from
    the source (eoctl.engine.spark.records.SparkRecords.fresh_stats)."""
    return [tuple(r) for r in con.execute(
        'SELECT endpoint, topic, "partition", max("offset") + 1, count(*), min("offset") FROM fresh '
        "GROUP BY ALL ORDER BY ALL").fetchall()]


def keep(con: duckdb.DuckDBPyConnection, config: Config, run_id: str, run: IndexRun,
         endpoints: dict[str, EndpointConfig], started_at: str, stats: list,
         states: dict[str, tuple[int, int]]) -> RecordIndex:
    """Complete this run's part of the record index (a merge of the newest segments when one is
    due, as eoctl.engine.spark.records.keep) and publish it; the history row will name it."""
    from eoctl import incremental
    from eoctl.engine.files import FsspecFiles
    from eoctl.incremental import RecordIndex, Segment

    assert run.partial is not None
    folder = incremental.run_folder(config, run_id)
    segments = list(run.base.segments) if run.base is not None else []
    fresh = sum(row[4] for row in stats)
    if fresh:
        segments.append(Segment(f"{folder}/records", fresh))
    lows: dict[str, dict[str, dict[int, int]]] = {}
    live = {n for n, ep in endpoints.items() if ep.input is not None and ep.input.kafka}
    lows.update(incremental.live_lows(run.base, run.plans, stats, live))
    archived = [n for n, ep in endpoints.items() if ep.input is not None and ep.input.archive]
    if archived:  # an archive's log start: the first offset it holds (the index's or the new)
        for ep, topic, partition, low in con.execute(
                f"SELECT ep, topic, \"partition\", log_start FROM log_starts WHERE ep IN "
                f"({', '.join(repr_sql(n) for n in archived)})").fetchall():
            lows.setdefault(ep, {}).setdefault(topic, {})[partition] = low
    merge = incremental.merge_plan(segments)
    if merge:
        segments, merged = segments[:-merge], segments[-merge:]
        older = [s for s in merged if not s.path.startswith(folder + "/")]
        own = len(older) < len(merged)  # this run's own segment is merged too
        parts = [p for p in (_index_rows(older) if older else None, "SELECT * FROM fresh" if own else None) if p]
        FsspecFiles().mkdirs(f"{run.partial}/merged")
        count = _copy(con, " UNION ALL ".join(parts), f"{run.partial}/merged/{_SEGMENT_FILE}")
        if own:
            con.execute("DROP VIEW fresh")  # it reads the segment the merge replaces
            incremental.discard(None, f"{run.partial}/records")
        segments.append(Segment(f"{folder}/merged", count))
    incremental.publish(None, config, run_id, run.partial)
    return incremental.sealed(None, RecordIndex(
        run_id, tuple(segments), incremental.fingerprints(config, endpoints), incremental.index_ends(run.plans, stats),
        run.committed, started_at, lows, incremental.state_files(folder, states), run.archives), folder)
