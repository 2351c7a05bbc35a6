"""eoctl.interrupts: a signal is never lost, also when Python runs its handler inside a finalizer,
where a raised exception is printed and dropped. Each case runs in a process of its own (the
handlers are the main thread's, and pytest has its own)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.chaos import CHAOS

#: a signal delivered while a finalizer runs: the handler raises Interrupted there, and Python
#: drops it; `then` is what the process does next
_DROPPED_IN_A_FINALIZER = """
import os, signal
from eoctl import interrupts
from eoctl.errors import Interrupted

interrupts.install()

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.{signal})
        for _ in range(1000):  # bytecode for the handler to run in
            pass

Finalized()
print("went on", flush=True)
try:
{then}
except Interrupted as exc:
    print("interrupted", exc.signum, flush=True)
"""


def _run(signal_name: str, then: str) -> subprocess.CompletedProcess:
    code = _DROPPED_IN_A_FINALIZER.format(signal=signal_name, then="\n".join("    " + line for line in then.splitlines()))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("signal_name", "number"), [("SIGINT", 2), ("SIGTERM", 15)])
def test_a_signal_a_finalizer_dropped_is_raised_at_the_next_check(signal_name: str, number: int) -> None:
    out = _run(signal_name, "interrupts.check()\nprint('no signal', flush=True)")
    assert out.stdout.splitlines() == ["went on", f"interrupted {number}"], out.stderr
    assert "Exception ignored" not in out.stderr  # noted, not printed as a stray traceback


def test_a_deferred_block_does_not_start_while_a_dropped_signal_waits() -> None:
    then = "with interrupts.deferred():\n    print('the block ran', flush=True)"
    out = _run("SIGINT", then)
    assert out.stdout.splitlines() == ["went on", "interrupted 2"], out.stderr


def test_the_command_line_reports_a_dropped_signal_as_an_interruption() -> None:
    """eoctl's own boundary: a signal a finalizer dropped after the command's last phase (here in
    the JSON output of `config check`) still exits 130 with the one line, not the command's 0."""
    code = """
import json, os, signal
from eoctl.cli.main import main

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass

dumps = json.dumps
def dumps_dropping_a_signal(*args, **kwargs):
    Finalized()
    return dumps(*args, **kwargs)
json.dumps = dumps_dropping_a_signal
main(["--config", {config!r}, "--format", "json", "config", "check"])
"""
    out = subprocess.run([sys.executable, "-c", code.format(config=str(CHAOS / "eoctl.toml"))], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 130, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == "eoctl: interrupted (SIGINT)"


_HANDLERS_AS_THE_INTERPRETER_ENDS = """
import atexit, signal, sys
from eoctl.cli import main as cli

# atexit runs as the interpreter ends, before Python puts the default handlers back
atexit.register(lambda: print("ignored", [signal.getsignal(s) == signal.SIG_IGN for s in (signal.SIGINT, signal.SIGTERM)],
                               "eoctl's", [getattr(signal.getsignal(s), "__module__", None) == "eoctl.interrupts"
                                           for s in (signal.SIGINT, signal.SIGTERM)]))
sys.argv = ["eoctl", "--config", {config!r}, "--format", "json", "config", "check"]
getattr(cli, {entry!r})()
"""


@pytest.mark.parametrize(("entry", "ignored"), [("console", True), ("main", False)])
def test_the_program_ignores_signals_once_its_code_is_said(entry: str, ignored: bool) -> None:
    """`eoctl` as a program (console): a signal after its exit code is decided changes nothing (a
    default handler would kill it with -2 and no line, its output already whole). main(), eoctl in
    a caller's interpreter, leaves eoctl's handlers to that caller."""
    code = _HANDLERS_AS_THE_INTERPRETER_ENDS.format(config=str(CHAOS / "eoctl.toml"), entry=entry)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == f"ignored {[ignored] * 2} eoctl's {[not ignored] * 2}"
