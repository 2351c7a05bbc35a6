"""The engine-neutral layer: checks, plans and scans as Ibis expressions over unbound tables,
compiled to the SQL of each engine (docs/engines.md). Nothing here imports an engine."""

from __future__ import annotations

from eoctl.expr.functions import Dialect, compile_sql

__all__ = ["Dialect", "compile_sql"]
