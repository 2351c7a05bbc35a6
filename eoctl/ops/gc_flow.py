"""What gc-tokens, gc-blobs and gc-outbox share: options, the per-endpoint tally, metrics, the run frame."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from eoctl.config.model import Config, EndpointConfig
from eoctl.errors import Interrupted
from eoctl.interrupts import deferred
from eoctl.ops.lease import Lease, RunLog
from eoctl.run_ids import new_run_id
from eoctl.stores.layout import StoreLayout


@dataclass
class GcOptions:
    grace: dt.timedelta = dt.timedelta(hours=24)
    max_deletes: int = 10_000
    batch_size: int = 500
    retention: dt.timedelta = dt.timedelta(days=7)
    endpoints: list[str] | None = None
    execute: bool = False
    evidence_rows: int = 100
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))

    @property
    def cutoff(self) -> dt.datetime:
        return self.now - self.grace


@dataclass
class Tally:
    """One endpoint's line of the plan/execution table (the same table either way)."""

    endpoint: str
    garbage: int = 0  # classified garbage, any age
    planned: int = 0  # garbage past the grace period, within --max-deletes
    deleted: int = 0  # removed by this run (journaled or quarantined first)
    skipped_young: int = 0  # garbage within the grace period: left for a later run
    skipped_over_limit: int = 0  # past --max-deletes: left for the next run
    skipped_changed: int = 0  # changed since the plan (re-checked in the delete's transaction)


@dataclass
class GcResult:
    command: str
    run_id: str
    executed: bool
    grace_seconds: int
    tallies: list[Tally]
    sample: list[dict[str, Any]] = field(default_factory=list)  # first planned rows (evidence)
    finished_leftovers: list[str] = field(default_factory=list)  # killed runs this run completed
    purged: int = 0  # journal rows / quarantined blobs past --keep-removed removed for good
    duration_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # what the plan could not use (no intents table)
    #: endpoint tables whose owner column never holds the endpoint's name: not collected from
    misnamed: list[dict[str, Any]] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        keys = ("garbage", "planned", "deleted", "skipped_young", "skipped_over_limit", "skipped_changed")
        return {k: sum(getattr(t, k) for t in self.tallies) for k in keys}

    def summary(self) -> dict[str, Any]:
        """The one-line JSON summary for cron, in the command's own words (field_names), with the
        first planned rows."""
        named = field_names(self.command)
        age = {} if self.command == "gc-outbox" else {"grace_seconds": self.grace_seconds}  # each outbox's retention
        return {"command": self.command, "run_id": self.run_id, "executed": self.executed, **age,
                **{named.get(k, k): v for k, v in self.totals().items()}, "purged": self.purged,
                "finished_leftovers": self.finished_leftovers, "duration_seconds": round(self.duration_seconds, 3),
                "notes": self.notes, "misnamed": self.misnamed,
                "endpoints": [{named.get(k, k): v for k, v in asdict(t).items()} for t in self.tallies],
                "planned_rows": self.sample}


#: a Tally's counts as a command's JSON and metrics name them, where its own word differs
_FIELD_NAMES = {"gc-outbox": {"garbage": "sent", "skipped_young": "skipped_within_retention"}}


def field_names(command: str) -> dict[str, str]:
    return _FIELD_NAMES.get(command, {})


@dataclass
class RestoreResult:
    command: str
    run_id: str
    restored: dict[str, int]  # what -> rows or blobs put back (or, planned, that would be)
    already_restored: bool = False
    executed: bool = True  # False: the plan of a restore, nothing changed
    #: what could not be put back, each {"endpoint", "name", "why"}: the run stays restorable
    not_restored: list[dict[str, str]] = field(default_factory=list)


def bound_to_limit(tallies: list[Tally], max_deletes: int) -> None:
    """Trim the planned counts to --max-deletes in endpoint-name order, the order execution takes rows in."""
    room = max_deletes
    for t in tallies:
        take = min(t.planned, room)
        t.skipped_over_limit, t.planned, room = t.planned - take, take, room - take


def selected(config: Config, names: list[str] | None) -> dict[str, EndpointConfig]:
    return {n: config.endpoint(n) for n in (names or list(config.endpoints))}


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


