"""`eoctl gc-blobs`: move orphaned prepared blobs past the grace period to a quarantine folder.

Nothing is deleted at once: a blob is recorded in the journal table (`eoctl_journal_blobs` in its
endpoint's store, state `moving`), then moved to `<prefix>/<ops.quarantine>/<run id>/<name>`, then
marked `quarantined`; the intents that registered it are journaled and deleted with it. A later
run purges quarantined blobs older than --keep-removed. A run killed mid-way leaves `moving` rows that
the next run completes. `--restore RUN` moves a run's blobs back and restores their intents.
Blob stores are reached through fsspec (local files, s3://, gs://, ... with their fsspec packages).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eoctl.config.model import Config
from eoctl.errors import UsageError
from eoctl.ops.gc_flow import (
    GcKind,
    GcOptions,
    GcResult,
    RestoreResult,
    Tally,
    restore_run,
    run_gc,
)
from eoctl.ops.journal import (
    intents_naming,
    journal_and_delete_intents,
    remove_intents_of,
)
from eoctl.ops.lease import utcnow
from eoctl.stores import sql
from eoctl.stores.connection import store_named
from eoctl.stores.db import Db, StoreConfig, in_list, open_db
from eoctl.stores.layout import StoreLayout

COMMAND = "gc-blobs"
JOURNAL = "eoctl_journal_blobs"


@dataclass
class BlobPrefix:
    """An endpoint's blob prefix opened through fsspec."""

    endpoint: str
    fs: Any
    root: str  # the prefix as a path of `fs`, without a trailing slash
    quarantine: str  # folder name under the root
    store: StoreConfig  # where the journal lives: the endpoint's store

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def quarantined(self, run_id: str, name: str) -> str:
        return f"{self.root}/{self.quarantine}/{run_id}/{name}"

    def modified(self, path: str) -> dt.datetime | None:
        """Modification time of a blob, None when it does not exist."""
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        mtime = info.get("mtime") or info.get("LastModified") or info.get("updated") or info.get("created")
        if isinstance(mtime, (int, float)):
            return dt.datetime.fromtimestamp(mtime, dt.timezone.utc)
        if isinstance(mtime, str):
            return dt.datetime.fromisoformat(mtime.replace("Z", "+00:00"))
        return mtime

    def present(self, path: str) -> bool:
        """Whether something is at `path`: a symlink counts as itself, whatever it points to (a
        relative one in the quarantine points elsewhere until it is put back)."""
        from fsspec.implementations.local import LocalFileSystem

        if isinstance(self.fs, LocalFileSystem):
            return os.path.lexists(self.fs._strip_protocol(path))
        return bool(self.fs.exists(path))

    def move(self, src: str, dst: str) -> None:
        self.fs.makedirs(dst.rsplit("/", 1)[0], exist_ok=True)
        self.fs.mv(src, dst)

    def prune(self, run_id: str) -> None:
        """Remove a run's quarantine folder once empty, and the quarantine folder once empty."""
        for folder in (f"{self.root}/{self.quarantine}/{run_id}", f"{self.root}/{self.quarantine}"):
            try:
                if self.fs.exists(folder) and not self.fs.find(folder):
                    self.fs.rm(folder, recursive=True)
            except (FileNotFoundError, OSError):
                pass


def blob_prefix(config: Config, name: str) -> BlobPrefix | None:
    from eoctl.blobfs import open_prefix

    ep = config.endpoint(name)
    if ep.blobs is None:
        return None
    if ep.store is None:
        raise UsageError(f"endpoints.{name}: gc-blobs keeps its journal in the endpoint's store; set 'store'")
    fs, root = open_prefix(str(ep.blobs), ep.blob_options)
    return BlobPrefix(name, fs, root.rstrip("/"), config.ops.quarantine, store_named(config, ep.store))


def _ensure_journal(db: Db) -> None:
    db.make(JOURNAL, lambda: db.columns(JOURNAL) is not None, lambda: db.execute(
        "create table if not exists :t (eoctl_run_id varchar not null, "
        "endpoint varchar not null, name varchar not null, size bigint, modified timestamptz, "
        "eoctl_removed_at timestamptz not null, state varchar not null, "
        "primary key (eoctl_run_id, endpoint, name))", t=db.table(JOURNAL)))


