"""Output is safe to print and paste: values from data reach a terminal, a report or a ticket
inert (control characters escaped, Rich markup literal, one row one line), and every `next:`
command works when pasted where the user ran eoctl (its options repeated, its ids quoted)."""

from __future__ import annotations

import io
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from eoctl.inert import inert, shell_word
from eoctl.findings import AuditReport, Finding, fill_command
from eoctl.report.render import render_markdown, render_text
from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl

HOSTILE = "m-\x1b]0;owned\x07-\x1b[2J-\r\nEO102 critical fake-\u202e-[red]x[/red]-\x85"
CONTROL = [chr(c) for c in (*range(0, 9), *range(11, 32), 0x7F, *range(0x80, 0xA0), 0x202E)]


@pytest.mark.unit
def test_inert_escapes_what_a_terminal_acts_on_and_nothing_else() -> None:
    assert inert("plain id-1 [x] ü") == "plain id-1 [x] ü"
    assert inert("a\x1b[2Jb\r\n\t\u202e\x85") == "a\\x1b[2Jb\\r\\n\\t\\u202e\\x85"
    assert not any(ch in inert(HOSTILE) for ch in CONTROL + ["\n", "\r"])


@pytest.mark.unit
@pytest.mark.parametrize("value", ["plain", "with space", "it's", HOSTILE, "back\\slash'\x1b", "\u202ex"])
def test_a_shell_word_is_inert_and_bash_reads_back_the_very_value(value: str) -> None:
    word = shell_word(value)
    assert not any(ch in word for ch in CONTROL + ["\n", "\r"])
    out = subprocess.run(["bash", "-c", f"printf '%s' {word}"], capture_output=True, check=True).stdout
    assert out == value.encode()


@pytest.mark.unit
def test_next_commands_repeat_the_options_the_user_ran_with() -> None:
    options = ["--config", "my dir/eoctl.toml", "--engine", "duckdb"]
    assert fill_command("eoctl trace {message_id}", {"message_id": "m 1"}, options) == (
        "eoctl --config 'my dir/eoctl.toml' --engine duckdb trace 'm 1'")
    sink = Finding("EO502", "shipping", "shipments", 1, [{"order_id": 31, "distinct_values": 2, "values": ["a"]}])
    assert sink.remedy(options)["command"] == "eoctl --config 'my dir/eoctl.toml' --engine duckdb trace --by order_id=31"
    for code in ("EO106", "EO204"):
        assert Finding(code, "billing", "orders", 1, [{}]).remedy()["command"] == "eoctl sources scan billing"


def _hostile_report() -> AuditReport:
    rows = [{"message_id": HOSTILE, "token_ids": [HOSTILE, "t-2"], "positions": [{"partition": 1, "offset": 2}]},
            {"message_id": "m-2", "token_ids": ["t-3"], "positions": []}]
    report = AuditReport(findings=[Finding("EO102", "shipping", "invoices", 2, rows)],
                         run={"id": "r", "endpoints": ["shipping"]}, scanned={"records": 2},
                         notes=[f"endpoint x not judged: rows under '{inert(HOSTILE)}' [bold]y[/bold]"])
    report.next_options = ["--config", "eoctl.toml"]
    return report


@pytest.mark.unit
def test_text_and_markdown_print_data_inert_one_row_per_line() -> None:
    report = _hostile_report()
    out = io.StringIO()
    render_text(report, Console(file=out, width=100, force_terminal=True, color_system="standard", highlight=False))
    text = out.getvalue()
    # the only escape sequences are Rich's own colours: none of the data's, and no line break inside a row
    assert "\x1b]0;" not in text and "\x1b[2J" not in text and "\u202e" not in text and "\x07" not in text
    assert "\r" not in text and "\x85" not in text
    assert "[red]x[/red]" in text and "[bold]y[/bold]" in text  # markup in data prints literally
    rows = [line for line in text.splitlines() if "message_id=" in line]
    assert len(rows) == 2 and "EO102 critical fake" in rows[0]  # the fake line stays inside its row
    next_line = next(line for line in text.splitlines() if "next:" in line)
    assert "$'m-\\x1b]0;owned\\x07" in next_line and "--config eoctl.toml" in next_line

    markdown = render_markdown(report)
    assert not any(ch in markdown for ch in CONTROL + ["\r"])
    table_rows = [line for line in markdown.splitlines() if line.startswith("| ") and "m-" in line]
    assert len(table_rows) == 2
    assert "docs/findings.md" not in markdown and "**Cause:**" in markdown  # no link that breaks in a ticket
    linked = render_markdown(report, "https://git.example.com/eoctl/blob/main/docs/findings.md")
    assert "Guide: [EO102](https://git.example.com/eoctl/blob/main/docs/findings.md#eo102)" in linked


@pytest.mark.integration
def test_every_next_command_of_the_chaos_audit_runs_when_pasted(tmp_path: Path, monkeypatch) -> None:
    """From another folder, with the config given relative to it and the engine on the command line:
    each `next:` line, pasted into bash where the audit ran, runs (not exit 2, no usage error)."""
    chaos = recorded_copy(tmp_path)
    monkeypatch.chdir(tmp_path)  # the config path as the user gave it: relative
    config = str(chaos.config_path.relative_to(tmp_path))
    audit = run_eoctl("--config", config, "--engine", "duckdb", "audit", "--no-record")
    assert audit.code == 1, audit.stderr[-2000:]
    commands = sorted({line.split("next: ", 1)[1].strip() for line in audit.stderr.splitlines() if "next: " in line})
    assert len(commands) >= 8 and all(c.startswith(f"eoctl --config {config} --engine duckdb ") for c in commands)
    eoctl = f"{shlex.quote(sys.executable)} -m eoctl"
    for command in commands:
        assert "COLUMN" not in command and "VALUE" not in command
        proc = subprocess.run(["bash", "-c", eoctl + command[len("eoctl"):]], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)
        assert proc.returncode in (0, 1), (command, proc.stderr[-2000:])


@pytest.mark.unit
def test_markdown_evidence_is_text_never_a_link_and_a_command_stays_one_code_span() -> None:
    """An id holding Markdown ([fix](https://...), a backtick) is printed as text in a ticket:
    before, it became a live link, or closed the `next:` code span early."""
    import re

    link, tick = "[fix](https://evil.example/x)", "m-`rm -rf`-1"
    rows = [{"message_id": tick, "token_ids": ["t-1", "t-2"], "positions": []},  # the next command's
            {"message_id": link, "token_ids": ["t-3"], "positions": []}]
    report = AuditReport(findings=[Finding("EO102", "shipping", "in|voices", 2, rows)],
                         run={"id": "r", "endpoints": ["shipping"]}, scanned={"records": 2})
    markdown = render_markdown(report)
    prose = [line for line in markdown.splitlines() if not line.startswith("**Next:**")]  # a code span is literal
    assert not any("](https://evil" in line for line in prose)
    assert any("\\[fix\\]\\(https://evil.example/x\\)" in line for line in prose)
    assert "(in\\|voices)" in markdown  # a `|` of data never splits a cell or a heading
    (next_line,) = [line for line in markdown.splitlines() if line.startswith("**Next:**")]
    span = re.fullmatch(r"\*\*Next:\*\* (`+) (.*) \1", next_line)
    assert span is not None and span[2].startswith("eoctl trace ") and tick in span[2]
    assert len(span[1]) > max(len(r) for r in re.findall("`+", span[2]))  # no backtick inside closes it
