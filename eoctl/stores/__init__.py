"""The pipeline's stores, read and changed directly (DuckDB files, PostgreSQL): connections,
which rows of a shared table are an endpoint's (layout), transactional changes (db), whole-table
snapshots an engine reads (snapshots)."""
