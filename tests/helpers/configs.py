"""Writing configuration files for tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

from eoctl.config.model import Config


def write_config(folder: Path, text: str, name: str = "eoctl.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def live_input_config(folder: Path, bootstrap: str, topic: str, store: bool = False) -> Path:
    """An endpoint `billing` reading `topic` live from the broker, as consumer group `billing`;
    with `store`, keeping its tables in a DuckDB file `state.duckdb` (the changing commands' lease)."""
    tables = ""
    if store:
        import duckdb

        duckdb.connect(str(folder / "state.duckdb")).close()
        tables = '[stores.state]\ntype = "duckdb"\npath = "state.duckdb"\n\n[endpoints.billing]\nstore = "state"\n'
    return write_config(folder, textwrap.dedent(f"""
        [kafka.main]
        bootstrap_servers = "{bootstrap}"

        [endpoints.billing.input]
        topics = ["{topic}"]
        kafka = "main"
        group = "billing"
    """) + "\n" + tables)


def live_tokens_pipeline(folder: Path, bootstrap: str, topic: str, tokens: list[tuple]) -> Config:
    """An endpoint `billing` reading `topic` live as group `billing`, with a token store of its own
    (`tokens`: rows of token_id, message_id, destination, attempt_id, created_at; no outbox, no
    intents) in `state.duckdb`, and a findings history beside it."""
    import duckdb

    from eoctl.config import load_config

    with duckdb.connect(str(folder / "state.duckdb")) as conn:
        conn.execute("create table eo_tokens (token_id varchar primary key, message_id varchar, destination varchar, "
                     "attempt_id varchar, created_at timestamptz)")
        for row in tokens:
            conn.execute("insert into eo_tokens values (?, ?, ?, ?, ?)", list(row))
    return load_config(write_config(folder, f"""
        [kafka.main]
        bootstrap_servers = "{bootstrap}"

        [stores.s]
        type = "duckdb"
        path = "{folder / 'state.duckdb'}"

        [history]
        path = "{folder / 'history.duckdb'}"

        [endpoints.billing]
        store = "s"
        outbox = false
        intents = false

        [endpoints.billing.input]
        topics = ["{topic}"]
        kafka = "main"
        group = "billing"
    """))


def on_engine(config: Config, kind: str) -> Config:
    """`config` with `[engine] kind = kind`: tests of engine-neutral behaviour run on DuckDB (seconds),
    while the parity tests hold the engines equal."""
    return config.model_copy(update={"engine": config.engine.model_copy(update={"kind": kind})})
