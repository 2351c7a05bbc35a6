"""The audit and trace flows (eoctl.audit.run_audit, eoctl.trace.run_trace) on a named engine,
whatever engine the configuration names: the parity tests run one configuration on both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eoctl.audit import run_audit
from eoctl.config.model import Config
from eoctl.findings import AuditReport
from eoctl.options import AuditOptions
from eoctl.trace import Lookup, TraceOptions, TraceResult, run_trace


def on_engine(config: Config, kind: str) -> Config:
    """`config` with its engine set to `kind` (spark or duckdb)."""
    return config.model_copy(update={"engine": config.engine.model_copy(update={"kind": kind})})


def audit_spark(spark: Any, config: Config, options: AuditOptions, codes: list[str],
                progress: Callable[[str], None] | None = None) -> AuditReport:
    return run_audit(on_engine(config, "spark"), options, codes, spark, progress)


def audit_duckdb(config: Config, options: AuditOptions, codes: list[str],
                 progress: Callable[[str], None] | None = None) -> AuditReport:
    return run_audit(on_engine(config, "duckdb"), options, codes, None, progress)


def trace_spark(spark: Any, config: Config, lookup: Lookup, options: TraceOptions | None = None) -> TraceResult:
    return run_trace(spark, on_engine(config, "spark"), lookup, options)


def trace_duckdb(config: Config, lookup: Lookup, options: TraceOptions | None = None) -> TraceResult:
    return run_trace(None, on_engine(config, "duckdb"), lookup, options)
