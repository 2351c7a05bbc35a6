"""Every command the chaos sample's audit prints runs when pasted, on a configuration whose endpoint
names differ from the names its stores and headers carry (`name_in_store`): each finding's `next:`
and each eoctl command its prose names, with the options the audit ran with.

Before, EO301 and EO303 printed `--endpoint shop` (the outbox row's owner) where the configuration's
endpoint is `web`: pasted, exit 2, unknown endpoint; and the prose named commands without --config.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
from pathlib import Path

import pytest

from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl
from tests.helpers.sent_outbox import LAYOUTS, keep_sent_rows

pytestmark = pytest.mark.integration

#: the configuration's names of the sample's endpoints; their names in the pipeline stay
RENAMED = {"shop": "web", "billing": "invoicing", "shipping": "delivery"}


def _renamed(config: Path) -> Path:
    text = config.read_text()
    for old, new in RENAMED.items():
        text = text.replace(f"[endpoints.{old}]", f'[endpoints.{new}]\nname_in_store = "{old}"')
        text = text.replace(f"[endpoints.{old}.", f"[endpoints.{new}.")
        text = text.replace(f"[[endpoints.{old}.", f"[[endpoints.{new}.")
    path = config.with_name("eoctl-renamed.toml")
    path.write_text(text)
    return path


def test_every_printed_command_runs_when_pasted(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    keep_sent_rows(chaos, LAYOUTS["status"], dt.datetime.now(dt.timezone.utc))  # for EO303
    config = _renamed(chaos.config_path)
    audit = run_eoctl("--config", str(config), "--engine", "duckdb", "--format", "json", "audit", "--no-record")
    assert audit.code == 1, audit.stderr[-2000:]
    report = json.loads(audit.stdout)
    assert {f["endpoint"] for f in report["findings"]} <= set(RENAMED.values())
    commands: dict[str, str] = {}
    for f in report["findings"]:
        remedy = f["remedy"] or {}
        if remedy.get("command"):
            commands.setdefault(remedy["command"], f["code"])
        for prose in (remedy.get(k) or "" for k in ("cause", "risk", "fix", "verify")):
            for named in re.findall(r"`(eoctl [^`]*)`", prose):
                # every one names the configuration the audit ran with
                assert named.startswith(f"eoctl --config {shlex.quote(str(config))} --engine duckdb "), named
    assert {"EO301", "EO303"} <= {code for c, code in commands.items() if "--endpoint" in c}, commands
    for command, code in sorted(commands.items()):
        words = shlex.split(command)
        assert words[:5] == ["eoctl", "--config", str(config), "--engine", "duckdb"], (code, command)
        for flag in ("--endpoint", "-e"):
            if flag in words:
                assert words[words.index(flag) + 1] in RENAMED.values(), (code, command)
        pasted = run_eoctl(*words[1:])
        assert pasted.code in (0, 1), f"{code}: {command}: exit {pasted.code}: {pasted.stderr[-1500:]}"
