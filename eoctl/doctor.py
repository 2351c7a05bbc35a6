"""`eoctl doctor`: check every configured component and say what is wrong and how to fix it.

Each check is one row: component, what was checked, ok or not, what was seen, how to fix it.
A failed check never stops the others; checks that depend on a failed one are skipped with why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from eoctl.config.model import Config, DuckDBStore, EndpointConfig, MySQLStore, TopicInput
from eoctl.errors import EoctlError



#: how the DuckDB engine reads a server's tables in bulk, and the package that does it
_BULK_READER = {"postgres": "ADBC", "mysql": "connectorx"}
_BULK_PACKAGE = {"postgres": "adbc-driver-postgresql", "mysql": "connectorx"}

class Status(str, Enum):
    OK = "ok"
    WARN = "warn"  # works, with less than the full protocol (a store without intents); never fails doctor
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class CheckResult:
    component: str
    check: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status.value
        return out


@dataclass
class DoctorReport:
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.status is not Status.FAIL for r in self.results)

    def counts(self) -> dict[str, int]:
        return {s.value: sum(r.status is s for r in self.results) for s in Status}

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "counts": self.counts(), "checks": [r.to_dict() for r in self.results]}


Progress = Callable[[str], None]


class _Doctor:
    def __init__(self, config: Config, start_spark: Callable[[], Any], progress: Progress) -> None:
        self.config = config
        self.start_spark = start_spark
        self.progress = progress
        self.report = DoctorReport()
        self.spark: Any = None
        self.duck = None  # the DuckDB engine's connection, when it is the configured engine
        self.kafka_ok: dict[str, bool] = {}
        # StoreLayout.misnamed() of the whole configuration, looked up at the first table row
        self._misnamed_tables: list[Any] | EoctlError | None = None

    def add(self, component: str, check: str, status: Status, detail: str, fix: str = "") -> bool:
        self.report.results.append(CheckResult(component, check, status, detail, fix))
        return status is Status.OK

    def attempt(self, component: str, check: str, fn: Callable[[], str], fix: str) -> bool:
        """Run one check; its return value is the detail; an exception is the failure's detail."""
        self.progress(f"{component}: {check}")
        try:
            return self.add(component, check, Status.OK, fn())
        except EoctlError as exc:
            return self.add(component, check, Status.FAIL, exc.one_line(), fix)
        except Exception as exc:  # a check must report, never crash the doctor
            return self.add(component, check, Status.FAIL, _one_line(exc), fix)

    # ---------------------------------------------------------------------------- engine

    @property
    def engine_ready(self) -> bool:
        return self.spark is not None or self.duck is not None

    def engine(self) -> None:
        engine = self.config.engine
        if engine.kind == "duckdb":

            def in_process() -> str:
                from importlib.metadata import version

                from eoctl.engine.duckdb.sql import connect

                self.duck = connect(engine.memory_limit)
                self.duck.execute("SELECT 42").fetchall()
                return f"DuckDB {version('duckdb')} in process, memory_limit {engine.memory_limit or 'default'}"

            self.attempt("duckdb", "engine runs a query", in_process, "reinstall eoctl (pip install -e .)")
            return
        if not engine.remote:

            def java() -> str:
                from eoctl.engine.spark.session import java_version

                major, line = java_version()
                if major < 17:
                    raise EoctlError(f"Java 17 or newer is needed, found: {line}")
                return line

            if not self.attempt("java", "Java 17+ is installed", java, "install OpenJDK 17 and set JAVA_HOME"):
                self.add("spark", "session starts", Status.SKIP, "needs Java")
                return

        def session() -> str:
            self.spark = self.start_spark()
            self.spark.range(1).count()  # a real job, not only a JVM
            return f"Spark {self.spark.version} on {engine.remote or engine.master}"

        self.attempt(
            "spark",
            "session starts and runs a job",
            session,
            "check engine.master/remote, the jars (engine.jars_dir or Maven access) and --debug output",
        )

    # ----------------------------------------------------------------------------- kafka

    def kafka(self) -> None:
        for name, conn in self.config.kafka.items():
            self.kafka_ok[name] = self.attempt(
                f"kafka.{name}",
                "broker reachable",
                lambda conn=conn: _broker_summary(conn),
                "check bootstrap_servers, the network path and security settings",
            )

    def live_input(self, ep_name: str, source: TopicInput) -> None:
        from eoctl.sources.kafka import committed_offsets, topic_partitions

        assert source.kafka is not None and source.group is not None
        component = f"endpoints.{ep_name}.input"
        conn = self.config.kafka[source.kafka]
        if not self.kafka_ok.get(source.kafka):
            self.add(component, "topics present", Status.SKIP, f"Kafka connection {source.kafka} is not reachable")
            return

        def topics() -> str:
            parts = topic_partitions(conn, source.topics)
            return ", ".join(f"{t} ({len(p)} partitions)" for t, p in parts.items())

        if not self.attempt(component, "topics present", topics, "create the topics or fix input.topics"):
            return

        def group() -> str:
            committed = committed_offsets(conn, source.group, source.topics)
            n = sum(len(p) for p in committed.values())
            return f"group {source.group}: {n} partition{'s' if n != 1 else ''} with committed offsets"

        self.attempt(component, "consumer-group offsets readable", group, "check input.group and the ACLs for it")

        if self.duck is not None:

            def plan() -> str:
                from eoctl.engine.duckdb.kafka_reader import offset_plan

                ranges = offset_plan(conn, source.topics, source.isolation, None)
                n = sum(end - start for start, end in ranges.values())
                return f"{len(ranges)} partitions, {n:,} offsets to read ({source.isolation})"

            self.attempt(component, "offsets readable for the DuckDB engine", plan,
                         "check the topics and the ACLs for them")
        if self.spark is not None:

            def connector() -> str:
                from eoctl.engine.spark.sources import read_topics

                read_topics(self.spark, conn, source.topics, isolation=source.isolation).schema
                return "spark-sql-kafka loaded"

            self.attempt(
                component,
                "Spark Kafka connector loads",
                connector,
                "make the connector available: engine.jars_dir (eoctl jars fetch DIR) or Maven access",
            )

    def archive_input(self, ep_name: str, source: TopicInput) -> None:
        from eoctl.engine.spark.sources import read_archive
        from eoctl.sources.archive import archive_committed_offsets

        assert source.archive is not None
        component = f"endpoints.{ep_name}.input"
        if not Path(source.archive).exists() and "://" not in source.archive:
            self.add(component, "topic archive readable", Status.FAIL, f"{source.archive} does not exist",
                     "fix input.archive")
        elif not self.engine_ready:
            self.add(component, "topic archive readable", Status.SKIP, "needs the engine")
        else:

            def readable() -> str:
                if self.duck is not None:
                    from eoctl.engine.duckdb.records import read_archive as read_on_duckdb

                    read_on_duckdb(self.duck, f"doctor_{ep_name}", source.archive, source.archive_format,
                                   source.topics)
                else:
                    read_archive(self.spark, source.archive, source.archive_format, source.topics).schema
                return f"{source.archive_format} records of {', '.join(source.topics)} in {source.archive}"

            self.attempt(
                component,
                "topic archive readable",
                readable,
                "the archive must hold topic, partition, offset, timestamp, key, value, headers",
            )

        def offsets() -> str:
            committed = archive_committed_offsets(source)
            missing = [t for t in source.topics if t not in committed]
            if missing:
                raise EoctlError(f"no committed offsets for topic {', '.join(missing)}")
            n = sum(len(p) for p in committed.values())
            return f"{n} partition{'s' if n != 1 else ''} with committed offsets"

        self.attempt(component, "committed offsets given", offsets, "set input.committed_offsets")

    # ---------------------------------------------------------------------------- stores

    def stores(self) -> None:
        from eoctl.stores.connection import connect, describe

        expected = self._expected_tables()
        for name, store in self.config.stores.items():
            component = f"stores.{name}"
            self.progress(f"{component}: connecting")
            try:
                with connect(store) as conn:
                    self.add(component, "reachable", Status.OK, describe(store))
                    for table, kind, columns, owner, users in expected.get(name, []):
                        self._table(component, conn, name, store, table, kind, columns, owner, users)
            except EoctlError as exc:
                fix = "check the path" if isinstance(store, DuckDBStore) else "check host, port, credentials and that the server runs"
                self.add(component, "reachable", Status.FAIL, exc.one_line(), fix)
                for table, _kind, _columns, owner, _users in expected.get(name, []):  # said, not silently left out
                    self.add(component, f"table {table} ({owner})", Status.SKIP, f"store {name} is not reachable")
                continue
            if self.duck is not None and expected.get(name):
                table = expected[name][0][0]
                how = "its snapshot" if isinstance(store, DuckDBStore) else f"it through {_BULK_READER[store.type]}"
                self.attempt(component, f"the DuckDB engine reads {how}",
                             lambda store=store, table=table: self._read(store, table),
                             "check that eoctl's temporary folder ($EOCTL_TMPDIR) is writable" if isinstance(
                                 store, DuckDBStore) else f"check the server and the {_BULK_PACKAGE[store.type]} package")
            if self.spark is not None and expected.get(name):
                table = expected[name][0][0]
                if isinstance(store, DuckDBStore):
                    self.attempt(component, "Spark reads its snapshot", lambda store=store, table=table: self._read(store, table),
                                 "check that eoctl's temporary folder ($EOCTL_TMPDIR) is writable and reachable by Spark")
                else:
                    self.attempt(component, "Spark reads it through JDBC", lambda store=store, table=table: self._read(store, table),
                                 "make the JDBC driver available: engine.jars_dir or Maven access")

    def _table(self, component: str, conn, store_name: str, store, table: str, kind: str, columns: dict[str, str], owner: str,
               users: list[str]) -> None:
        """One endpoint table: it exists (intents may not: a warning), has its columns, and the rows
        of endpoints sharing it can be told apart by its owner column (eoctl.stores.layout)."""
        from eoctl.stores.connection import describe, table_columns
        from eoctl.stores.layout import OPTIONAL, OWNER, WITHOUT, missing_column, needed_columns, wrong_type

        check = f"table {table} ({owner})"
        found = table_columns(conn, store, table)
        if found is None:
            if kind in OPTIONAL:
                self.add(component, check, Status.WARN, f"table {table} does not exist in schema "
                         f"{store.schema_name}: {WITHOUT[kind]}",
                         f"nothing to do without register-cleanup; else create it, or map {owner}.table")
            else:
                self.add(component, check, Status.FAIL, f"table {table} does not exist in schema "
                         f"{store.schema_name}", f"create it, or map {owner}.table to the right name")
            return
        owner_column = columns[OWNER[kind]]
        sent_column = columns.pop("sent", None)
        what = f"table {table} ({describe(store)}, schema {store.schema_name})"
        wrong = missing_column(what, found, needed_columns(owner, kind, columns, sent_column))
        if wrong is not None:  # the sentence every command refuses the table with
            self.add(component, check, Status.FAIL, str(wrong), "add the column, or set the key it names")
            return
        wrong = wrong_type(what, found, owner, kind, columns)
        if wrong is not None:
            self.add(component, check, Status.FAIL, str(wrong), "map the key to the column holding that time")
            return
        wrong = self._unparsed_time(what, store, table, kind, columns, owner, found)
        if wrong is not None:
            self.add(component, check, Status.FAIL, str(wrong),
                     "map the key to a column holding times, or correct the value")
            return
        if owner_column in found:
            if self._misnamed(component, check, store_name, table, kind):
                return
            shared = f"; shared by {', '.join(users)}, each reads the rows its name is in" if len(users) > 1 else ""
            self.add(component, check, Status.OK, f"{len(columns)} expected columns present{shared}")
        elif len(users) > 1:
            self.add(component, check, Status.FAIL,
                     f"table {table} is shared by {', '.join(users)} but has no column {owner_column}: "
                     "their rows cannot be told apart",
                     f"add the column (the endpoint's name), map it in {owner}.columns.{OWNER[kind]}, or give "
                     "each endpoint its own table")
        else:
            self.add(component, check, Status.WARN,
                     f"table {table} has no column {owner_column}: every row is taken as {users[0]}'s",
                     f"right if the table is {users[0]}'s alone; if it is shared, map {owner}.columns.{OWNER[kind]}")

    def _unparsed_time(self, what: str, store, table: str, kind: str, columns: dict[str, str], key: str,
                       found) -> str | None:
        """The sentence of the first value of a text column read as a time that is no time, found as
        the configured engine finds it in an audit (its first_unparsed_time over the table's rows);
        None when there is none, or no such column (a time type needs no read)."""
        from eoctl.stores.layout import text_time_columns, unparsed_time

        if not text_time_columns(kind, columns, found.types) or not self.engine_ready:
            return None
        if self.duck is not None:
            from eoctl.engine.duckdb.sql import repr_sql
            from eoctl.engine.duckdb.stores import first_unparsed_time
            from eoctl.stores.snapshots import duckdb_snapshot, mysql_snapshot, postgres_snapshot

            copy = {DuckDBStore: duckdb_snapshot, MySQLStore: mysql_snapshot}.get(type(store), postgres_snapshot)
            source = f"read_parquet({repr_sql(copy(store, table))})"
            types = dict(row[:2] for row in self.duck.execute(f"DESCRIBE SELECT * FROM {source}").fetchall())
            unparsed = first_unparsed_time(self.duck, kind, columns, source, None, types)
        else:
            from eoctl.engine.spark.run import first_unparsed_time
            from eoctl.engine.spark.stores import read_store_table

            unparsed = first_unparsed_time(read_store_table(self.spark, store, table), kind, columns)
        if unparsed is None:
            return None
        return unparsed_time(what, key, unparsed[0], columns[unparsed[0]], unparsed[1])

    def _misnamed(self, component: str, check: str, store_name: str, table: str, kind: str) -> bool:
        """Fail the row when the table holds rows under other names but none under the name of an
        endpoint that reads it (eoctl.stores.layout.StoreLayout.misnamed, the rule every command
        refuses by): a name that differs between the configuration and the store. True when it
        failed."""
        from eoctl.inert import inert
        from eoctl.stores.layout import StoreLayout

        if self._misnamed_tables is None:
            try:
                self._misnamed_tables = StoreLayout(self.config).misnamed()
            except EoctlError as exc:
                self._misnamed_tables = exc
        if isinstance(self._misnamed_tables, EoctlError):
            self.add(component, check, Status.FAIL, self._misnamed_tables.one_line(),
                     "check the table and the user's rights on it")
            return True
        mine = [m for m in self._misnamed_tables if (m.store, m.table, m.kind) == (store_name, table, kind)]
        if not mine:
            return False
        shown = ", ".join(f"'{inert(n)}' ({c:,} row{'s' if c != 1 else ''})" for n, c in mine[0].found)
        looked = ", ".join(f"'{inert(m.name)}'" for m in mine)
        self.add(component, check, Status.FAIL,
                 f"no row of {table} has {mine[0].column} {looked}, but rows have {shown}: "
                 f"{', '.join(m.endpoint for m in mine)} would read as empty, so audit, reconcile, gc and trace "
                 "refuse to judge it",
                 f"set {' / '.join(m.key for m in mine)} to the name its rows carry (or rename the endpoint)")
        return True

    def _read(self, store, table: str) -> str:
        from eoctl.engine.spark.stores import read_store_table
        from eoctl.stores.snapshots import duckdb_snapshot, mysql_snapshot, postgres_snapshot

        if self.duck is not None:
            copy = {DuckDBStore: duckdb_snapshot, MySQLStore: mysql_snapshot}.get(type(store), postgres_snapshot)
            copy(store, table)
            return f"{table} copied" + ("" if isinstance(store, DuckDBStore) else f" through {_BULK_READER[store.type]}")
        read_store_table(self.spark, store, table).schema
        return f"{table} schema read" + ("" if isinstance(store, DuckDBStore) else " through JDBC")

    def _expected_tables(self) -> dict[str, list[tuple[str, str, dict[str, str], str, list[str]]]]:
        """store name -> [(table, kind, canonical -> mapped column, config key of its first user,
        the endpoints using it)] for every endpoint's tables, once per table."""
        from eoctl.stores.layout import KINDS, StoreLayout

        layout = StoreLayout(self.config)  # only its configuration is read here, not the stores
        out: dict[str, list[tuple[str, str, dict[str, str], str, list[str]]]] = {}
        seen: set[tuple[str, str]] = set()
        for ep_name, ep in self.config.endpoints.items():
            for key in KINDS:
                table = getattr(ep, key)
                store = ep.store_of(table)
                if store is None or (store, table.table) in seen:
                    continue
                seen.add((store, table.table))
                columns = table.columns.model_dump()
                if getattr(table, "sent_column", None):  # an outbox that keeps sent rows needs its column too
                    columns["sent"] = table.sent_column
                out.setdefault(store, []).append((table.table, key, columns,
                                                  f"endpoints.{ep_name}.{key}", layout.sharing(store, table.table, key)))
        return out

    # -------------------------------------------------------------------- blobs and sinks

    def blobs(self, ep_name: str, ep: EndpointConfig) -> None:
        assert ep.blobs is not None

        def listable() -> str:
            from eoctl.blobfs import open_prefix

            fs, path = open_prefix(ep.blobs, ep.blob_options)
            if not fs.exists(path):
                raise EoctlError(f"blob prefix {ep.blobs} does not exist")
            if not fs.isdir(path):
                raise EoctlError(f"blob prefix {ep.blobs} is not a folder/prefix")
            return f"{ep.blobs} listable ({type(fs).__name__})"

        self.attempt(f"endpoints.{ep_name}.blobs", "blob prefix listable", listable,
                     "fix the URI, the credentials in blob_options, or install the fsspec package for its scheme")

    def sinks(self, ep_name: str, ep: EndpointConfig) -> None:
        from eoctl.engine.spark.stores import read_table
        from eoctl.expr.inputs import check_sink_columns

        for sink in ep.sinks:
            component = f"endpoints.{ep_name}.sinks.{sink.name}"
            if not self.engine_ready:
                self.add(component, "readable", Status.SKIP, "needs the engine")
                continue

            def readable(sink=sink) -> str:
                if self.duck is not None:
                    from eoctl.engine.duckdb.stores import read_sink

                    columns = list(read_sink(self.duck, self.config, sink, "doctor_sink", {}, check_columns=False))
                else:
                    columns = read_table(self.spark, self.config, sink).columns
                check_sink_columns(self.config, sink, list(columns))  # as every command refuses it
                return f"{len(columns)} columns, {sink.message_id_column} present"

            self.attempt(component, "readable with its columns", readable,
                         "fix the sink's path/table or its message_id_column/key_columns")

    def run(self) -> DoctorReport:
        for warning in self.config.warnings():
            self.add("config", "has something to read", Status.WARN, warning)
        try:
            self.engine()
            self.kafka()
            for ep_name, ep in self.config.endpoints.items():
                if ep.input is not None:
                    (self.live_input if ep.input.kafka else self.archive_input)(ep_name, ep.input)
            self.stores()
            for ep_name, ep in self.config.endpoints.items():
                if ep.blobs:
                    self.blobs(ep_name, ep)
                self.sinks(ep_name, ep)
        finally:
            if self.duck is not None:
                self.duck.close()
        return self.report


def _broker_summary(conn) -> str:
    from confluent_kafka import KafkaException

    from eoctl.sources.kafka import admin

    client = admin(conn)
    try:
        md = client.list_topics(timeout=conn.timeout_seconds)
    except KafkaException as exc:
        raise EoctlError(f"{conn.bootstrap_servers} not reachable: {exc.args[0].str()}") from None
    finally:
        client.poll(0)  # hands librdkafka's queued log lines to eoctl's logging (shown with --debug)
    return f"{len(md.brokers)} broker(s), {len(md.topics)} topics at {conn.bootstrap_servers}"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0][:300] if text else type(exc).__name__)


def run_doctor(
    config: Config, start_spark: Callable[[], Any], progress: Progress | None = None
) -> DoctorReport:
    """Check every component `config` names; `start_spark` is called once, lazily."""
    return _Doctor(config, start_spark, progress or (lambda _msg: None)).run()

