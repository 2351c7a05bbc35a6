"""Audit findings in a form two runs (two engines) can be compared in."""

from __future__ import annotations

import json


def canonical(report) -> dict:
    """(code, endpoint, where) -> (count, every evidence row as sorted JSON)."""
    return {(f.code, f.endpoint, f.where): (f.count, sorted(json.dumps(r, sort_keys=True) for r in f.evidence))
            for f in report.findings}
