"""`eoctl findings ...`: the history of audit runs: list, show one, compare two."""

from __future__ import annotations

from typing import Annotated

import typer

from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, example, stderr_console

app = typer.Typer(help="The findings history: every audit run, recorded.", no_args_is_help=True)


@app.command("list", epilog=example("eoctl --config samples/chaos/eoctl.toml findings list"))
def list_runs(ctx: typer.Context,
              limit: Annotated[int, typer.Option("--limit", "-n", min=1, metavar="N", help="newest runs to list")] = 20) -> int:
    """The recorded audit runs, newest first: when, which configuration, counts per code."""
    from dataclasses import asdict

    from eoctl.history import list_runs as runs
    from eoctl.report.history import render_runs

    app_ctx: AppContext = ctx.obj
    found = runs(app_ctx.config(), limit)
    if app_ctx.json:
        emit_json({"runs": [asdict(r) for r in found]}, schema="eoctl.findings-list/v1",
                  run=app_ctx.run("findings list"))
    else:
        render_runs(found, stderr_console())
    return 0


@app.command("show", epilog=example("eoctl --config samples/chaos/eoctl.toml findings show last"))
def show(ctx: typer.Context, run: Annotated[str, typer.Argument(metavar="RUN_ID", help="run id, or last / previous")]) -> int:
    """One recorded run: its findings and their evidence, as the audit reported them."""
    from dataclasses import asdict

    from eoctl.history import show as show_run
    from eoctl.report.history import render_recorded

    app_ctx: AppContext = ctx.obj
    recorded = show_run(app_ctx.config(), run)
    report = recorded.report()
    report.next_options = app_ctx.next_options()
    ordered = sorted(report.findings, key=lambda f: (-f.severity, f.code, f.endpoint))  # as the audit shows them
    if app_ctx.json:
        # `run` is this command's (the envelope); the audit run shown is `recorded_run`
        emit_json({"recorded_run": asdict(recorded.summary), "scanned": report.scanned,
                   "findings": [f.to_dict(report.next_options) for f in ordered]},
                  schema="eoctl.findings-show/v1", run=app_ctx.run("findings show"))
    else:
        render_recorded(recorded, report, stderr_console())
    return 0


@app.command("diff", epilog=example("eoctl --config samples/chaos/eoctl.toml findings diff previous last"))
def diff(ctx: typer.Context,
         run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="the earlier run (id, last or previous)")],
         run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="the later run (id, last or previous)")]) -> int:
    """What changed between two runs, item by item: new, resolved, persisting. Items are the
    evidence rows each run kept (see --evidence-rows)."""
    from dataclasses import asdict

    from eoctl.history import diff as diff_runs
    from eoctl.report.history import render_diff

    app_ctx: AppContext = ctx.obj
    result = diff_runs(app_ctx.config(), run_a, run_b)
    if app_ctx.json:
        emit_json({"run_a": result.run_a, "run_b": result.run_b, "totals": result.totals(),
                   "changes": [asdict(c) for c in result.changes]}, schema="eoctl.findings-diff/v1",
                  run=app_ctx.run("findings diff"))
    else:
        render_diff(result, stderr_console())
    return 0
