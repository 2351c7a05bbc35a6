"""eoctl.logs: what reaches stderr from eoctl's and the libraries' loggers."""

from __future__ import annotations

import logging

import pytest
import py4j.java_gateway

from eoctl import logs


def _root_record(pathname: str) -> logging.LogRecord:
    return logging.getLogger().makeRecord("root", logging.ERROR, pathname, 1, "Exception while sending command.", (), None)


@pytest.fixture
def clean_root():
    root = logging.getLogger()
    handlers, filters = root.handlers[:], root.filters[:]
    yield root
    root.handlers[:], root.filters[:] = handlers, filters


@pytest.mark.parametrize("debug", [False, True])
def test_py4j_complaints_through_the_root_logger_show_only_with_debug(clean_root, capsys, debug) -> None:
    logs.setup(debug)
    clean_root.handlers[:] = [logging.StreamHandler()]  # what logging.exception's basicConfig adds
    clean_root.handle(_root_record(py4j.java_gateway.__file__))
    clean_root.handle(_root_record(__file__))  # another library's error still shows
    err = capsys.readouterr().err
    assert err.count("Exception while sending command.") == (2 if debug else 1)


def test_once_eoctl_ends_the_jvm_py4j_is_silent_even_with_debug(clean_root, capsys) -> None:
    logs.setup(True)
    clean_root.handlers[:] = [logging.StreamHandler()]
    logs.quiet_py4j()
    logging.getLogger("py4j.java_gateway").error("Exception while sending command.")
    clean_root.handle(_root_record(py4j.java_gateway.__file__))
    logging.getLogger("eoctl").debug("eoctl's own line")
    clean_root.handle(_root_record(__file__))  # another library's error still shows
    err = capsys.readouterr().err
    assert err.count("Exception while sending command.") == 1 and "eoctl's own line" in err
