"""`eoctl trace`: what happened to one message."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from eoctl.cli.audit_cmd import parse_duration, parse_time
from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, progress, stderr
from eoctl.errors import ExitCode, UsageError


def trace(
    ctx: typer.Context,
    ident: Annotated[Optional[str], typer.Argument(metavar="[ID]", help="a message id (or, with --token, a token id)", show_default=False)] = None,
    token: Annotated[bool, typer.Option("--token", help="ID is a token id")] = False,
    by: Annotated[Optional[str], typer.Option("--by", help="find the message by a sink column, e.g. order_id=42")] = None,
    since: Annotated[Optional[str], typer.Option(help="read only records at or after this ISO time (fast path)")] = None,
    until: Annotated[Optional[str], typer.Option(help="read only records before this ISO time")] = None,
    window: Annotated[str, typer.Option("--window", help="how far around what the stores know to read")] = "24h",
    full_scan: Annotated[bool, typer.Option("--full-scan", help="read every record, whatever the stores know")] = False,
    stuck_after: Annotated[str, typer.Option("--stuck-after", help="outbox entries pending longer are stuck")] = "15m",
    grace: Annotated[str, typer.Option(help="tokens younger than this are not orphans")] = "24h",
) -> int:
    """Everything eoctl can see about one logical message: every copy on every input topic, its
    tokens, the outbox entry that holds it and the one its processing left, intents, blobs and sink
    rows, as a timeline, with a verdict (processed once, processed twice, in flight, lost, ghost).
    Exit 1 when the verdict is processed twice, lost, ghost or nothing was found."""
    from eoctl.trace import Lookup, TraceOptions, run_trace

    app: AppContext = ctx.obj
    if sum(x is not None for x in (ident, by)) != 1:
        raise UsageError("give a message id, a token id with --token, or --by COLUMN=VALUE (one of them)")
    if by is not None:
        column, sep, value = by.partition("=")
        if not sep or not column.strip():
            raise UsageError(f"--by {by!r}: expected COLUMN=VALUE, e.g. --by order_id=42")
        lookup = Lookup("sink", value, column.strip())
    else:
        assert ident is not None
        lookup = Lookup("token_id" if token else "message_id", ident)
    options = TraceOptions(
        since=parse_time(since, "--since") if since else None, until=parse_time(until, "--until") if until else None,
        window=parse_duration(window, "--window"), full_scan=full_scan,
        stuck_after=parse_duration(stuck_after, "--stuck-after"), grace=parse_duration(grace, "--grace"))
    config = app.config()
    with progress(not app.json) as step:
        step("starting Spark")
        spark = app.spark()
        step("tracing")
        result = run_trace(spark, config, lookup, options)
    if app.json:
        emit_json(result.to_dict())
    else:
        from eoctl.report.trace import render_trace

        render_trace(result, stderr)
    return int(ExitCode.FINDINGS if result.worst_is_bad() else ExitCode.OK)
