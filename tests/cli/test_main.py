"""The CLI conventions every command inherits, through the real entry point."""

from __future__ import annotations

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
    result = run_eoctl("--config", str(path), "config", "check")
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
