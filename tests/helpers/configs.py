"""Writing configuration files for tests."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_config(folder: Path, text: str, name: str = "eoctl.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path
