"""The DuckDB engine: the same tables the Spark engine reads, in process, on one machine.

Inputs become views of one DuckDB database in the run's temporary folder (eoctl.scratch): on
disk, so that what does not fit in `memory_limit` spills to `temp_directory` instead of failing.
Checks never import this module: they are Ibis expressions over unbound tables of the same names,
compiled to DuckDB's SQL (docs/engines.md).
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from typing import TYPE_CHECKING

from eoctl.engine.duckdb.files import archive_files
from eoctl.engine.duckdb.sql import connect, flat_table, ident, no_rows, repr_sql, sql_text, sql_utc_wall_time
from eoctl.errors import SourceError
from eoctl.sources.archive import check_archive_files
from eoctl.sources.records import PROTOCOL_COLUMNS

if TYPE_CHECKING:
    import duckdb

    from eoctl.incremental import PartitionPlan

#: the normalized record schema (eoctl.sources.records), as DuckDB types
#: columns every topic archive file has at its top level, and nothing else there names
PLACE_COLUMNS = ("topic", "partition", "offset", "headers")

RECORD_SQL_TYPES = {
    "topic": "VARCHAR",
    "partition": "INTEGER",
    "offset": "BIGINT",
    "timestamp": "TIMESTAMP",
    "key": "BLOB",
    "value": "BLOB",
    "headers": "STRUCT(key VARCHAR, value BLOB)[]",
}


def list_archives(config, endpoints: list[str]) -> dict[str, list[str]]:
    """The files of every topic archive `endpoints` read, by path (archive_files): listed apart
    from the reading, so that a run lists them (fsspec's import, a walk of each folder) while its
    stores are copied."""
    listed: dict[str, list[str]] = {}
    for name in endpoints:
        source = config.endpoint(name).input
        if source is not None and not source.kafka and source.archive not in listed:
            listed[source.archive] = archive_files(source.archive, source.archive_format)
    return listed


class ArchiveFiles:
    """The DuckDB engine's eoctl.incremental.ArchiveProbe: archives listed through fsspec, the
    files added since an indexed run read by a connection of their own (the run's may be copying
    the stores meanwhile)."""

    def __init__(self, memory_limit: str | None) -> None:
        self.memory_limit = memory_limit

    def listing(self, path: str) -> dict[str, int]:
        from eoctl.engine.files import FsspecFiles

        return FsspecFiles().listing(path)

    def holds_below(self, source, files: list[str], plans: list[PartitionPlan]) -> bool:
        from eoctl.incremental import below_end_condition

        root = source.archive.rstrip("/")
        con = connect(self.memory_limit)
        try:
            read_archive(con, "added_files", source.archive, source.archive_format, source.topics,
                         [f"{root}/{f}" for f in files])
            return bool(con.execute(f"SELECT 1 FROM added_files WHERE {below_end_condition(plans, ident)} "
                                    "LIMIT 1").fetchall())  # the first such record ends the read
        finally:
            con.close()


def read_archive(con: duckdb.DuckDBPyConnection, view: str, path: str, fmt: str,
                 topics: list[str] | None = None, files: list[str] | None = None) -> None:
    """Make `view` the records of the archive at `path` in the normalized record schema; only
    `topics` when given. A JSON archive's lines that are not records are the view `{view}_bad`
    (undecodable_lines). `files`: the archive's files, listed already (list_archives)."""
    if fmt == "json":
        _read_json_archive(con, view, path, topics, files)
        return
    if fmt != "parquet":
        raise SourceError(f"the DuckDB engine reads Parquet and JSON topic archives; {path} is {fmt}")
    files = archive_files(path, fmt) if files is None else files
    listed = ", ".join(f"'{sql_text(f)}'" for f in files)
    check_archive_files(path, misfit_parquet_files(con, files))
    columns = _parquet_columns(con, listed)
    # A timestamp Spark wrote is an instant (TIMESTAMP WITH TIME ZONE here): its UTC wall time,
    # as Spark shows it.
    select = ", ".join((sql_utc_wall_time(ident(c), columns[c]) if t == "TIMESTAMP" else f"CAST({ident(c)} AS {t})")
                       + f" AS {ident(c)}" for c, t in RECORD_SQL_TYPES.items())
    con.execute(f"CREATE OR REPLACE VIEW {ident(view)} AS SELECT {select} FROM read_parquet([{listed}])"
                f"{_topic_filter(topics)}")


def _no_records(con: duckdb.DuckDBPyConnection, view: str) -> None:
    con.execute(f"CREATE OR REPLACE TABLE {ident(view)} AS {no_rows(RECORD_SQL_TYPES)}")


def _topic_filter(topics: list[str] | None, column: str = "topic") -> str:
    return f" WHERE {column} IN ({', '.join(repr_sql(t) for t in topics)})" if topics else ""


#: JSON types a field of each kind may have and still decode as Spark's JSON reader decodes it
#: (eoctl.sources.archive: PERMISSIVE mode, where a field that does not convert makes the line a
#: corrupt record): a number field takes a JSON integer in range; a text field takes any value (a
#: number or object becomes its JSON text); a time takes a text Spark parses or an integer
#: (seconds); binary takes base64 text; every field may be absent or null.
def _field_decodes(json: str, path: str, kind: str) -> str:
    t = f"json_type({json}, {repr_sql(path)})"
    absent = f"{t} IS NULL OR {t} = 'NULL'"
    value = f"json_extract_string({json}, {repr_sql(path)})"
    if kind == "INTEGER":
        ok = f"{t} IN ('BIGINT', 'UBIGINT') AND try_cast({value} AS INTEGER) IS NOT NULL"
    elif kind == "BIGINT":
        ok = f"{t} IN ('BIGINT', 'UBIGINT') AND try_cast({value} AS BIGINT) IS NOT NULL"
    elif kind == "TIMESTAMP":
        ok = f"({t} = 'VARCHAR' AND try_cast({value} AS TIMESTAMPTZ) IS NOT NULL) OR {t} IN ('BIGINT', 'UBIGINT')"
    elif kind == "BLOB":
        ok = f"{t} = 'VARCHAR' AND try(from_base64({value})) IS NOT NULL"
    else:
        ok = "true"
    return f"(({absent}) OR ({ok}))"


def _read_json_archive(con: duckdb.DuckDBPyConnection, view: str, path: str, topics: list[str] | None,
                       files: list[str] | None = None) -> None:
    """A JSON-lines archive read line by line, so that a line that is not a record is named by
    file and 1-based line (blank lines counted) instead of being skipped in silence: `{view}` holds
    the lines that decode as records with a place in the log (topic, partition, offset),
    `{view}_bad` the others (file, line, problem, text: the first 200 characters). Both come from
    one parse of the lines, so they always agree. Each file is read whole (read_text): a JSON
    archive's files are as large as the writer's rolling makes them."""
    files = archive_files(path, "json") if files is None else files
    files, originals = _as_utf8(con, files)
    listed = ", ".join(repr_sql(f) for f in files)
    # a file read through its UTF-8 copy is named as the archive's file
    filename = ("CASE filename " + " ".join(f"WHEN {repr_sql(c)} THEN {repr_sql(o)}" for c, o in originals.items())
                + " ELSE filename END") if originals else "filename"
    place = ("topic", "partition", "offset")
    j = "text"
    headers_ok = (f"(json_type({j}, '$.headers') IS NULL OR json_type({j}, '$.headers') = 'NULL' OR "
                  f"(json_type({j}, '$.headers') = 'ARRAY' AND coalesce(list_bool_and(list_transform("
                  f"json_extract({j}, '$.headers[*]'), lambda h: json_type(h) = 'NULL' OR (json_type(h) = 'OBJECT' "
                  f"AND {_field_decodes('h', '$.value', 'BLOB')}))), true)))")
    fields_ok = " AND ".join([_field_decodes(j, "$.partition", "INTEGER"), _field_decodes(j, "$.offset", "BIGINT"),
                              _field_decodes(j, "$.timestamp", "TIMESTAMP"), headers_ok])
    con.execute(f"""CREATE OR REPLACE VIEW {ident(view + '_lines')} AS
        WITH raw AS (SELECT {filename} AS file, string_split(content, chr(10)) AS parts FROM read_text([{listed}])),
        numbered AS (SELECT file, generate_subscripts(parts, 1) AS line, unnest(parts) AS raw_text FROM raw),
        lines AS (SELECT file, line, rtrim(raw_text, chr(13)) AS text FROM numbered WHERE trim(raw_text) <> ''),
        objects AS (SELECT *, coalesce(json_valid(text), false) AND json_type(CASE WHEN json_valid(text) THEN text
                                                                                   END) = 'OBJECT' AS is_object
                    FROM lines)
        SELECT file, line, text, CASE WHEN is_object THEN {fields_ok} ELSE false END AS decodes,
               CASE WHEN is_object THEN json_extract_string(text, '$.topic') END AS topic,
               CASE WHEN is_object THEN json_extract_string(text, '$.partition') END AS "partition",
               CASE WHEN is_object THEN json_extract_string(text, '$.offset') END AS "offset"
        FROM objects""")
    placed = " AND ".join(f"{ident(c)} IS NOT NULL" for c in place)
    headers = ("list_transform(json_extract(text, '$.headers[*]'), lambda h: CASE WHEN json_type(h) <> 'NULL' THEN "
               "{'key': json_extract_string(h, '$.key'), 'value': from_base64(json_extract_string(h, '$.value'))} END)")
    timestamp = ("CASE WHEN json_type(text, '$.timestamp') = 'VARCHAR' THEN CAST(CAST(json_extract_string(text, "
                 "'$.timestamp') AS TIMESTAMPTZ) AS TIMESTAMP) WHEN json_type(text, '$.timestamp') IN ('BIGINT', "
                 "'UBIGINT') THEN CAST(to_timestamp(CAST(json_extract_string(text, '$.timestamp') AS BIGINT)) "
                 "AS TIMESTAMP) END")
    con.execute(f"""CREATE OR REPLACE VIEW {ident(view)} AS
        SELECT topic, CAST("partition" AS INTEGER) AS "partition", CAST("offset" AS BIGINT) AS "offset",
               {timestamp} AS timestamp, from_base64(json_extract_string(text, '$.key')) AS key,
               from_base64(json_extract_string(text, '$.value')) AS value, {headers} AS headers
        FROM {ident(view + '_lines')} WHERE decodes AND {placed}{' AND topic IN (' + ', '.join(
            repr_sql(t) for t in topics) + ')' if topics else ''}""")
    con.execute(f"""CREATE OR REPLACE VIEW {ident(view + '_bad')} AS
        SELECT file, CAST(line AS BIGINT) AS line,
               CASE WHEN NOT decodes THEN 'not a record: malformed JSON or a field of the wrong type'
                    ELSE 'no ' || concat_ws(', ', {', '.join(f"CASE WHEN {ident(c)} IS NULL THEN '{c}' END"
                                                           for c in place)}) END AS problem,
               substr(text, 1, 200) AS text
        FROM {ident(view + '_lines')} WHERE (NOT decodes OR NOT ({placed}))
        {' AND (topic IS NULL OR topic IN (' + ', '.join(repr_sql(t) for t in topics) + '))' if topics else ''}""")


def _as_utf8(con: duckdb.DuckDBPyConnection, files: list[str]) -> tuple[list[str], dict[str, str]]:
    """`files`, each that is not valid UTF-8 (binary garbage among its lines) replaced by a copy in
    the run's folder whose invalid bytes are U+FFFD, as Spark's text reader decodes them: its lines
    are then judged one by one (EO106 for those that are not records), not the file rejected
    whole. Returns the files to read and copy -> the archive's file."""
    listed = ", ".join(repr_sql(f) for f in files)
    bad = [r[0] for r in con.execute(f"SELECT filename FROM read_blob([{listed}]) "
                                     "WHERE try(decode(content)) IS NULL").fetchall()]
    if not bad:
        return files, {}
    import fsspec

    from eoctl.scratch import run_dir

    folder = run_dir() / f"utf8-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    copies: dict[str, str] = {}
    for i, name in enumerate(bad):
        with fsspec.open(name, "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
        copy = folder / f"{i}.json"
        copy.write_text(text, encoding="utf-8")
        copies[str(copy)] = name
    return [next((c for c, o in copies.items() if o == f), f) for f in files], copies


def misfit_parquet_files(con: duckdb.DuckDBPyConnection, files: list[str]) -> list[tuple[str, list[str]]]:
    """(file, the record columns it lacks) of each Parquet file of `files` that is no topic archive
    file, from the files' footers (one query: DuckDB reads every footer of a scan anyway). A file
    of another schema beside good ones made DuckDB's scan fail mid-way, and Spark's read on with
    its rows dropped; alone, it was named by nothing."""
    listed = ", ".join(repr_sql(f) for f in files)
    try:
        rows = con.execute(f"SELECT file_name, list(DISTINCT name) FROM parquet_schema([{listed}]) "
                           "GROUP BY file_name ORDER BY file_name").fetchall()
    except Exception as exc:  # a file cut short or of another format: main() names it, as on Spark
        from eoctl.engine.errors import said_by_main

        if said_by_main(str(exc)):
            raise
        raise SourceError(f"topic archive cannot be read as parquet: {str(exc).splitlines()[0]}") from None
    # nested fields are listed too (headers' key and value): the columns only a record has at top
    # level are what tells one apart
    return [(str(f), missing) for f, names in rows if (missing := [c for c in PLACE_COLUMNS if c not in names])]


def _parquet_columns(con: duckdb.DuckDBPyConnection, listed: str) -> dict[str, str]:
    try:
        rows = con.execute(f"DESCRIBE SELECT * FROM read_parquet([{listed}])").fetchall()
    except Exception as exc:  # duckdb raises one class per cause; the first line says which
        from eoctl.engine.errors import said_by_main

        if said_by_main(str(exc)):
            raise  # a file cut short or of another format, memory run out: main() names it as on Spark
        raise SourceError(f"topic archive cannot be read as parquet: {str(exc).splitlines()[0]}") from None
    return {row[0]: row[1] for row in rows}


def protocol_view(con: duckdb.DuckDBPyConnection, view: str, records: str, names: dict[str, str]) -> None:
    """Make `view` the records of view `records` plus one binary column per protocol header
    (`names`: column -> header key), the last value of a key a record carries twice, as Kafka's
    lastHeader takes (DuckDB indexes from the end with -1; an empty list gives NULL)."""
    cols = ", ".join(f"list_filter(headers, lambda h: h.key = {repr_sql(key)})[-1].value AS {ident(col)}"
                     for col, key in names.items())
    con.execute(f"CREATE OR REPLACE VIEW {ident(view)} AS SELECT *, {cols} FROM {ident(records)}")


@functools.cache
def working_copy_sql() -> str:
    """The working copy's SQL over views `protocol` and `commits`: the same for every run of the
    process, so compiled once (DuckDBRun compiles it while the stores are copied)."""
    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.records import commits_table, protocol_table, working_copy

    return compile_sql(working_copy(protocol_table(), commits_table(), Dialect.duckdb), Dialect.duckdb)


def build_working_copy(con: duckdb.DuckDBPyConnection, config, endpoints: list[str] | None = None,
                       options=None, keep: bool = True, index=None, endpoint_ranges: dict | None = None,
                       listed: dict[str, list[str]] | None = None) -> dict[str, dict[str, dict[int, int]]]:
    """The audit's working copy of every audited input, as `records` (eoctl.expr.records): read
    once, kept in the run's database (spilling to disk past `memory_limit`); with `keep` false a
    view (one query reads it: only its columns are decoded). `options` (AuditOptions): only its
    ranges, and records at or after `since` and before `until`. `index`
    (eoctl.engine.duckdb.index.IndexRun): the record index this run continues from or keeps;
    `endpoint_ranges`: endpoint -> the offset ranges of its live input to read (trace's slice of a
    time span; [] reads nothing); `listed`: the archives' files, listed already (list_archives).
    Returns the committed offsets it was taken against (endpoint -> topic -> partition)."""
    from eoctl.expr.records import HEADERS
    from eoctl.sources import input_committed_offsets

    keys = {h: getattr(config.protocol.headers, h) for h in HEADERS}
    selects, kafka_starts, archived, bad = [], [], [], []
    committed: dict[str, dict[str, dict[int, int]]] = {}
    for name, ep in config.endpoints.items():
        if ep.input is None or (endpoints and name not in endpoints):
            continue
        if ep.input.kafka:
            from eoctl.engine.duckdb.kafka_reader import read_kafka
            from eoctl.sources.kafka import partition_offsets

            conn = config.kafka[ep.input.kafka]
            ranges = options.ranges if options is not None else None
            if index is not None and index.kafka_ranges(name) is not None:
                ranges = index.kafka_ranges(name)  # from where the index ends
            if endpoint_ranges is not None and name in endpoint_ranges:
                ranges = endpoint_ranges[name]
            mine = [r for r in ranges or [] if r.topic in ep.input.topics]
            if ranges is not None and not mine:  # --range names only other inputs' topics: none of this one's
                _no_records(con, f"raw_{name}")
            else:
                read_kafka(con, f"raw_{name}", conn, ep.input.topics, ep.input.isolation, mine or None,
                           config.engine.kafka_readers)
            # a live topic's log start is the broker's
            kafka_starts += [{"ep": name, "topic": p.topic, "partition": p.partition, "log_start": p.log_start}
                             for p in partition_offsets(conn, ep.input.topics)]
        else:
            files = (listed or {}).get(ep.input.archive)
            if index is not None and ep.input.archive_format == "parquet":
                files = index.files_to_read(con, name, files if files is not None else
                                            archive_files(ep.input.archive, ep.input.archive_format))
            if files == []:  # no file holds a record past the index (nothing arrived since the last run)
                _no_records(con, f"raw_{name}")
            else:
                read_archive(con, f"raw_{name}", ep.input.archive, ep.input.archive_format, ep.input.topics, files)
            archived.append(name)
            if ep.input.archive_format == "json":
                bad.append(f"SELECT {repr_sql(name)} AS ep, * FROM {ident(f'raw_{name}_bad')}")
        protocol_view(con, f"protocol_{name}", f"raw_{name}", keys)
        conds = _record_filter(options)
        # the rows after where the index ends: of Parquet, one query per disjoint part, each skipping
        # row groups; of JSON lines (no row groups, each query a parse of the files) their OR
        branches = (index.archive_branches(name, split=ep.input.archive_format == "parquet")
                    if index is not None and ep.input.archive else None) or [None]
        for branch in branches:
            where = " AND ".join(conds + ([branch] if branch else []))
            selects.append(f"SELECT {repr_sql(name)} AS endpoint, topic, partition, \"offset\", timestamp, "
                           f"{', '.join(HEADERS)} FROM {ident(f'protocol_{name}')}{' WHERE ' + where if where else ''}")
        committed[name] = input_committed_offsets(config, ep.input)
    if not selects:
        selects.append(no_rows(_PROTOCOL_SQL_TYPES))
    con.execute("CREATE OR REPLACE VIEW protocol AS " + " UNION ALL ".join(selects))
    bad.append("SELECT NULL::VARCHAR AS ep, NULL::VARCHAR AS file, NULL::BIGINT AS line, NULL::VARCHAR AS problem, "
               "NULL::VARCHAR AS text WHERE false")
    con.execute("CREATE OR REPLACE VIEW undecodable AS " + " UNION ALL ".join(bad))
    commits_table(con, committed)
    sql = working_copy_sql()
    # a temporary table: in memory, spilled to temp_directory past memory_limit, never written
    # compressed into the database file (10M records: 5.0 s against 10.7 s, with up to twice
    # the memory where the limit leaves room)
    kept = "TEMP TABLE" if keep else "VIEW"
    if index is None:
        con.execute(f"CREATE OR REPLACE {kept} records AS {sql}")
    else:
        from eoctl.engine.duckdb.index import records_with_index

        records_with_index(con, sql, index, committed, kept)
    flat_table(con, "kafka_log_starts", kafka_starts, {"ep": "VARCHAR", "topic": "VARCHAR", "partition": "INTEGER",
                                                       "log_start": "BIGINT"})
    # an archive's log start is the first offset it holds (of every record, usable or not): when
    # continuing an index that kept them, its lows and the new records' (the index unread)
    lows = index.archive_lows(archived) if index is not None else None
    source = "records"
    if lows is not None:
        flat_table(con, "index_lows", lows, {"endpoint": "VARCHAR", "topic": "VARCHAR", "partition": "INTEGER",
                                             "offset": "BIGINT"})
        source = '(SELECT endpoint, topic, partition, "offset" FROM fresh UNION ALL SELECT * FROM index_lows)'
    in_archives = ", ".join(repr_sql(n) for n in archived) or "NULL"
    con.execute(f"CREATE OR REPLACE {kept} log_starts AS SELECT endpoint AS ep, topic, "
                f'partition, min("offset") AS log_start FROM {source} WHERE endpoint IN ({in_archives}) GROUP BY ALL '
                "UNION ALL SELECT * FROM kafka_log_starts")
    return committed


def commits_table(con: duckdb.DuckDBPyConnection, committed: dict[str, dict[str, dict[int, int]]]) -> None:
    """Table `commits`, the committed offsets a working copy is met with: each endpoint's next
    offset to process, by topic and partition (`committed`: endpoint -> topic -> partition)."""
    rows = [{"c_endpoint": n, "c_topic": t, "c_partition": p, "committed": o}
            for n, topics in committed.items() for t, parts in topics.items() for p, o in parts.items()]
    flat_table(con, "commits", rows, {"c_endpoint": "VARCHAR", "c_topic": "VARCHAR", "c_partition": "INTEGER",
                                      "committed": "BIGINT"})


def _record_filter(options) -> list[str]:
    """The conditions of --range, --since and --until (the Spark reader's predicates)."""
    if options is None:
        return []
    conds = []
    if options.ranges:
        one = []
        for r in options.ranges:
            c = f"(topic = {repr_sql(r.topic)} AND partition = {int(r.partition)}"
            if r.start >= 0:
                c += f' AND "offset" >= {int(r.start)}'
            if r.end >= 0:
                c += f' AND "offset" < {int(r.end)}'
            one.append(c + ")")
        conds.append("(" + " OR ".join(one) + ")")
    for bound, op in ((options.since, ">="), (options.until, "<")):
        if bound is not None:
            utc = bound.astimezone(dt.timezone.utc).replace(tzinfo=None)
            conds.append(f"timestamp {op} TIMESTAMP '{utc.isoformat(sep=' ')}'")
    return conds


_PROTOCOL_SQL_TYPES = {"endpoint": "VARCHAR", **{c: RECORD_SQL_TYPES[c] for c in ("topic", "partition", "offset", "timestamp")},
                       **{h: "BLOB" for h in PROTOCOL_COLUMNS}}


