"""`eoctl jars ...`: the connector and JDBC jars for machines without Maven access."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, example, stderr_console

app = typer.Typer(help="The Kafka connector and JDBC driver jars Spark needs.", no_args_is_help=True)


def _engine(app_ctx: AppContext):
    """The configured engine when a configuration file exists, else the defaults."""
    from eoctl.config.model import EngineConfig

    return app_ctx.config().engine if app_ctx.config_path.exists() else EngineConfig()


@app.command("list", epilog=example("eoctl jars list"))
def list_jars(ctx: typer.Context) -> int:
    """Print the Maven coordinates eoctl loads for the installed pyspark."""
    from eoctl.engine.spark.jars import runtime_coordinates

    coords = [str(c) for c in runtime_coordinates(_engine(ctx.obj))]
    if ctx.obj.json:
        emit_json({"coordinates": coords}, schema="eoctl.jars/v1", run=ctx.obj.run("jars list"))
    else:
        for c in coords:
            stderr_console().print(c)
    return 0


@app.command("fetch", epilog=example("eoctl jars fetch ./jars && export EOCTL_JARS_DIR=$PWD/jars"))
def fetch(ctx: typer.Context, dest: Annotated[Path, typer.Argument(metavar="DEST", help="folder to copy the jars into")]) -> int:
    """Copy the Kafka connector and JDBC drivers (with their dependencies) into DEST with Maven,
    for engine.jars_dir / EOCTL_JARS_DIR on machines that cannot reach Maven Central."""
    from eoctl.engine.spark.jars import fetch_jars

    jars = fetch_jars(_engine(ctx.obj), dest)
    if ctx.obj.json:
        emit_json({"dest": str(dest.resolve()), "jars": [j.name for j in jars]}, schema="eoctl.jars/v1",
                  run=ctx.obj.run("jars fetch"))
    else:
        stderr_console().print(f"{len(jars)} jars in {dest.resolve()}; set EOCTL_JARS_DIR={dest.resolve()}")
    return 0
