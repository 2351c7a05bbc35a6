"""`eoctl config ...`."""

from __future__ import annotations

import typer

from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, example, stderr_console

app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)


@app.command("check", epilog=example("eoctl --config samples/basic/eoctl.toml config check"))
def check(ctx: typer.Context) -> int:
    """Validate the configuration file and print it resolved (defaults filled in, paths made
    absolute, ${ENV} interpolated), with every secret masked; every configured local file or
    folder that does not exist is named, and the exit code is then 3."""
    from eoctl.config import masked
    from eoctl.config.paths import missing_paths
    from eoctl.errors import ExitCode
    from eoctl.report.terminal import render_mapping

    app_ctx: AppContext = ctx.obj
    config = app_ctx.config()
    resolved = masked(config)
    missing = missing_paths(config)
    if app_ctx.json:
        emit_json({"config": str(app_ctx.config_path), "valid": True, "missing_paths": missing, "resolved": resolved},
                  schema="eoctl.config-check/v1")
    else:
        stderr_console().print(f"[green]{app_ctx.config_path}: valid[/]")
        render_mapping(resolved, stderr_console())
        for line in missing:
            stderr_console().print(f"eoctl: error: {line}", markup=False, highlight=False)
    return int(ExitCode.RUNTIME) if missing else 0
