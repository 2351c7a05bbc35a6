"""Audit reports as text (Rich, for terminals), Markdown (for incident tickets) and JSON."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from eoctl.inert import inert
from eoctl.findings import AuditReport, Finding, Invocation
from eoctl.secrets import mask_text, redact

if TYPE_CHECKING:  # Rich is imported by what renders: JSON output never needs it
    from rich.console import Console

_STYLE = {"info": "dim", "warning": "yellow", "error": "red", "critical": "bold red"}
TOP_EVIDENCE = 5


def more_rows(count: int, listed: int, evidence_file: str | None) -> str | None:
    """The line under the top rows of `count` (a finding's, a class's): how many more there are
    and where to see them. `listed`: the rows the result holds (--evidence-rows at most);
    `evidence_file`: the Parquet file of them all, written with --output."""
    rest = count - min(listed, TOP_EVIDENCE)
    if rest <= 0:
        return None
    if evidence_file:
        return f"... and {rest} more; all rows in {evidence_file}"
    where = []
    if listed > TOP_EVIDENCE:
        where.append(f"--format json lists {listed - TOP_EVIDENCE} of them")
    if count > listed:
        where.append("--output FILE writes them all")
    return f"... and {rest} more; " + ", ".join(where)


def cell(value: Any) -> str:
    """A value as text, whole (ids and keys are never cut) and inert (eoctl.inert: a control
    character of an id is printed escaped, and a line break never splits a row)."""
    return inert(value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False))


#: characters Markdown reads as markup (links, emphasis, code spans, HTML, tables, headings)
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")


def md_cell(value: Any) -> str:
    """cell() for a Markdown table: every character Markdown acts on is escaped, so an id such as
    `[fix](https://...)` is text in a ticket, never a live link, and `|` never ends a cell."""
    return _MARKDOWN.sub(r"\\\1", cell(value))


def md_code(text: str) -> str:
    """`text` as one inline code span whatever backticks it holds (CommonMark: a fence longer than
    any run of backticks inside, padded with spaces)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}" if longest else f"{fence}{text}{fence}"


def print_rows(rows: list[dict[str, Any]], console: Console, columns: list[str] | None = None) -> None:
    """Evidence rows, one per line as `column=value`: an id is never wrapped or cut (pasted into
    `eoctl trace`, half an id finds nothing); the terminal wraps long lines itself."""
    for row in rows:
        pairs = ((c, row.get(c)) for c in columns) if columns else row.items()
        console.print("  " + "  ".join(f"{c}={cell(v)}" for c, v in pairs), soft_wrap=True, markup=False,
                      highlight=False)


def print_notes(notes: list[str], console: Console, indent: str = "") -> None:
    """`note:` lines; a note may quote data (the names a table holds): never read as markup."""
    from rich.markup import escape

    for note in notes:
        console.print(f"{indent}[yellow]note:[/] {escape(inert(note))}", soft_wrap=True)


def render_text(report: AuditReport, console: Console) -> None:
    from rich.table import Table

    scanned = ", ".join(f"{v} {k}" for k, v in report.scanned.items())
    console.print(f"[bold]eoctl audit[/] run {report.run.get('id')}: {scanned}; endpoints "
                  f"{', '.join(report.run.get('endpoints', []))}")
    if "scan" in report.run:
        console.print(scan_line(report.run["scan"]), markup=False)
    print_notes(report.notes, console)
    if not report.findings:
        endpoints = report.run.get("endpoints", [])
        from eoctl.stores.layout import unjudged

        left_out = sorted(unjudged([(m["endpoint"], m["kind"]) for m in report.misnamed], endpoints))
        if left_out:  # an endpoint not judged has no findings to show, and is not clean
            others = [e for e in endpoints if e not in left_out]
            console.print(f"[yellow]not judged:[/] {', '.join(left_out)} (see the notes); "
                          + (f"no findings in {', '.join(others)}" if others else "nothing else was audited"))
        else:
            console.print("[green]no findings[/]")
        return
    summary = Table(title="findings by code", title_justify="left")
    for col in ("code", "severity", "count", "finding"):
        summary.add_column(col, justify="right" if col == "count" else "left")
    for code, row in report.summary().items():
        summary.add_row(code, f"[{_STYLE[row['severity']]}]{row['severity']}[/]", str(row["count"]), row["title"])
    console.print(summary)
    for f in sorted(report.findings, key=lambda f: (-f.severity, f.code, f.endpoint)):
        _render_finding(f, console, report.next_options)


