"""`eoctl config ...`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, example, stderr_console

app = typer.Typer(help="Inspect or start the configuration.", no_args_is_help=True)


@app.command("init", epilog=example("eoctl config init eoctl.toml"))
def init(
    ctx: typer.Context,
    path: Annotated[Optional[Path], typer.Argument(metavar="PATH", help="the file to write (default: --config's)")] = None,
) -> int:
    """Write a commented starting configuration to PATH (default: the --config path, else
    ./eoctl.toml): every section a pipeline needs, commented out, valid as written. An existing
    file is never overwritten."""
    from eoctl.cli.output import check_target, write_whole
    from eoctl.config.starter import STARTER
    from eoctl.errors import UsageError

    app_ctx: AppContext = ctx.obj
    path = path or app_ctx.config_path
    if path.exists():
        raise UsageError(f"{path} exists already: eoctl config init never overwrites a file",
                         hint="give another PATH, or edit this one")
    check_target(path, "config init")
    write_whole(path, STARTER, "config init")
    stderr_console().print(f"wrote {path}: uncomment what your pipeline has, then: eoctl --config {path} config check",
                           markup=False, highlight=False, soft_wrap=True)
    return 0


@app.command("check", epilog=example("eoctl --config samples/basic/eoctl.toml config check"))
def check(ctx: typer.Context) -> int:
    """Validate the configuration file: every problem first, each with its key path (an unknown key
    with the key it was likely meant as), then, when it is valid, the configuration resolved
    (defaults filled in, paths made absolute, ${ENV} interpolated) with every secret masked. A
    configured local file or folder that does not exist is a problem too: exit 3; any other, 2."""
    from eoctl.config import masked
    from eoctl.config.paths import blob_prefix_conflicts, missing_paths
    from eoctl.errors import ConfigError, ExitCode
    from eoctl.report.terminal import render_mapping

    app_ctx: AppContext = ctx.obj
    path = app_ctx.config_path
    try:
        config = app_ctx.config()
    except ConfigError as exc:
        if not exc.problems:  # no file, or no TOML: one line, as for any command
            raise
        problems = exc.problems
        if app_ctx.json:
            emit_json({"config": str(path), "valid": False, "problems": problems, "missing_paths": [],
                       "resolved": None}, schema="eoctl.config-check/v1", run=app_ctx.run("config check"))
        else:
            _say_problems(path, problems)
        return int(ExitCode.USAGE)
    resolved = masked(config)
    missing = missing_paths(config)
    overlapping = blob_prefix_conflicts(config)  # gc-blobs would take these files for blobs
    problems = [*overlapping, *missing]
    warnings = config.warnings()
    if app_ctx.json:
        emit_json({"config": str(path), "valid": not problems, "problems": problems, "missing_paths": missing,
                   "warnings": warnings, "resolved": resolved}, schema="eoctl.config-check/v1",
                  run=app_ctx.run("config check"))
    else:
        if problems:
            _say_problems(path, problems)
        else:
            stderr_console().print(f"[green]{path}: valid[/]", highlight=False)
        for warning in warnings:
            stderr_console().print(f"eoctl: warning: {warning}", markup=False, highlight=False, soft_wrap=True)
        render_mapping(resolved, stderr_console())
    return int(ExitCode.USAGE if overlapping else ExitCode.RUNTIME if missing else ExitCode.OK)


def _say_problems(path, problems: list[str]) -> None:
    console = stderr_console()
    console.print(f"eoctl: error: {path}: {len(problems)} problem{'s' if len(problems) > 1 else ''}",
                  markup=False, highlight=False, soft_wrap=True)
    for problem in problems:
        console.print(f"  - {problem}", markup=False, highlight=False, soft_wrap=True)