@dataclass(frozen=True)
class GcKind:
    """What gc-tokens, gc-blobs and gc-outbox differ in; `run_gc` is the flow they share."""

    command: str
    what: str  # tokens | blobs
    key: str  # the plan's row key: token_id | name
    # (Scope, records, Dialect, endpoints) -> the garbage rows: endpoint, key, collectable, attempt_lost
    # (eoctl.expr.reconcile), what the plan keeps, counts and orders
    garbage: Callable[..., Any]
    # (Scope, rows of `garbage`, endpoints) -> those rows with the classification's columns: only
    # the rows a plan shows or collects get them (the text columns of every garbage row: half a
    # 10M-token plan's classification)
    evidence: Callable[..., Any]
    columns: tuple[str, ...]  # the evidence columns a plan shows and an execution records
    # the store tables are reached through the run's one StoreLayout (layout.config is the configuration)
    apply_batch: Callable[..., None]  # (layout, endpoint, rows, run_id, options, tally)
    #: (layout, killed run id, options): complete what a killed run left half-done (finish_interrupted)
    finish_killed: Callable[[StoreLayout, str, GcOptions], None]
    purge: Callable[[StoreLayout, GcOptions], int]
    record_columns: tuple[str, ...]  # the records' columns `garbage` reads (kept once for the plan)
    #: (spark, layout, options, kind, step) -> the plan (tallies, misnamed, sample(), rows(limit),
    #: release()): GarbagePlan, on the engine; gc-outbox's store answers its own question
    planner: Callable[..., Any] | None = None


class GarbagePlan:
    """The collectable rows of a plan, on the configured engine (eoctl.engine.run): one tally per
    endpoint in name order, a sample, the rows streamed in endpoint then key order. Evidence comes
    from every endpoint (a pending entry of one holds tokens of another); only the selected
    endpoints' garbage is collected. `spark`: a session, or a function that starts one."""

    def __init__(self, spark: Any, layout: StoreLayout, options: GcOptions, kind: GcKind,
                 step: Callable[[str], None] = lambda _m: None) -> None:
        from eoctl.engine.run import open_run
        from eoctl.options import AuditOptions

        config = layout.config
        self.key = kind.key
        # the classification (kept as `garbage`) reads a few columns of the records: those alone
        # are kept (records_for), not the whole working copy
        self.engine = open_run(spark, config, AuditOptions(now=options.now, grace=options.grace),
                               # run_gc says the plan's steps; of the engine's, only its start
                               lambda m: step(m) if m == "starting Spark" else None,
                               inputs=frozenset({"blobs"}) if kind.what == "blobs" else frozenset(), layout=layout,
                               narrow_records=True)
        try:
            # imported once the run is open: the DuckDB engine copies the stores meanwhile
            import ibis

            from eoctl.expr import compile_sql
            from eoctl.expr.records import records_table

            scope, dialect = self.engine.scope, self.engine.dialect
            # a misnamed endpoint table (scope.misnamed) leaves its endpoint, or with an outbox all,
            # out of scope.endpoints: nothing is collected from it
            self.misnamed = scope.misnamed
            self.notes: list[str] = []  # what the plan could not use besides the layout's notes
            names = sorted(n for n in selected(config, options.endpoints) if n in scope.endpoints
                           and (scope.has(n, "tokens") if kind.what == "tokens" else config.endpoints[n].blobs))
            counts: dict[str, dict[bool, int]] = {n: {} for n in names}
            self._collectable_sql: Callable[[int], str] | None = None  # limit -> the SQL of so many rows
            self._sample_sql: str | None = None
            if names:
                # every endpoint in one pass: one compile and one scan, however many endpoints
                records = records_table(self.engine.records_for(kind.record_columns), kind.record_columns)
                garbage = kind.garbage(scope, records, dialect, names)
                classify = compile_sql(garbage, dialect)
                kept = ibis.table(garbage.schema(), name="garbage")
                counted = kept.group_by("endpoint", "collectable").aggregate(n=kept.count())
                order = ["endpoint", kind.key]
                collectable = kept.filter(kept.collectable).order_by(order)

                def collectable_sql(limit: int) -> str:
                    rows = kind.evidence(scope, collectable.limit(limit), names)
                    return compile_sql(rows.select("endpoint", kind.key, *kind.columns).order_by(order), dialect)

                self._collectable_sql = collectable_sql
                # compiled before the first wait: the DuckDB engine keeps the records meanwhile
                count_sql = compile_sql(counted, dialect)
                self._sample_sql = self._collectable_sql(options.evidence_rows)
                self.engine.keep("garbage", classify)
                for r in self.engine.rows(count_sql):
                    counts[r["endpoint"]][r["collectable"]] = r["n"]
            self.tallies = [Tally(n, garbage=sum(c.values()), planned=c.get(True, 0), skipped_young=c.get(False, 0))
                            for n, c in counts.items()]
        except BaseException:
            self.engine.release()
            raise

    def sample(self) -> list[dict[str, Any]]:
        """The first --evidence-rows collectable rows, secrets masked."""
        return [] if self._sample_sql is None else self.engine.rows(self._sample_sql)

    def rows(self, limit: int) -> Iterator[Any]:
        """At most `limit` rows, in endpoint then key order, computed once."""
        if self._collectable_sql is not None:
            yield from self.engine.stream(self._collectable_sql(limit))

    def release(self) -> None:
        self.engine.release()


