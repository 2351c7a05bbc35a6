"""The audit flow (eoctl.audit.run_audit) on a named engine, whatever engine the configuration
names: the parity tests audit one configuration on both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eoctl.audit import run_audit
from eoctl.config.model import Config
from eoctl.findings import AuditReport
from eoctl.options import AuditOptions


def on_engine(config: Config, kind: str) -> Config:
    """`config` with its engine set to `kind` (spark or duckdb)."""
    return config.model_copy(update={"engine": config.engine.model_copy(update={"kind": kind})})


def audit_spark(spark: Any, config: Config, options: AuditOptions, codes: list[str],
                progress: Callable[[str], None] | None = None) -> AuditReport:
    return run_audit(on_engine(config, "spark"), options, codes, spark, progress)


def audit_duckdb(config: Config, options: AuditOptions, codes: list[str],
                 progress: Callable[[str], None] | None = None) -> AuditReport:
    return run_audit(on_engine(config, "duckdb"), options, codes, None, progress)
