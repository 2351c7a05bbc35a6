"""`eoctl audit`: run the selected checks over one shared scan and return typed findings."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from eoctl import incremental
from eoctl.config.model import Config
from eoctl.errors import UsageError
from eoctl.options import AuditOptions
from eoctl.findings import CATALOG, AuditReport, Finding, code_of
from eoctl.run_ids import new_run_id

if TYPE_CHECKING:
    from eoctl.engine.run import EngineRun
    from eoctl.expr.functions import Dialect
    from eoctl.expr.incremental import Continuation
    from eoctl.expr.inputs import Scope

_CODE = re.compile(r"^EO\d{1,3}$")

T = TypeVar("T")


def select_codes(select: list[str] | None, ignore: list[str] | None) -> list[str]:
    """Codes to run: `select` entries are codes or prefixes (EO2 = all token checks)."""

    def expand(items: list[str], flag: str) -> set[str]:
        out: set[str] = set()
        for item in (i.strip().upper() for raw in items for i in raw.split(",") if i.strip()):
            matched = {c for c in CATALOG if c.startswith(item)} if _CODE.match(item) else set()
            if not matched:
                raise UsageError(f"{flag} {item!r}: no such finding code (known: {min(CATALOG)}..{max(CATALOG)}, "
                                 f"or a prefix like {min(CATALOG)[:3]})")
            out |= matched
        return out

    chosen = expand(select, "--select") if select else set(CATALOG)
    return sorted(chosen - (expand(ignore, "--ignore") if ignore else set()))


def run_audit(config: Config, options: AuditOptions, codes: list[str], spark: Any = None,
              progress: Callable[[str], None] | None = None) -> AuditReport:
    """The findings of `codes` on the configured engine (eoctl.engine.run.open_run; `spark`: a
    session, or a function that starts one, unused on DuckDB): the checks of eoctl.expr.catalog
    compiled to the engine's SQL over the run's views, every record read once, or with
    `--since-last` the recorded index's and the ones added since. With `options.keep_index` the
    records become this run's part of the record index (report.index)."""
    from eoctl.engine.run import open_run
    from eoctl.findings import inputs_of

    step = progress or (lambda _m: None)
    _check_since_last(options)
    run_id = new_run_id(options.now)  # its time is the run's start (started_at)
    selected = options.endpoints or list(config.endpoints)
    report = AuditReport(run=_run(run_id, config.engine.kind, options, selected, codes))
    if options.since_last:
        step("looking for the record index of the last recorded run")
    keeps = options.keep_index and incremental.indexable(config, options)
    engine = open_run(spark, config, options, step, inputs=inputs_of(codes),
                      index_path=incremental.partial_path(config, run_id) if keeps else None)
    try:
        report.scanned["records"] = total = engine.record_count()  # the one scan all checks share
        stats = engine.fresh_stats()
        report.run["scan"] = incremental.scan_summary(engine.base, engine.fallback, options.since_last, total,
                                                      sum(row[4] for row in stats), config, keeps)
        continuation = _continuation(engine, keeps)
        scope = engine.scope
        if engine.base is not None:
            report.run["scan"]["continued"] = sorted(continuation.states)
            if continuation.drops:
                report.run["scan"]["note"] = (f"retention took indexed records since the last run: {code_of('topics.sequence_gaps')} read every "
                                              "record's sequence numbers again")
            if sinks := continuation.sink_reads(scope):
                report.run["scan"]["sinks"] = sinks
        report.notes = scope.layout.notes(scope.selected, scope.misnamed) + _large_entries(engine)
        report.misnamed = [m.to_dict() for m in scope.misnamed]
        kept, continuation = evaluate_checks(report, engine, codes, step, continuation)
        if keeps and not scope.misnamed:  # a run that judged less is never continued
            step("keeping the record index for the next --since-last run")
            states = keep_states(engine, continuation, kept)
            report.index = engine.keep_index(run_id, stats, states)
            report.run["scan"]["states"] = {n: {"rows": f.rows, "bytes": f.bytes}
                                            for n, f in (report.index.states or {}).items()}
    finally:
        engine.release()
    report.run["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    return report


def _large_entries(engine: EngineRun) -> list[str]:
    """A note for each pending entry holding more outgoing messages than a message's processing
    makes (eoctl.expr.outbox.LARGE_ENTRY): a batch job's entry, read once for every check."""
    from eoctl.expr import compile_sql
    from eoctl.expr.outbox import LARGE_ENTRY, large_entries

    if not engine.scope.kept_pending:
        return []
    return [f"pending outbox entry {r['incoming_message_id']} of {r['sender']} holds {r['messages']:,} outgoing "
            f"messages (more than {LARGE_ENTRY:,}): a batch, not one message's effects; its messages were read "
            "once for every check" for r in engine.rows(
                compile_sql(large_entries(), engine.dialect))]


def _continuation(engine: EngineRun, keeps: bool) -> Continuation | None:
    """What the checks read of an incremental audit (eoctl.expr.incremental): continuing from the
    engine's base, or, for a run that keeps an index without one, every record (its states are
    built whole). None: neither."""
    from eoctl.expr.incremental import Continuation

    base = engine.base
    if base is not None:
        drops = incremental.drops(base, engine.plans)
        below = None if drops else incremental.processed_bounds(base, engine.plans, engine.committed)
        return Continuation(True, frozenset(base.states or ()), drops, keeps, processed_below=below)
    return Continuation(False) if keeps else None


def evaluate_checks(report: AuditReport, engine: EngineRun, codes: list[str], step: Callable[[str], None],
                    continuation: Continuation | None = None) -> tuple[set[str], Continuation | None]:
    """Run the checks of `codes` (eoctl.expr.catalog) over the engine's views, the tables they share
    computed first; each check with evidence (counted, sampled, the rest kept in a file) becomes a
    finding of `report`. With a `continuation`, each check reads the records of its family
    (eoctl.expr.incremental), each kept once. The names of the tables kept, and the continuation
    as the run found it (its marks, how EO503 read: what the states for the next run are built by)."""
    from eoctl.engine.run import in_order
    from eoctl.expr import compile_sql
    from eoctl.expr.catalog import CHECKS, shared_tables
    from eoctl.expr.records import records_table

    records, dialect, scope = records_table(), engine.dialect, engine.scope

    def checks_sql(c: Continuation | None) -> tuple[dict[str, str], list[tuple[str, Any, str]]]:
        """The SQL of the shared tables and of each check's evidence, in the catalog's order."""
        shared = {name: compile_sql(expr, dialect)
                  for name, expr in shared_tables(codes, scope, records, dialect, c).items()}
        evidence = []
        for code in codes:
            code_records = c.records_of(code) if c is not None else records
            code_scope = c.scope_for(code, scope) if c is not None else scope
            evidence += [(code, hit, compile_sql(in_evidence_order(code, hit.evidence), dialect))
                         for hit in CHECKS[code](code_scope, code_records, dialect)]
        return shared, evidence

    if continuation is not None:
        continuation, kept, (shared, evidence) = _continue(report, engine, continuation, codes, step, checks_sql)
    else:
        kept, (shared, evidence) = set(), checks_sql(None)
    for name, sql in shared.items():
        engine.keep(name, sql)  # in order: one may read another (repeated_keys)
        kept.add(name)

    def waiting_for(i: int) -> None:  # a code's first evidence: the check it belongs to
        if i == 0 or evidence[i - 1][0] != evidence[i][0]:
            step(f"{evidence[i][0]}: {CATALOG[evidence[i][0]].title}")

    results = in_order(engine, [partial(engine.evaluate, sql, f"{report.run['id']}-{code}-{hit.endpoint}")
                                for code, hit, sql in evidence], waiting_for)
    for (code, hit, _), (count, rows, path) in zip(evidence, results):
        if count:
            report.findings.append(Finding(code, hit.endpoint, hit.where, count, rows, path))
        if counted := CATALOG[code].scanned_as:  # what the scan read although no other check saw it
            report.scanned[counted] = report.scanned.get(counted, 0) + count
    return kept, continuation


def _continue(report: AuditReport, engine: EngineRun, continuation: Continuation, codes: list[str],
              step: Callable[[str], None], then: Callable[[Continuation], T]) -> tuple[Continuation, set[str], T]:
    """What a run with a `continuation` does before the checks, in this order: read the sinks'
    kept marks (a continuing run), keep the next marks before any check reads a sink (a row
    written later is above the mark the next run reads from), then (continuing) the messages in
    flight without a held token (UNHELD), the indexed records the checks need again, the probes'
    keys, the candidates and the families' views, and the sinks' touched rows. The continuation
    as the run found it (its marks, whether the index was read by key), the names of the marks
    and of UNHELD, kept, and what `then` (pure Python: the checks' compiling) returns for that
    continuation, run in a thread of its own while the engine makes the families' and the sinks'
    tables."""
    from eoctl.expr import compile_sql
    from eoctl.expr.incremental import EFFECTS, FAMILY_OF, UNHELD, states
    from eoctl.expr.sinks import effect_endpoints

    dialect, scope = engine.dialect, engine.scope
    if continuation.continuing:
        engine.open_states({n: s.schema for n, s in states(scope).items() if n in continuation.states})
        marks = {name: engine.rows(compile_sql(expr, dialect))[0]["mark"]
                 for name, expr in continuation.mark_queries(scope).items()}
        continuation = replace(continuation, sink_marks=tuple(sorted(marks.items())))
    marks_kept = continuation.marks(scope, dialect)
    for name, expr in marks_kept.items():
        engine.keep(name, compile_sql(expr, dialect))
    if not continuation.continuing:
        return continuation, set(marks_kept), then(continuation)
    if effect_endpoints(scope) and (EFFECTS in {FAMILY_OF.get(c) for c in codes} or continuation.keeps):
        # after the next marks and counts (eoctl.expr.sink_states); a run that neither runs
        # EO503 nor keeps its states reads nothing for it
        continuation = replace(continuation, effects_why=_effects_why(engine, continuation))
        report.run["scan"]["effects"] = (
            "the records of the messages processed since the last run and of those it kept without a row"
            if continuation.effects_why is None else f"every record: {continuation.effects_why}")
    engine.keep(UNHELD, compile_sql(continuation.unheld(), dialect))
    families = continuation.families(codes, scope)
    step("reading the indexed records the checks need again")
    # each step's statements compiled while the engine runs the step before (DuckDB and Spark's
    # client let go of the GIL while they work): the next ones for the index read by key while it
    # is, then the checks while those run
    statements = partial(_families_and_sinks, families=families, scope=scope, dialect=dialect)
    if engine.looks_up and continuation.narrows(families):
        keys = {c: k if k is None else compile_sql(k, dialect) for c, k in continuation.reach_keys(families, scope).items()}
        with _ahead(partial(statements, replace(continuation, reached=True))) as compiled:
            if engine.reach(keys):
                continuation, steps = replace(continuation, reached=True), compiled()
    if not continuation.reached:
        steps = statements(continuation)
    # how the probes read the index: a few columns by key and the carried records, or every row
    report.run.setdefault("scan", {})["index_read"] = "narrow" if continuation.reached else "whole"
    with _ahead(partial(then, continuation)) as compiled:
        for how, tables in steps:
            if how == "keep_all":
                _keep_all(engine, tables)
            else:
                for name, sql in tables.items():
                    getattr(engine, how)(name, sql)
        return continuation, {*marks_kept, UNHELD}, compiled()


def _effects_why(engine: EngineRun, continuation: Continuation) -> str | None:
    """Why EO503 reads every record this run (None: it continues from the states): the plan's
    reason, or a sink whose rows below the recorded run's mark are not as many as then."""
    from eoctl.expr import compile_sql

    why = continuation.effects_blocked(engine.scope)
    if why is not None:
        return why
    for sink, expr in continuation.effect_guards(engine.scope, engine.dialect).items():
        row = engine.rows(compile_sql(expr, engine.dialect))[0]
        if row["now"] != row["then"]:
            return (f"sink {sink} holds {row['now']} rows below the watermark the last run kept, not {row['then']} "
                    "as then (rows deleted or rewritten)")
    return None


def _families_and_sinks(continuation: Continuation, families: list[str], scope: Scope,
                        dialect: Dialect) -> list[tuple[str, dict[str, str]]]:
    """The statements that make the families' views and the narrowed sinks' (eoctl.expr.
    incremental), in order: (how, name -> SQL), how being `keep_all` (none reads another), `keep`
    or `view`: the probes' keys, the candidates, each family's view (a filter of the kept
    candidates and the new records), the sinks' touched rows and their views."""
    from eoctl.expr import compile_sql
    from eoctl.expr.incremental import CANDIDATES, family_view

    def compiled(tables: dict[str, Any]) -> dict[str, str]:
        return {name: compile_sql(expr, dialect) for name, expr in tables.items()}

    return [("keep_all", compiled(continuation.probe_keys(families, scope, dialect))),
            ("keep", compiled({CANDIDATES: continuation.candidates(families, scope, dialect)})),
            ("view", compiled({family_view(f): continuation.family(f, scope, dialect) for f in families})),
            ("keep", compiled(continuation.sink_tables(scope, dialect))),
            ("view", compiled(continuation.sink_views(scope)))]


@contextmanager
def _ahead(work: Callable[[], T]) -> Iterator[Callable[[], T]]:
    """`work` in a thread of its own while the block runs; the block calls what this yields for
    its result (waiting for it; its exception raised there). Leaving the block early waits for
    the thread."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    # the block's thread takes the GIL back after each statement of the engine: within 0.5 ms
    # of asking, not Python's 5 ms (an index look-up of a dozen statements took 0.1 s longer)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, 0.0005))
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="eoctl-compile") as pool:
            yield pool.submit(work).result
    finally:
        sys.setswitchinterval(interval)


def _keep_all(engine: EngineRun, tables: dict[str, str]) -> None:
    """Keep each of `tables` (name -> SQL), none of which reads another: up to the engine's
    concurrency at once (eoctl.engine.run.in_order)."""
    from eoctl.engine.run import in_order

    in_order(engine, [partial(engine.keep, name, sql) for name, sql in tables.items()])


def keep_states(engine: EngineRun, continuation: Continuation, kept: set[str]) -> dict[str, tuple[int, int]]:
    """Write the states of eoctl.expr.incremental.states for the next run into this run's part of
    the record index: from a table the run kept where it holds the same rows, else built over the
    family's records or the sink's. name -> (rows, bytes)."""
    import ibis

    from eoctl.engine.run import in_order
    from eoctl.expr import compile_sql
    from eoctl.expr.incremental import carried_from, next_state_table, states

    written = {}
    carried = carried_from(engine.scope)
    for name, state in states(engine.scope).items():
        # a kept table may hold more columns than the state (EO501's counts): the state's only
        rows = (ibis.table(ibis.schema(state.schema), name=state.shared) if state.shared in kept
                else state.build(continuation, engine.scope, engine.dialect))
        sql = compile_sql(rows.select(*state.schema), engine.dialect)
        if name in carried:  # read again by carried_records: kept before any state is written
            engine.keep(next_state_table(name), sql)
            sql = f"SELECT * FROM {next_state_table(name)}"
        written[name] = sql
    sizes = in_order(engine, [partial(engine.keep_state, name, sql) for name, sql in written.items()])
    return dict(zip(written, sizes))


def in_evidence_order(code: str, evidence):
    """`evidence` in one order on both engines, so that a report's rows and its `next:` command
    are the same whichever ran it: by the code's identity columns, then every other column of a
    plain type, nulls first (Spark's default, said to DuckDB)."""
    import ibis

    schema = evidence.schema()
    plain = [c for c, t in schema.items() if not (t.is_array() or t.is_struct() or t.is_map())]
    first = [c for c in CATALOG[code].identity if c in plain]
    return evidence.order_by([ibis.asc(c, nulls_first=True) for c in [*first, *[c for c in plain if c not in first]]])


def _check_since_last(options: AuditOptions) -> None:
    if options.since_last and (options.ranges or options.since or options.until):
        raise UsageError("--since-last continues a full scan: it does not combine with --range, --since or --until")


def _run(run_id: str, engine: str, options: AuditOptions, endpoints: list[str], codes: list[str],
         ) -> dict[str, object]:
    return {
        "id": run_id,
        "engine": engine,
        "started_at": options.now.isoformat(),
        "endpoints": endpoints,
        "codes": codes,
        "grace_seconds": int(options.grace.total_seconds()),
        "stuck_after_seconds": int(options.stuck_after.total_seconds()),
    }
