"""eoctl: audit and repair exactly-once message pipelines."""

__version__ = "0.1.0.dev0"
