"""One run's inputs opened on an engine: what the engine-neutral flows (the audit's checks,
reconcile-tokens, the gc plans) ask of DuckDB or Spark. The flows build Ibis expressions over the
views the run opened (eoctl.expr.inputs), compile them to the run's dialect and hand the SQL here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
             records_in_one_query: bool = False) -> EngineRun:
    """The inputs every configured endpoint reads, opened on the configured engine: DuckDB in
    process, else Spark (`spark`: a session, or a function that starts one, called only here).
    `records_in_one_query`: the flow reads the records in one query, so DuckDB leaves them a view
    (only the columns that query needs are decoded) instead of computing the working copy."""
    if config.engine.kind == "duckdb":
        from eoctl.engine.duckdb_audit import DuckDBRun

        return DuckDBRun(config, options, step, sinks=sinks, blobs=blobs, layout=layout,
                         keep_records=not records_in_one_query)
    from eoctl.engine.spark_audit import SparkRun

    return SparkRun(spark() if callable(spark) else spark, config, options, step, sinks=sinks, blobs=blobs,
                    layout=layout)
