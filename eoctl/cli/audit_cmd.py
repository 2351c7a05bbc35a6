"""`eoctl audit`."""

from __future__ import annotations

import datetime as dt
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from eoctl.cli.context import AppContext, OutputFormat
from eoctl.cli.output import check_target, misnamed_exit, progress, stderr_console, write_stdout, write_whole
from eoctl.errors import EoctlError, ExitCode, UsageError
from eoctl.findings import Severity, code_of

if TYPE_CHECKING:
    from eoctl.findings import AuditReport

#: --fail-on's choices, from the severities (help lists them)
FailOn = Enum("FailOn", {s.label: s.label for s in Severity}, type=str)

def parse_duration(text: str, flag: str) -> dt.timedelta:
    from eoctl.config.model import checked_duration, duration_of

    try:
        return duration_of(checked_duration(text))
    except ValueError as exc:
        raise UsageError(f"{flag} {text!r}: {str(exc).split(', got ')[0]}") from None


def parse_time(text: str, flag: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected an ISO time like 2026-11-01T12:00:00Z") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def write_audit_metrics(path: Path, report: AuditReport | None) -> None:
    """The audit's Prometheus textfile (eoctl.metrics): findings (evidence rows counted) per
    endpoint, code and severity, with every selected code at 0 where it found nothing, so that an
    alert sees a finding resolve; records scanned; duration. `report` None: the run failed."""
    from eoctl.metrics import Metric, write_textfile

    if report is None:
        write_textfile(path, "eoctl_audit", [], success=False)
        return
    from eoctl.findings import CATALOG

    found: dict[tuple[str, str], int] = {}
    for f in report.findings:
        found[(f.endpoint, f.code)] = found.get((f.endpoint, f.code), 0) + f.count
    samples = [({"endpoint": ep, "code": code, "severity": CATALOG[code].severity.label}, found.get((ep, code), 0))
               for ep in report.run.get("endpoints", []) for code in report.run.get("codes", [])]
    write_textfile(path, "eoctl_audit", [
        Metric("findings", "findings of the last audit (evidence rows), per endpoint, code and severity", samples),
        Metric("records_scanned", "records the last audit read", [({}, report.scanned.get("records", 0))]),
        Metric("misnamed_tables", "endpoint tables whose rows carry other names (not judged: exit 6)",
               [({}, len(report.misnamed))]),
        Metric("duration_seconds", "wall time of the last audit", [({}, report.run.get("duration_seconds", 0))]),
    ], success=True)


def audit(
    ctx: typer.Context,
    select: Annotated[Optional[list[str]], typer.Option("--select", metavar="CODE", help=f"codes or prefixes to run ({code_of('topics.under_several_tokens')}, EO2); repeatable")] = None,
    ignore: Annotated[Optional[list[str]], typer.Option("--ignore", metavar="CODE", help="codes or prefixes to skip; repeatable")] = None,
    endpoint: Annotated[Optional[list[str]], typer.Option("--endpoint", "-e", metavar="ENDPOINT", help="audit only these endpoints; repeatable")] = None,
    grace: Annotated[Optional[str], typer.Option(metavar="DURATION", help="orphan tokens and blobs younger than this are not findings (default: [audit] grace, else 24h)", show_default=False)] = None,
    stuck_after: Annotated[Optional[str], typer.Option("--stuck-after", metavar="DURATION", help="outbox entries pending longer are stuck (default: [audit] stuck_after, else 15m)", show_default=False)] = None,
    transaction_timeout: Annotated[Optional[str], typer.Option("--transaction-timeout", metavar="DURATION", help="open Kafka transactions older than this hang (default: [audit] transaction_timeout, else 15m)", show_default=False)] = None,
    ranges: Annotated[Optional[list[str]], typer.Option("--range", metavar="RANGE", help="only TOPIC:PARTITION[:START[:END]]; repeatable")] = None,
    since: Annotated[Optional[str], typer.Option(metavar="TIME", help="only records at or after this ISO time")] = None,
    until: Annotated[Optional[str], typer.Option(metavar="TIME", help="only records before this ISO time")] = None,
    fail_on: Annotated[FailOn, typer.Option("--fail-on", help="exit 1 when a finding is at least this severe")] = FailOn.error,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="FILE", help="write the report to FILE (large evidence as Parquet beside it)")] = None,
    evidence_rows: Annotated[int, typer.Option("--evidence-rows", min=1, metavar="N", help="evidence rows kept in the report per finding")] = 1000,
    record: Annotated[bool, typer.Option("--record/--no-record", help="record the run in the findings history")] = True,
    since_last: Annotated[bool, typer.Option("--since-last", help="read from the source only the offsets added since the last recorded run; the rest from its record index")] = False,
    metrics_file: Annotated[Optional[Path], typer.Option("--metrics-file", metavar="PATH", help="write Prometheus textfile-collector metrics (findings per endpoint, code and severity; records; duration; last success)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no report or progress on stderr, only errors and warnings (cron: the exit code, --output and --metrics-file say the rest)")] = False,
) -> int:
    """Scan the configured topics, stores, blob prefixes and sinks (read-only) and report every
    finding of the catalog with its evidence; exit 1 when one is at or above --fail-on."""
    from eoctl.audit import run_audit, select_codes
    from eoctl.config import paths
    from eoctl.cli.sources_cmd import parse_range
    from eoctl.options import AuditOptions
    from eoctl.findings import Severity
    from eoctl.report.render import render_json, render_markdown, render_text
    from eoctl.sources import check_ranges

    app: AppContext = ctx.obj
    threshold = Severity.parse(fail_on.value)
    codes = select_codes(select, ignore)
    config = app.config()
    for name in endpoint or []:
        config.endpoint(name)  # unknown endpoint: usage error before Spark starts
    if since_last and (ranges or since or until):
        raise UsageError("--since-last continues a full scan: it does not combine with --range, --since or --until")
    if metrics_file is not None:
        check_target(metrics_file, "--metrics-file")  # before the run, not after it
    evidence_dir = None
    if output is not None:
        check_target(output, "--output")  # before the run, not after it
        evidence_dir = output.resolve().parent / f"{output.stem}-evidence"
    options = AuditOptions(
        now=app.started_at,  # the run's start: its id's time, and what ages are counted to
        # flag > the configuration's [audit] > the built-in default
        grace=parse_duration(grace or config.audit.grace, "--grace"),
        stuck_after=parse_duration(stuck_after or config.audit.stuck_after, "--stuck-after"),
        transaction_timeout=parse_duration(transaction_timeout or config.audit.transaction_timeout,
                                           "--transaction-timeout"),
        endpoints=endpoint or None, ranges=[parse_range(r) for r in ranges or []] or None,
        since=parse_time(since, "--since") if since else None, until=parse_time(until, "--until") if until else None,
        evidence_rows=evidence_rows, evidence_dir=evidence_dir, since_last=since_last,
        keep_index=record and since_last,  # an index costs a copy of the records: only for those who continue
    )
    audited = [config.endpoint(n) for n in endpoint or config.endpoints]
    check_ranges([ep.input for ep in audited if ep.input], options.ranges, config)  # before Spark starts
    try:
        paths.require_paths(config)  # a missing file is one line now, not an engine error a minute later
        with progress(app.output is OutputFormat.text, quiet=quiet) as step:
            report = run_audit(config, options, codes, app.spark, step)
    except Exception:  # known or not, cron's monitoring must see the failure
        if metrics_file is not None:
            write_audit_metrics(metrics_file, None)
        raise
    report.next_options = app.next_options()
    report.run = app.run("audit", report.run)  # the envelope every command's JSON has
    reason = report.run.get("scan", {}).get("reason")
    if reason:
        stderr_console().print(f"eoctl: {reason}")

    fmt = app.format_for(output)  # `--output r.json` is JSON unless --format says otherwise
    # a configuration problem is said on stderr whatever the format (text there shows it as a note)
    misnamed = misnamed_exit(report.misnamed, said=fmt is OutputFormat.text and output is None)
    if record and report.misnamed:
        stderr_console().print("eoctl: the run was not recorded in the findings history: it did not judge every "
                               "endpoint (fix the configuration, then audit again)")
    elif record:
        try:
            from eoctl.incremental import record as record_run

            record_run(app.session, config, report)
        except EoctlError as exc:  # the audit itself succeeded: say so, and why it was not recorded
            stderr_console().print(f"eoctl: warning: the run was not recorded in the findings history: {exc.one_line()}")
    if fmt is OutputFormat.json:
        text = render_json(report)
    elif fmt is OutputFormat.markdown:
        text = render_markdown(report, config.report.docs_url)
    else:
        text = None
    if output is not None:
        if text is None:
            import io

            from rich.console import Console

            buffer = io.StringIO()
            render_text(report, Console(file=buffer, width=160, highlight=False, color_system=None))
            text = buffer.getvalue()
        write_whole(output, text, "--output")  # never a half-written report
        if not quiet:
            stderr_console().print(f"report written to {output}", markup=False)
    elif text is not None:
        write_stdout(text)
    elif not quiet:
        render_text(report, stderr_console())
    if metrics_file is not None:
        write_audit_metrics(metrics_file, report)
    if misnamed is not None:
        return misnamed
    worst = report.worst()
    return int(ExitCode.FINDINGS if worst is not None and worst >= threshold else ExitCode.OK)
