"""eoctl's logging: warnings as `eoctl: warning: ...` lines on stderr; everything with --debug.

Messages that are part of a command's output (reports, progress) do not go through here; this is
for what happens on the side: waiting for a locked file, a client library's own lines.
"""

from __future__ import annotations

import logging
import sys

LOGGER = "eoctl"


def get(name: str) -> logging.Logger:
    """The logger of an eoctl module (`eoctl.<name>`)."""
    return logging.getLogger(f"{LOGGER}.{name}")


class _OneLine(logging.Formatter):
    def __init__(self, debug: bool) -> None:
        super().__init__()
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if self.debug:
            return f"eoctl: {record.levelname.lower()}: [{record.name}] {text}"
        return f"eoctl: {record.levelname.lower()}: {text}"


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (tests and Rich may replace it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def setup(debug: bool) -> None:
    """Configure the `eoctl` logger once per process (stderr; DEBUG with --debug, else WARNING)."""
    root = logging.getLogger(LOGGER)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    from eoctl.secrets import MaskingFilter

    handler = _Stderr()
    handler.setFormatter(_OneLine(debug))
    handler.addFilter(MaskingFilter())  # a record may quote a connection string
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    root.propagate = False
    # librdkafka calls its connection failures errors; doctor and the commands say what failed
    logging.getLogger(f"{LOGGER}.kafka").setLevel(logging.DEBUG if debug else logging.CRITICAL + 1)
    # py4j logs every call a signal cut short (the engine is stopped right after): --debug only
    py4j = logging.getLogger("py4j")
    py4j.handlers[:] = [handler] if debug else [logging.NullHandler()]
    py4j.setLevel(logging.WARNING if debug else logging.CRITICAL + 1)  # its DEBUG is every call
    py4j.propagate = False
    # py4j also logs through the root logger (`logging.exception` when a call meets a JVM that is
    # already ending, e.g. stopped at the end of a command that failed): --debug only, like the rest
    logging.getLogger().filters[:] = [] if debug else [_NotFromPy4j()]


def quiet_py4j() -> None:
    """py4j silent from now on, --debug too: called when eoctl ends the driver JVM on purpose,
    after which a py4j call still on its way (a thread's, a finalizer's) can only complain that
    the JVM is gone, a traceback that says nothing about the run."""
    py4j = logging.getLogger("py4j")
    py4j.handlers[:] = [logging.NullHandler()]
    py4j.setLevel(logging.CRITICAL + 1)
    py4j.propagate = False
    root = logging.getLogger()
    if not any(isinstance(f, _NotFromPy4j) for f in root.filters):
        root.addFilter(_NotFromPy4j())


class _NotFromPy4j(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "py4j" not in record.pathname.replace("\\", "/").split("/")
