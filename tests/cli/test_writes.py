"""Paths and files: a report, a metrics file or the findings history is written whole or not at
all. A target that cannot be written is one line (what, where, why) with a documented exit code,
said before the run when it can be known then; a write that fails midway (a full disk: here a
file-size limit, which fails writes the same way) leaves no `.partial` and no 0-byte history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eoctl.errors import ExitCode
from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl

pytestmark = pytest.mark.integration

_LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # past 4 KiB every write fails: EFBIG
from eoctl.errors import EoctlError
try:
{body}
except EoctlError as exc:
    print(json.dumps([int(exc.exit_code), exc.one_line()]))
else:
    print(json.dumps(None))
"""


def _limited(body: str, cwd: Path) -> object:
    code = "import json\n" + _LIMITED.format(body="\n".join("    " + line for line in body.strip().splitlines()))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize(("flag", "command"), [("--output", ("audit", "--no-record")),
                                               ("--output", ("reconcile-tokens",)),
                                               ("--metrics-file", ("gc-tokens",))])
def test_a_target_in_a_missing_folder_or_on_a_folder_is_refused_before_the_run(tmp_path: Path, flag: str,
                                                                               command: tuple[str, ...]) -> None:
    chaos = recorded_copy(tmp_path)
    for target, why in ((tmp_path / "missing" / "out.json", f"the folder {tmp_path / 'missing'} does not exist"),
                        (tmp_path, "is a folder")):
        proc = run_eoctl("--config", str(chaos.config_path), "--engine", "duckdb", *command, flag, str(target))
        assert proc.code == ExitCode.USAGE, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line, and no phase line: before the run
        assert proc.stderr.startswith(f"eoctl: error: {flag} {target}: {why}")
    assert not (tmp_path / "missing").exists()


def test_a_report_that_cannot_be_written_leaves_nothing_half_written(tmp_path: Path) -> None:
    outcome = _limited("from pathlib import Path\nfrom eoctl.cli.output import write_whole\n"
                       "write_whole(Path('report.json'), 'x' * 100_000, '--output')", tmp_path)
    assert outcome == [ExitCode.RUNTIME, "--output report.json cannot be written: File too large"]
    assert list(tmp_path.iterdir()) == []
    from eoctl.cli.output import write_whole

    write_whole(tmp_path / "report.json", "whole\n", "--output")  # and where there is room, it is written
    assert (tmp_path / "report.json").read_text() == "whole\n"


def test_metrics_that_cannot_be_written_leave_the_last_whole_file(tmp_path: Path) -> None:
    (tmp_path / "gc.prom").write_text("# the last run's\n")
    outcome = _limited("from pathlib import Path\nfrom eoctl.ops.gc_flow import GcResult, Tally, write_metrics\n"
                       "r = GcResult('gc-tokens', 'run', True, 0, [Tally(f'endpoint-{i}' * 20) for i in range(200)])\n"
                       "write_metrics(Path('gc.prom'), r, success=True)", tmp_path)
    assert outcome == [ExitCode.RUNTIME, "--metrics-file gc.prom cannot be written: File too large"]
    assert [p.name for p in tmp_path.iterdir()] == ["gc.prom"]
    assert (tmp_path / "gc.prom").read_text() == "# the last run's\n"


def test_a_history_that_cannot_be_created_warns_and_leaves_no_empty_file(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    history = chaos.config_path.parent / "eoctl-history.duckdb"
    assert not history.exists()
    outcome = _limited(f"from pathlib import Path\nfrom eoctl.config import load_config\nfrom eoctl.history import record\n"
                       f"from eoctl.findings import AuditReport\n"
                       f"record(load_config(Path({str(chaos.config_path)!r})), AuditReport(run={{'id': 'r1'}}))",
                       tmp_path)
    assert outcome[0] == ExitCode.RUNTIME and outcome[1].startswith(f"findings history {history} cannot be created: ")
    assert sorted(p.name for p in history.parent.iterdir() if "history" in p.name) == []
    # nothing is left that breaks the next run: where there is room, the audit records, and the history reads
    audit = run_eoctl("--config", str(chaos.config_path), "--engine", "duckdb", "-f", "json", "audit")
    assert audit.code == ExitCode.FINDINGS, audit.stderr[-2000:]
    assert history.stat().st_size > 0
    listed = run_eoctl("--config", str(chaos.config_path), "-f", "json", "findings", "list")
    assert listed.code == 0 and len(json.loads(listed.stdout)["runs"]) == 1
