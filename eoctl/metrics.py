"""Prometheus textfile-collector files (node_exporter's `--collector.textfile.directory`), written
whole or not at all, for the commands cron runs: audit, gc-tokens, gc-blobs.

Every file ends with `<prefix>_last_run_success`, `<prefix>_last_run_timestamp_seconds` and
`<prefix>_last_success_timestamp_seconds`, the last carried over from the previous file when a run
fails, so an alert can fire on a run that keeps failing as well as on what the runs find.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eoctl.secrets import mask_text
from eoctl.writes import write_whole


@dataclass
class Metric:
    name: str  # after the prefix
    help: str
    samples: list[tuple[dict[str, str], Any]] = field(default_factory=list)  # (labels, value)
    kind: str = "gauge"


def _label(value: str) -> str:
    """A label value as the text format writes one: backslash, quote and line break escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def write_textfile(path: Path, prefix: str, metrics: list[Metric], success: bool, flag: str = "--metrics-file") -> None:
    """`metrics` (when the run succeeded) and the run's outcome as `path`, replaced atomically (the
    collector never reads half a file). A write that fails is one line (SourceError) and leaves
    no temporary file."""
    previous_success = None
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith(f"{prefix}_last_success_timestamp_seconds "):
                previous_success = line.split()[1]
    now = int(time.time())
    outcome = [Metric("last_run_success", "1 when the last run succeeded", [({}, 1 if success else 0)]),
               Metric("last_run_timestamp_seconds", "when the last run ended", [({}, now)])]
    last = str(now) if success else previous_success
    if last is not None:
        outcome.append(Metric("last_success_timestamp_seconds", "when a run last succeeded", [({}, last)]))
    lines: list[str] = []
    for m in [*(metrics if success else []), *outcome]:
        lines += [f"# HELP {prefix}_{m.name} {m.help}", f"# TYPE {prefix}_{m.name} {m.kind}"]
        for labels, value in m.samples:
            rendered = "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels.items()) + "}" if labels else ""
            lines.append(f"{prefix}_{m.name}{rendered} {value}")
    write_whole(path, mask_text("\n".join(lines) + "\n"), flag)
