"""Exit codes and the errors the CLI's one error boundary turns into one line each."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes; documented in README.md and docs/commands.md. Values are a stable contract for cron and CI."""

    OK = 0
    #: findings (or failed doctor checks) at or above the chosen severity
    FINDINGS = 1
    #: bad command line or configuration: nothing was read or changed
    USAGE = 2
    #: the run could not complete: a server, a Spark job or a file failed
    RUNTIME = 3
    #: another run of the same command holds the lease (gc, replay): nothing was changed
    LOCKED = 4
    #: trace: an id matched nothing on the topics read, in the stores or the sinks (a typo, or
    #: outside the span read); a verdict to act on on another id still exits 1
    NOT_FOUND = 5
    #: the configuration and the data disagree (an endpoint's tables hold rows under other names
    #: only): that endpoint was not judged, nothing was changed; the output names the names found
    #: and the key to set. A configuration problem, never a finding
    MISCONFIGURED = 6
    #: stopped by SIGINT (Ctrl-C): nothing half-written; a changing command's next run finishes it
    INTERRUPTED = 130
    #: stopped by SIGTERM, the same way
    TERMINATED = 143


class EoctlError(Exception):
    """An error with a message fit for one line of output and a documented exit code."""

    exit_code: ExitCode = ExitCode.RUNTIME

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(EoctlError):
    """The configuration file is missing, unreadable or invalid. `problems`: every problem found,
    one line each with its key path (the message names the first; `config check` lists them all)."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, *, hint: str | None = None, problems: list[str] | None = None) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems or []


class UsageError(EoctlError):
    """The command line asks for something that cannot be done as asked."""

    exit_code = ExitCode.USAGE


class Misconfigured(EoctlError):
    """The configuration and the data disagree: a command that changes things refuses to run."""

    exit_code = ExitCode.MISCONFIGURED


class SourceError(EoctlError):
    """A configured source (topic, archive, table, store, blob prefix) could not be read."""

    exit_code = ExitCode.RUNTIME


class EngineError(EoctlError):
    """The Spark engine could not start or lost its session."""

    exit_code = ExitCode.RUNTIME


class LeaseHeld(EoctlError):
    """Another run of the same command holds the single-runner lease."""

    exit_code = ExitCode.LOCKED


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (eoctl.interrupts); exits 128 + the signal's number.

    A BaseException, as KeyboardInterrupt is: code that reports an error per item and goes on
    (`except Exception`) must not swallow it."""

    def __init__(self, signum: int, *, hint: str | None = None) -> None:
        import signal

        super().__init__(signum)
        self.signum = signum
        self.hint = hint
        self.exit_code = ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED
        self.message = f"interrupted ({signal.Signals(signum).name})"

    def one_line(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message
