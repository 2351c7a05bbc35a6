"""Rendering only: terminal tables (Rich), JSON, Markdown and the findings guide, of the typed
results the core returns. Only the CLI imports it."""
