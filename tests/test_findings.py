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


def test_each_declared_part_of_a_code_names_something_that_exists() -> None:
    """A code's declaration is all that lists it: each name it gives (a shared table, a family, a
    narrowed view, a verdict, a decision) must be one the engines and trace know."""
    from eoctl.expr import sink_states
    from eoctl.expr.catalog import SHARED
    from eoctl.expr.incremental import _PROBES
    from eoctl.trace.model import Verdict
    from eoctl.trace.verdict import DECIDERS, FACTS

    for code, info in CATALOG.items():
        assert set(info.shared) <= set(SHARED), code
        assert not info.family or info.family in _PROBES, code
        assert not info.narrowed_view or callable(getattr(sink_states, f"{info.narrowed_view}_view", None)), code
        if info.verdict is not None:
            assert Verdict(info.verdict.verdict).bad, code
            assert not info.verdict.decide or info.verdict.decide in DECIDERS, code
            fields = set(re.findall(r"\{(\w+)\}", info.verdict.reason)) - set(FACTS) - {"where", "endpoint"}
            assert not fields or fields <= _evidence_columns(code), code
    ranks = [info.verdict.rank for info in CATALOG.values() if info.verdict]
    assert len(set(ranks)) == len(ranks)


def _evidence_columns(code: str) -> set[str]:
    """The columns of `code`'s evidence on the chaos sample's scope (compiled, not run)."""
    from eoctl.config.loader import load_config
    from eoctl.expr.catalog import CHECKS
    from eoctl.expr.functions import Dialect
    from eoctl.expr.inputs import Scope
    from eoctl.expr.records import records_table
    from eoctl.options import AuditOptions

    import ibis

    from eoctl.expr.inputs import STORE_SCHEMAS

    config = load_config(REPO / "samples" / "chaos" / "eoctl.toml")
    sinks = {(n, s.name): ibis.schema({c: "string" for c in [s.message_id_column, *s.key_columns, *s.value_columns,
                                                            *([s.watermark_column] if s.watermark_column else [])]})
             for n, ep in config.endpoints.items() for s in ep.sinks}
    scope = Scope(config, AuditOptions(), tables={(n, kind) for n, ep in config.endpoints.items() if ep.store
                                                  for kind in STORE_SCHEMAS}, sink_schemas=sinks)
    columns = {c for hit in CHECKS[code](scope, records_table(), Dialect.duckdb) for c in hit.evidence.columns}
    assert columns, code
    return columns


def test_no_code_is_named_in_code_outside_its_declaration() -> None:
    """eoctl.findings declares every code once; everything else derives from it (a check by its
    declared function, a family, a view, a verdict). A string naming a code anywhere else in the
    package would be a second list to keep in step."""
    import ast

    found = []
    for path in sorted((REPO / "eoctl").rglob("*.py")):
        if path == REPO / "eoctl" / "findings.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and re.search(r"\bEO\d{3}\b", node.value)):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:60]!r}")
    assert found == []