def run_gc(spark: Any, config: Config, options: GcOptions, kind: GcKind,
           progress: Callable[[str], None] = lambda _m: None) -> GcResult:
    """Plan; with options.execute, under the lease: finish killed runs, plan, apply in batches, purge.
    `spark`: a SparkSession, or a function that starts one: it is called only when the plan needs
    it, after the lease is held, so a run refused by the lease never starts Spark (on the DuckDB
    engine it is never called)."""
    run_id = new_run_id(options.now)
    grace = int(options.grace.total_seconds())
    layout = StoreLayout(config)

    def planned() -> Any:
        progress(f"classifying {kind.what}")
        plan = (kind.planner or GarbagePlan)(spark, layout, options, kind, progress)
        bound_to_limit(plan.tallies, options.max_deletes)
        return plan

    if not options.execute:
        started = time.monotonic()
        plan = planned()
        try:
            result = GcResult(kind.command, run_id, False, grace, plan.tallies, plan.sample(),
                              notes=layout.notes(options.endpoints, plan.misnamed) + plan.notes,
                        misnamed=[m.to_dict() for m in plan.misnamed])
        finally:
            plan.release()
        result.duration_seconds = time.monotonic() - started  # the plan's wall time, as an execution's
        return result

    def work(lease: Lease, log: RunLog) -> GcResult:
        progress("finishing interrupted runs")
        leftovers = finish_interrupted(layout, log, run_id, options, kind)
        plan = planned()
        try:
            sample = plan.sample()
            _apply_in_batches(layout, plan, options, run_id, lease, kind, progress)
        finally:
            plan.release()
        progress("purging what is past the retention")
        purged = kind.purge(layout, options)
        return GcResult(kind.command, run_id, True, grace, plan.tallies, sample, leftovers, purged,
                        notes=layout.notes(options.endpoints, plan.misnamed) + plan.notes,
                        misnamed=[m.to_dict() for m in plan.misnamed])

    return run_changing(config, kind.command, run_id, work)


def _apply_in_batches(layout: StoreLayout, plan: Any, options: GcOptions, run_id: str, lease: Lease, kind: GcKind,
                      progress: Callable[[str], None]) -> None:
    """At most --max-deletes rows, in endpoint then key order (as `bound_to_limit` counted them),
    streamed in batches of --batch-size, one endpoint per batch; the lease is renewed after each
    batch."""
    tallies = plan.tallies
    by_endpoint = {t.endpoint: t for t in tallies}
    batch: list[Any] = []
    current: str | None = None
    for row in plan.rows(options.max_deletes):
        if batch and (row["endpoint"] != current or len(batch) >= options.batch_size):
            with deferred():  # a signal stops the run between batches, never inside one
                kind.apply_batch(layout, current, batch, run_id, options, by_endpoint[current])
            lease.renew()
            progress(f"{sum(t.deleted for t in tallies)} {kind.what} removed")
            batch = []
        current = row["endpoint"]
        batch.append(row)
    if batch:
        with deferred():
            kind.apply_batch(layout, current, batch, run_id, options, by_endpoint[current])


R = TypeVar("R")


def finish_interrupted(layout: StoreLayout, log: RunLog, run_id: str, options: GcOptions, kind: GcKind) -> list[str]:
    """Every earlier run of the command the log holds as unfinished (killed): what it left
    half-done completed (kind.finish_killed, journaled under its own id so that its restore stays
    whole), then marked `interrupted`. Returns their ids."""
    finished = []
    for old in log.unfinished(kind.command, run_id):
        kind.finish_killed(layout, old, options)
        log.set_status(old, "interrupted")
        finished.append(old)
    return finished


