"""Audit findings in a form two runs (two engines) can be compared in."""

from __future__ import annotations

import json


def canonical(report) -> dict:
    """(code, endpoint, where) -> (count, every evidence row as sorted JSON)."""
    return {(f.code, f.endpoint, f.where): (f.count, sorted(json.dumps(r, sort_keys=True) for r in f.evidence))
            for f in report.findings}


def identities(report) -> dict:
    """(code, endpoint, where) -> (count, the sorted identities of its evidence items): what the
    findings history compares runs by, independent of the audit's time."""
    from eoctl import history

    return {(f.code, f.endpoint, f.where): (f.count, sorted(history.item_key(f.code, row) for row in f.evidence))
            for f in report.findings}