# --------------------------------------------------------------------------------- execute


def _quarantine_batch(layout: StoreLayout, endpoint: str, batch: list[Any], run_id: str, options: GcOptions,
                      tally: Tally) -> None:
    prefix = blob_prefix(layout.config, endpoint)
    assert prefix is not None
    now = utcnow()
    with open_db(prefix.store) as db:
        _ensure_journal(db)
        with db.tx():
            for r in batch:
                db.execute("insert into :t values (%s, %s, %s, %s, %s, %s, 'moving')",
                           [run_id, endpoint, r["name"], r["size"], _utc(r["modified"]), now], t=db.table(JOURNAL))
    moved = _move_journaled(prefix, run_id, [r["name"] for r in batch], options.cutoff)
    tally.deleted += len(moved)
    tally.skipped_changed += len(batch) - len(moved)
    remove_intents_of(layout, "blob", batch, moved, "name", run_id)


def _utc(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)  # Spark hands back UTC wall times
    return value


def _move_journaled(prefix: BlobPrefix, run_id: str, names: list[str],
                    cutoff: dt.datetime | None) -> set[str]:
    """Move the `moving` blobs of a run into quarantine and mark them; returns the names now in
    quarantine. A blob modified since the plan (younger than the cutoff) is left and marked `changed`."""
    states: dict[str, str] = {}
    for name in names:
        src, dst = prefix.path(name), prefix.quarantined(run_id, name)
        modified = prefix.modified(src)
        if modified is None:
            states[name] = "quarantined" if prefix.fs.exists(dst) else "vanished"
        elif cutoff is not None and modified >= cutoff:
            states[name] = "changed"
        else:
            prefix.move(src, dst)
            states[name] = "quarantined"
    with open_db(prefix.store) as db:
        with db.tx():
            for name, state in states.items():
                db.execute("update :t set state = %s where eoctl_run_id = %s and endpoint = %s and name = %s",
                           [state, run_id, prefix.endpoint, name], t=db.table(JOURNAL))
    return {n for n, s in states.items() if s == "quarantined"}


def _journal_rows(prefix: BlobPrefix, run_id: str, states: tuple[str, ...]) -> list[str]:
    with open_db(prefix.store) as db:
        if db.columns(JOURNAL) is None:
            return []
        return [r[0] for r in db.execute(
            "select name from :t where eoctl_run_id = %s and endpoint = %s and state in :states order by name",
            [run_id, prefix.endpoint, *states], t=db.table(JOURNAL), states=in_list(states))]


def _prefixes(config: Config) -> list[BlobPrefix]:
    return [p for p in (blob_prefix(config, n) for n, ep in config.endpoints.items() if ep.blobs) if p is not None]


def finish_killed(layout: StoreLayout, old: str, options: GcOptions | None = None) -> None:
    """Complete killed run `old`: blobs journaled as `moving` are moved (the age re-check still
    holds), and the intents of its quarantined blobs are removed."""
    for prefix in _prefixes(layout.config):
        moving = _journal_rows(prefix, old, ("moving",))
        if moving:
            _move_journaled(prefix, old, moving, None)
        quarantined = _journal_rows(prefix, old, ("quarantined",))
        for start in range(0, len(quarantined), 500):
            part = quarantined[start:start + 500]
            it = layout.table(prefix.endpoint, "intents")
            if it is not None:
                ids = intents_naming(it, "blob", part)
                if ids:
                    journal_and_delete_intents(it, "blob", ids, part, old)


def purge(layout: StoreLayout, options: GcOptions) -> int:
    """Quarantined blobs older than --keep-removed are deleted for good (and their intents' journal)."""
    from eoctl.ops.journal import purge_journal

    before = utcnow() - options.retention
    purged = 0
    for prefix in _prefixes(layout.config):
        with open_db(prefix.store) as db:
            if db.columns(JOURNAL) is None:
                continue
            rows = db.execute("select eoctl_run_id, name from :t where state = 'quarantined' "
                              "and endpoint = %s and eoctl_removed_at < %s", [prefix.endpoint, before],
                              t=db.table(JOURNAL))
        runs = set()
        for run, name in rows:
            path = prefix.quarantined(run, name)
            if prefix.fs.exists(path):
                prefix.fs.rm(path)
            runs.add(run)
            purged += 1
        with open_db(prefix.store) as db:
            with db.tx():
                for run, name in rows:
                    db.execute("update :t set state = 'purged' where eoctl_run_id = %s "
                               "and endpoint = %s and name = %s", [run, prefix.endpoint, name], t=db.table(JOURNAL))
        for run in runs:
            prefix.prune(run)
    for it in layout.distinct_tables("intents"):
        blobs = sql.fragment(":kind = %s", kind=sql.column(it.col("kind")))
        purge_journal(it.store, it.table, before, blobs, ("blob",))
    return purged


