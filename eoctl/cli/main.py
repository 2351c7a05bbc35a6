"""The `eoctl` command: global options, sub-app registration, and the one error boundary."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer._click.exceptions import NoArgsIsHelpError  # typer 0.29 ships its own click
from typer.core import TyperGroup

from eoctl import __version__
from eoctl.cli import (
    abort_txn_cmd,
    audit_cmd,
    config_cmd,
    doctor_cmd,
    findings_cmd,
    gc_cmd,
    jars_cmd,
    replay_cmd,
    runs_cmd,
    sources_cmd,
    trace_cmd,
)
from eoctl.cli.context import AppContext, EngineKind, OutputFormat
from eoctl.cli.output import example
from eoctl.errors import EoctlError, ExitCode, Interrupted
from eoctl.inert import inert
from eoctl.secrets import mask_text



def hoist_global_options(args: list[str], options: list) -> list[str]:
    """`args` with the global options (and their values) moved before the command, in the order
    given: `eoctl audit --config C` is `eoctl --config C audit`, as cron lines and kubectl users
    write it, and of an option given twice the later wins. Nothing after `--` moves."""
    takes_value = {name: not option.is_flag for option in options for name in option.opts + option.secondary_opts}
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        name, inline = (arg.split("=", 1)[0], "=" in arg) if arg.startswith("--") else (arg[:2], len(arg) > 2)
        if arg.startswith("-") and name in takes_value:
            if takes_value[name] and not inline:
                if i + 1 == len(args):
                    raise typer.BadParameter("needs a value", param_hint=f"'{arg}'")
                front += args[i:i + 2]
                i += 2
                continue
            if not takes_value[name] and inline:  # `-hx`, `--debug=x`: left for the parser to refuse
                rest.append(arg)
            else:
                front.append(arg)
            i += 1
            continue
        rest.append(arg)
        i += 1
    return front + rest


def _plain_arguments() -> None:
    """typer 0.29 writes a required argument as `{RUN_ID}` in usage lines and adds its type
    (`RUN_ID <str>`); eoctl's help writes placeholders one way, `RUN_ID`, `[ID]...` when optional.
    tests/cli/test_main.py holds every help to it, so a typer upgrade that changes this fails there."""
    from typer.core import TyperArgument

    def usage_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")

    TyperArgument._usage_display_name = usage_name
    TyperArgument.display_type_rich = lambda self, ctx: None


_plain_arguments()


class _Eoctl(TyperGroup):
    """The top-level group: global options are accepted after the command too (hoist_global_options)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_options(args, [p for p in self.params if p.opts]))


app = typer.Typer(
    cls=_Eoctl,
    rich_markup_mode=None,
    name="eoctl",
    help="Audit and repair exactly-once message pipelines (transactional outbox + token deduplication on Kafka).",
    epilog=example("eoctl --config samples/basic/eoctl.toml doctor"),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    # the help uses the terminal's whole width (click caps it at 80 and cuts command summaries to
    # fit); piped, the width is COLUMNS or 80
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 1000},
)

# Every sub-app is registered here and only here.
app.add_typer(config_cmd.app, name="config")
app.add_typer(sources_cmd.app, name="sources")
app.add_typer(jars_cmd.app, name="jars")
app.add_typer(findings_cmd.app, name="findings")
app.add_typer(runs_cmd.app, name="runs")
_CHAOS = "eoctl --config samples/chaos/eoctl.toml"
app.command("audit", epilog=example(f"{_CHAOS} audit --grace 0s --fail-on critical",
                                    f"{_CHAOS} --format json audit --since-last"))(audit_cmd.audit)
app.command("doctor", epilog=example("eoctl --config samples/basic/eoctl.toml doctor"))(doctor_cmd.doctor)
app.command("reconcile-tokens", epilog=example(f"{_CHAOS} reconcile-tokens --grace 0s"))(gc_cmd.reconcile_tokens)
app.command("gc-tokens", epilog=example(f"{_CHAOS} gc-tokens --grace 0s --dry-run"))(gc_cmd.gc_tokens)
app.command("gc-blobs", epilog=example(f"{_CHAOS} gc-blobs --grace 0s"))(gc_cmd.gc_blobs)
app.command("gc-outbox", epilog=example(f"{_CHAOS} gc-outbox --endpoint billing"))(gc_cmd.gc_outbox)
app.command("replay-outbox", epilog=example(f"{_CHAOS} replay-outbox --stuck-after 30m"))(replay_cmd.replay_outbox)
app.command("trace", epilog=example(f"{_CHAOS} trace --by order_id=30"))(trace_cmd.trace)
app.command("abort-transaction", epilog=example(f"{_CHAOS} abort-transaction --transaction-timeout 15m"))(
    abort_txn_cmd.abort_transaction)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"eoctl {__version__}")
        raise typer.Exit()


