"""`eoctl runs ...`: the runs of the commands that change things (gc-tokens, gc-blobs,
gc-outbox, replay-outbox, abort-transaction), from the run log in the control store: their ids, for
`--restore RUN_ID`, and how each ended."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, example, stderr_console

app = typer.Typer(help="The runs of the commands that change things.", no_args_is_help=True)

COMMANDS = ("gc-tokens", "gc-blobs", "gc-outbox", "replay-outbox", "abort-transaction")


@app.command("list", epilog=example("eoctl --config samples/chaos/eoctl.toml runs list --command gc-blobs"))
def list_runs(
    ctx: typer.Context,
    command: Annotated[Optional[str], typer.Option("--command", metavar="COMMAND", help=f"only this command's runs ({', '.join(COMMANDS)})")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, metavar="N", help="newest runs to list")] = 20,
) -> int:
    """The newest runs of gc-tokens, gc-blobs, replay-outbox and abort-transaction, newest first:
    run id (what --restore takes), command, when, how it ended (finished, running, stopped, failed,
    restored) and what it did."""
    from eoctl.errors import UsageError
    from eoctl.ops.lease import RunLog

    if command is not None and command not in COMMANDS:
        raise UsageError(f"--command {command!r}: expected one of {', '.join(COMMANDS)}")
    app_ctx: AppContext = ctx.obj
    runs = RunLog(app_ctx.config()).runs(limit, command)
    if app_ctx.json:
        emit_json({"runs": runs}, schema="eoctl.runs-list/v1", run=app_ctx.run("runs list"))
        return 0
    from eoctl.report.history import render_change_runs

    render_change_runs(runs, stderr_console())
    return 0
