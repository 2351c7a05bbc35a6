"""Running the real `eoctl` entry point in a subprocess, as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def run_eoctl(*args: str, env: dict[str, str] | None = None, unset: tuple[str, ...] = (),
              timeout: float = 600) -> Result:
    full_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset}
    proc = subprocess.run(
        [sys.executable, "-m", "eoctl", *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


#: a phase line a command prints on stderr when it is not a terminal (eoctl.cli.output.progress)
PROGRESS_LINE = re.compile(r"^eoctl: \[\d+\.\ds\] ")


def without_progress(stderr: str) -> list[str]:
    """stderr's lines but the phase lines: what a run said besides its progress."""
    return [line for line in stderr.splitlines() if not PROGRESS_LINE.match(line)]
