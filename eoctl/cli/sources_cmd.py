"""`eoctl sources ...`: what eoctl reads, as it reads it."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, example, progress, stderr_console
from eoctl.errors import UsageError

app = typer.Typer(help="Read the configured topics and archives.", no_args_is_help=True)


def parse_range(text: str):
    """TOPIC:PARTITION[:START[:END]] -> OffsetRange; END is exclusive."""
    from eoctl.sources.kafka import EARLIEST, LATEST, OffsetRange

    parts = text.split(":")
    try:
        if len(parts) < 2 or len(parts) > 4 or not parts[0]:
            raise ValueError
        partition = int(parts[1])
        start = int(parts[2]) if len(parts) > 2 and parts[2] else EARLIEST
        end = int(parts[3]) if len(parts) > 3 and parts[3] else LATEST
    except ValueError:
        raise UsageError(f"--range {text!r}: expected TOPIC:PARTITION[:START[:END]], e.g. orders:0:100:200") from None
    given = [int(p) for p in parts[2:] if p]
    if partition < 0 or any(v < 0 for v in given):
        raise UsageError(f"--range {text!r}: a partition and offsets are 0 or more (TOPIC:PARTITION[:START[:END]])")
    if len(parts) > 3 and parts[2] and parts[3] and start > end:
        raise UsageError(f"--range {text!r}: START {start} is above END {end} (END is exclusive: START <= END)")
    return OffsetRange(parts[0], partition, start, end)


@app.command("scan", epilog=example("eoctl --config samples/basic/eoctl.toml sources scan billing"))
def scan(
    ctx: typer.Context,
    endpoint: Annotated[str, typer.Argument(metavar="ENDPOINT", help="endpoint whose input to read")],
    ranges: Annotated[
        Optional[list[str]],
        typer.Option("--range", metavar="RANGE", help="read only TOPIC:PARTITION[:START[:END]] (END exclusive); repeatable"),
    ] = None,
) -> int:
    """Read an endpoint's input (on the chosen engine) and print, per partition: records, offsets,
    the committed offset, records in flight, records carrying the protocol headers, distinct
    message ids."""
    from eoctl.report.terminal import render_summary
    from eoctl.sources import check_ranges
    from eoctl.config import paths
    from eoctl.engine.run import summarize_input

    app_ctx: AppContext = ctx.obj
    config = app_ctx.config()
    offset_ranges = [parse_range(r) for r in ranges or []]
    source = config.endpoint(endpoint).input
    check_ranges([source] if source else [], offset_ranges, config)
    with progress(not app_ctx.json) as step:
        paths.require_paths(config)  # a missing file is one line now, not an engine error later
        summary = summarize_input(app_ctx.spark, config, endpoint, offset_ranges or None, step)
    if app_ctx.json:
        emit_json(summary.to_dict(), schema="eoctl.sources-scan/v1", run=ctx.obj.run("sources scan"))
    else:
        render_summary(summary, stderr_console())
    return 0
