"""Rendering of the findings history (runs, one recorded run, a diff) on a Rich console."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eoctl.history import FindingsDiff, RecordedRun, RunSummary
from eoctl.report.render import cell

if TYPE_CHECKING:  # Rich is imported by what renders: JSON output never needs it
    from rich.console import Console

    from eoctl.findings import AuditReport


def render_runs(runs: list[RunSummary], console: Console) -> None:
    from rich.table import Table

    table = Table(title="recorded audit runs (newest first)", title_justify="left")
    for col in ("run", "started", "config", "endpoints", "findings by code"):
        table.add_column(col, no_wrap=col == "run")
    for r in runs:
        counts = ", ".join(f"{c} {n}" for c, n in sorted(r.counts.items())) or "none"
        table.add_row(r.run_id, _iso(r.started_at), r.config_digest, ", ".join(r.endpoints), counts)
    console.print(table)


def render_recorded(run: RecordedRun, report: AuditReport, console: Console) -> None:
    """A recorded run as its audit showed it: the summary by code, then each finding with its
    evidence, risk, what to do and the next command (eoctl.report.render)."""
    from eoctl.report.render import render_text

    s = run.summary
    console.print(f"recorded at {_iso(s.started_at)}, configuration {s.config_digest}", markup=False)
    render_text(report, console)


def render_diff(result: FindingsDiff, console: Console) -> None:
    from rich.table import Table

    t = result.totals()
    console.print(f"[bold]findings diff[/] {result.run_a} -> {result.run_b}: [red]{t['new']} new[/], "
                  f"[green]{t['resolved']} resolved[/], {t['persisting']} persisting")
    table = Table(title="by code and endpoint", title_justify="left")
    for col in ("code", "endpoint", "new", "resolved", "persisting"):
        table.add_column(col, justify="right" if col in ("new", "resolved", "persisting") else "left")
    for c in result.changes:
        table.add_row(c.code, c.endpoint, str(len(c.new)), str(len(c.resolved)), str(len(c.persisting)))
    console.print(table)
    for c in result.changes:
        for kind, items in (("new", c.new), ("resolved", c.resolved)):
            for item in items[:5]:
                console.print(f"  {kind:8} {c.code} {c.endpoint}: {cell(item)}")


def _iso(value: object) -> str:
    """A time as ISO 8601, as the JSON writes it (with the `T` and its offset)."""
    import datetime as dt

    return value.isoformat() if isinstance(value, dt.datetime) else str(value)


def render_change_runs(runs: list[dict], console: Console) -> None:
    """The runs of the commands that change things, newest first (eoctl runs list)."""
    from rich.table import Table
    from rich.text import Text

    if not runs:
        console.print("no run of gc-tokens, gc-blobs, replay-outbox or abort-transaction is recorded yet")
        return
    table = Table(title="runs", title_justify="left")
    for col in ("run id", "command", "started", "status", "what it did"):
        table.add_column(col, no_wrap=col == "run id")
    for r in runs:
        s = r.get("summary") or {}
        did = ", ".join(f"{k} {s[k]}" for k in ("planned", "deleted", "purged", "replayed", "skipped", "aborted")
                        if isinstance(s.get(k), int))
        table.add_row(Text(r["id"]), r["command"], _iso(r["started_at"]), r["status"], did)
    console.print(table)