def _render_finding(f: Finding, console: Console, options: Invocation) -> None:
    from rich.markup import escape
    from rich.text import Text

    sev = f.severity.label
    console.print(f"\n[{_STYLE[sev]}]{f.code} {sev}[/] {f.info.title}: [bold]{f.count}[/] in {f.endpoint} "
                  f"({escape(f.where)})")
    print_rows(f.evidence[:TOP_EVIDENCE], console)
    more = more_rows(f.count, len(f.evidence), f.evidence_file)
    if more:
        console.print(f"[dim]  {more}[/]")
    remedy = f.remedy(options)
    if remedy:
        console.print(f"  [bold]risk:[/] {escape(remedy['risk'])}")
        console.print(f"  [bold]what to do:[/] {escape(remedy['fix'])}")
        if remedy["command"]:
            console.print(Text.assemble(("  next: ", "bold"), remedy["command"]), soft_wrap=True)
        console.print(f"  [dim]guide: {escape(remedy['docs'])}[/]", soft_wrap=True)


def scan_line(scan: dict) -> str:
    """One line: how the records were read (the whole source, or continuing from a recorded run)."""
    if scan.get("mode") == "incremental":
        return (f"scan: incremental from run {scan['base_run']}: {scan['new_records']} records read from the "
                f"source, {scan['indexed_records']} from its record index")
    reason = f" ({scan['reason']})" if scan.get("reason") else ""
    return f"scan: full, {scan.get('new_records')} records read from the source{reason}"


def render_markdown(report: AuditReport, docs_url: str | None = None) -> str:
    """The report for an incident ticket. `docs_url`: where the findings guide is read (`[report]
    docs_url`): each finding links to its section there; without it the guide's words stand
    inline (a relative link breaks where the report is pasted)."""
    lines = [f"## eoctl audit {report.run.get('id')}", "",
             f"Run at {report.run.get('started_at')} over {', '.join(report.run.get('endpoints', []))}; "
             + ", ".join(f"{v} {k}" for k, v in report.scanned.items()) + " scanned.", ""]
    if "scan" in report.run:
        lines += [scan_line(report.run["scan"]).capitalize() + ".", ""]
    lines += [f"> Note: {md_cell(note)}" for note in report.notes] + ([""] if report.notes else [])
    if not report.findings:
        return "\n".join(lines + ["No findings.", ""])
    lines += ["| code | severity | count | finding |", "|---|---|---:|---|"]
    lines += [f"| {c} | {r['severity']} | {r['count']} | {r['title']} |" for c, r in report.summary().items()]
    for f in sorted(report.findings, key=lambda f: (-f.severity, f.code, f.endpoint)):
        lines += ["", f"### {f.code} ({f.severity.label}): {f.count} in {md_cell(f.endpoint)} ({md_cell(f.where)})", "",
                  f.info.title, ""]
        if f.evidence:
            cols = list(f.evidence[0])
            lines.append("| " + " | ".join(cols) + " |")
            lines.append("|" + "---|" * len(cols))
            for row in f.evidence[:TOP_EVIDENCE]:
                lines.append("| " + " | ".join(md_cell(row.get(c)) for c in cols) + " |")
            if f.count > TOP_EVIDENCE:
                lines.append(f"\n{f.count - TOP_EVIDENCE} more rows" + (f" in `{f.evidence_file}`" if f.evidence_file else "") + ".")
        remedy = f.remedy(report.next_options)
        if remedy:
            lines += ["", f"**Risk:** {remedy['risk']}.", "", f"**What to do:** {remedy['fix']}."]
            if remedy["command"]:
                lines += ["", f"**Next:** {md_code(remedy['command'])}"]
            if docs_url:
                lines += ["", f"Guide: [{f.code}]({docs_url.split('#')[0]}#{f.code.lower()})"]
            else:
                lines += ["", f"**Cause:** {remedy['cause']}.", "", f"**How to verify:** {remedy['verify']}."]
    return mask_text("\n".join(lines) + "\n")


def render_json(report: AuditReport) -> str:
    return json.dumps(redact(report.to_dict()), indent=2, default=str) + "\n"
