"""Direct (non-Spark) access to the pipeline's stores: DuckDB files and PostgreSQL."""