# --------------------------------------------------------------------------------- restore


def refuse_overlapping_prefixes(config: Config, endpoints: list[str] | None = None) -> None:
    """UsageError (exit 2) before anything is read or moved when a blob prefix holds, or is inside,
    another configured file or folder (`blobs = "."` beside eoctl.toml): its files would be taken
    for orphaned blobs."""
    from eoctl.config.paths import blob_prefix_conflicts

    conflicts = blob_prefix_conflicts(config, endpoints)
    if conflicts:
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise UsageError(f"gc-blobs refused: {conflicts[0]}{more}",
                         hint="give each endpoint's blobs a folder of their own, holding nothing else eoctl reads")


def restore(config: Config, run_id: str, execute: bool = True) -> RestoreResult:
    """Move every blob a run quarantined back to its place and restore the intents it removed;
    without `execute`, count what would be put back."""
    refuse_overlapping_prefixes(config)

    def put_back(really: bool, not_restored: list[dict[str, str]]) -> int:
        back = 0
        for prefix in _prefixes(config):
            done: list[str] = []
            for name in _journal_rows(prefix, run_id, ("moving", "quarantined")):
                src, dst = prefix.path(name), prefix.quarantined(run_id, name)
                held, back_already = prefix.present(dst), prefix.present(src)
                if held and not back_already:
                    if really:
                        prefix.move(dst, src)
                    back += 1
                    done.append(name)
                elif back_already and not held:  # put back by an earlier restore cut short
                    done.append(name)
                else:
                    why = ("a file of that name is at the prefix again: move it away, then restore again" if held
                           else "it is no longer in the quarantine (removed by hand, or purged)")
                    not_restored.append({"endpoint": prefix.endpoint, "name": name, "why": why})
            if not really or not done:
                continue
            with open_db(prefix.store) as db:
                with db.tx():
                    for part in (done[i:i + 500] for i in range(0, len(done), 500)):
                        db.execute("update :t set state = 'restored' where eoctl_run_id = %s "
                                   "and endpoint = %s and name in :names and state in ('moving', 'quarantined')",
                                   [run_id, prefix.endpoint, *part], t=db.table(JOURNAL), names=in_list(part))
            prefix.prune(run_id)
        return back

    return restore_run(config, COMMAND, run_id, "blobs", put_back, execute)


def _garbage(scope: Any, records: Any, dialect: Any, names: list[str]) -> Any:
    from eoctl.expr.reconcile import garbage_blobs

    return garbage_blobs(scope, records, dialect, names)


def _evidence(scope: Any, rows: Any, names: list[str]) -> Any:
    from eoctl.expr.reconcile import blob_evidence

    return blob_evidence(scope, rows, names)


KIND = GcKind(COMMAND, "blobs", "name", _garbage, _evidence, ("size", "modified", "reason", "intents"),
              _quarantine_batch, finish_killed, purge, record_columns=("producer", "blobs", "causation_id"))


def gc_blobs(spark: Any, config: Config, options: GcOptions,
             progress: Callable[[str], None] = lambda _m: None) -> GcResult:
    """Plan (options.execute False) or quarantine orphaned blobs; see the module doc. `spark`: a
    session, or a function that starts one once the lease is held (see run_gc)."""
    refuse_overlapping_prefixes(config, options.endpoints)
    for name in (options.endpoints or list(config.endpoints)) if options.execute else ():
        ep = config.endpoint(name)  # before the lease and the run log are written (a plan writes neither)
        if ep.blobs is not None and ep.store is None:
            raise UsageError(f"endpoints.{name}: gc-blobs keeps its journal in the endpoint's store; set 'store'")
    return run_gc(spark, config, options, KIND, progress)
