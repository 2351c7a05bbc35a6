"""The findings guide (docs/findings.md), generated from the catalog's declarations so the two
cannot drift: `python -m eoctl.report.guide > docs/findings.md`; a test holds the file equal."""

from __future__ import annotations

from eoctl.report.findings import CATALOG


def findings_guide() -> str:
    lines = ["# Findings guide", "",
             "One section per finding code of `eoctl audit`: what causes it, what it risks, how to fix it and",
             "how to see that it is fixed. Each finding of a report carries the same text as `remedy` (JSON)",
             "or under the finding (text, Markdown), with the first command's ids filled in.", "",
             "Generated from the declarations in `eoctl/report/findings.py` by",
             "`python -m eoctl.report.guide > docs/findings.md`; do not edit by hand.", "",
             "| code | severity | area | finding |", "|---|---|---|---|"]
    lines += [f"| [{c.code}](#{c.code.lower()}) | {c.severity.label} | {c.area} | {c.title} |" for c in CATALOG.values()]
    for c in CATALOG.values():
        r = c.remedy
        assert r is not None, c.code
        lines += ["", f"## {c.code}", "", f"**{c.title}** ({c.severity.label}, {c.area})", "",
                  f"- **Cause:** {r.cause}.", f"- **Risk:** {r.risk}.", f"- **Fix:** {r.fix}."]
        if r.command:
            lines.append(f"- **First command:** `{r.command}` (a report fills in the ids).")
        lines.append(f"- **Verify:** {r.verify}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(findings_guide(), end="")
