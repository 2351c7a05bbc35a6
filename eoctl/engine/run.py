"""One run's inputs opened on an engine: what the engine-neutral flows (the audit's checks,
reconcile-tokens, the gc plans) ask of DuckDB or Spark. The flows build Ibis expressions over the
views the run opened (eoctl.expr.inputs), compile them to the run's dialect and hand the SQL here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from eoctl.config.model import Config
    from eoctl.expr.functions import Dialect
    from eoctl.expr.inputs import Scope
    from eoctl.options import AuditOptions
    from eoctl.stores.layout import StoreLayout


class EngineRun(Protocol):
    scope: Scope  # which tables the run opened, as the expressions see them
    dialect: Dialect

    def keep(self, name: str, sql: str) -> None:
        """The rows of `sql` computed once and kept as table `name` (replacing one of that name)."""

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

    def release(self) -> None:
        """Free everything the run holds (also after a failure)."""


def open_run(spark: Any, config: Config, options: AuditOptions, step: Callable[[str], None], *,
             sinks: bool = False, blobs: bool = False, layout: StoreLayout | None = None,
             narrow_records: bool = False) -> EngineRun:
    """The inputs every configured endpoint reads, opened on the configured engine: DuckDB in
    process, else Spark (`spark`: a session, or a function that starts one, called only here).
    `narrow_records`: the flow reads a few columns of the records, through records_for, so DuckDB
    leaves the working copy a view (only those columns are ever decoded) instead of computing it."""
    if config.engine.kind == "duckdb":
        from eoctl.engine.duckdb_audit import DuckDBRun

        return DuckDBRun(config, options, step, sinks=sinks, blobs=blobs, layout=layout,
                         keep_records=not narrow_records)
    from eoctl.engine.spark_audit import SparkRun

    return SparkRun(spark() if callable(spark) else spark, config, options, step, sinks=sinks, blobs=blobs,
                    layout=layout)
