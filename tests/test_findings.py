"""The catalog of findings is declared once (eoctl.findings); the table of codes in docs/commands.md follows it."""

from __future__ import annotations

import re

import pytest

from eoctl.findings import CATALOG
from tests.helpers.servers import REPO

pytestmark = pytest.mark.unit


def test_the_table_of_codes_lists_every_code_with_its_severity_in_catalog_order() -> None:
    rows = re.findall(r"^\| (EO\d{3}) \| (\w+) \|", (REPO / "docs" / "commands.md").read_text(), flags=re.MULTILINE)
    assert rows == [(code, info.severity.label) for code, info in CATALOG.items()]


def test_every_code_has_one_engine_neutral_check() -> None:
    from eoctl.expr.catalog import CHECKS

    assert list(CHECKS) == list(CATALOG)
