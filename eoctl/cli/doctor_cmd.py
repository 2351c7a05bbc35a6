"""`eoctl doctor`."""

from __future__ import annotations

import typer

from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, progress, stderr_console
from eoctl.errors import ExitCode


def doctor(ctx: typer.Context) -> int:
    """Check every configured component: Java, Spark, Kafka, topics and consumer groups, stores and
    their tables and columns, blob prefixes, sinks. One row per check; exit 0 only when all pass."""
    from eoctl.doctor import run_doctor
    from eoctl.report.terminal import render_doctor

    app: AppContext = ctx.obj
    config = app.config()
    with progress(not app.json) as step:
        report = run_doctor(config, lambda: app.spark(require_paths=False), step)  # it checks paths itself
    if app.json:
        emit_json(report.to_dict(), schema="eoctl.doctor/v1", run=app.run("doctor"))
    else:
        render_doctor(report, stderr_console())
    return int(ExitCode.OK if report.ok else ExitCode.FINDINGS)
