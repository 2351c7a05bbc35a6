"""Rendering of reconcile-tokens, gc-tokens, gc-blobs and replay-outbox results: text tables and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from eoctl.inert import inert
from eoctl.report.render import TOP_EVIDENCE, more_rows, print_notes, print_rows
from eoctl.findings import code_of
from eoctl.secrets import redact

# for the type hints only: the results' modules are the commands' own (a gc command never imports
# replay's), and Rich is imported by what renders (JSON output never needs it)
if TYPE_CHECKING:
    from rich.console import Console

    from eoctl.ops.gc_flow import GcResult, RestoreResult
    from eoctl.ops.reconcile import ReconcileReport
    from eoctl.ops.replay import ReplayResult

RECONCILE_SCHEMA = "eoctl.reconcile-tokens/v1"
GC_SCHEMA = "eoctl.gc/v1"
_NOTE = {
    "live": "a record in flight carries it",
    "referenced": "a pending outbox entry holds it",
    "leaked": f"its record is processed; the receiver kept it ({code_of('tokens.leaked_tokens')})",
    "garbage": "an attempt that did not commit, or an orphan past the grace period",
    "young": "on no record yet, within the grace period",
    "missing": "in-flight records without a token",
}


def render_reconcile(report: ReconcileReport, console: Console) -> None:
    from rich.table import Table

    from eoctl.ops.reconcile import TOKEN_CLASSES

    console.print(f"[bold]eoctl reconcile-tokens[/] run {report.run['id']} "
                  f"(grace {report.run['grace_seconds']}s)")
    print_notes(report.notes, console)
    table = Table(title="tokens by class", title_justify="left")
    table.add_column("endpoint", style="bold")
    for c in (*TOKEN_CLASSES, "missing"):
        table.add_column(c, justify="right")
    for name, counts in report.counts.items():
        table.add_row(name, *[str(counts.get(c, 0)) for c in (*TOKEN_CLASSES, "missing")])
    console.print(table)
    for ev in report.evidence:
        if ev.cls == "live":
            continue  # the normal state; JSON has them
        console.print(f"\n[bold]{ev.endpoint} {ev.cls}[/]: {ev.count} ({_NOTE[ev.cls]})")
        _rows(ev.rows, console)
        more = more_rows(ev.count, len(ev.rows), ev.parquet)
        if more:
            console.print(f"[dim]{more}[/]")


def reconcile_json(report: ReconcileReport) -> dict[str, Any]:
    return redact({"schema": RECONCILE_SCHEMA, "run": report.run, "notes": report.notes,
                   "misnamed": report.misnamed, "counts": report.counts,
                   "evidence": [{"endpoint": e.endpoint, "class": e.cls, "count": e.count, "rows": e.rows,
                                 "evidence_file": e.parquet} for e in report.evidence]})


_TEXT_COLUMNS = ("token_id", "name", "topic", "partition", "offset", "message_id", "created_at", "modified",
                 "processed_copy", "reason")


def _rows(rows: list[dict[str, Any]], console: Console) -> None:
    """The top rows, with the columns a person reads first (JSON has every column)."""
    if not rows:
        return
    print_rows(rows[:TOP_EVIDENCE], console, [c for c in _TEXT_COLUMNS if c in rows[0]])


def restore_command(command: str, run_id: str, options: Sequence[str] = ()) -> str:
    """The command that puts back what run `run_id` removed, with the user's global options."""
    from eoctl.findings import fill_command

    return fill_command(f"eoctl {command} --restore {{run_id}} --execute", {"run_id": run_id}, options)


def render_gc(result: GcResult, console: Console, options: Sequence[str] = ()) -> None:
    """The same table for a plan and an execution; only the verb and the deleted column differ.
    `options`: the global options the user ran eoctl with (repeated in the undo command)."""
    from rich.table import Table
    from rich.text import Text

    what = {"gc-tokens": "tokens", "gc-blobs": "blobs"}.get(result.command, "outbox rows")
    outbox = result.command == "gc-outbox"
    mode = "executed" if result.executed else "plan only (nothing changed; add --execute)"
    age = "each outbox's retention" if outbox else f"grace {result.grace_seconds}s"
    console.print(f"[bold]eoctl {result.command}[/] run {result.run_id}: {mode}; {age}")
    for old in result.finished_leftovers:
        console.print(f"finished the leftovers of interrupted run {old}")
    print_notes(result.notes, console)
    table = Table(title="sent outbox rows" if outbox else f"garbage {what}", title_justify="left")
    for col in ("endpoint", "sent" if outbox else "garbage", "planned", "removed",
                "skipped: within retention" if outbox else "skipped: young", "skipped: over limit",
                "skipped: changed"):
        table.add_column(col, justify="left" if col == "endpoint" else "right")
    rows = [*result.tallies]
    for t in rows:
        table.add_row(t.endpoint, str(t.garbage), str(t.planned), str(t.deleted) if result.executed else "-",
                      str(t.skipped_young), str(t.skipped_over_limit), str(t.skipped_changed))
    tot = result.totals()
    table.add_row("[bold]total[/]", str(tot["garbage"]), str(tot["planned"]),
                  str(tot["deleted"]) if result.executed else "-", str(tot["skipped_young"]),
                  str(tot["skipped_over_limit"]), str(tot["skipped_changed"]))
    console.print(table)
    if result.sample and outbox:  # the entry, when it was last updated (sent), and its age
        console.print("first planned outbox rows (entry, sent, age):")
        print_rows([{"endpoint": r["endpoint"], "entry": r["incoming_message_id"], "sent": r["updated_at"],
                     "age": _age_text(r.get("age_seconds"))} for r in result.sample[:TOP_EVIDENCE]], console)
    elif result.sample:
        console.print(f"first planned {what}:")
        _rows(result.sample, console)
    if result.executed:
        kept = "quarantine" if what == "blobs" else "journal"
        console.print(f"removed {tot['deleted']} {what} (kept in the {kept}); purged {result.purged} past the "
                      f"retention; {result.duration_seconds:.1f}s")
        if tot["deleted"]:
            console.print(Text.assemble("undo: ", restore_command(result.command, result.run_id, options)),
                          soft_wrap=True)


