"""Ctrl-C and SIGTERM as normal operations: the run stops, says so in one line, exits 130 or 143.

A signal raises `Interrupted` in the main thread, wherever it is (a Spark job, a Kafka poll),
except inside `deferred()` blocks: a batch of deletes, a history record. There the signal is
noted and raised when the block ends, so nothing is ever half-written; a second signal during
the block raises at once (the block's transaction rolls back).

Why eoctl installs its own handler: PySpark's SIGINT handler calls into the JVM from inside the
signal handler while the main thread is itself in a JVM call, which fails with py4j's
"reentrant call" tracebacks; this handler never touches the JVM.

Python runs a signal handler between two bytecodes of the main thread, and that may be inside a
finalizer (`__del__`, a weakref callback), where a raised exception is printed and dropped: the
run would go on as if no signal had come. Such a dropped Interrupted is noted (sys.unraisablehook)
and raised at the next `check()`: at every phase of a command, at the start of a deferred block,
and when the command returns.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from eoctl.errors import Interrupted

_deferring = 0
_pending: int | None = None
_received: int | None = None


def _handler(signum: int, _frame) -> None:
    global _pending, _received
    _received = signum
    if _deferring and _pending is None:
        _pending = signum
        return
    _pending = None
    raise Interrupted(signum)


def received() -> int | None:
    """The signal that stopped this run, if one did. A library that catches every exception may
    turn our Interrupted into its own error (py4j cut mid-call, a JVM that did not start); the
    error boundary asks this to report the run as interrupted all the same."""
    return _received


def _unraisable(info) -> None:
    """An Interrupted raised where Python drops exceptions (a finalizer) is raised again at the
    next check(); anything else goes to the hook there was."""
    global _pending
    if isinstance(info.exc_value, Interrupted):
        _pending = info.exc_value.signum
        return
    _previous_unraisablehook(info)


_previous_unraisablehook = sys.unraisablehook


def install() -> None:
    """Take over SIGINT and SIGTERM (eoctl.engine.spark.session keeps PySpark from installing its own).
    Only the main thread can."""
    global _previous_unraisablehook
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)
        signal.signal(signal.SIGTERM, _handler)
        if sys.unraisablehook is not _unraisable:
            _previous_unraisablehook = sys.unraisablehook
            sys.unraisablehook = _unraisable


def ignore() -> None:
    """Ignore SIGINT and SIGTERM from now on: the run is over and has said so. Python puts the
    default handlers back as the interpreter ends, and a signal in those last milliseconds would
    kill the process (exit -2, no line) after its output was whole."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def check() -> None:
    """Raise now if a signal is waiting: one that arrived during a deferred block that has ended,
    or one whose Interrupted a finalizer dropped."""
    global _pending
    if _pending is not None and not _deferring:
        signum, _pending = _pending, None
        raise Interrupted(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """Finish the block before a (first) signal takes effect; a signal already waiting stops the
    block before it starts."""
    global _deferring
    check()
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    check()
