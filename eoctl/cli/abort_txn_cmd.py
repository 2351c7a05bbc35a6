"""`eoctl abort-transaction`: abort the hanging Kafka transactions EO601 finds."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from eoctl.cli.audit_cmd import parse_duration
from eoctl.cli.context import AppContext, OutputFormat
from eoctl.cli.output import emit_json, progress, stderr_console
from eoctl.errors import ExitCode, UsageError
from eoctl.findings import code_of


def abort_transaction(
    ctx: typer.Context,
    execute: Annotated[bool, typer.Option("--execute/--dry-run", help="abort; --dry-run (the default) only lists the hanging transactions")] = False,
    transaction_timeout: Annotated[str, typer.Option("--transaction-timeout", metavar="DURATION", help=f"open transactions older than this hang ({code_of('transactions.hanging_transactions')}'s rule)")] = "15m",
    endpoint: Annotated[Optional[list[str]], typer.Option("--endpoint", "-e", metavar="ENDPOINT", help="only these endpoints' live inputs; repeatable")] = None,
) -> int:
    """List the partitions of the live inputs whose last stable offset has stayed behind the high
    watermark longer than --transaction-timeout, with the producer id, epoch and start offset of
    the transaction holding each; with --execute, abort each through Kafka's Admin API (KIP-664),
    under a lease, and say whether the last stable offset moved. Needs Java (Kafka's Java Admin
    client, in the Spark driver's JVM) when something hangs."""
    from eoctl.engine.spark.kafka_admin import JavaTransactionAdmin
    from eoctl.ops.abort_txn import AbortOptions, abort_transactions
    from eoctl.report.ops import render_abort

    app: AppContext = ctx.obj
    config = app.config()
    selected = [config.endpoint(name) for name in endpoint or config.endpoints]
    if not any(ep.input is not None and ep.input.kafka for ep in selected):
        raise UsageError(f"no {'selected ' if endpoint else ''}endpoint reads a live Kafka topic: a topic archive holds "
                         "no transaction to abort", hint="give an endpoint whose input has kafka = ...")
    options = AbortOptions(now=app.started_at, transaction_timeout=parse_duration(transaction_timeout, "--transaction-timeout"),
                           endpoints=endpoint, execute=execute)
    with progress(app.output is OutputFormat.text) as step:
        def admin_for(conn):
            step("starting Spark (Kafka's Java Admin client)")
            return JavaTransactionAdmin(app.spark(require_paths=False), conn)

        result = abort_transactions(config, options, admin_for, step)
    if app.json:
        emit_json(result.to_dict(), run=app.run("abort-transaction", {"id": result.run_id}))
    else:
        render_abort(result, stderr_console())
    return int(ExitCode.RUNTIME if result.failed() else ExitCode.OK)
