"""The front page and the reference agree with the code: README's exit codes and docs/commands.md's
are ExitCode's, every page of docs/ is in the site's navigation, README's links resolve, and CI
runs README's test command word for word."""

from __future__ import annotations

import re

import pytest

from eoctl.errors import ExitCode
from tests.helpers.servers import REPO

pytestmark = pytest.mark.unit

README = (REPO / "README.md").read_text(encoding="utf-8")


def _exit_rows(text: str) -> list[tuple[int, str]]:
    return [(int(code), name) for code, name in re.findall(r"^\| (\d+) \| ([A-Z_]+) \|", text, flags=re.MULTILINE)]


def test_readme_and_the_reference_list_every_exit_code_as_the_enum_declares_it() -> None:
    declared = [(c.value, c.name) for c in ExitCode]
    assert _exit_rows(README) == declared
    assert _exit_rows((REPO / "docs" / "commands.md").read_text(encoding="utf-8")) == declared


def test_every_page_of_the_reference_is_in_the_sites_navigation() -> None:
    nav = set(re.findall(r"^\s+- [^:]+: (\S+\.md)$", (REPO / "mkdocs.yml").read_text(), flags=re.MULTILINE))
    assert nav == {p.name for p in (REPO / "docs").glob("*.md")}


def test_readme_is_a_front_page_whose_links_resolve() -> None:
    assert len(README.splitlines()) < 300
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README):
        assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_ci_runs_the_test_command_readme_gives() -> None:
    commands = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    setup = [line for line in commands.splitlines() if line and not line.startswith("#")]
    assert setup[0] == "pip install -e . && eoctl --config samples/chaos/eoctl.toml audit"
    last = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert last == setup[1]
