"""Human-readable rendering of core results on a Rich console (stderr)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from eoctl.doctor import DoctorReport, Status
from eoctl.sources.summary import InputSummary

if TYPE_CHECKING:  # Rich is imported by what renders: JSON output never needs it
    from rich.console import Console

#: the width of a table of prose off a terminal
PIPE_TABLE_WIDTH = 120

_STATUS_STYLE = {Status.OK: "[green]ok[/]", Status.WARN: "[yellow]warn[/]", Status.FAIL: "[bold red]FAIL[/]", Status.SKIP: "[yellow]skip[/]"}


def render_doctor(report: DoctorReport, console: Console) -> None:
    from rich.table import Table

    table = Table(title="eoctl doctor", title_justify="left", show_lines=False, expand=True)
    # folded, never cut with an ellipsis: a path or a key is whole over two lines
    table.add_column("component", style="bold", overflow="fold",
                     min_width=min(40, max((len(r.component) for r in report.results), default=9)))
    table.add_column("check", overflow="fold", ratio=1)
    table.add_column("status", no_wrap=True, min_width=6)
    table.add_column("detail / fix", overflow="fold", ratio=2)
    for r in report.results:
        detail = r.detail if r.status is Status.OK or not r.fix else f"{r.detail}\n[dim]fix: {r.fix}[/]"
        table.add_row(r.component, r.check, _STATUS_STYLE[r.status], detail)
    # off a terminal (a pipe, a log) the console is 1000 columns wide so that no id is cut; this
    # table's last column is prose, wrapped at a width a log viewer shows
    console.print(table, width=None if console.is_terminal else PIPE_TABLE_WIDTH)
    c = report.counts()
    verdict = "[green]all checks passed[/]" if report.ok else f"[bold red]{c['fail']} check(s) failed[/]"
    console.print(f"{verdict}: {c['ok']} ok, {c['warn']} warning{'s' if c['warn'] != 1 else ''}, {c['fail']} failed, "
                  f"{c['skip']} skipped")


def render_summary(summary: InputSummary, console: Console) -> None:
    from rich.table import Table

    iso = f", {summary.isolation}" if summary.isolation else ""
    table = Table(title=f"{summary.endpoint}: {summary.source}{iso}", title_justify="left")
    for col in ("topic", "partition", "records", "offsets", "committed", "in flight", "with headers", "message ids"):
        table.add_column(col, justify="left" if col == "topic" else "right")
    for p in summary.partitions:
        table.add_row(
            p.topic,
            str(p.partition),
            str(p.records),
            f"{p.first_offset}..{p.last_offset}",
            "-" if p.committed_offset is None else str(p.committed_offset),
            str(p.in_flight),
            str(p.with_protocol_headers),
            str(p.distinct_message_ids),
        )
    console.print(table)
    console.print(f"{summary.records} records in {len(summary.partitions)} partition(s)")


def render_mapping(data: Any, console: Console) -> None:
    """The resolved configuration (already masked by the caller) as human text: one `key = value`
    line per setting, by its full key path, in the file's order."""
    for key, value in _flattened(data, ""):
        console.print(f"{key} = {value}", markup=False, highlight=False, soft_wrap=True)


def _flattened(data: Any, prefix: str):
    if isinstance(data, dict):
        if not data and prefix:
            yield prefix, "{}"
        for k, v in data.items():
            yield from _flattened(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list) and any(isinstance(v, dict) for v in data):
        for i, v in enumerate(data):
            yield from _flattened(v, f"{prefix}[{i}]")
    else:
        yield prefix, json.dumps(data, default=str, ensure_ascii=False)
