"""The CLI conventions every command inherits, through the real entry point."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from eoctl import __version__
from tests.helpers.cli import run_eoctl
from tests.helpers.configs import write_config


def test_help_is_instant_because_heavy_modules_stay_unimported() -> None:
    probe = (
        "import sys; sys.argv = ['eoctl', '--help']\n"
        "from eoctl.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('pyspark', 'duckdb', 'confluent_kafka', 'psycopg', 'fsspec') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "HEAVY=\n" in out.replace("HEAVY=\r\n", "HEAVY=\n") or out.strip().endswith("HEAVY=")


def test_version() -> None:
    result = run_eoctl("--version")
    assert result.code == 0 and result.stdout.strip() == f"eoctl {__version__}"


@pytest.mark.parametrize("command", [[], ["doctor"], ["config", "check"], ["sources", "scan"], ["jars", "fetch"]])
def test_every_help_ends_with_an_example(command: list[str]) -> None:
    result = run_eoctl(*command, "--help")
    assert result.code == 0
    assert result.stdout.strip().splitlines()[-1].strip().startswith("Example: eoctl")


def test_unknown_command_and_bad_option_value_exit_2() -> None:
    unknown = run_eoctl("frobnicate")
    assert unknown.code == 2 and "No such command" in unknown.stderr and "Traceback" not in unknown.stderr
    bad = run_eoctl("--format", "yaml", "config", "check")
    assert bad.code == 2 and "yaml" in bad.stderr


BAD_CONFIGS = {
    "invalid_toml": ("[stores\n", "invalid TOML"),
    "unknown_key": ('[engine]\nmaster = "local[1]"\ncolour = "blue"\n', "unknown key 'engine.colour'"),
    "wrong_type": ('[kafka.k]\nbootstrap_servers = "b"\ntimeout_seconds = "soon"\n', "kafka.k.timeout_seconds"),
    "unset_env": ('[stores.pg]\ntype = "postgres"\ndatabase = "d"\nuser = "u"\npassword = "${EOCTL_TEST_UNSET_PW}"\n',
                  "environment variable EOCTL_TEST_UNSET_PW is not set"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_configuration_gives_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    text, expected = BAD_CONFIGS[case]
    path = write_config(tmp_path, text)
    result = run_eoctl("--config", str(path), "audit")  # config check lists every problem: below
    assert result.code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0] and str(path) in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_missing_configuration_file_gives_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_eoctl("--config", str(tmp_path / "nope.toml"), "doctor")
    assert result.code == 2
    assert result.stderr.strip().splitlines() == [
        f"eoctl: error: {tmp_path / 'nope.toml'}: configuration file not found "
        "(pass --config PATH, set EOCTL_CONFIG, or create ./eoctl.toml)"
    ]


def test_config_from_env_var_and_debug_shows_traceback(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[engine\n")
    result = run_eoctl("config", "check", env={"EOCTL_CONFIG": str(path)})
    assert result.code == 2 and str(path) in result.stderr
    debug = run_eoctl("--debug", "config", "check", env={"EOCTL_CONFIG": str(path)})
    assert debug.code == 2 and "Traceback" in debug.stderr


def test_config_check_json_goes_to_stdout_with_secrets_masked(tmp_path: Path) -> None:
    import json

    path = write_config(tmp_path, '[stores.pg]\ntype = "postgres"\ndatabase = "d"\nuser = "u"\npassword = "${PW}"\n')
    result = run_eoctl("--config", str(path), "--format", "json", "config", "check", env={"PW": "hunter2"})
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["valid"] is True and doc["resolved"]["stores"]["pg"]["password"] == "********"
    assert "hunter2" not in result.stdout + result.stderr
    text = run_eoctl("--config", str(path), "config", "check", env={"PW": "hunter2"})
    assert text.code == 0 and text.stdout == "" and "valid" in text.stderr and "hunter2" not in text.stderr


def test_master_and_remote_together_is_a_usage_error(tmp_path: Path) -> None:
    result = run_eoctl("--master", "local[1]", "--remote", "sc://x:1", "config", "check")
    assert result.code == 2 and "not both" in result.stderr


def test_bad_range_is_a_usage_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[endpoints.e.input]\ntopics = ["t"]\narchive = "a"\n')
    result = run_eoctl("--config", str(path), "sources", "scan", "e", "--range", "t:zero")
    assert result.code == 2
    assert result.stderr.strip() == (
        "eoctl: error: --range 't:zero': expected TOPIC:PARTITION[:START[:END]], e.g. orders:0:100:200"
    )


def _leaf_commands() -> list[list[str]]:
    """Every command of the app (sub-apps' commands by their full path), from the app itself."""
    import typer.main

    from eoctl.cli.main import app

    def walk(command, path: list[str]):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path

    return list(walk(typer.main.get_command(app), []))


#: values for the commands' required arguments: what is checked fails before they are used
_ARGUMENTS = {"trace": ["msg-1"], "sources scan": ["billing"], "findings show": ["r1"], "findings diff": ["r1", "r2"]}


def test_hoisting_moves_global_options_with_their_values_and_nothing_else() -> None:
    import typer
    import typer.main

    from eoctl.cli.main import app, hoist_global_options

    options = [p for p in typer.main.get_command(app).params if p.opts]
    hoist = lambda *a: hoist_global_options(list(a), options)
    assert hoist("audit", "--config", "c.toml", "-fjson", "--grace", "0s") == [
        "--config", "c.toml", "-fjson", "audit", "--grace", "0s"]
    assert hoist("-c", "a.toml", "trace", "--debug", "-c", "b.toml", "--format=json", "x") == [
        "-c", "a.toml", "--debug", "-c", "b.toml", "--format=json", "trace", "x"]
    # after `--` everything is an argument; -e is audit's own
    assert hoist("trace", "-e", "x", "--", "--debug") == ["trace", "-e", "x", "--", "--debug"]
    with pytest.raises(typer.BadParameter):
        hoist("audit", "--config")


@pytest.mark.parametrize("path", [p for p in _leaf_commands() if p[0] != "jars" and p != ["config", "init"]],
                         ids=" ".join)
def test_global_options_after_the_command_are_the_same_options(path: list[str], tmp_path: Path) -> None:
    """--config after the command is the one used: the same error line, naming it, either way."""
    missing = str(tmp_path / "missing.toml")
    argv = [*path, *_ARGUMENTS.get(" ".join(path), [])]
    before = run_eoctl("--config", missing, *argv)
    after = run_eoctl(*argv, "--config", missing)
    assert before.code == after.code == 2 and missing in after.stderr
    assert after.stderr == before.stderr and after.stderr.count("\n") == 1


def test_of_a_global_option_given_twice_the_later_wins(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[engine]\nkind = "duckdb"\n')
    result = run_eoctl("--format", "text", "--config", "nowhere.toml", "config", "check", "--config", str(config),
                       "--format", "json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["resolved"]["engine"]["kind"] == "duckdb"
    listed = run_eoctl("jars", "list", "-f", "json")
    assert listed.code == 0 and json.loads(listed.stdout)["coordinates"]


def test_no_command_prints_the_help_and_exits_0() -> None:
    result = run_eoctl()
    assert result.code == 0 and "Usage: eoctl" in result.stdout and "error" not in result.stderr
    short = run_eoctl("-V")
    assert short.code == 0 and short.stdout.strip() == f"eoctl {__version__}"
    # the shell is detected from the process's parents (shellingham): run under bash, whatever
    # runs the tests (a worker without a shell among its ancestors detects none)
    completion = subprocess.run(["bash", "-c", f"{shlex.quote(sys.executable)} -m eoctl --show-completion; exit $?"],
                                capture_output=True, text=True, timeout=60)
    assert completion.returncode == 0 and "complete -o default -F _eoctl_completion" in completion.stdout, (
        completion.stderr)


@pytest.mark.parametrize("path", [[]] + _leaf_commands(), ids=lambda p: " ".join(p) or "eoctl")
def test_help_shows_flags_as_flags_choices_as_choices_and_cuts_nothing(path: list[str]) -> None:
    result = run_eoctl(*path, "--help", env={"COLUMNS": "80"})
    assert result.code == 0
    text = result.stdout
    for wrong in ("<bool>", "<str>", "<list", "<int", "<float", "<path>", "[[", "…"):
        assert wrong not in text, f"{wrong!r} in the help of {' '.join(path) or 'eoctl'}"
    assert "{" not in text.splitlines()[0]  # the usage line: RUN_ID, not {RUN_ID}
    assert all(len(line) <= 80 for line in text.splitlines() if "Example: " not in line)  # examples: whole
    if path == ["audit"]:
        assert "--fail-on <info|warning|error|critical>" in text and "--transaction-timeout DURATION" in text


@pytest.mark.parametrize("path", [p for p in _leaf_commands() if p != ["audit"]], ids=" ".join)
def test_a_format_a_command_does_not_write_is_refused(path: list[str]) -> None:
    result = run_eoctl("--format", "markdown", *path, *_ARGUMENTS.get(" ".join(path), []))
    assert result.code == 2 and result.stdout == ""
    assert f"only audit writes Markdown; {path[0]} writes text or json" in result.stderr


@pytest.mark.integration
def test_every_commands_json_names_its_schema_and_writes_times_in_iso_8601(tmp_path: Path) -> None:
    import datetime as dt
    import re

    from tests.helpers.chaos import recorded_copy

    cfg = ("--config", str(recorded_copy(tmp_path).config_path), "--engine", "duckdb", "--format", "json")
    run_eoctl(*cfg, "audit", "--select", "EO201", "--grace", "0s")  # two recorded runs for findings diff, even
    audited = run_eoctl(*cfg, "audit", "--select", "EO201", "--grace", "0s")  # from a clone without a history
    run_id = json.loads(audited.stdout)["run"]["id"]
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{8}", run_id)  # the style of every command's runs
    gc = run_eoctl(*cfg, "gc-tokens", "--execute", "--grace", "0s")
    envelope = {"id", "command", "engine", "started_at", "finished_at", "duration_seconds", "config_digest"}
    digests = set()
    for args in (["audit", "--select", "EO201", "--no-record"], ["config", "check"], ["jars", "list"],
                 ["findings", "list"], ["findings", "show", "last"], ["findings", "diff", "previous", "last"],
                 ["doctor"], ["sources", "scan", "billing"], ["reconcile-tokens"], ["gc-tokens"], ["gc-blobs"],
                 ["replay-outbox"], ["trace", "x"], ["gc-tokens", "--restore", json.loads(gc.stdout)["run"]["id"]]):
        result = run_eoctl(*cfg, *args)
        assert result.code in (0, 1, 5), (args, result.stderr[-1000:])
        data = json.loads(result.stdout)
        assert data["schema"].startswith("eoctl.") and data["schema"].endswith("/v1"), args
        assert not re.search(r'"\d{4}-\d\d-\d\d \d\d:\d\d', result.stdout), f"a time without its T: {args}"
        # one envelope: schema, then this command's run
        assert list(data)[:2] == ["schema", "run"] and envelope <= set(data["run"]), args
        run = data["run"]
        command = " ".join(args[:2] if args[0] in ("config", "jars", "findings", "sources") else args[:1])
        assert run["command"] == command, (args, run["command"])
        assert run["engine"] == "duckdb" and run["duration_seconds"] >= 0, args
        started = dt.datetime.fromisoformat(run["started_at"])
        assert run["id"].startswith(started.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")), (args, run)
        digests.add(run["config_digest"])
    assert len(digests) == 1 and None not in digests  # one configuration, one digest


def _examples() -> list[str]:
    """Every `Example:` line of every command's help, as printed."""
    found = []
    for path in [[]] + _leaf_commands():
        help_text = run_eoctl(*path, "--help", env={"COLUMNS": "80"}).stdout
        found += [line.split("Example: ", 1)[1] for line in help_text.splitlines() if "Example: " in line]
    return sorted(set(found))


@pytest.mark.integration
def test_every_example_in_the_help_runs_from_the_repository_root(tmp_path: Path, spark_jars: Path) -> None:
    """Pasted as a user pastes them, from a checkout's root (a copy of samples/, so the examples that
    change things change the copy), on the DuckDB engine (seconds; the engines agree elsewhere)."""
    import shutil

    from tests.helpers.servers import REPO

    # without the histories other tests record beside the samples, perhaps at this moment
    shutil.copytree(REPO / "samples", tmp_path / "samples", ignore=shutil.ignore_patterns("eoctl-history*"))
    examples = _examples()
    assert len(examples) >= 15
    env = {**os.environ, "EOCTL_ENGINE": "duckdb", "EOCTL_JARS_DIR": str(spark_jars),
           "PYTHONPATH": str(REPO)}  # this checkout's eoctl, whatever is installed
    for line in examples:
        command = line.replace("eoctl ", f"{sys.executable} -m eoctl ")
        result = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                                check=False, timeout=600)
        # the samples have no live Kafka: abort-transaction's example says so (its run on a broker:
        # tests/ops/test_abort_txn.py)
        allowed = (0, 1, 2) if " abort-transaction" in line else (0, 1)
        assert result.returncode in allowed, f"{line}: exit {result.returncode}: {result.stderr[-1500:]}"


def test_abort_transaction_without_a_live_kafka_input_says_so() -> None:
    """abort-transaction's JSON on live Kafka: tests/ops/test_abort_txn.py; an archive holds no
    transaction, and a plan of nothing would read as "none hang"."""
    from tests.helpers.servers import REPO

    result = run_eoctl("--config", str(REPO / "samples" / "chaos" / "eoctl.toml"), "abort-transaction")
    assert result.code == 2 and result.stdout == ""
    assert result.stderr.strip() == ("eoctl: error: no endpoint reads a live Kafka topic: a topic archive holds no "
                                     "transaction to abort (give an endpoint whose input has kafka = ...)")


def test_help_uses_the_terminals_width() -> None:
    """Summaries were cut at 80 columns whatever the terminal (click's cap): at 200 columns the
    audit's whole first sentence shows; piped without COLUMNS, 80 as before."""
    wide = run_eoctl("--help", env={"COLUMNS": "200"}).stdout
    audit = next(line for line in wide.splitlines() if line.strip().startswith("audit "))
    assert audit.rstrip().endswith("exit 1 when one is at or above --fail-on.") and len(audit) <= 200
    narrow = run_eoctl("--help", unset=("COLUMNS",)).stdout
    assert all(len(line) <= 80 for line in narrow.splitlines() if "Example: " not in line)


@pytest.mark.parametrize("stream, args, code", [
    ("stderr", ["audit", "--no-record", "--select", "EO401", "--fail-on", "critical"], 0),
    ("stderr", ["audit", "--no-record"], 1),
    ("stdout", ["--format", "json", "audit", "--no-record", "--select", "EO401", "--fail-on", "critical"], 0),
])
def test_a_reader_that_leaves_early_is_not_a_failure(stream: str, args: list[str], code: int) -> None:
    """`eoctl audit | head`: the pipe closes after the first line; the run still ends with its own
    exit code (before, exit 1 and a traceback about a broken pipe)."""
    from tests.helpers.servers import REPO

    chaos = str(REPO / "samples" / "chaos" / "eoctl.toml")
    pipes = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: subprocess.PIPE}
    proc = subprocess.Popen([sys.executable, "-m", "eoctl", "--config", chaos, "--engine", "duckdb", *args], **pipes)
    reader = getattr(proc, stream)
    assert reader.read(1)  # the first byte, then the reader is gone
    reader.close()
    assert proc.wait(120) == code
