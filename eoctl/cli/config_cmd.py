"""`eoctl config ...`."""

from __future__ import annotations

import typer

from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, stderr

app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)


@app.command("check", epilog="Example: eoctl --config samples/basic/eoctl.toml config check")
def check(ctx: typer.Context) -> int:
    """Validate the configuration file and print it resolved (defaults filled in, paths made
    absolute, ${ENV} interpolated), with every secret masked."""
    from eoctl.config import masked
    from eoctl.report.terminal import render_mapping

    app_ctx: AppContext = ctx.obj
    resolved = masked(app_ctx.config())
    if app_ctx.json:
        emit_json({"config": str(app_ctx.config_path), "valid": True, "resolved": resolved})
    else:
        stderr.print(f"[green]{app_ctx.config_path}: valid[/]")
        render_mapping(resolved, stderr)
    return 0
