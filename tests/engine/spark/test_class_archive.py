"""eoctl's class-data-sharing archive for the Spark driver (eoctl.engine.spark.class_archive): which
archive a run maps, what the clean-up keeps, and, with real JVMs, that the CLI records one, a
later driver maps it, and a broken one never stops Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eoctl.config.model import EngineConfig
from eoctl.engine.spark import class_archive
from eoctl.engine.spark.session import _class_archive_options, java_path, java_version

KEY = "0123456789abcdef"


def _archive(folder: Path, size: int, *, named: int | None = None, age_s: float = 0, key: str = KEY) -> Path:
    path = folder / f"spark-classes-{key}-{size if named is None else named}.jsa"
    path.write_bytes(b"x" * size)
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


@pytest.mark.unit
def test_find_takes_the_newest_whole_archive_and_marks_it_used(tmp_path: Path) -> None:
    assert class_archive.find(tmp_path, KEY) is None
    older = _archive(tmp_path, 10, age_s=100)
    newer = _archive(tmp_path, 12, age_s=50)
    _archive(tmp_path, 9, named=20)  # truncated: its size is not its name's, never mapped
    _archive(tmp_path, 30, key="fedcba9876543210")  # another classpath's
    assert class_archive.find(tmp_path, KEY) == newer
    assert time.time() - newer.stat().st_mtime < 5  # used now: the clean-up keeps it
    newer.unlink()
    assert class_archive.find(tmp_path, KEY) == older


@pytest.mark.unit
def test_clean_keeps_the_new_archive_and_what_others_may_use(tmp_path: Path) -> None:
    kept = _archive(tmp_path, 10, age_s=10)
    older_same_key = _archive(tmp_path, 11, age_s=20)
    newer_same_key = _archive(tmp_path, 12, age_s=1)  # a run that saved after this one: the newest stays
    other_used = _archive(tmp_path, 13, key="fedcba9876543210", age_s=86400)
    other_unused = _archive(tmp_path, 14, key="aaaaaaaaaaaaaaaa", age_s=31 * 86400)
    old_tmp = tmp_path / f"spark-classes-{KEY}.{os.getpid()}.tmp"  # older than any dump
    old_tmp.write_bytes(b"x")
    os.utime(old_tmp, (time.time() - 7200, time.time() - 7200))
    dead = subprocess.Popen(["true"])
    dead.wait()
    killed_tmp = tmp_path / f"spark-classes-{KEY}.{dead.pid}.tmp"  # its run is gone
    killed_tmp.write_bytes(b"x")
    running_tmp = tmp_path / f"spark-classes-fedcba9876543210.{os.getpid()}.tmp"  # a live run writing now
    running_tmp.write_bytes(b"x")
    old_failure = tmp_path / f"spark-classes-{KEY}.failed"
    old_failure.touch()
    os.utime(old_failure, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    log = tmp_path / "spark-driver.log"
    log.write_text("not an archive")
    os.utime(log, (time.time() - 90 * 86400, time.time() - 90 * 86400))

    removed = class_archive.clean(tmp_path, keep=kept)

    assert sorted(removed) == sorted([older_same_key, other_unused, old_tmp, killed_tmp, old_failure])
    assert all(p.exists() for p in (kept, newer_same_key, other_used, running_tmp, log))
    # each run cleans, also one with no archive of its own yet: only what is stale goes
    other_unused = _archive(tmp_path, 14, key="aaaaaaaaaaaaaaaa", age_s=31 * 86400)
    assert class_archive.clean(tmp_path, keep=None) == [other_unused]


@pytest.mark.unit
def test_the_key_follows_the_classpath_not_the_run() -> None:
    base = {"spark.jars": "/j/a.jar", "spark.driver.extraJavaOptions": "-Djava.io.tmpdir=/tmp/run-1/jvm"}
    key = class_archive.key_of(base, "/usr/bin/java", 'openjdk version "17.0.15"')
    other_run = {**base, "spark.driver.extraJavaOptions": "-Djava.io.tmpdir=/tmp/run-2/jvm"}
    assert class_archive.key_of(other_run, "/usr/bin/java", 'openjdk version "17.0.15"') == key
    assert class_archive.key_of({**base, "spark.jars": "/j/b.jar"}, "/usr/bin/java", 'openjdk version "17.0.15"') != key
    assert class_archive.key_of(base, "/usr/bin/java", 'openjdk version "21.0.2"') != key
    packages = {"spark.jars.packages": "org.postgresql:postgresql:42.7.14"}
    assert class_archive.key_of(packages, "/usr/bin/java", 'openjdk version "17.0.15"') != key


@pytest.mark.unit
def test_off_by_setting_or_when_the_user_sets_the_drivers_jvm_options(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    settings = {"spark.jars": "/j/a.jar"}
    assert _class_archive_options(EngineConfig(class_archive=False), settings, "java 17", True, tmp_path) == ""
    for name in ("spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions"):
        mine = EngineConfig(conf={name: "-Xshare:off"})
        assert _class_archive_options(mine, settings, "java 17", True, tmp_path) == ""


@pytest.mark.unit
def test_the_environment_turns_it_off(tmp_path: Path) -> None:
    from eoctl.config import load_config

    path = tmp_path / "eoctl.toml"
    path.write_text("", encoding="utf-8")
    assert load_config(path, environ={}).engine.class_archive is True
    assert load_config(path, environ={"EOCTL_CLASS_ARCHIVE": "false"}).engine.class_archive is False


# ------------------------------------------------------------------------- with real JVMs


@pytest.mark.integration
def test_driver_options_map_an_archive_or_record_one(tmp_path: Path) -> None:
    _major, line = java_version()
    settings = {"spark.jars": "/j/a.jar"}
    try:
        assert "-XX:+RecordDynamicDumpInfo" in class_archive.driver_options(settings, tmp_path, java_path(), line,
                                                                            record=True)
        assert class_archive.recording()
        assert class_archive.driver_options(settings, tmp_path, java_path(), line, record=False) == ""
        assert not class_archive.recording()  # a session that will not save records nothing
        key = class_archive.key_of(settings, java_path(), line)
        (tmp_path / f"spark-classes-{key}.failed").touch()  # a dump failed lately: no recording for a day
        assert class_archive.driver_options(settings, tmp_path, java_path(), line, record=True) == ""
        (tmp_path / f"spark-classes-{key}.failed").unlink()
        archive = _archive(tmp_path, 8, key=key)
        options = class_archive.driver_options(settings, tmp_path, java_path(), line, record=True)
        assert f"-XX:SharedArchiveFile={archive}" in options and "Record" not in options
    finally:
        class_archive.forget(tmp_path, "")


def _driver_maps(jars: Path, cache: Path) -> dict:
    from tests.helpers.spark_maps import LOADED, run

    seen = run(jars, cache)
    assert seen.pop("loads") == dict.fromkeys(LOADED, True)
    return seen


@pytest.mark.integration
def test_the_cli_records_an_archive_a_later_driver_maps_and_a_broken_or_ignored_one_is_dropped(
        tmp_path: Path, spark_jars: Path) -> None:
    from tests.helpers.chaos import recorded_copy
    from tests.helpers.cli import run_eoctl

    chaos = recorded_copy(tmp_path)
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache), "EOCTL_JARS_DIR": str(spark_jars)}
    scan = run_eoctl("--config", str(chaos.config_path), "--format", "json", "--master", "local[1]", "sources",
                     "scan", "billing", env=env)
    assert scan.code == 0, scan.stderr
    assert json.loads(scan.stdout)["schema"] == "eoctl.sources-scan/v1"  # stdout is the JSON alone
    assert "saving the classes Spark loaded" in scan.stderr
    archives = sorted((cache / "eoctl").glob("spark-classes-*"))
    assert len(archives) == 1 and archives[0].suffix == ".jsa", archives  # whole, nothing temporary left
    recorded = archives[0]
    assert recorded.name.endswith(f"-{recorded.stat().st_size}.jsa")

    mapped = _driver_maps(spark_jars, cache)
    assert mapped == {"mapped": [str(recorded)], "count": 3, "archives": [recorded.name]}  # mapped, so kept

    # An archive cut short under a name that matches its size: the JVM that maps it dies at
    # start. Spark must start all the same, without it, and the broken file must go.
    head = recorded.read_bytes()[: recorded.stat().st_size // 3]
    recorded.unlink()
    broken = recorded.with_name(recorded.name.rsplit("-", 1)[0] + f"-{len(head)}.jsa")
    broken.write_bytes(head)
    after = _driver_maps(spark_jars, cache)
    assert after == {"mapped": [], "count": 3, "archives": []}

    # A whole file the JVM does not take (it checks what the key cannot see): it ignores it, and
    # eoctl removes it, so that a later run records one that fits instead of passing this forever.
    ignored = recorded.with_name(recorded.name.rsplit("-", 1)[0] + "-4096.jsa")
    ignored.write_bytes(b"not a class archive".ljust(4096, b"."))
    assert _driver_maps(spark_jars, cache) == {"mapped": [], "count": 3, "archives": []}


@pytest.mark.integration
def test_a_ctrl_c_while_saving_leaves_one_line_and_no_archive(tmp_path: Path, spark_jars: Path) -> None:
    import signal

    from tests.helpers.chaos import recorded_copy
    from tests.helpers.kill import group_gone
    from tests.helpers.servers import wait_until

    chaos = recorded_copy(tmp_path)
    cache, tmp_root = tmp_path / "cache", tmp_path / "eoctl-tmp"
    proc = subprocess.Popen(
        [sys.executable, "-m", "eoctl", "--config", str(chaos.config_path), "--format", "json", "--master", "local[1]",
         "sources", "scan", "billing"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
        env={**os.environ, "XDG_CACHE_HOME": str(cache), "EOCTL_JARS_DIR": str(spark_jars), "EOCTL_TMPDIR": str(tmp_root)})
    assert proc.stderr is not None
    err = ""
    while "saving the classes" not in err and (line := proc.stderr.readline()):
        err += line
    assert "saving the classes" in err, err[-2000:]
    time.sleep(1)  # into the dump
    os.kill(proc.pid, signal.SIGINT)
    out, rest = proc.communicate(timeout=120)

    assert proc.returncode == 130, rest[-2000:]
    assert rest.strip().splitlines() == ["eoctl: interrupted (SIGINT)"]
    assert json.loads(out)["schema"] == "eoctl.sources-scan/v1"  # the command's answer came before
    assert sorted(p.name for p in (cache / "eoctl").iterdir()) == ["spark-driver.log"]  # no archive, whole or not
    assert wait_until(lambda: group_gone(proc.pid), 60, 0.5), "the Spark driver JVM outlived the run"
    assert list(tmp_root.iterdir()) == []
