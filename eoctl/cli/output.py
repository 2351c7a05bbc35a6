"""Where output goes: JSON to stdout for scripts, human text and progress to stderr."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.console import Console

stderr = Console(stderr=True, highlight=False, soft_wrap=False)
if not stderr.is_terminal:  # logs and CI: wide rows rather than 80-column wrapping
    stderr.width = 160


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str, sort_keys=False) + "\n")
    sys.stdout.flush()


@contextmanager
def progress(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr whose text the work updates; silent when stderr is not a terminal."""
    if not enabled or not stderr.is_terminal:
        yield lambda _msg: None
        return
    with stderr.status("starting") as status:
        yield lambda msg: status.update(msg)
