"""Where output goes: JSON to stdout for scripts, human text and progress to stderr."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.console import Console

from eoctl.secrets import mask_text, redact


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


stderr = Console(file=MaskedStderr(), highlight=False, soft_wrap=False)
if not stderr.is_terminal:  # logs and CI: wide rows rather than 80-column wrapping
    stderr.width = 160


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(redact(data), indent=2, default=str, sort_keys=False) + "\n")
    sys.stdout.flush()


@contextmanager
def progress(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr whose text the work updates; silent when stderr is not a terminal."""
    if not enabled or not stderr.is_terminal:
        yield lambda _msg: None
        return
    with stderr.status("starting") as status:
        yield lambda msg: status.update(msg)
