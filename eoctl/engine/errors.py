"""The engines' errors, in one line an operator can act on, the same on both engines.

A half-written Parquet file or JSON line reaches eoctl as a py4j error whose message is a Java
stack trace ("An error occurred while calling o1835.count"), or as a DuckDB error naming the
file. What matters in it is which file could not be read and why; the rest is for --debug.
"""

from __future__ import annotations

import re

_READ_FILE = re.compile(r"\[(?:FAILED_READ_FILE|CANNOT_READ_FILE_FOOTER)[A-Z_.]*\][^\n]*?reading file (\S+?)\.?(?:\s|$)")
_CAUSE = re.compile(r"Caused by: [\w.$]+: ([^\n]+)")
_DUCKDB_FILE = re.compile(r"^(?:[A-Za-z ]+ Error: )?(.*?)(?: of| in)? file '([^']+)'(.*)$", re.MULTILINE)
#: what each engine says of a file that is cut short or of another format, said one way
_NOT_PARQUET = ("is not a Parquet file", "No magic bytes found at end of file")


def message_of(exc: BaseException) -> str:
    """str(exc), also for a py4j error whose JVM is gone (its str() calls the JVM)."""
    try:
        return str(exc)
    except Exception:  # py4j: "<exception str() failed>"
        return type(exc).__name__


def describe(text: str) -> str | None:
    """'could not read FILE: REASON' when `text` (an engine error's message) says a file could
    not be read; None otherwise. A local file is named by its path on both engines."""
    found = _READ_FILE.search(text)
    if found is not None:
        path = found.group(1)
        causes = _CAUSE.findall(text)
        reason = causes[-1].strip() if causes else "unreadable"
    else:
        duck = _DUCKDB_FILE.search(text.strip().splitlines()[0]) if text.strip() else None
        if duck is None:
            return None
        path, reason = duck.group(2), (duck.group(1) + duck.group(3)).strip(" .:") or "unreadable"
    if any(marker in text for marker in _NOT_PARQUET):
        reason = "not a Parquet file"
    if path.startswith("file:") and not path.startswith("file://"):
        path = path[len("file:"):]
    elif path.startswith("file://"):
        path = path[len("file://"):]
    return f"could not read {path}: {reason[:200]}"


_DUCKDB_WRITE = re.compile(r'Could not (?:write|create|open|truncate|extend) file "([^"]+)": ([^\n]+)')
#: errnos of a write that fails for want of room or of a right to write, not for a fault of eoctl
_NO_ROOM = {"ENOSPC", "EFBIG", "EDQUOT", "EROFS", "EACCES", "EPERM"}


def write_failure(exc: BaseException, text: str) -> str | None:
    """'cannot write PATH: REASON' when `exc` (or an engine's message `text`) is a write that failed
    for want of room or rights (a full disk, a quota, a read-only folder); None otherwise."""
    import errno as errnos
    import os

    if isinstance(exc, OSError) and exc.errno is not None and errnos.errorcode.get(exc.errno) in _NO_ROOM:
        where = f" {exc.filename}" if exc.filename else ""
        return f"cannot write{where}: {os.strerror(exc.errno)}"
    found = _DUCKDB_WRITE.search(text)
    if found is not None:
        return f"cannot write {found.group(1)}: {found.group(2).strip()}"
    return None


_DUCKDB_MEMORY = re.compile(r"Out of Memory Error: ([^\n]*)")
_JVM_MEMORY = re.compile(r"java\.lang\.OutOfMemoryError: ([^\n]*)")


def out_of_memory(text: str) -> str | None:
    """'the ENGINE engine ran out of memory: DETAIL (what to set)' when an engine's message `text`
    says it did; None otherwise. Not a fault of the data: the operator gives it more room."""
    duck = _DUCKDB_MEMORY.search(text)
    if duck is not None:
        return (f"the DuckDB engine ran out of memory: {duck.group(1).strip()[:200]} (raise [engine] memory_limit, "
                "or run on Spark: eoctl --engine spark)")
    jvm = _JVM_MEMORY.search(text)
    if jvm is not None:
        return (f"the Spark engine ran out of memory: {jvm.group(1).strip()[:200]} (raise spark.driver.memory or "
                "spark.executor.memory in [engine.conf])")
    return None


def said_by_main(text: str) -> bool:
    """Whether main() says an engine error of message `text` in its own words (a file cut short,
    memory run out): a reader then lets it through rather than blame the source it was reading."""
    return describe(text) is not None or out_of_memory(text) is not None
