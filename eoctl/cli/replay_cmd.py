"""`eoctl replay-outbox`: push stuck outbox entries through without ever re-generating tokens."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from eoctl.cli.audit_cmd import parse_duration
from eoctl.cli.context import AppContext, OutputFormat
from eoctl.cli.output import emit_json_line, stderr_console, stderr_is_terminal
from eoctl.errors import ExitCode


def replay_outbox(
    ctx: typer.Context,
    execute: Annotated[bool, typer.Option("--execute/--dry-run", help="replay; --dry-run (the default) only lists the stuck entries")] = False,
    stuck_after: Annotated[str, typer.Option("--stuck-after", metavar="DURATION", help="entries pending longer than this are stuck")] = "15m",
    endpoint: Annotated[Optional[list[str]], typer.Option("--endpoint", "-e", metavar="ENDPOINT", help="only these endpoints' outboxes; repeatable")] = None,
    entry: Annotated[Optional[list[str]], typer.Option("--entry", metavar="MESSAGE_ID", help="only this entry (its incoming message id), whatever its age; repeatable")] = None,
    max_entries: Annotated[int, typer.Option("--max-entries", min=1, metavar="N", help="replay at most this many entries per run")] = 100,
    rate: Annotated[Optional[float], typer.Option("--rate", min=0.01, metavar="PER_SECOND", help="at most this many entries per second")] = None,
) -> int:
    """List outbox entries pending longer than --stuck-after; with --execute, finish each as the
    endpoint would: commit tokens only if none are committed yet, dispatch with the committed token
    ids and wait for every delivery report, remove the incoming token, delete the entry under its
    version. A poison or conflicting entry is reported and skipped; it never stalls the others."""
    from eoctl.ops.replay import ReplayOptions, replay
    from eoctl.report.ops import render_replay, replay_json

    app: AppContext = ctx.obj
    config = app.config()
    for name in endpoint or []:
        config.endpoint(name)
    options = ReplayOptions(now=app.started_at, stuck_after=parse_duration(stuck_after, "--stuck-after"),
                            endpoints=endpoint, entries=entry, max_entries=max_entries, rate=rate, execute=execute)
    if app.output is OutputFormat.text and stderr_is_terminal():
        from rich.progress import Progress

        with Progress(console=stderr_console(), transient=True) as bar:
            task = bar.add_task("replaying", total=None)
            result = replay(config, options, lambda done, total, what: bar.update(
                task, completed=done, total=total, description=what))
    else:
        result = replay(config, options)
    if app.json:
        emit_json_line(replay_json(result), run=app.run("replay-outbox", {"id": result.run_id}))
    else:
        render_replay(result, stderr_console())
    counts = result.counts()
    if counts.get("failed"):
        return int(ExitCode.RUNTIME)  # a broker or store failed: the next run retries
    return int(ExitCode.FINDINGS if counts.get("skipped") else ExitCode.OK)  # poison entries need a person
