"""Configured files and folders that must exist, checked before any engine starts.

A missing DuckDB file or archive folder is found in a millisecond here; found by Spark, it cost a
minute of startup and ended in an engine error. The rule: a configured file or folder that does
not exist is like a server that does not answer, exit 3 (ExitCode.RUNTIME), and `config check`
lists every one of them. Remote URIs (s3://, hdfs://, ...) are left to their readers.
"""

from __future__ import annotations

from pathlib import Path

from eoctl.config.model import Config, DuckDBStore
from eoctl.errors import SourceError


def _local(value: str) -> Path | None:
    if value.startswith("file://"):
        return Path(value[len("file://"):])
    return None if "://" in value else Path(value)


def missing_paths(config: Config) -> list[str]:
    """One line per configured local file or folder that does not exist: where it is configured, what it is."""
    out: list[str] = []

    def need(where: str, what: str, value: str | None) -> None:
        path = _local(value) if value else None
        if path is not None and not path.exists():
            out.append(f"{where}: {what} {path} does not exist")

    for name, store in config.stores.items():
        if isinstance(store, DuckDBStore):
            need(f"stores.{name}.path", "DuckDB file", store.path)
    for name, ep in config.endpoints.items():
        if ep.input is not None:
            need(f"endpoints.{name}.input.archive", "archive folder", ep.input.archive)
            if isinstance(ep.input.committed_offsets, str):
                need(f"endpoints.{name}.input.committed_offsets", "committed offsets file", ep.input.committed_offsets)
        need(f"endpoints.{name}.blobs", "blob folder", ep.blobs)
        for sink in ep.sinks:
            need(f"endpoints.{name}.sinks.{sink.name}.path", "sink dataset", sink.path)
    need("engine.jars_dir", "jars folder", config.engine.jars_dir)
    return out


def require_paths(config: Config) -> None:
    """SourceError (exit 3) naming the first missing path, before an engine starts."""
    missing = missing_paths(config)
    if missing:
        more = f"; {len(missing) - 1} more: eoctl config check lists them" if len(missing) > 1 else ""
        raise SourceError(missing[0] + more)


def configured_paths(config: Config) -> list[tuple[str, Path]]:
    """(config key, resolved path) of every local file or folder the configuration names: the
    file itself, DuckDB stores, archives, committed-offsets files, blob prefixes, sink datasets,
    the findings history and its record indexes, the jars folder."""
    out: list[tuple[str, Path]] = []

    def add(where: str, value: str | Path | None) -> None:
        path = _local(str(value)) if value else None
        if path is not None:
            out.append((where, path.resolve()))

    add("the configuration file", config.source)
    for name, store in config.stores.items():
        if isinstance(store, DuckDBStore):
            add(f"stores.{name}.path", store.path)
    for name, ep in config.endpoints.items():
        if ep.input is not None:
            add(f"endpoints.{name}.input.archive", ep.input.archive)
            if isinstance(ep.input.committed_offsets, str):
                add(f"endpoints.{name}.input.committed_offsets", ep.input.committed_offsets)
        add(f"endpoints.{name}.blobs", ep.blobs)
        for sink in ep.sinks:
            add(f"endpoints.{name}.sinks.{sink.name}.path", sink.path)
    if config.history.store is None:
        add("history.path", config.history.path)
    add("history.records", config.history.records)
    add("engine.jars_dir", config.engine.jars_dir)
    return out


def blob_prefix_conflicts(config: Config, endpoints: list[str] | None = None) -> list[str]:
    """One line per blob prefix (of `endpoints`, default all) that holds, or is inside, another
    configured file or folder: gc-blobs would take the configuration, an archive or a store for
    orphaned blobs and move them."""
    paths = configured_paths(config)
    out = []
    for name in endpoints or list(config.endpoints):
        own = f"endpoints.{name}.blobs"
        prefix = next((p for where, p in paths if where == own), None)
        if prefix is None:
            continue
        for where, path in paths:
            if where == own:
                continue
            if path == prefix or prefix in path.parents:
                out.append(f"{own} {prefix} holds {where} {path}")
            elif path in prefix.parents:
                out.append(f"{own} {prefix} is inside {where} {path}")
    return out
