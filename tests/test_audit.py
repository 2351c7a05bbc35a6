"""eoctl.audit: the checks compiled in a thread of their own while the engine works."""

from __future__ import annotations

import sys
import threading

import pytest

from eoctl.audit import _ahead

pytestmark = pytest.mark.unit


def test_work_ahead_runs_beside_the_block_and_gives_its_result() -> None:
    started, release = threading.Event(), threading.Event()

    def work() -> str:
        started.set()
        release.wait(10)
        return threading.current_thread().name

    with _ahead(work) as result:
        assert started.wait(10)  # running while the block runs, not when the result is asked for
        release.set()
        assert result().startswith("eoctl-compile")


def test_the_switch_interval_is_put_back_whatever_ends_the_block() -> None:
    before = sys.getswitchinterval()

    def failing() -> None:
        raise ValueError("column 'x' is not in table y")

    with _ahead(failing) as result:
        assert sys.getswitchinterval() < before
        with pytest.raises(ValueError, match="column 'x'"):
            result()
    assert sys.getswitchinterval() == before
    with pytest.raises(KeyboardInterrupt):
        with _ahead(lambda: None):
            raise KeyboardInterrupt
    assert sys.getswitchinterval() == before