def _age_text(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 86400:.1f}d" if seconds >= 86400 else f"{seconds / 3600:.1f}h"


def gc_json(result: GcResult) -> dict[str, Any]:
    """gc's JSON (one line on stdout: cron mails and log collectors read it whole)."""
    return {"schema": GC_SCHEMA, **result.summary()}


def render_restore(result: RestoreResult, console: Console, options: Sequence[str] = ()) -> None:
    from rich.text import Text

    if result.already_restored:
        console.print(f"run {result.run_id} was already restored; nothing to do")
        return
    done = ", ".join(f"{n} {k}" for k, n in result.restored.items())
    if not result.executed:
        console.print(f"[bold]eoctl {result.command}[/] would restore run {result.run_id}: {done} to put back "
                      "(plan only, nothing changed; add --execute)")
        _not_restored(result, console)
        return
    console.print(f"[bold]eoctl {result.command}[/] restored run {result.run_id}: {done} put back")
    _not_restored(result, console)
    if result.not_restored:
        console.print(Text.assemble("once each obstacle is gone: ",
                                    restore_command(result.command, result.run_id, options)), soft_wrap=True)


def _not_restored(result: RestoreResult, console: Console) -> None:
    from rich.text import Text

    if result.not_restored:
        console.print("[bold red]not restored[/] (kept in the journal; the run stays restorable):")
    for item in result.not_restored:
        console.print(Text(f"  {item['endpoint']}: {inert(item['name'])}: {item['why']}"), soft_wrap=True)


def restore_json(result: RestoreResult) -> dict[str, Any]:
    return {"schema": GC_SCHEMA, "restore": asdict(result)}


REPLAY_SCHEMA = "eoctl.replay-outbox/v1"
_STATUS = {"planned": "planned", "replayed": "[green]replayed[/]", "skipped": "[yellow]skipped[/]",
           "conflict": "[yellow]conflict[/]", "failed": "[bold red]failed[/]"}


def render_replay(result: ReplayResult, console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    mode = "executed" if result.executed else "plan only (nothing changed; add --execute)"
    console.print(f"[bold]eoctl replay-outbox[/] run {result.run_id}: {mode}")
    if not result.outcomes:
        console.print("no stuck outbox entries")
        return
    table = Table(title="stuck outbox entries", title_justify="left")
    longest = max(len(o.entry_id) for o in result.outcomes)
    for col in ("endpoint", "entry (incoming message id)", "age", "messages", "tokens committed", "status",
                "reason"):
        if col.startswith("entry"):  # an id is never wrapped or cut: the other columns give way
            table.add_column(col, no_wrap=True, min_width=longest)
        else:
            table.add_column(col, justify="right" if col in ("age", "messages") else "left")
    for o in result.outcomes:
        # the entry id and the reason come from data: plain text, inert (never markup)
        table.add_row(o.endpoint, Text(inert(o.entry_id)), _age(o.age_seconds), str(o.messages),
                      "yes" if o.tokens_committed else "no", _STATUS[o.status], Text(inert(o.reason or "")))
    console.print(table)
    counts = ", ".join(f"{n} {status}" for status, n in result.counts().items())
    console.print(f"{counts}; {result.duration_seconds:.1f}s" if result.executed else counts)


def _age(seconds: int) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds // 60}m"


def render_abort(result: Any, console: Console) -> None:
    """eoctl.ops.abort_txn.AbortResult: the plan and the execution print the same table."""
    from rich.table import Table

    mode = "executed" if result.executed else "plan only (nothing changed; add --execute)"
    console.print(f"[bold]eoctl abort-transaction[/] run {result.run_id}: {mode}; transaction timeout "
                  f"{result.transaction_timeout_seconds}s")
    if not result.transactions:
        console.print("no hanging transactions")
        return
    table = Table(title="hanging transactions", title_justify="left")
    for col in ("endpoint", "partition", "last stable", "high watermark", "age", "producer id", "epoch",
                "status", "reason"):
        table.add_column(col, no_wrap=col in ("partition", "producer id"),
                         justify="right" if col in ("last stable", "high watermark", "age", "epoch") else "left")
    for t in result.transactions:
        stable = str(t.last_stable_offset) + (f" -> {t.last_stable_offset_after}" if t.last_stable_offset_after
                                              is not None else "")
        table.add_row(t.endpoint, f"{t.topic}[{t.partition}]", stable, str(t.high_watermark), _age(t.age_seconds),
                      "-" if t.producer_id is None else str(t.producer_id),
                      "-" if t.producer_epoch is None else str(t.producer_epoch), t.status, t.reason)
    console.print(table)
    console.print(", ".join(f"{n} {status}" for status, n in result.counts().items()) +
                  f"; {result.duration_seconds:.1f}s")


def replay_json(result: ReplayResult) -> dict[str, Any]:
    """One line, like gc's: the summary with one object per entry (replayed, skipped and why, ...)."""
    return {"schema": REPLAY_SCHEMA, **result.summary()}
