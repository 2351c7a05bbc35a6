"""`eoctl reconcile-tokens`, `eoctl gc-tokens`, `eoctl gc-blobs`, `eoctl gc-outbox`: classify, then collect
garbage safely."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from eoctl.cli.audit_cmd import parse_duration
from eoctl.cli.context import AppContext, OutputFormat
from eoctl.cli.output import (
    check_target,
    emit_json,
    emit_json_line,
    enveloped,
    misnamed_exit,
    progress,
    stderr_console,
    write_whole,
)
from eoctl.errors import ExitCode

Endpoints = Annotated[Optional[list[str]], typer.Option("--endpoint", "-e", metavar="ENDPOINT", help="only these endpoints' tokens or blobs; repeatable")]
Grace = Annotated[str, typer.Option(metavar="DURATION", help="never touch anything younger than this")]


def reconcile_tokens(
    ctx: typer.Context,
    endpoint: Endpoints = None,
    grace: Grace = "24h",
    evidence_rows: Annotated[int, typer.Option("--evidence-rows", min=1, metavar="N", help="evidence rows kept per class")] = 100,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="FILE", help="write the JSON to FILE (all evidence as Parquet beside it)")] = None,
) -> int:
    """Classify every token of every endpoint (read-only, on the chosen engine): live, referenced by
    a pending outbox entry, leaked, garbage or young; and every in-flight record without a token."""
    from eoctl.ops.reconcile import run_reconcile
    from eoctl.report.ops import reconcile_json, render_reconcile

    app: AppContext = ctx.obj
    config = app.config()
    for name in endpoint or []:
        config.endpoint(name)
    if output is not None:
        check_target(output, "--output")  # before the run, not after it
    evidence_dir = output.resolve().parent / f"{output.stem}-evidence" if output else None
    args = {"endpoints": endpoint, "grace": parse_duration(grace, "--grace"), "evidence_rows": evidence_rows,
            "evidence_dir": evidence_dir, "now": app.started_at}
    from eoctl.config import paths

    with progress(app.output is OutputFormat.text) as step:
        paths.require_paths(config)  # a missing file is one line now, not an engine error later
        report = run_reconcile(app.spark, config, **args, progress=step)
    if output is not None:
        import json

        from eoctl.secrets import redact

        document = enveloped(reconcile_json(report), run=app.run("reconcile-tokens", report.run))
        write_whole(output, json.dumps(redact(document), indent=2, default=str) + "\n", "--output")
        stderr_console().print(f"report written to {output}", markup=False)
    if app.json:
        emit_json(reconcile_json(report), run=app.run("reconcile-tokens", report.run))
    else:
        render_reconcile(report, stderr_console())
    return misnamed_exit(report.misnamed, said=not app.json) or 0


def _gc(ctx: typer.Context, command: str, execute: bool, grace: str, max_deletes: int, batch_size: int,
        retention: str, endpoint: list[str] | None, restore: str | None, metrics_file: Path | None,
        evidence_rows: int) -> int:
    from eoctl.ops import gc_blobs, gc_outbox, gc_tokens
    from eoctl.ops.gc_flow import GcOptions, GcResult, write_metrics
    from eoctl.report.ops import gc_json, render_gc, render_restore, restore_json

    module = {"gc-tokens": gc_tokens, "gc-blobs": gc_blobs, "gc-outbox": gc_outbox}[command]
    app: AppContext = ctx.obj
    config = app.config()
    for name in endpoint or []:
        config.endpoint(name)
    if metrics_file is not None:
        check_target(metrics_file, "--metrics-file")  # before the run, not after it
    if restore is not None:
        result = module.restore(config, restore, execute)
        if app.json:
            emit_json_line(restore_json(result), run=app.run(command))  # the run restored: restore.run_id
        else:
            render_restore(result, stderr_console(), app.next_options().options)
        # something left in the quarantine: said, and not a success (the run stays restorable)
        return int(ExitCode.RUNTIME) if result.not_restored and result.executed else 0
    options = GcOptions(now=app.started_at, grace=parse_duration(grace, "--grace"), max_deletes=max_deletes, batch_size=batch_size,
                        retention=parse_duration(retention, "--keep-removed"), endpoints=endpoint, execute=execute,
                        evidence_rows=evidence_rows)
    try:
        from eoctl.config import paths

        with progress(app.output is OutputFormat.text) as step:
            if command == "gc-outbox":  # the store answers: no engine, no topic read
                result: GcResult = gc_outbox.gc_outbox(config, options, step)
            else:
                paths.require_paths(config)  # a missing file is one line now, not an engine error later
                run = gc_tokens.gc_tokens if command == "gc-tokens" else gc_blobs.gc_blobs
                result = run(app.spark, config, options, step)
    except Exception:  # known or not, cron's monitoring must see the failure
        if metrics_file is not None:
            write_metrics(metrics_file, GcResult(command, "-", execute, 0, []), success=False)
        raise
    if metrics_file is not None:
        write_metrics(metrics_file, result, success=True)
    if app.json:
        emit_json_line(gc_json(result), run=app.run(command, {"id": result.run_id}))
    else:
        render_gc(result, stderr_console(), app.next_options().options)
    return misnamed_exit(result.misnamed, said=not app.json) or 0


_EXECUTE = typer.Option("--execute/--dry-run", help="change things; --dry-run (the default) prints the plan only")
_MAX = typer.Option("--max-deletes", min=1, metavar="N", help="remove at most this many per run (the rest waits for the next run)")
_BATCH = typer.Option("--batch-size", min=1, max=10_000, metavar="N", help="rows or blobs per transaction")
_RESTORE = typer.Option("--restore", metavar="RUN_ID", help="put back what run RUN_ID removed (with --execute)")
_METRICS = typer.Option("--metrics-file", metavar="FILE", help="write Prometheus textfile-collector metrics to this file")
_SAMPLE = typer.Option("--evidence-rows", min=0, metavar="N", help="planned rows shown as evidence")
#: the name it had first: taken still, not shown (an outbox's own `retention` is another thing)
_RETENTION = typer.Option("--retention", metavar="DURATION", hidden=True)


def _kept_for(keep_removed: str, retention: str | None) -> str:
    return retention if retention is not None else keep_removed


def gc_tokens(
    ctx: typer.Context,
    execute: Annotated[bool, _EXECUTE] = False,
    grace: Grace = "24h",
    max_deletes: Annotated[int, _MAX] = 10_000,
    batch_size: Annotated[int, _BATCH] = 500,
    keep_removed: Annotated[str, typer.Option("--keep-removed", metavar="DURATION", help="how long the journal keeps removed tokens for --restore")] = "7d",
    retention: Annotated[Optional[str], _RETENTION] = None,
    endpoint: Endpoints = None,
    restore: Annotated[Optional[str], _RESTORE] = None,
    metrics_file: Annotated[Optional[Path], _METRICS] = None,
    evidence_rows: Annotated[int, _SAMPLE] = 20,
) -> int:
    """Remove garbage tokens (attempts that did not commit, orphans) older than --grace. Plans by
    default; with --execute deletes in batches, each journaled first in its own transaction, under
    a lease so two runs never overlap (the second exits with code 4). Never touches a live,
    referenced, leaked or young token."""
    return _gc(ctx, "gc-tokens", execute, grace, max_deletes, batch_size, _kept_for(keep_removed, retention), endpoint, restore,
               metrics_file, evidence_rows)


def gc_blobs(
    ctx: typer.Context,
    execute: Annotated[bool, _EXECUTE] = False,
    grace: Grace = "24h",
    max_deletes: Annotated[int, _MAX] = 10_000,
    batch_size: Annotated[int, _BATCH] = 500,
    keep_removed: Annotated[str, typer.Option("--keep-removed", metavar="DURATION", help="how long quarantined blobs are kept for --restore before they are purged")] = "7d",
    retention: Annotated[Optional[str], _RETENTION] = None,
    endpoint: Endpoints = None,
    restore: Annotated[Optional[str], _RESTORE] = None,
    metrics_file: Annotated[Optional[Path], _METRICS] = None,
    evidence_rows: Annotated[int, _SAMPLE] = 20,
) -> int:
    """Move orphaned prepared blobs older than --grace to the quarantine folder (purged after
    --keep-removed). Plans by default; --execute changes, under a lease. Never touches a blob a record
    or a pending entry names, nor a young one."""
    return _gc(ctx, "gc-blobs", execute, grace, max_deletes, batch_size, _kept_for(keep_removed, retention), endpoint, restore,
               metrics_file, evidence_rows)


def gc_outbox(
    ctx: typer.Context,
    execute: Annotated[bool, _EXECUTE] = False,
    max_deletes: Annotated[int, _MAX] = 10_000,
    batch_size: Annotated[int, _BATCH] = 500,
    keep_removed: Annotated[str, typer.Option("--keep-removed", metavar="DURATION", help="how long the journal keeps removed rows for --restore (the outbox's own `retention` says which rows are removed)")] = "7d",
    retention: Annotated[Optional[str], _RETENTION] = None,
    endpoint: Annotated[Optional[list[str]], typer.Option("--endpoint", "-e", metavar="ENDPOINT", help="only these endpoints' outboxes; repeatable")] = None,
    restore: Annotated[Optional[str], _RESTORE] = None,
    metrics_file: Annotated[Optional[Path], _METRICS] = None,
    evidence_rows: Annotated[int, _SAMPLE] = 20,
) -> int:
    """Delete sent rows of outboxes that keep them (sent_column) once they are older than their
    outbox's retention (by updated_at): the cleanup EO303 asks for. Plans by default; with --execute
    deletes in batches, each journaled first in its own transaction that re-checks the row, under a
    lease (a second run exits with code 4). Never touches a pending row."""
    return _gc(ctx, "gc-outbox", execute, "0s", max_deletes, batch_size, _kept_for(keep_removed, retention), endpoint, restore,
               metrics_file, evidence_rows)
