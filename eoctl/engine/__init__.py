"""The engines and what the flows ask of them: eoctl.engine.run (the EngineRun protocol and
open_run, the one place an engine is chosen), one package per engine (spark/, duckdb/), and what
both share (errors, evidence values, the record index's files)."""
