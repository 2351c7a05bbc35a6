"""Every finding says what to do next: the remedy declared with its code, shown by each output
with its command's ids filled in, and the findings guide generated from the same declarations."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from eoctl.audit import select_codes
from tests.helpers.audits import audit_duckdb
from eoctl.config import load_config
from eoctl.findings import CATALOG, Finding, fill_command
from eoctl.report.guide import codes_table, findings_guide, with_codes_table
from eoctl.report.render import render_json, render_markdown, render_text
from tests.helpers.chaos import CHAOS, settled
from tests.helpers.servers import REPO


@pytest.mark.unit
def test_the_guide_in_docs_is_the_one_the_declarations_give() -> None:
    assert (REPO / "docs" / "findings.md").read_text(encoding="utf-8") == findings_guide(), (
        "regenerate: python -m eoctl.report.guide > docs/findings.md")
    for code, info in CATALOG.items():
        r = info.remedy
        assert r is not None and all([r.cause, r.risk, r.fix, r.verify]), code
        assert r.command.startswith("eoctl "), f"{code}: a finding says the first command to run"
        assert f"\n## {code}\n" in findings_guide()


@pytest.mark.unit
def test_the_table_of_codes_in_docs_is_the_one_the_declarations_give() -> None:
    page = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    assert with_codes_table(page) == page, "regenerate: python -m eoctl.report.guide --commands"
    assert page.count("\n| EO") >= len(CATALOG)
    for code, info in CATALOG.items():
        assert info.summary, f"{code}: the table of codes says what is found"
        assert f"| {code} | {info.severity.label} | {info.summary} |" in codes_table()


@pytest.mark.unit
def test_commands_are_filled_quoted_and_keep_placeholders_for_what_is_missing() -> None:
    assert fill_command("eoctl trace {message_ids}", {"message_ids": ["a", "b c", None]}) == "eoctl trace a 'b c'"
    assert fill_command("eoctl replay-outbox --endpoint {producer}", {}) == "eoctl replay-outbox --endpoint PRODUCER"
    finding = Finding("EO102", "shipping", "invoices", 1, [{"message_id": "m-1"}])
    assert finding.to_dict()["remedy"]["command"] == "eoctl trace m-1"
    assert finding.to_dict()["remedy"]["docs"] == "docs/findings.md#eo102"


@pytest.fixture(scope="module")
def chaos_report():
    return audit_duckdb(load_config(CHAOS / "eoctl.toml"), settled(), select_codes(None, None))


@pytest.mark.integration
def test_every_finding_of_the_chaos_sample_carries_its_remedy_in_every_format(chaos_report) -> None:
    assert {f.code for f in chaos_report.findings} >= {"EO102", "EO201", "EO301", "EO302", "EO402", "EO501"}
    as_json = json.loads(render_json(chaos_report))
    out = io.StringIO()
    render_text(chaos_report, Console(file=out, width=100, color_system=None))
    text, markdown = out.getvalue(), render_markdown(chaos_report)
    for finding, data in zip(chaos_report.findings, as_json["findings"]):
        remedy = data["remedy"]
        # prose wraps at the terminal's width; commands and ids never do
        assert remedy == finding.remedy() and remedy["fix"] in " ".join(text.split()) and remedy["fix"] in markdown
        # the command's placeholders are evidence columns: every one is filled (EO502's: the sink's first key)
        assert not re.search(r"\b[A-Z_]{3,}\b", remedy["command"].replace("EO", "")), remedy["command"]
        assert remedy["command"] in text and f"`{remedy['command']}`" in markdown


@pytest.mark.integration
def test_text_never_wraps_or_cuts_an_id(chaos_report) -> None:
    out = io.StringIO()
    render_text(chaos_report, Console(file=out, width=60, color_system=None))
    lines = out.getvalue().splitlines()
    for finding in chaos_report.findings:
        for row in finding.evidence[:5]:
            for value in row.values():
                if isinstance(value, str) and re.fullmatch(r"[0-9a-f-]{36}", value):
                    assert any(value in line for line in lines), value
