"""What the global options give every command: the configuration and the Spark session, lazily."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eoctl.config.model import Config
    from eoctl.findings import Invocation


class EngineKind(str, Enum):
    spark = "spark"
    duckdb = "duckdb"


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"  # audit reports; other commands print text


@dataclass
class AppContext:
    config_path: Path
    output: OutputFormat = OutputFormat.text
    debug: bool = False
    master: str | None = None
    remote: str | None = None
    engine: str | None = None  # --engine
    format_given: bool = False  # --format on the command line (else an --output's extension decides)
    #: when the command started: every JSON envelope's run times and duration count from here
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))
    _config: Config | None = field(default=None, repr=False)
    _spark: Any = field(default=None, repr=False)

    @property
    def json(self) -> bool:
        return self.output is OutputFormat.json

    def format_for(self, output: Path | None) -> OutputFormat:
        """The format of what goes to `output`: --format when given, else the file's extension
        (.json, .md), else text."""
        if self.format_given or output is None:
            return self.output
        return {".json": OutputFormat.json, ".md": OutputFormat.markdown,
                ".markdown": OutputFormat.markdown}.get(output.suffix.lower(), OutputFormat.text)

    def run(self, command: str, own: dict[str, Any] | None = None) -> dict[str, Any]:
        """The `run` of every command's JSON (one envelope): id, command, engine, started_at,
        finished_at, duration_seconds, config_digest; `own`: what the command's result says of its
        run (its id, times, engine and anything else it adds, which is kept)."""
        from eoctl.run_ids import new_run_id

        own = dict(own or {})
        finished = dt.datetime.now(dt.timezone.utc)
        config = self._config
        digest = None
        if config is not None:
            from eoctl.history import config_digest

            digest = config_digest(config)
        run = {
            "id": own.pop("id", None) or own.pop("run_id", None) or new_run_id(self.started_at),
            "command": command,
            "engine": own.pop("engine", None) or (config.engine.kind if config is not None else None),
            "started_at": own.pop("started_at", None) or self.started_at.isoformat(),
            "finished_at": own.pop("finished_at", None) or finished.isoformat(),
            "duration_seconds": round((finished - self.started_at).total_seconds(), 3),
            "config_digest": digest,
        }
        return {**run, **own}

    def next_options(self) -> Invocation:
        """What a command eoctl prints as the next to run repeats (the configuration as it was
        found, the engine and cluster when given), and the endpoints' names it passes, so that it
        runs as this one did."""
        from eoctl.findings import Invocation

        out = ["--config", str(self.config_path)]
        for flag, value in (("--engine", self.engine), ("--master", self.master), ("--remote", self.remote)):
            if value:
                out += [flag, str(value)]
        return Invocation(out, {} if self._config is None else self._config.names_in_pipeline())

    def config(self) -> Config:
        """Load and validate the configuration once; flags override env, env overrides the file."""
        if self._config is None:
            from eoctl.config import load_config

            self._config = load_config(self.config_path, overrides={
                "kind": self.engine, "master": self.master, "remote": self.remote})
        return self._config

    def spark(self, require_paths: bool = True) -> Any:
        """The session, started on first use; first, unless `require_paths` is false (doctor,
        which reports each missing path as a check of its own), every configured local path
        must exist (eoctl.config.paths)."""
        if self._spark is None:
            import tempfile

            from eoctl.config import paths
            from eoctl.engine.spark import start_session
            from eoctl.scratch import run_dir

            if require_paths:  # a missing file is one line now, not an engine error a minute later
                paths.require_paths(self.config())

            # PySpark's own temporary files (the gateway's connection file) go under the run's
            # folder too; a CLI process only, as it changes where every tempfile goes
            tempfile.tempdir = str(run_dir())
            # the CLI ends its driver JVM itself (close), so it may record the class archive
            self._spark = start_session(self.config().engine, debug=self.debug, record_classes=True)
        return self._spark

    @property
    def session(self) -> Any:
        """The Spark session, if this run started one (the DuckDB engine never does)."""
        return self._spark

    def close(self, succeeded: bool = False) -> None:
        """Stop the engine (also after an error or an interrupt), then remove the run's temporary
        folder. After a run that `succeeded` and recorded Spark's classes, the archive is saved
        first (a failed or interrupted run ends at once instead)."""
        import sys

        from eoctl.scratch import remove_run_dir

        spark, self._spark = self._spark, None
        try:
            if spark is not None:
                from eoctl.engine.spark import class_archive, stop_session

                try:
                    if succeeded and class_archive.recording():
                        print("eoctl: saving the classes Spark loaded, so that later runs start sooner (once)",
                              file=sys.stderr, flush=True)
                        class_archive.save(spark)
                finally:  # a Ctrl-C while saving still ends the JVM before its folder goes
                    try:
                        stop_session(spark, quiet=not self.debug, end_jvm=True)
                    finally:
                        class_archive.discard_unfinished()
            elif "pyspark" in sys.modules:  # a session cut off while it started
                from eoctl.engine.spark import end_driver_jvm

                end_driver_jvm()
        finally:
            remove_run_dir()
