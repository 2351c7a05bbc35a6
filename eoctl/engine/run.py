"""One run's inputs opened on an engine: what the engine-neutral flows (the audit, reconcile-tokens,
the gc plans) ask of DuckDB or Spark. The flows build Ibis expressions over the views the run
opened (eoctl.expr.inputs), compile them to the run's dialect and hand the SQL here; the audit's
record index (eoctl.incremental) is read and kept through the run too. open_run is the one place
an engine is chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from eoctl.config.model import Config
    from eoctl.expr.functions import Dialect
    from eoctl.expr.inputs import Scope
    from eoctl.incremental import PartitionPlan, RecordIndex
    from eoctl.options import AuditOptions
    from eoctl.sources.kafka import OffsetRange
    from eoctl.sources.summary import InputSummary
    from eoctl.stores.layout import StoreLayout
    from eoctl.trace.reader import TraceReader

T = TypeVar("T")


class EngineRun(Protocol):
    scope: Scope  # which tables the run opened, as the expressions see them
    dialect: Dialect
    concurrency: int  # keep, evaluate or keep_state calls at once, each from a thread (in_order)
    looks_up: bool  # whether `reach` may look rows of the index up by key (else it answers False)

    def keep(self, name: str, sql: str) -> None:
        """The rows of `sql` computed once and kept as table `name` (replacing one of that name), in
        no order: what reads it orders it."""

    def stream_outgoing(self, view: str, above: int) -> bool:
        """Table `view` (eoctl.expr.outbox.STREAMED_OUTGOING) of the messages of each pending entry
        whose `outgoing` text is longer than `above` characters, read by a streaming JSON reader
        (an entry that is no list of messages has none); False when the engine has no such reader
        (the expression then parses every entry)."""

    def view(self, name: str, sql: str) -> None:
        """The rows of `sql` as view `name`, computed by each query that reads it (a small filter
        of kept tables: keeping it would cost a Spark job)."""

    def records_for(self, columns: Sequence[str]) -> str:
        """The name of a table of the records with at least `columns`, for a flow that reads no
        others: the working copy where the engine keeps one, else just these columns kept (read
        from the source and decoded once, however often the flow's query reads them)."""

    def rows(self, sql: str) -> list[dict[str, Any]]:
        """A small result (counts, a sample) brought back, secrets masked."""

    def evaluate(self, sql: str, stem: str) -> tuple[int, list[dict[str, Any]], str | None]:
        """Evidence: the rows of `sql` counted, a sample of options.evidence_rows brought back, the
        rest written to options.evidence_dir as `stem`.parquet."""

    def stream(self, sql: str) -> Iterator[dict[str, Any]]:
        """Every row of `sql`, in its order, batch by batch: never the whole result at once."""

    def cancel(self) -> None:
        """Stop what other threads of the run are computing now (in_order: one call failed, or a
        signal came): their calls then fail soon instead of running to the end. What starts after
        it is not stopped: in_order calls it until every call has ended."""

    def release(self) -> None:
        """Free everything the run holds (also after a failure): a record index begun and not
        kept (keep_index) is removed."""

    # the record index (`audit --since-last`, eoctl.incremental), on both engines the same files

    base: RecordIndex | None  # the recorded run's index the records continue from, if any
    fallback: str | None  # why an index found was not continued from (a full scan)

    def record_count(self) -> int:
        """How many records the checks see (the index's and the source's)."""

    def fresh_stats(self) -> list[tuple[str, str, int, int, int, int]]:
        """(endpoint, topic, partition, end offset, records, lowest offset) per partition read from
        the source, when the run continues or keeps an index (else [])."""

    plans: dict[str, list[PartitionPlan]]  # continuing: per endpoint, where the source was read from
    committed: dict[str, dict[str, dict[int, int]]]  # endpoint -> topic -> partition -> committed offset now

    def open_states(self, schemas: dict) -> None:
        """Continuing: a view `state_<name>` of each state of `schemas` (name -> column -> Ibis
        type) the base run kept, read in those types whichever engine wrote it."""

    def reach(self, keys: dict[str, str | None]) -> bool:
        """Continuing: make `indexed_reach` (eoctl.expr.incremental.Continuation.reach_keys), the
        index's rows whose key column(s) (`keys`: "column[,column...]" -> SQL of the keys, or None:
        the column not null) hold a key looked up, its carried records and its rows at or past the
        in-flight floors; False when the engine reads the index whole instead (the probes then
        scan every indexed row)."""

    def keep_state(self, name: str, sql: str) -> tuple[int, int]:
        """The rows of `sql` written as state `name` of this run's part of the record index, for
        the next run (eoctl.expr.incremental.states): (rows, bytes)."""

    def keep_index(self, run_id: str, stats: list, states: dict[str, tuple[int, int]]) -> RecordIndex:
        """Complete and publish this run's part of the record index (opened with `index_path`),
        with the states kept (name -> (rows, bytes))."""


def in_order(engine: EngineRun, calls: Sequence[Callable[[], T]],
             before: Callable[[int], None] = lambda _i: None) -> list[T]:
    """The results of `calls` (independent calls of the engine: keep, evaluate, keep_state), in
    their order, up to engine.concurrency of them running at once; `before(i)` in this thread as
    the i-th result is waited for (progress). In a warm Spark session a job of a few rows mostly
    waits (scheduling, small tasks), which several at once overlap: an incremental audit's eleven
    evidence queries took 11 s instead of 15 on two cores, where a full audit's, busy scanning,
    gained 2 s of 47 (in a new JVM, busy compiling, both gain less). A failure or a signal
    cancels the calls not started and the engine's running work; nothing returns before every
    thread has stopped."""
    if engine.concurrency <= 1 or len(calls) <= 1:
        results = []
        for i, call in enumerate(calls):
            before(i)
            results.append(call())
        return results
    from concurrent.futures import ThreadPoolExecutor, wait

    pool = ThreadPoolExecutor(min(engine.concurrency, len(calls)), thread_name_prefix="eoctl-engine")
    futures = [pool.submit(call) for call in calls]
    try:
        results = []
        for i, future in enumerate(futures):
            before(i)
            results.append(future.result())
        return results
    except BaseException:
        for future in futures:
            future.cancel()
        # again until every call has ended: a query runs as several jobs (adaptive execution),
        # and one between two of them has none running to cancel
        engine.cancel()
        while wait(futures, timeout=0.5).not_done:
            engine.cancel()
        raise
    finally:
        pool.shutdown(wait=True)


def open_run(spark: Any, config: Config, options: AuditOptions, step: Callable[[str], None], *,
             inputs: frozenset[str] = frozenset(), layout: StoreLayout | None = None,
             narrow_records: bool = False, index_path: str | None = None) -> EngineRun:
    """The inputs every configured endpoint reads, opened on the configured engine: DuckDB in
    process, else Spark (`spark`: a session, or a function that starts one, called only here).
    `inputs`: what the flow reads besides the records and store tables (eoctl.findings.INPUTS);
    `narrow_records`: the flow reads a few columns of the records, through records_for, so DuckDB
    leaves the working copy a view (only those columns are ever decoded) instead of computing it;
    with `options.since_last`, the records continue the newest recorded index that covers them;
    `index_path`: the (partial) folder this run's part of the record index is written to."""
    run: EngineRun
    if config.engine.kind == "duckdb":
        from eoctl.engine.duckdb.run import DuckDBRun

        run = DuckDBRun(config, options, step, inputs=inputs, layout=layout, keep_records=not narrow_records,
                        index_path=index_path)
    else:
        from eoctl.engine.spark.run import SparkRun

        if callable(spark):
            step("starting Spark")
            spark = spark()
        run = SparkRun(spark, config, options, step, inputs=inputs, layout=layout, index_path=index_path)
    try:
        _keep_pending_outgoing(run, step)
    except BaseException:
        run.release()
        raise
    return run


def _keep_pending_outgoing(run: EngineRun, step: Callable[[str], None]) -> None:
    """The pending entries' outgoing messages parsed from their JSON once, kept for every check and
    plan that reads them (eoctl.expr.outbox.pending_outgoing): where an entry holds a batch of a
    million messages, each reader parsing it again cost minutes. An entry of more than
    STREAMED_ENTRY characters goes through the engine's streaming JSON reader where it has one:
    DuckDB parses one value in one piece, 289 s for a million messages (187 MB) against 2.6 s
    read as a file, and a signal waits for the end of the piece."""
    from eoctl.expr import compile_sql
    from eoctl.expr.outbox import PENDING_OUTGOING, STREAMED_ENTRY, STREAMED_OUTGOING, pending_outgoing_rows

    scope = run.scope
    if not any(kind == "outbox" for _endpoint, kind in scope.tables):
        return  # an empty view: nothing to parse
    step("reading the messages of the pending outbox entries")
    scope.streamed_outgoing = run.stream_outgoing(STREAMED_OUTGOING, STREAMED_ENTRY)
    run.keep(PENDING_OUTGOING, compile_sql(pending_outgoing_rows(scope, run.dialect), run.dialect))
    scope.kept_pending = True


def open_trace_reader(spark: Any, config: Config, step: Callable[[str], None] = lambda _m: None) -> TraceReader:
    """The configured engine's trace reader (eoctl.trace.reader; `spark`: a session, or a function
    that starts one, called only here)."""
    if config.engine.kind == "duckdb":
        from eoctl.engine.duckdb.trace import DuckDBTraceReader

        return DuckDBTraceReader(config)
    from eoctl.engine.spark.trace import SparkTraceReader

    if callable(spark):
        step("starting Spark")
        spark = spark()
    return SparkTraceReader(spark)


def open_rows_run(config: Config, tables: dict[str, tuple[list[dict[str, Any]], Any]], scope: Scope) -> EngineRun:
    """A run over a handful of given rows (`tables`: name -> (rows, Ibis schema); trace's rows of
    one message), in process on DuckDB whatever the configured engine: a Spark job each would cost
    more than all of them. Its evidence rows are the rows' own Python values, every one."""
    from eoctl.engine.duckdb.run import RowsRun

    run = RowsRun(config, tables, scope)
    try:  # one of the rows may be a batch job's entry of a million messages: parsed once, as by open_run
        _keep_pending_outgoing(run, lambda _m: None)
    except BaseException:
        run.release()
        raise
    return run


def summarize_input(spark: Any, config: Config, endpoint: str, ranges: list[OffsetRange] | None = None,
                    step: Callable[[str], None] = lambda _m: None) -> InputSummary:
    """`eoctl sources scan` on the configured engine: per partition of an endpoint's input, its
    records, offsets, committed offset, records in flight, records with the protocol headers and
    distinct message ids (`spark`: a session, or a function that starts one, unused on DuckDB)."""
    if config.engine.kind == "duckdb":
        from eoctl.engine.duckdb.summary import summarize_input as on_duckdb

        step(f"reading {endpoint}'s input")
        return on_duckdb(config, endpoint, ranges)
    from eoctl.engine.spark.summary import summarize_input as on_spark

    if callable(spark):
        step("starting Spark")
        spark = spark()
    step(f"reading {endpoint}'s input")
    return on_spark(spark, config, endpoint, ranges)
