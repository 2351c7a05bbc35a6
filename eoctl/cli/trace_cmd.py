"""`eoctl trace`: what happened to one message."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from eoctl.cli.audit_cmd import parse_duration, parse_time
from eoctl.cli.context import AppContext
from eoctl.cli.output import emit_json, misnamed_exit, progress, stderr_console
from eoctl.errors import ExitCode, UsageError


def trace(
    ctx: typer.Context,
    idents: Annotated[Optional[list[str]], typer.Argument(metavar="ID", help="message ids (or, with --token, token ids), traced in one pass", show_default=False)] = None,
    token: Annotated[bool, typer.Option("--token", help="ID is a token id")] = False,
    by: Annotated[Optional[str], typer.Option("--by", metavar="COLUMN=VALUE", help="find the message by a sink column, e.g. order_id=42")] = None,
    since: Annotated[Optional[str], typer.Option(metavar="TIME", help="read only records at or after this ISO time (fast path)")] = None,
    until: Annotated[Optional[str], typer.Option(metavar="TIME", help="read only records before this ISO time")] = None,
    window: Annotated[str, typer.Option("--window", metavar="DURATION", help="how far around what the stores know to read")] = "24h",
    full_scan: Annotated[bool, typer.Option("--full-scan", help="read every record, whatever the stores know")] = False,
    stuck_after: Annotated[Optional[str], typer.Option("--stuck-after", metavar="DURATION", help="outbox entries pending longer are stuck (default: [audit] stuck_after, else 15m, as the audit)")] = None,
    grace: Annotated[Optional[str], typer.Option(metavar="DURATION", help="tokens younger than this are not orphans (default: [audit] grace, else 24h, as the audit)")] = None,
) -> int:
    """Everything eoctl can see about one logical message: every copy on every input topic, its
    tokens, the outbox entry that holds it and the one its processing left, intents, blobs and sink
    rows, as a timeline, with the catalog's findings on it and a verdict (processed once, processed
    twice, will be processed twice, in flight, lost, ghost). Several ids are traced in one pass.
    Exit 1 when a verdict is processed twice, will be processed twice, lost or ghost; else 5 when
    an id matched nothing (a typo reads differently from data loss)."""
    from eoctl.trace import Lookup, TraceOptions, run_trace

    app: AppContext = ctx.obj
    if bool(idents) == (by is not None):
        raise UsageError("give a message id, a token id with --token, or --by COLUMN=VALUE (one of them)")
    if by is not None:
        column, sep, value = by.partition("=")
        if not sep or not column.strip():
            raise UsageError(f"--by {by!r}: expected COLUMN=VALUE, e.g. --by order_id=42")
        lookup = Lookup("sink", value, column.strip())
    else:
        assert idents
        lookup = Lookup("token_id" if token else "message_id", idents[0], values=list(dict.fromkeys(idents)))
    config = app.config()
    # the audit's settings unless a flag says otherwise: both classify one token or entry alike
    options = TraceOptions(
        since=parse_time(since, "--since") if since else None, until=parse_time(until, "--until") if until else None,
        window=parse_duration(window, "--window"), full_scan=full_scan,
        stuck_after=parse_duration(stuck_after or config.audit.stuck_after, "--stuck-after"),
        grace=parse_duration(grace or config.audit.grace, "--grace"))
    with progress(not app.json) as step:
        from eoctl.config import paths

        paths.require_paths(config)  # a missing file is one line now, not an engine error later
        result = run_trace(app.spark, config, lookup, options, step)
    if app.json:
        emit_json(result.to_dict(), run=app.run("trace"))
    else:
        from eoctl.report.trace import render_trace

        render_trace(result, stderr_console())
    misnamed = misnamed_exit(result.misnamed, said=not app.json)
    if misnamed is not None:
        return misnamed
    if result.worst_is_bad():
        return int(ExitCode.FINDINGS)
    return int(ExitCode.NOT_FOUND if result.nothing_found() else ExitCode.OK)
