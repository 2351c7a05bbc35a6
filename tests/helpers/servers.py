"""Shared rules for test servers: free ports, waiting, and fail-under-CI instead of skip."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("EOCTL_TEST_CACHE", REPO / ".cache"))


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def unavailable(what: str, why: str) -> None:
    """A server the test needs could not start: fail under CI=true, skip loudly elsewhere."""
    message = f"{what} could not start: {why}"
    if under_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(f"SKIPPED FOR LACK OF A SERVER (would fail under CI=true): {message}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