def run_changing(config: Config, command: str, run_id: str, work: Callable[[Lease, RunLog], R]) -> R:
    """Hold the lease and log the run around `work` (its result has `summary()` and
    `duration_seconds`: GcResult, AbortResult); a failure or an interrupt leaves the run
    'failed' or 'interrupted' for the next run to finish, and always releases the lease (a kill
    leaves it for the takeover rule)."""
    started = time.monotonic()
    log = RunLog(config)
    with Lease(config, command, run_id) as lease:
        log.start(run_id, command)
        try:
            result = work(lease, log)
        except Interrupted as exc:
            with deferred():
                log.set_status(run_id, "stopped")  # a signal: unfinished, as a failure is
            exc.hint = f"nothing is half-done; the next `eoctl {command} --execute` finishes run {run_id}"
            raise
        except BaseException:
            log.set_status(run_id, "failed")
            raise
        result.duration_seconds = time.monotonic() - started
        log.finish(run_id, "finished", result.summary())
    return result


def restore_run(config: Config, command: str, run_id: str, what: str,
                put_back: Callable[[bool, list[dict[str, str]]], int], execute: bool = True) -> RestoreResult:
    """Under the command's lease: `put_back(True, not_restored)` (returns how many `what` it
    restored, and lists in `not_restored` what it could not put back), then the intents the run
    removed; the run is then marked restored, and restoring it again does nothing. Anything not put
    back stays journaled and the run restorable (a later restore, once the obstacle is gone, puts
    back the rest). Without `execute`, the plan: `put_back(False, ...)` and the intents only
    counted, no lease taken."""
    from eoctl.errors import UsageError

    log = RunLog(config)
    known = log.get(run_id)
    if known is None or known[0] != command:
        raise UsageError(f"--restore {run_id}: no {command} run with this id in the run log")
    if known[1] == "restored":
        return RestoreResult(command, run_id, {what: 0, "intents": 0}, already_restored=True, executed=execute)
    left: list[dict[str, str]] = []

    def intents() -> int:
        return restore_tables(config, "intents", "intent_id", run_id, execute, left)

    if not execute:
        planned = {what: put_back(False, left), "intents": intents()}
        return RestoreResult(command, run_id, planned, executed=False, not_restored=left)
    with Lease(config, command, new_run_id()):
        restored = {what: put_back(True, left)}
        restored["intents"] = intents()
        if not left:
            log.set_status(run_id, "restored")
    return RestoreResult(command, run_id, restored, not_restored=left)


def restore_tables(config: Config, kind: str, key: str, run_id: str, execute: bool,
                   not_restored: list[dict[str, str]], keep: Callable[[Any], bool] = lambda _t: True) -> int:
    """eoctl.ops.journal.restore_table over each physical `kind` table (that `keep` keeps) once."""
    from eoctl.ops.journal import restore_table

    return sum(restore_table(t, key, run_id, execute, not_restored, config.names_in_pipeline())
               for t in StoreLayout(config).distinct_tables(kind) if keep(t))


def write_metrics(path: Path, result: GcResult, success: bool) -> None:
    """gc's Prometheus textfile (eoctl.metrics): per endpoint, what was planned, removed and left."""
    from eoctl.metrics import Metric, write_textfile

    named = field_names(result.command)
    outbox = result.command == "gc-outbox"
    metrics = [Metric(named.get(key, key), help_text, [({"endpoint": t.endpoint}, getattr(t, key))
                                                       for t in result.tallies])
               # per endpoint only: a total beside labelled series would be double-counted by sum()
               for key, help_text in (
                   ("planned", "sent rows planned for removal (past their outbox's retention)" if outbox else
                    "items planned for removal (garbage past the grace period)"),
                   ("deleted", "items removed (journaled or quarantined first)"),
                   ("skipped_young", "sent rows left because they are within their outbox's retention" if outbox
                    else "garbage left because it is younger than the grace period"),
                   ("skipped_over_limit", "garbage left for the next run by --max-deletes"),
                   ("skipped_changed", "items that changed between plan and delete"))]
    metrics.append(Metric("duration_seconds", "wall time of the last run", [({}, round(result.duration_seconds, 3))]))
    write_textfile(path, "eoctl_" + result.command.replace("-", "_"), metrics, success)
