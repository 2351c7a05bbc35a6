"""Rendering of the findings history (runs, one recorded run, a diff) on a Rich console."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eoctl.history import FindingsDiff, RecordedRun, RunSummary
from eoctl.report.render import TOP_EVIDENCE, cell, print_rows

if TYPE_CHECKING:  # Rich is imported by what renders: JSON output never needs it
    from rich.console import Console


def render_runs(runs: list[RunSummary], console: Console) -> None:
    from rich.table import Table

    table = Table(title="recorded audit runs (newest first)", title_justify="left")
    for col in ("run", "started", "config", "endpoints", "findings by code"):
        table.add_column(col, no_wrap=col == "run")
    for r in runs:
        counts = ", ".join(f"{c} {n}" for c, n in sorted(r.counts.items())) or "none"
        table.add_row(r.run_id, str(r.started_at), r.config_digest, ", ".join(r.endpoints), counts)
    console.print(table)


def render_recorded(run: RecordedRun, console: Console) -> None:
    s = run.summary
    console.print(f"[bold]audit run {s.run_id}[/] at {s.started_at} (config {s.config_digest}) over "
                  f"{', '.join(s.endpoints)}")
    if not run.findings:
        console.print("[green]no findings[/]")
    for f in run.findings:
        console.print(f"\n{f['code']} {f['severity']}: [bold]{f['count']}[/] in {f['endpoint']} ({f['where']})")
        print_rows(f["evidence"][:TOP_EVIDENCE], console)


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