@app.callback()
def global_options(
    ctx: typer.Context,
    config: Annotated[
        Optional[Path],
        typer.Option("--config", "-c", metavar="PATH", help="configuration file (env EOCTL_CONFIG; default ./eoctl.toml)", show_default=False),
    ] = None,
    output: Annotated[
        Optional[OutputFormat], typer.Option("--format", "-f", help="text for people (stderr; the default), json "
                                             "for scripts (stdout), markdown (audit only, stdout); with --output, "
                                             "the file's extension when not given", show_default=False)
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks and Spark's own logs")] = False,
    engine: Annotated[
        Optional[EngineKind], typer.Option("--engine", help="duckdb: one machine, in process; spark: the pipeline's "
                                           "engine, local or a cluster (env EOCTL_ENGINE; default spark)",
                                           show_default=False)
    ] = None,
    master: Annotated[
        Optional[str], typer.Option("--master", metavar="URL", help="Spark master, e.g. spark://host:7077 (env EOCTL_MASTER)")
    ] = None,
    remote: Annotated[
        Optional[str], typer.Option("--remote", metavar="URL", help="Spark Connect URL, e.g. sc://host:15002 (env EOCTL_REMOTE)")
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    from eoctl import logs
    from eoctl.config import resolve_config_path
    from eoctl.scratch import remove_stale

    logs.setup(debug)
    remove_stale()  # what killed runs left (eoctl.scratch): every command, it costs a listing
    if master and remote:
        raise typer.BadParameter("use --master or --remote, not both", param_hint="--remote")
    if output is OutputFormat.markdown and ctx.invoked_subcommand not in MARKDOWN_COMMANDS:
        raise typer.BadParameter(f"only {', '.join(MARKDOWN_COMMANDS)} writes Markdown; "
                                 f"{ctx.invoked_subcommand} writes text or json", param_hint="'--format markdown'")
    ctx.obj = AppContext(resolve_config_path(config), output or OutputFormat.text, debug, master, remote,
                         engine.value if engine else None, format_given=output is not None)
    # closed by main(), after an error is described: Spark's error messages live in its JVM
    _contexts.append(ctx.obj)


_contexts: list[AppContext] = []
#: the commands that write Markdown (an incident ticket's report); the others refuse it (exit 2)
MARKDOWN_COMMANDS = ("audit",)


def run(argv: list[str]) -> int:
    """Run eoctl with `argv`; every known error becomes one line on stderr. Returns the exit code."""
    from eoctl import interrupts

    # a command allocates mostly long-lived objects (Ibis's expression graphs and compiler, the
    # imported modules) and little garbage: the default thresholds ran ~270 collections, two of
    # them full, 0.11 s of a 1.6 s gc-tokens plan; these are mypy's, for the same reason
    gc.set_threshold(200_000, 30, 30)
    debug = "--debug" in argv
    _mask_library_logs()
    command = typer.main.get_command(app)
    interrupts.install()
    succeeded = False
    try:
        result = command.main(args=argv, prog_name="eoctl", standalone_mode=False)
        interrupts.check()  # a signal a finalizer dropped after the last phase: not a finished run
        code = int(result) if isinstance(result, int) else 0
        succeeded = True
    except BaseException as exc:  # noqa: BLE001 - the one error boundary
        code = _report(exc, debug)
    finally:
        try:
            while _contexts:
                _contexts.pop().close(succeeded)  # the engine stopped, the run's temporary folder removed
        except BaseException as exc:  # noqa: BLE001 - a second Ctrl-C while stopping: still one line
            code = _report(exc, debug)
    # everything is closed: what is still alive (mostly imported modules: Ibis, PyArrow) is kept
    # out of the interpreter's last collections, which cost ~0.2 s of every command's wall time
    gc.freeze()
    return code


def main(argv: list[str] | None = None) -> None:
    """eoctl in this interpreter (tests, embedding): run, then exit with the code. The signal
    handlers stay eoctl's, for a caller that goes on after catching SystemExit."""
    sys.exit(run(sys.argv[1:] if argv is None else argv))


def console() -> None:
    """The `eoctl` program (console script, `python -m eoctl`): eoctl is the process. Once its
    exit code is said, signals are ignored: Python puts the default handlers back as the
    interpreter ends, and a signal in those last milliseconds would kill the process (exit -2,
    no line) after its output was whole."""
    from eoctl import interrupts

    sys.stdout, sys.stderr = _ClosablePipe(sys.stdout), _ClosablePipe(sys.stderr)
    code = run(sys.argv[1:])
    interrupts.ignore()
    sys.exit(code)


class _ClosablePipe:
    """A standard stream whose reader may leave (`eoctl audit | head`): once a write finds the pipe
    closed, the rest of the output is dropped and the command goes on to its own exit code. A
    reader that stops reading is not a failure of the run."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._closed = False

    def write(self, text: str) -> int:
        if not self._closed:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self._closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        import os

        self._closed = True
        try:  # what the stream still buffers is dropped: the interpreter's last flush must not fail
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _report(exc: BaseException, debug: bool) -> int:
    """One line on stderr for `exc`; returns the exit code."""
    import traceback

    from eoctl import interrupts
    from eoctl.engine.errors import describe as describe_engine_error
    from eoctl.engine.errors import message_of, out_of_memory, write_failure

    if isinstance(exc, SystemExit):
        raise exc
    signum = interrupts.received()
    if signum is not None and not isinstance(exc, Interrupted):
        exc = Interrupted(signum)  # a library turned our interrupt into an error of its own
    if isinstance(exc, typer.Exit):
        return exc.exit_code
    if isinstance(exc, NoArgsIsHelpError):  # `eoctl`, `eoctl config`: the help, as asked
        print(exc.format_message())
        return int(ExitCode.OK)
    if isinstance(exc, typer.Abort):
        print("eoctl: aborted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    if isinstance(exc, typer.TyperException):  # bad flags, unknown command, bad option values
        print(f"eoctl: error: {exc.format_message()}", file=sys.stderr)
        return int(ExitCode.USAGE)
    if debug:  # masked: a message may hold a connection string
        print(mask_text("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
    if isinstance(exc, Interrupted):  # Ctrl-C, SIGTERM: one line, 130 or 143
        print(f"eoctl: {exc.one_line()}", file=sys.stderr)
        return int(exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):  # a library's own SIGINT handler got in first
        print("eoctl: interrupted (SIGINT)", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    if isinstance(exc, EoctlError):  # inert: a name from data (an archive file's) may hold escapes
        print(f"eoctl: error: {inert(mask_text(exc.one_line()))}", file=sys.stderr)
        return int(exc.exit_code)
    if not isinstance(exc, Exception):
        raise exc
    message = message_of(exc).strip()
    unwritable = write_failure(exc, message)
    if unwritable:  # a full disk or a folder it may not write: where, and why; nothing is left half-written
        print(f"eoctl: error: {inert(mask_text(unwritable))} (free space there, or point EOCTL_TMPDIR or the output "
              "elsewhere)", file=sys.stderr)
        return int(ExitCode.RUNTIME)
    unreadable = describe_engine_error(message)
    if unreadable:  # a truncated or corrupt file: which, and why, is what the operator needs
        print(f"eoctl: error: {inert(mask_text(unreadable))} (a half-written or corrupt file: restore it or move it away)",
              file=sys.stderr)
        return int(ExitCode.RUNTIME)
    short = out_of_memory(message)
    if short:
        print(f"eoctl: error: {inert(mask_text(short))}", file=sys.stderr)
        return int(ExitCode.RUNTIME)
    if debug:
        return int(ExitCode.RUNTIME)
    # masked before it is cut, so a cut never leaves the start of a secret unmasked
    text = mask_text(message).splitlines()[0][:300] if message else ""
    print(f"eoctl: internal error: {type(exc).__name__}: {inert(text)} (rerun with --debug for the traceback)",
          file=sys.stderr)
    return int(ExitCode.RUNTIME)


def _mask_library_logs() -> None:
    """What libraries log outside eoctl's loggers (eoctl.logs) reaches stderr through Python's
    handler of last resort, which then masks it too."""
    import logging

    from eoctl.secrets import MaskingFilter

    if logging.lastResort is not None and not any(isinstance(f, MaskingFilter) for f in logging.lastResort.filters):
        logging.lastResort.addFilter(MaskingFilter())
