"""Rendering of core results: terminal tables (Rich) and JSON. The core never imports this."""
