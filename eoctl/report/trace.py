"""Rendering of `eoctl trace` on a Rich console: verdict first, then the timeline and the evidence."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from eoctl.inert import inert
from eoctl.trace import MessageTrace, TraceResult

if TYPE_CHECKING:  # Rich is imported by what renders: JSON output never needs it
    from rich.console import Console

_STYLE = {"processed once": "green", "in flight": "yellow", "never sent": "yellow", "not judged": "yellow"}


def render_trace(result: TraceResult, console: Console) -> None:
    from rich.markup import escape

    from eoctl.report.render import print_notes

    lk = result.lookup
    what = (f"{lk.column} = {lk.value}" if lk.kind == "sink" else
            f"{lk.kind.replace('_', ' ')}{'s' if len(lk.values) > 1 else ''} {', '.join(lk.values)}")
    console.print(f"[bold]trace of {_safe(what)}[/]", soft_wrap=True)
    for note in result.scans:
        kind = "[yellow]read every record[/]" if note.full else "read"
        looked = f"looked up {note.indexed:,} indexed record(s) and " if note.indexed else ""
        console.print(f"  {looked}{kind} {note.records_read} record(s) of {escape('; '.join(note.inputs))} for "
                      f"{note.purpose}: {escape(note.bounds)}")
    print_notes(result.notes, console, indent="  ")
    if not result.messages:
        console.print("[red]no message found[/]")
    for m in result.messages:
        _message(m, console)
    if result.history_run:
        console.print(f"\nrecorded findings are from audit run {_safe(result.history_run)}")


def _safe(value: object) -> str:
    """A value from data, for a line with markup: inert, and its brackets never read as markup."""
    from rich.markup import escape

    return escape(inert(value))


def _cell(value: object):
    """A table cell from data: plain text (never markup), inert."""
    from rich.text import Text

    return Text(inert(value))


def _message(m: MessageTrace, console: Console) -> None:
    from rich.table import Table

    style = _STYLE.get(m.verdict.value, "bold red")
    partial = " [yellow](as far as was read)[/]" if m.unread else ""
    console.print(f"\n[bold]message {_safe(m.message_id)}[/]: [{style}]{m.verdict.value.upper()}[/]{partial}",
                  soft_wrap=True)
    for reason in m.reasons:
        console.print(f"  - {_safe(reason)}", soft_wrap=True)
    if m.what_to_do:
        console.print(f"  [bold]what to do:[/] {_safe(m.what_to_do)}")
    if m.copies:
        table = Table(title="copies", title_justify="left")
        for col in ("topic/partition@offset", "timestamp", "token", "token in store", "producer", "seq", "attempt",
                    "state"):
            table.add_column(col, no_wrap=col in ("topic/partition@offset", "token"))  # ids whole
        for c in m.copies:
            present = {None: "-", True: "present", False: "gone"}[c.token_present]
            table.add_row(*map(_cell, (f"{c.topic}/{c.partition}@{c.offset}", _t(c.timestamp), c.token_id or "-",
                                       present, c.producer or "-", c.sequence or "-", c.attempt_id or "-",
                                       f"processed by {c.consumer}" if c.processed else f"in flight ({c.consumer})")))
        console.print(table)
    console.print("timeline:")
    for e in m.timeline:
        console.print(f"  {_t(e.at):>25}  {inert(e.what)}", markup=False, highlight=False, soft_wrap=True)
    if m.findings:
        console.print("findings on this message: " + ", ".join(sorted({f['code'] for f in m.findings})))
    if m.recorded_findings:
        console.print("in the last recorded audit: " + _safe(", ".join(
            sorted({f"{f['code']} ({f['endpoint']})" for f in m.recorded_findings}))))
    for line in m.findings_differ:
        console.print(f"  {inert(line)}", markup=False, highlight=False, soft_wrap=True)


def _t(value: object) -> str:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    return "" if value is None else str(value)
