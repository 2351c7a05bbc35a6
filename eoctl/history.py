"""The findings history: every audit run recorded, listed, shown and compared.

Recorded in a DuckDB file (`history.path`, next to the configuration by default) or in a configured
store (`history.store`, e.g. PostgreSQL). Each finding's evidence rows are also kept as items with
a stable identity (the columns that name the thing found, without ages or counts), so two runs can
be compared item by item: new, resolved, persisting.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eoctl.config import masked
from eoctl.config.model import Config, DuckDBStore
from eoctl.errors import EoctlError, SourceError, UsageError
from eoctl.interrupts import deferred
from eoctl.findings import CATALOG, AuditReport
from eoctl.stores.connection import store_named
from eoctl.stores.db import Db, open_db

RUNS = "eoctl_audit_runs"
FINDINGS = "eoctl_audit_findings"
ITEMS = "eoctl_audit_items"

_AGGREGATES = {"rows", "values", "distinct_values", "copies", "positions", "age_seconds"}


#: json.dumps with any argument builds an encoder per call: 0.1 s of recording 10,000 items
_ITEM_JSON = json.JSONEncoder(sort_keys=True, default=str)


def item_key(code: str, row: dict[str, Any]) -> str:
    """A stable identity of one evidence row (JSON of its identifying columns)."""
    cols = CATALOG[code].identity or tuple(c for c in row if c not in _AGGREGATES)
    return _ITEM_JSON.encode({c: row.get(c) for c in cols})


def config_digest(config: Config) -> str:
    """sha256 of the resolved configuration, secrets masked (so it can be shown and compared, and
    says nothing of a secret: a guessed one cannot be checked against it). Which engine runs it
    (kind, master, remote: a flag away) is not the pipeline's configuration: left out, so that a
    run on either engine names the same configuration."""
    data = masked(config)
    for key in ("kind", "master", "remote"):
        data.get("engine", {}).pop(key, None)
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _create_history_file(path: Path) -> None:
    """A new, empty DuckDB file at `path`, or none: made beside it and linked in when whole, so that
    a full disk never leaves a 0-byte file that every later run fails to open, and audits creating
    it at once all record into the one that won."""
    import os

    import duckdb

    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with duckdb.connect(str(tmp)) as con:
            con.execute("checkpoint")
        try:  # a link, never a rename: a history another audit made meanwhile is never replaced
            os.link(tmp, path)
        except FileExistsError:
            pass
    except (OSError, duckdb.Error) as exc:
        reason = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else str(exc).splitlines()[0]
        raise SourceError(f"findings history {path} cannot be created: {reason}") from None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            try:
                leftover.unlink()
            except OSError:
                pass


@contextmanager
def history_db(config: Config, *, create: bool) -> Iterator[Db]:
    if config.history.store:
        store = store_named(config, config.history.store)
    else:
        path = Path(config.history.path)
        if not path.exists():
            if not create:
                raise UsageError(f"no findings history yet at {path} (an audit records one)")
            _create_history_file(path)
        store = DuckDBStore.model_validate({"type": "duckdb", "path": str(path)})
    with open_db(store) as db:
        if create:
            db.make(RUNS, lambda: _tables_made(db), lambda: _create_tables(db))
        elif db.columns(RUNS) is None:
            raise UsageError("no audit run is recorded in the findings history yet")
        yield db


def _tables_made(db: Db) -> bool:
    """Whether the history's tables are all there, each column too (then a recording takes no
    lock of DDL: Db.make)."""
    runs = db.columns(RUNS)
    return (runs is not None and "record_index" in runs
            and db.columns(FINDINGS) is not None and db.columns(ITEMS) is not None)


def _create_tables(db: Db) -> None:
    db.execute("create table if not exists :t (run_id varchar primary key, "
               "started_at timestamptz, finished_at timestamptz, config_digest varchar, endpoints varchar, "
               "codes varchar, counts varchar, scanned varchar)", t=db.table(RUNS))
    db.execute("create table if not exists :t (run_id varchar, code varchar, "
               "severity varchar, endpoint varchar, location varchar, count bigint, evidence varchar, "
               "evidence_complete boolean, evidence_file varchar)", t=db.table(FINDINGS))
    db.execute("create table if not exists :t (run_id varchar, code varchar, "
               "endpoint varchar, item varchar)", t=db.table(ITEMS))
    # Added after the first release: histories written before have no such column yet.
    db.execute("alter table :t add column if not exists record_index varchar", t=db.table(RUNS))


def _ts(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text) if text else None


def record(config: Config, report: AuditReport) -> str:
    """Store one audit run; returns its id. A history that cannot take it (a full disk, a damaged
    file, a server's refusal) is a SourceError saying where and why: the audit says it as a warning
    and its report stands; the transaction leaves nothing half-recorded."""
    from eoctl.stores.connection import DRIVER_MODULES, describe

    try:
        return _record(config, report)
    except Exception as exc:
        if isinstance(exc, EoctlError) or not (isinstance(exc, OSError)
                                               or type(exc).__module__.startswith(DRIVER_MODULES)):
            raise
        where = describe(store_named(config, config.history.store)) if config.history.store else config.history.path
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise SourceError(f"findings history {where} cannot be written: {reason}") from None


def _record(config: Config, report: AuditReport) -> str:
    run = report.run
    counts = {code: row["count"] for code, row in report.summary().items()}
    with deferred(), history_db(config, create=True) as db:  # a signal waits for the commit: no half-recorded run
        with db.tx():
            db.execute("insert into :t (run_id, started_at, finished_at, config_digest, endpoints, "
                       "codes, counts, scanned, record_index) values (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                       [run["id"], _ts(run.get("started_at")), _ts(run.get("finished_at")), config_digest(config),
                        json.dumps(run.get("endpoints", [])), json.dumps(run.get("codes", [])), json.dumps(counts),
                        json.dumps(report.scanned), report.index.to_json() if report.index is not None else None],
                       t=db.table(RUNS))
            for f in report.findings:
                db.execute("insert into :t values (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                           [run["id"], f.code, f.severity.label, f.endpoint, f.where, f.count,
                            json.dumps(f.evidence, default=str), len(f.evidence) == f.count, f.evidence_file],
                           t=db.table(FINDINGS))
                _insert_items(db, run["id"], f.code, f.endpoint, sorted({item_key(f.code, row) for row in f.evidence}))
    return run["id"]


def _insert_items(db: Db, run_id: str, code: str, endpoint: str | None, keys: list[str]) -> None:
    """A finding's item keys in one statement, as an array parameter unnested (the history is a
    DuckDB file or PostgreSQL, both with arrays): DuckDB parses and binds a statement of 500 rows
    of parameters in some 17 ms, so a run with 10,000 evidence items spent 0.35 s of its
    recording there, against 0.015 s for the array."""
    if keys:
        db.execute("insert into :t select %s, %s, %s, unnest(cast(%s as varchar[]))",
                   [run_id, code, endpoint, keys], t=db.table(ITEMS))


def count_runs(config: Config) -> int:
    """How many runs the findings history holds (0 when there is none yet)."""
    try:
        with history_db(config, create=False) as db:
            return int(db.execute("select count(*) from :t", t=db.table(RUNS))[0][0])
    except UsageError:
        return 0


def indexed_runs(config: Config, limit: int = 10) -> list[tuple[str, str]]:
    """(run id, record index JSON) of the newest runs that kept a record index, newest first; none
    when there is no history yet (or one written before record indexes existed)."""
    try:
        with history_db(config, create=False) as db:
            if "record_index" not in (db.columns(RUNS) or []):
                return []
            return [(r[0], r[1]) for r in db.execute(
                "select run_id, record_index from :t where record_index is not null "
                "order by started_at desc limit %s", [limit], t=db.table(RUNS))]
    except UsageError:
        return []


@dataclass
class RunSummary:
    run_id: str
    started_at: Any
    config_digest: str
    endpoints: list[str]
    counts: dict[str, int]


def list_runs(config: Config, limit: int = 20) -> list[RunSummary]:
    with history_db(config, create=False) as db:
        rows = db.execute("select run_id, started_at, config_digest, endpoints, counts from :t "
                          "order by started_at desc limit %s", [limit], t=db.table(RUNS))
    return [RunSummary(r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4])) for r in rows]


def _resolve(db: Db, run_id: str) -> str:
    """A run id, or `last` / `previous` for the newest and the one before."""
    if run_id in ("last", "previous"):
        rows = db.execute("select run_id from :t order by started_at desc limit 2", t=db.table(RUNS))
        index = 0 if run_id == "last" else 1
        if len(rows) <= index:
            raise UsageError(f"{run_id!r}: the findings history has only {len(rows)} run(s)")
        return rows[index][0]
    if not db.execute("select 1 from :t where run_id = %s", [run_id], t=db.table(RUNS)):
        raise UsageError(f"run {run_id!r} is not in the findings history (see: eoctl findings list)")
    return run_id


@dataclass
class RecordedRun:
    summary: RunSummary
    findings: list[dict[str, Any]]
    scanned: dict[str, Any] = field(default_factory=dict)

    def report(self) -> AuditReport:
        """The run as its audit reported it: each finding with its title, severity and remedy."""
        from eoctl.findings import Finding

        s = self.summary
        return AuditReport(
            findings=[Finding(f["code"], f["endpoint"], f["where"], f["count"], f["evidence"], f["evidence_file"])
                      for f in self.findings if f["code"] in CATALOG],
            run={"id": s.run_id, "started_at": s.started_at, "endpoints": s.endpoints}, scanned=self.scanned)


def show(config: Config, run_id: str) -> RecordedRun:
    with history_db(config, create=False) as db:
        run_id = _resolve(db, run_id)
        r = db.execute("select run_id, started_at, config_digest, endpoints, counts, scanned from :t "
                       "where run_id = %s", [run_id], t=db.table(RUNS))[0]
        rows = db.execute("select code, severity, endpoint, location, count, evidence, evidence_complete, "
                          "evidence_file from :t where run_id = %s order by code, endpoint",
                          [run_id], t=db.table(FINDINGS))
    findings = [{"code": c, "severity": s, "endpoint": e, "where": w, "count": n, "evidence": json.loads(ev),
                 "evidence_complete": complete, "evidence_file": file}
                for c, s, e, w, n, ev, complete, file in rows]
    return RecordedRun(RunSummary(r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4])), findings,
                       json.loads(r[5]) if r[5] else {})


@dataclass
class CodeDiff:
    code: str
    endpoint: str
    new: list[dict[str, Any]] = field(default_factory=list)
    resolved: list[dict[str, Any]] = field(default_factory=list)
    persisting: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FindingsDiff:
    run_a: str
    run_b: str
    changes: list[CodeDiff]

    def totals(self) -> dict[str, int]:
        return {k: sum(len(getattr(c, k)) for c in self.changes) for k in ("new", "resolved", "persisting")}


def diff(config: Config, run_a: str, run_b: str) -> FindingsDiff:
    """Items of run B not in run A (new), of A not in B (resolved), in both (persisting)."""
    with history_db(config, create=False) as db:
        a, b = _resolve(db, run_a), _resolve(db, run_b)
        items = {run: {(code, ep, item) for code, ep, item in db.execute(
            "select code, endpoint, item from :t where run_id = %s", [run], t=db.table(ITEMS))} for run in (a, b)}
    by_code: dict[tuple[str, str], CodeDiff] = {}

    def add(kind: str, entries: set[tuple[str, str, str]]) -> None:
        for code, ep, item in sorted(entries):
            by_code.setdefault((code, ep), CodeDiff(code, ep))
            getattr(by_code[(code, ep)], kind).append(json.loads(item))

    add("new", items[b] - items[a])
    add("resolved", items[a] - items[b])
    add("persisting", items[a] & items[b])
    return FindingsDiff(a, b, [by_code[k] for k in sorted(by_code)])


def evidence_of_last_run(config: Config) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    """The newest recorded run's id and every evidence row it kept (code, endpoint, row); `trace`
    matches them against one message's ids. Raises UsageError when nothing is recorded."""
    with history_db(config, create=False) as db:
        run_id = _resolve(db, "last")
        rows = db.execute("select code, endpoint, evidence from :t where run_id = %s", [run_id],
                          t=db.table(FINDINGS))
    return run_id, [(c, e, row) for c, e, ev in rows for row in json.loads(ev)]
