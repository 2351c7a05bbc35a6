"""Spark's errors, in one line an operator can act on.

A half-written Parquet file or JSON line reaches eoctl as a py4j error whose message is a Java
stack trace ("An error occurred while calling o1835.count"). What matters in it is which file
could not be read and why; the rest is for --debug.
"""

from __future__ import annotations

import re

_READ_FILE = re.compile(r"\[(?:FAILED_READ_FILE|CANNOT_READ_FILE_FOOTER)[A-Z_.]*\][^\n]*?reading file (\S+?)\.?(?:\s|$)")
_CAUSE = re.compile(r"Caused by: [\w.$]+: ([^\n]+)")


def message_of(exc: BaseException) -> str:
    """str(exc), also for a py4j error whose JVM is gone (its str() calls the JVM)."""
    try:
        return str(exc)
    except Exception:  # py4j: "<exception str() failed>"
        return type(exc).__name__


def describe(text: str) -> str | None:
    """'Spark could not read FILE: REASON' when `text` (an engine error's message) says a file
    could not be read; None otherwise."""
    found = _READ_FILE.search(text)
    if found is None:
        return None
    causes = _CAUSE.findall(text)
    reason = causes[-1].strip() if causes else "unreadable"
    return f"Spark could not read {found.group(1)}: {reason[:200]}"
