"""Where output goes: JSON to stdout for scripts, human text and progress to stderr."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from eoctl.secrets import mask_text, redact
from eoctl.writes import write_whole  # noqa: F401 - the commands write their files through it

if TYPE_CHECKING:
    from rich.console import Console


class MaskedStderr:
    """sys.stderr, looked up at each write as Console(stderr=True) does, with every secret masked:
    whatever a command prints (a failed check's message, an evidence row) passes the rule."""

    def _target(self) -> Any:
        # While a status spinner runs, Rich swaps sys.stderr for a proxy that prints back through
        # the console; writing there would loop, so write to the stream it stands for.
        return getattr(sys.stderr, "rich_proxied_file", sys.stderr)

    def write(self, text: str) -> int:
        return self._target().write(mask_text(text))

    def __getattr__(self, name: str) -> Any:
        if name == "rich_proxied_file":  # Rich would unwrap this stream and bypass the masking
            raise AttributeError(name)
        return getattr(self._target(), name)


@functools.cache
def stderr_console() -> Console:
    """The Rich console on stderr (human text, tables, the spinner), made at its first use: a
    command whose output is JSON, off a terminal, never imports Rich (15 ms of a command's start)."""
    from rich.console import Console

    console = Console(file=MaskedStderr(), highlight=False, soft_wrap=False)
    if not console.is_terminal:  # logs, pipes, CI: a line is never wrapped (an id split in two finds nothing)
        console.width = 1000
    return console


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal, as Rich decides it (stderr_console().is_terminal), without
    importing Rich where its answer can only be no: stderr is no TTY and neither of the variables
    Rich reads to say otherwise (TTY_COMPATIBLE, FORCE_COLOR) is set."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):  # a stream without a file, or closed
        tty = False
    if not tty and os.environ.get("TTY_COMPATIBLE") is None and os.environ.get("FORCE_COLOR") is None:
        return False
    return stderr_console().is_terminal


def check_target(path: Path, flag: str) -> None:
    """Before a run: `path` can be written where it is: its folder exists and it is no folder
    itself (UsageError, exit 2, before anything is read)."""
    from eoctl.errors import UsageError

    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder", hint="give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: the folder {path.parent} does not exist", hint="create it, or give another")


def misnamed_exit(problems: list[dict[str, Any]], said: bool) -> int | None:
    """ExitCode.MISCONFIGURED when a run found endpoint tables that never carry the endpoint's name
    (eoctl.stores.layout.Misnamed, as dicts), each said on stderr unless the text output `said`
    them as notes already; None when there were none."""
    from eoctl.errors import ExitCode

    if not problems:
        return None
    if not said:
        for problem in problems:
            stderr_console().print(f"eoctl: {problem['note']}", markup=False, highlight=False, soft_wrap=True)
    return int(ExitCode.MISCONFIGURED)


def example(*commands: str) -> str:
    """A help epilog of example lines, never rewrapped (`\b`): each can be pasted whole, and a test
    runs each from the repository's root against the samples."""
    return "\b\n" + "\n".join(f"Example: {c}" for c in commands)


def _plain(value: Any) -> Any:
    """What json cannot write: times as ISO 8601 (with the `T`, and the offset they carry)."""
    import datetime as dt

    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return str(value)


def enveloped(data: dict[str, Any], schema: str | None = None, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every command's JSON in one envelope: `schema` (`eoctl.<command>/v1`) first, then `run`
    (AppContext.run: id, command, engine, times, duration, config digest), then the rest."""
    schema = schema or data.get("schema")
    head: dict[str, Any] = {"schema": schema} if schema else {}
    if run is not None:
        head["run"] = run
    return {**head, **{k: v for k, v in data.items() if k not in head}}


def emit_json(data: Any, schema: str | None = None, run: dict[str, Any] | None = None) -> None:
    """One JSON document on stdout, secrets masked, in the envelope (enveloped)."""
    write_stdout(json.dumps(redact(enveloped(data, schema, run)), indent=2, default=_plain, sort_keys=False) + "\n")


def emit_json_line(data: dict[str, Any], schema: str | None = None, run: dict[str, Any] | None = None) -> None:
    """The same envelope on one line (gc and replay: cron mails and log collectors read it whole)."""
    write_stdout(json.dumps(redact(enveloped(data, schema, run)), default=_plain, separators=(",", ":")) + "\n")


def write_stdout(text: str) -> None:
    """`text` (a JSON document, a report) on stdout whole: a signal while it is written takes
    effect once it is (eoctl.interrupts.deferred), so a script never reads half a document; the
    run still ends as interrupted. Writing a large document to a pipe blocks while the reader is
    behind, which is when a Ctrl-C tends to land."""
    from eoctl.interrupts import deferred

    with deferred():
        sys.stdout.flush()
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # a stream without a file (a test's capture)
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        # os.write until all is written: Python's buffered writer drops what a signal cut short
        # (a 1 MB write to a full pipe kept its first 64 KiB, Python 3.11)
        rest = memoryview(text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict"))
        while rest:
            rest = rest[os.write(fd, rest):]


@contextmanager
def progress(enabled: bool = True, quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """On a terminal, a spinner on stderr whose text the work updates (`enabled`: text output).
    Elsewhere (cron, a pipe, CI), whatever the format: one line per phase on stderr with the time
    since the command started, `eoctl: [12.3s] reading the store tables`, and the total at the
    end, so a long run under cron is never silent for minutes. `quiet` (audit --quiet): neither."""
    from eoctl import interrupts

    def phase(show: Callable[[str], None]) -> Callable[[str], None]:
        """Each phase starts with interrupts.check(): a signal a finalizer dropped stops the run here."""
        def step(msg: str) -> None:
            interrupts.check()
            show(msg)

        return step

    if quiet or stderr_is_terminal():
        if quiet or not enabled:
            yield phase(lambda _msg: None)
            return
        with stderr_console().status("starting") as status:
            yield phase(status.update)
        return
    started = time.monotonic()
    masked = MaskedStderr()

    def say(msg: str) -> None:
        masked.write(f"eoctl: [{time.monotonic() - started:.1f}s] {msg}\n")
        masked.flush()

    line = phase(say)
    yield line
    line("done")
